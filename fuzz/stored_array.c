/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: a JSON array of strings as the database stores it (workers/data/stored_array.c).
 * The input is the stored text. Checks: counting and writing agree on the number of elements
 * and on refusing; what is written is one valid JSON array (so the answer it lands in stays
 * JSON whatever a row holds); a refused text writes nothing.
 */
#include "json_check.h"
#include "stored_array.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    const char *text = (const char *)data;
    long n = mg_stored_array_walk(text, size, NULL, NULL);
    struct mg_buf out, tmp;
    mg_buf_init(&out);
    mg_buf_init(&tmp);
    struct mg_json j;
    mg_json_init(&j, &out);
    long written = mg_stored_array_walk(text, size, &j, &tmp);
    if (written != n)
        abort();
    if (n >= 0 && !out.failed && !json_is_valid(mg_buf_cstr(&out), out.len))
        abort();
    /* Written as an object's key: nothing at all when refused, or empty and asked so. */
    mg_buf_reset(&out);
    mg_json_init(&j, &out);
    mg_json_object_begin(&j);
    bool wrote = mg_stored_array_write(&j, "k", text, size, true, &tmp);
    mg_json_object_end(&j);
    if (wrote != (n > 0))
        abort();
    if (!out.failed && !json_is_valid(mg_buf_cstr(&out), out.len))
        abort();
    if (!wrote && !(out.len == 2 && memcmp(out.data, "{}", 2) == 0))
        abort();
    mg_buf_free(&out);
    mg_buf_free(&tmp);
    return 0;
}
