/* SPDX-License-Identifier: ISC */
#include "json.h"

#include <criterion/criterion.h>

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The JSON a writer produced; the buffer stays owned by the test. */
static const char *json_text(struct mg_buf *b)
{
    cr_assert_not(b->failed, "the buffer was marked failed");
    return mg_buf_cstr(b);
}

static const char *escaped(struct mg_buf *b, const char *s, size_t len)
{
    mg_buf_reset(b);
    mg_json_escape(b, s, len);
    return json_text(b);
}

static const char *double_text(double v)
{
    static char text[64];
    int n = mg_json_format_double(v, text, sizeof text);
    cr_assert_eq((size_t)n, strlen(text), "returned length %d for \"%s\"", n, text);
    return text;
}

static uint64_t random_state = 0x9E3779B97F4A7C15u;

static uint64_t random_u64(void)
{
    /* xorshift64*: fixed seed, so a failure reproduces. */
    random_state ^= random_state >> 12;
    random_state ^= random_state << 25;
    random_state ^= random_state >> 27;
    return random_state * 0x2545F4914F6CDD1Du;
}

/* --- structure and commas ------------------------------------------------------------ */

Test(json, empty_array_and_empty_object_have_nothing_inside)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_object_begin(&j);
    mg_json_key(&j, "list");
    mg_json_array_begin(&j);
    mg_json_array_end(&j);
    mg_json_key(&j, "map");
    mg_json_object_begin(&j);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    cr_assert_str_eq(json_text(&b), "{\"list\":[],\"map\":{}}");
    mg_buf_free(&b);
}

Test(json, nested_values_are_separated_by_exactly_one_comma)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_object_begin(&j);
    mg_json_kv_int(&j, "a", 1);
    mg_json_key(&j, "b");
    mg_json_array_begin(&j);
    mg_json_int(&j, 1);
    mg_json_array_begin(&j);
    mg_json_array_end(&j);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "x", "y");
    mg_json_kv_null(&j, "z");
    mg_json_object_end(&j);
    mg_json_array_begin(&j);
    mg_json_bool(&j, true);
    mg_json_bool(&j, false);
    mg_json_array_end(&j);
    mg_json_string(&j, "s");
    mg_json_array_end(&j);
    mg_json_key(&j, "c");
    mg_json_object_begin(&j);
    mg_json_key(&j, "d");
    mg_json_object_begin(&j);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_json_kv_bool(&j, "e", true);
    mg_json_object_end(&j);
    cr_assert_str_eq(json_text(&b), "{\"a\":1,\"b\":[1,[],{\"x\":\"y\",\"z\":null},[true,false],"
                                    "\"s\"],\"c\":{\"d\":{}},\"e\":true}");
    mg_buf_free(&b);
}

Test(json, key_value_helpers_write_each_kind_of_value)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "s", "t");
    mg_json_kv_string(&j, "n", NULL);
    mg_json_kv_int(&j, "i", -5);
    mg_json_kv_uint(&j, "u", 7);
    mg_json_kv_double(&j, "d", 36.664);
    mg_json_kv_bool(&j, "f", false);
    mg_json_kv_null(&j, "z");
    mg_json_object_end(&j);
    cr_assert_str_eq(json_text(&b), "{\"s\":\"t\",\"n\":null,\"i\":-5,\"u\":7,\"d\":36.664,"
                                    "\"f\":false,\"z\":null}");
    mg_buf_free(&b);
}

Test(json, keys_are_escaped_like_strings)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_object_begin(&j);
    mg_json_kv_int(&j, "a\"<b>", 1);
    mg_json_object_end(&j);
    cr_assert_str_eq(json_text(&b), "{\"a\\\"\\u003cb\\u003e\":1}");
    mg_buf_free(&b);
}

Test(json, nesting_up_to_max_depth_is_written)
{
    struct mg_buf b;
    struct mg_json j;
    char want[2 * MG_JSON_MAX_DEPTH + 1];
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    for (int i = 0; i < MG_JSON_MAX_DEPTH; i++)
        mg_json_array_begin(&j);
    for (int i = 0; i < MG_JSON_MAX_DEPTH; i++)
        mg_json_array_end(&j);
    memset(want, '[', MG_JSON_MAX_DEPTH);
    memset(want + MG_JSON_MAX_DEPTH, ']', MG_JSON_MAX_DEPTH);
    want[2 * MG_JSON_MAX_DEPTH] = '\0';
    cr_assert_str_eq(json_text(&b), want);
    mg_buf_free(&b);
}

Test(json, nesting_beyond_max_depth_marks_the_buffer_failed)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    for (int i = 0; i < MG_JSON_MAX_DEPTH; i++)
        mg_json_object_begin(&j);
    cr_assert_not(b.failed);
    mg_json_array_begin(&j);
    cr_assert(b.failed);
    cr_assert_eq(j.depth, MG_JSON_MAX_DEPTH);
    mg_buf_free(&b);
}

Test(json, closing_more_than_was_opened_marks_the_buffer_failed)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_array_begin(&j);
    mg_json_array_end(&j);
    cr_assert_not(b.failed);
    mg_json_object_end(&j);
    cr_assert(b.failed);
    cr_assert_eq(j.depth, 0);
    mg_buf_free(&b);
}

Test(json, key_without_a_value_marks_the_buffer_failed)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_object_begin(&j);
    mg_json_key(&j, "a");
    cr_assert_not(b.failed);
    mg_json_object_end(&j);
    cr_assert(b.failed);
    mg_buf_free(&b);
}

Test(json, two_keys_in_a_row_mark_the_buffer_failed)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_object_begin(&j);
    mg_json_key(&j, "a");
    mg_json_key(&j, "b");
    cr_assert(b.failed);
    mg_buf_free(&b);
}

Test(json, null_string_writes_null)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_array_begin(&j);
    mg_json_string(&j, NULL);
    mg_json_string_n(&j, NULL, 3);
    mg_json_string(&j, "");
    mg_json_array_end(&j);
    cr_assert_str_eq(json_text(&b), "[null,null,\"\"]");
    mg_buf_free(&b);
}

Test(json, string_n_writes_exactly_len_bytes_including_nul)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_string_n(&j, "a\0bcdef", 3);
    cr_assert_str_eq(json_text(&b), "\"a\\u0000b\"");
    mg_buf_free(&b);
}

Test(json, raw_fragments_are_written_unchanged_between_commas)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_object_begin(&j);
    mg_json_key(&j, "cached");
    mg_json_raw(&j, "{\"k\":[1,2]}", 11);
    mg_json_key(&j, "list");
    mg_json_array_begin(&j);
    mg_json_raw(&j, "\"<as is>\"", 9);
    mg_json_raw(&j, "3trailing", 1);
    mg_json_raw(&j, NULL, 0);
    mg_json_array_end(&j);
    mg_json_object_end(&j);
    cr_assert_str_eq(json_text(&b), "{\"cached\":{\"k\":[1,2]},\"list\":[\"<as is>\",3,null]}");
    mg_buf_free(&b);
}

Test(json, empty_raw_fragment_marks_the_buffer_failed)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_array_begin(&j);
    mg_json_raw(&j, "", 0);
    cr_assert(b.failed);
    mg_buf_free(&b);
}

Test(json, writes_nothing_more_once_the_buffer_has_failed)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_array_begin(&j);
    b.failed = true;
    size_t len = b.len;
    mg_json_string(&j, "more");
    mg_json_double(&j, 1.5);
    mg_json_array_end(&j);
    cr_assert_eq(b.len, len);
    mg_buf_free(&b);
}

/* --- integers, booleans ---------------------------------------------------------------- */

Test(json, integers_print_across_their_full_range)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_array_begin(&j);
    mg_json_int(&j, INT64_MIN);
    mg_json_int(&j, INT64_MAX);
    mg_json_int(&j, 0);
    mg_json_int(&j, -1);
    mg_json_int(&j, 10);
    mg_json_uint(&j, UINT64_MAX);
    mg_json_uint(&j, 0);
    mg_json_array_end(&j);
    cr_assert_str_eq(json_text(&b), "[-9223372036854775808,9223372036854775807,0,-1,10,"
                                    "18446744073709551615,0]");
    mg_buf_free(&b);
}

Test(json, random_integers_match_printf)
{
    struct mg_buf b;
    struct mg_json j;
    char want[32];
    mg_buf_init(&b);
    for (int i = 0; i < 10000; i++) {
        uint64_t u = random_u64() >> (random_u64() % 64);
        int64_t s = (int64_t)random_u64() >> (random_u64() % 64);
        mg_buf_reset(&b);
        mg_json_init(&j, &b);
        mg_json_uint(&j, u);
        snprintf(want, sizeof want, "%" PRIu64, u);
        cr_assert_str_eq(json_text(&b), want);
        mg_buf_reset(&b);
        mg_json_init(&j, &b);
        mg_json_int(&j, s);
        snprintf(want, sizeof want, "%" PRId64, s);
        cr_assert_str_eq(json_text(&b), want);
    }
    mg_buf_free(&b);
}

/* --- strings ------------------------------------------------------------------------- */

Test(json, escapes_quote_and_backslash)
{
    struct mg_buf b;
    mg_buf_init(&b);
    cr_assert_str_eq(escaped(&b, "say \"hi\" \\o/", 12), "say \\\"hi\\\" \\\\o/");
    mg_buf_free(&b);
}

Test(json, escapes_every_control_character_as_go_does)
{
    /* Go 1.22+: short forms for \b \f \n \r \t, \u00XX with lowercase hex for the rest. */
    static const char *const want[32] = {
        "\\u0000", "\\u0001", "\\u0002", "\\u0003", "\\u0004", "\\u0005", "\\u0006", "\\u0007",
        "\\b",     "\\t",     "\\n",     "\\u000b", "\\f",     "\\r",     "\\u000e", "\\u000f",
        "\\u0010", "\\u0011", "\\u0012", "\\u0013", "\\u0014", "\\u0015", "\\u0016", "\\u0017",
        "\\u0018", "\\u0019", "\\u001a", "\\u001b", "\\u001c", "\\u001d", "\\u001e", "\\u001f",
    };
    struct mg_buf b;
    mg_buf_init(&b);
    for (int c = 0; c < 32; c++) {
        char in[3] = {'a', (char)c, 'z'};
        char expect[16];
        snprintf(expect, sizeof expect, "a%sz", want[c]);
        cr_assert_str_eq(escaped(&b, in, 3), expect, "control byte 0x%02x", c);
    }
    mg_buf_free(&b);
}

Test(json, escapes_html_significant_characters)
{
    struct mg_buf b;
    mg_buf_init(&b);
    cr_assert_str_eq(escaped(&b, "<a href='x'>&amp;</a>", 21),
                     "\\u003ca href='x'\\u003e\\u0026amp;\\u003c/a\\u003e");
    mg_buf_free(&b);
}

Test(json, leaves_other_printable_ascii_alone)
{
    struct mg_buf b;
    char in[128];
    size_t n = 0;
    mg_buf_init(&b);
    for (int c = 0x20; c <= 0x7f; c++)
        if (c != '"' && c != '\\' && c != '<' && c != '>' && c != '&')
            in[n++] = (char)c;
    in[n] = '\0';
    cr_assert_str_eq(escaped(&b, in, n), in);
    mg_buf_free(&b);
}

Test(json, escapes_line_and_paragraph_separators)
{
    struct mg_buf b;
    mg_buf_init(&b);
    cr_assert_str_eq(escaped(&b,
                             "a\xE2\x80\xA8"
                             "b\xE2\x80\xA9"
                             "c",
                             9),
                     "a\\u2028b\\u2029c");
    /* Their neighbours U+2027 and U+202A are ordinary characters. */
    cr_assert_str_eq(escaped(&b, "\xE2\x80\xA7\xE2\x80\xAA", 6), "\xE2\x80\xA7\xE2\x80\xAA");
    mg_buf_free(&b);
}

Test(json, passes_valid_multibyte_utf8_through_unchanged)
{
    static const char *const valid[] = {
        "\xC2\x80",         /* U+0080, smallest two-byte */
        "\xDF\xBF",         /* U+07FF */
        "\xE0\xA0\x80",     /* U+0800, smallest three-byte */
        "\xED\x9F\xBF",     /* U+D7FF, just below the surrogates */
        "\xEE\x80\x80",     /* U+E000, just above them */
        "\xEF\xBF\xBD",     /* U+FFFD itself */
        "\xEF\xBF\xBF",     /* U+FFFF */
        "\xF0\x90\x80\x80", /* U+10000, smallest four-byte */
        "\xF4\x8F\xBF\xBF", /* U+10FFFF, the largest code point */
        "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x93\xA1 \xE6\x97\xA5\xE6\x9C\xAC",
    };
    struct mg_buf b;
    mg_buf_init(&b);
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++)
        cr_assert_str_eq(escaped(&b, valid[i], strlen(valid[i])), valid[i], "case %zu", i);
    mg_buf_free(&b);
}

Test(json, replaces_each_byte_of_invalid_utf8_with_one_replacement_character)
{
    static const struct {
        const char *in;
        const char *want;
    } cases[] = {
        {"a\x80z", "a\\ufffdz"},                              /* lone continuation byte */
        {"\xBF\xBF", "\\ufffd\\ufffd"},                       /* two of them */
        {"\xC0\x80", "\\ufffd\\ufffd"},                       /* overlong NUL */
        {"\xC1\xBF", "\\ufffd\\ufffd"},                       /* overlong U+007F */
        {"\xE0\x80\x80", "\\ufffd\\ufffd\\ufffd"},            /* overlong three-byte */
        {"\xE0\x9F\xBF", "\\ufffd\\ufffd\\ufffd"},            /* overlong U+07FF */
        {"\xF0\x80\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd"}, /* overlong four-byte */
        {"\xF0\x8F\xBF\xBF", "\\ufffd\\ufffd\\ufffd\\ufffd"}, /* overlong U+FFFF */
        {"\xED\xA0\x80", "\\ufffd\\ufffd\\ufffd"},            /* surrogate U+D800 */
        {"\xED\xBF\xBF", "\\ufffd\\ufffd\\ufffd"},            /* surrogate U+DFFF */
        {"\xF4\x90\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd"}, /* U+110000 */
        {"\xF5\x80\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd"}, /* lead byte past U+10FFFF */
        {"\xF8\x88\x80\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd"},
        {"\xFE\xFF", "\\ufffd\\ufffd"},
        {"ab\xE2\x82", "ab\\ufffd\\ufffd"},        /* cut off at the end */
        {"\xF0\x9F\x93", "\\ufffd\\ufffd\\ufffd"}, /* cut-off four-byte */
        {"\xE2\x82"
         "A",
         "\\ufffd\\ufffdA"}, /* cut off by ASCII */
        {"\xC3"
         "<",
         "\\ufffd\\u003c"},                             /* cut off by an escaped byte */
        {"\xE2\x82\xC3\xA9", "\\ufffd\\ufffd\xC3\xA9"}, /* resumes at the next valid one */
    };
    struct mg_buf b;
    mg_buf_init(&b);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_str_eq(escaped(&b, cases[i].in, strlen(cases[i].in)), cases[i].want, "case %zu",
                         i);
    mg_buf_free(&b);
}

/* Go's loop, one byte at a time, with a decoder that computes the code point. */
static void reference_escape(struct mg_buf *out, const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            if (c == '"' || c == '\\')
                mg_buf_printf(out, "\\%c", c);
            else if (c == '\b')
                mg_buf_puts(out, "\\b");
            else if (c == '\f')
                mg_buf_puts(out, "\\f");
            else if (c == '\n')
                mg_buf_puts(out, "\\n");
            else if (c == '\r')
                mg_buf_puts(out, "\\r");
            else if (c == '\t')
                mg_buf_puts(out, "\\t");
            else if (c < 0x20 || c == '<' || c == '>' || c == '&')
                mg_buf_printf(out, "\\u%04x", c);
            else
                mg_buf_putc(out, (char)c);
            i++;
            continue;
        }
        size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
        uint32_t cp = n == 4 ? c & 0x07 : n == 3 ? c & 0x0F : c & 0x1F;
        bool ok = n != 0 && c < 0xF8 && i + n <= len;
        for (size_t k = 1; ok && k < n; k++) {
            ok = (s[i + k] & 0xC0) == 0x80;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        static const uint32_t smallest[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (ok)
            ok = cp >= smallest[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
        if (!ok) {
            mg_buf_puts(out, "\\ufffd");
            i++;
        } else if (cp == 0x2028 || cp == 0x2029) {
            mg_buf_printf(out, "\\u%04x", (unsigned)cp);
            i += n;
        } else {
            mg_buf_append(out, s + i, n);
            i += n;
        }
    }
}

Test(json, random_byte_strings_escape_like_a_byte_by_byte_reference)
{
    /* Mostly plain text with some of every kind of byte, so runs of every length occur. */
    static const unsigned char spice[] = {0x00, 0x08, 0x0A, 0x1F, '"',  '\\', '<',  '>',  '&',
                                          0x7F, 0x80, 0xA8, 0xA9, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0,
                                          0xE2, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF};
    struct mg_buf got, want;
    unsigned char in[600];
    mg_buf_init(&got);
    mg_buf_init(&want);
    for (int round = 0; round < 20000; round++) {
        size_t len = random_u64() % sizeof in;
        unsigned density = 1 + (unsigned)(random_u64() % 64);
        for (size_t i = 0; i < len; i++) {
            uint64_t r = random_u64();
            if (r % density == 0)
                in[i] = spice[(r >> 8) % sizeof spice];
            else if (r % density == 1)
                in[i] = (unsigned char)(r >> 16);
            else if (r % density == 2)
                in[i] = (unsigned char)(0x80 | ((r >> 16) & 0x3F));
            else
                in[i] = (unsigned char)(' ' + (r >> 16) % 95);
        }
        mg_buf_reset(&got);
        mg_buf_reset(&want);
        mg_json_escape(&got, (const char *)in, len);
        reference_escape(&want, in, len);
        cr_assert_eq(got.len, want.len, "round %d: length %zu, reference %zu", round, got.len,
                     want.len);
        cr_assert(memcmp(got.data, want.data, got.len) == 0, "round %d differs", round);
    }
    mg_buf_free(&got);
    mg_buf_free(&want);
}

/* --- doubles ------------------------------------------------------------------------- */

Test(json, doubles_print_as_go_encoding_json_does)
{
    static const struct {
        double v;
        const char *want;
    } cases[] = {
        {36.664, "36.664"},
        {0.1, "0.1"},
        {1.0 / 3, "0.3333333333333333"},
        {2.0 / 3, "0.6666666666666666"},
        {-122.268, "-122.268"},
        {36, "36"},
        {-36, "-36"},
        {1.5, "1.5"},
        {100, "100"},
        {1e20, "100000000000000000000"},
        {123456789012345678.0, "123456789012345680"},
        {9007199254740993.0, "9007199254740992"},
        {1e21, "1e+21"},
        {1.5e300, "1.5e+300"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {0.000001, "0.000001"},
        {0.0000012345, "0.0000012345"},
        {0.0000001, "1e-7"},
        {-0.0000001, "-1e-7"},
        {1.5e-10, "1.5e-10"},
        {2.2250738585072014e-308, "2.2250738585072014e-308"},
        {5e-324, "5e-324"},
        {0.1 + 0.2, "0.30000000000000004"},
        {5.960464477539063e-08, "5.960464477539063e-8"},  /* 2^-24 */
        {5.684341886080802e-14, "5.684341886080802e-14"}, /* 2^-44 */
        {6.189700196426902e26, "6.189700196426902e+26"},  /* 2^89 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_str_eq(double_text(cases[i].v), cases[i].want, "case %zu", i);
}

Test(json, negative_zero_prints_as_zero)
{
    cr_assert_str_eq(double_text(-0.0), "0");
    cr_assert_str_eq(double_text(0.0), "0");
}

Test(json, nan_and_infinities_print_as_null)
{
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    mg_json_init(&j, &b);
    mg_json_array_begin(&j);
    mg_json_double(&j, NAN);
    mg_json_double(&j, INFINITY);
    mg_json_double(&j, -INFINITY);
    mg_json_array_end(&j);
    cr_assert_str_eq(json_text(&b), "[null,null,null]");
    mg_buf_free(&b);
}

Test(json, format_double_refuses_a_buffer_too_small)
{
    char small[4] = "xyz";
    cr_assert_eq(mg_json_format_double(36.664, small, sizeof small), 0);
    cr_assert_str_eq(small, "");
}

/*
 * The shortest digits of a the slow way, from one digit up: the correctly rounded form, else
 * its neighbour on the far side of a. Writes them without trailing zeros and returns the
 * exponent of the first.
 */
static int reference_shortest(double a, char *digits)
{
    char text[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(text, sizeof text, "%.*e", p - 1, a);
        double back = strtod(text, NULL);
        long long mantissa = 0;
        int n = 0;
        const char *t = text;
        for (; *t != 'e'; t++)
            if (*t != '.') {
                mantissa = mantissa * 10 + (*t - '0');
                n++;
            }
        int exponent = atoi(t + 1) - (n - 1);
        if (back != a) {
            mantissa += back < a ? 1 : -1;
            snprintf(text, sizeof text, "%llde%d", mantissa, exponent);
            if (strtod(text, NULL) != a)
                continue;
        }
        while (mantissa % 10 == 0) {
            mantissa /= 10;
            exponent++;
        }
        int len = snprintf(digits, 20, "%lld", mantissa);
        return exponent + len - 1;
    }
    cr_assert_fail("no precision reads %a back", a);
    return 0;
}

/* Checks text against the reference digits and Go's choice between the 'f' and 'e' forms. */
static void assert_prints_shortest(double v)
{
    const char *text = double_text(v);
    double back = strtod(text, NULL);
    cr_assert(memcmp(&back, &v, sizeof v) == 0, "%a printed as %s reads back as %a", v, text, back);

    double a = fabs(v);
    char want_digits[24];
    int want_exponent = reference_shortest(a, want_digits);
    char want[64];
    char *w = want + snprintf(want, sizeof want, "%s", v < 0 ? "-" : "");
    int n = (int)strlen(want_digits);
    if (a < 1e-6 || a >= 1e21) {
        snprintf(w, 40, "%c%s%se%c%d", want_digits[0], n > 1 ? "." : "", want_digits + 1,
                 want_exponent < 0 ? '-' : '+', abs(want_exponent));
    } else if (want_exponent < 0) {
        w += sprintf(w, "0.");
        for (int k = -1; k > want_exponent; k--)
            *w++ = '0';
        strcpy(w, want_digits);
    } else {
        /* Digit k has weight 10^(want_exponent - k); stop after the last digit or the units. */
        for (int k = 0; k < n || k <= want_exponent; k++) {
            if (k == want_exponent + 1)
                *w++ = '.';
            *w++ = k < n ? want_digits[k] : '0';
        }
        *w = '\0';
    }
    cr_assert_str_eq(text, want, "%a", v);
}

Test(json, random_doubles_print_shortest_and_read_back_exactly)
{
    int checked = 0;
    while (checked < 100000) {
        uint64_t bits = random_u64();
        double v;
        memcpy(&v, &bits, sizeof v);
        if (!isfinite(v) || v == 0)
            continue;
        assert_prints_shortest(v);
        checked++;
    }
}

Test(json, random_decimals_of_1_to_17_digits_print_shortest)
{
    /* Values like coordinates and averages, read from text of every length. */
    for (int i = 0; i < 100000; i++) {
        uint64_t limit = 10;
        for (int digits = (int)(random_u64() % 17); digits > 0; digits--)
            limit *= 10;
        int64_t mantissa = (int64_t)(random_u64() % limit);
        int exponent = (int)(random_u64() % 50) - 35;
        char text[64];
        snprintf(text, sizeof text, "%s%" PRId64 "e%d", random_u64() % 2 ? "-" : "", mantissa,
                 exponent);
        double v = strtod(text, NULL);
        if (v == 0)
            continue;
        assert_prints_shortest(v);
    }
}

Test(json, every_power_of_two_prints_shortest)
{
    /* At a power of two the doubles below are closer than those above: the hard cases. */
    for (int e = -1074; e <= 1023; e++) {
        assert_prints_shortest(ldexp(1.0, e));
        assert_prints_shortest(-ldexp(1.0, e));
    }
}

Test(json, extreme_doubles_print_shortest)
{
    const double cases[] = {DBL_MIN,
                            DBL_MAX,
                            DBL_TRUE_MIN,
                            nextafter(DBL_MIN, 0),
                            1e21,
                            nextafter(1e21, 0),
                            1e-6,
                            nextafter(1e-6, 0),
                            1e23,
                            9007199254740992.0,
                            4503599627370496.5};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_prints_shortest(cases[i]);
}

Test(json, rounded_doubles_round_half_away_from_zero_like_go_math_round)
{
    /*
     * The arithmetic is Go's math.Round(v*10^d)/10^d, so 0.15 (really 0.1499999999999999944)
     * rounds to 0.2 because 0.15*10 is exactly 1.5 in doubles, where "%.1f" would say 0.1;
     * and 1.005 rounds to 1 because 1.005*100 is 100.49999999999999.
     */
    static const struct {
        double v;
        int decimals;
        const char *want;
    } cases[] = {
        {1.25, 1, "1.3"},
        {-1.25, 1, "-1.3"},
        {2.5, 0, "3"},
        {-2.5, 0, "-3"},
        {0.125, 2, "0.13"},
        {0.15, 1, "0.2"},
        {1.005, 2, "1"},
        {12.5, 1, "12.5"},
        {50.0, 1, "50"},
        {33.333333, 1, "33.3"},
        {36.6644, 2, "36.66"},
        {-0.04, 1, "0"},
        {2.675, 2, "2.68"},
        {7.25, -1, "7"},
        {1e300, 2, "1e+300"},
        {0.1 + 0.2, 2, "0.3"},
        {DBL_MAX, 1, "1.7976931348623157e+308"},
        {123.456, 30, "123.456"},
    };
    struct mg_buf b;
    struct mg_json j;
    mg_buf_init(&b);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_buf_reset(&b);
        mg_json_init(&j, &b);
        mg_json_double_rounded(&j, cases[i].v, cases[i].decimals);
        cr_assert_str_eq(json_text(&b), cases[i].want, "case %zu: %.17g to %d places", i,
                         cases[i].v, cases[i].decimals);
    }
    mg_buf_reset(&b);
    mg_json_init(&j, &b);
    mg_json_double_rounded(&j, NAN, 2);
    cr_assert_str_eq(json_text(&b), "null");
    mg_buf_free(&b);
}
