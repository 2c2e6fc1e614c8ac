/* SPDX-License-Identifier: ISC */
/*
 * Tests for workers/data/stored_array.c: a JSON array of strings as the database stores it
 * (path_json, resolved_path), counted, refused when it is anything else, and written again.
 */
#include <criterion/criterion.h>

#include "stored_array.h"

#include <string.h>

TestSuite(stored_array);

/* The array text writes, in a static buffer; NULL when refused. */
static const char *rewritten(const char *text, long *n)
{
    static char out[256];
    struct mg_buf b, tmp;
    mg_buf_init(&b);
    mg_buf_init(&tmp);
    struct mg_json j;
    mg_json_init(&j, &b);
    *n = mg_stored_array_walk(text, strlen(text), &j, &tmp);
    cr_assert_eq(*n, mg_stored_array_walk(text, strlen(text), NULL, NULL), "%s", text);
    snprintf(out, sizeof out, "%s", mg_buf_cstr(&b));
    mg_buf_free(&b);
    mg_buf_free(&tmp);
    return *n < 0 ? NULL : out;
}

Test(stored_array, strings_and_nulls_are_counted_and_written_again)
{
    long n;
    cr_expect_str_eq(rewritten(" [ \"a1\" , null,\"B2\" ] ", &n), "[\"a1\",null,\"B2\"]");
    cr_expect_eq(n, 3);
    cr_expect_str_eq(rewritten("[]", &n), "[]");
    cr_expect_eq(n, 0);
    /* Escapes are decoded and written again; a lone surrogate is U+FFFD. */
    cr_expect_str_eq(rewritten("[\"\\u00e9\\ud83d\\ude00\\ud800x\\/\"]", &n),
                     "[\"\xc3\xa9\xf0\x9f\x98\x80\xef\xbf\xbdx/\"]");
    cr_expect_eq(n, 1);
}

Test(stored_array, anything_else_is_refused_and_writes_nothing)
{
    static const char *const bad[] = {
        "",          "null",          "[1]",       "[\"a\",]", "[\"a\"] x",   "{\"a\":1}",
        "[[\"a\"]]", "[\"a\" \"b\"]", "[\"\\x\"]", "[\"a",     "[\"\\u12\"]", "[true]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long n;
        cr_expect_null(rewritten(bad[i], &n), "%s", bad[i]);
        cr_expect_eq(n, -1, "%s", bad[i]);
    }
}

Test(stored_array, written_under_its_key_or_not_at_all)
{
    struct mg_buf b, tmp;
    mg_buf_init(&b);
    mg_buf_init(&tmp);
    struct mg_json j;
    mg_json_init(&j, &b);
    mg_json_object_begin(&j);
    cr_expect(mg_stored_array_write(&j, "path", "[\"ab\"]", 6, true, &tmp));
    cr_expect_not(mg_stored_array_write(&j, "empty", "[]", 2, true, &tmp));
    cr_expect(mg_stored_array_write(&j, "kept", "[]", 2, false, &tmp));
    cr_expect_not(mg_stored_array_write(&j, "none", NULL, 0, false, &tmp));
    cr_expect_not(mg_stored_array_write(&j, "bad", "[1]", 3, false, &tmp));
    mg_json_object_end(&j);
    cr_expect_str_eq(mg_buf_cstr(&b), "{\"path\":[\"ab\"],\"kept\":[]}");
    mg_buf_free(&b);
    mg_buf_free(&tmp);
}
