/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the JSON writer (workers/data/json.c). The input is a program: each byte picks
 * the next call (open or close a container, a key, a string of the bytes that follow, an
 * integer, a double from eight bytes, true, false, null) and the writer's output must be one
 * valid JSON value whatever the strings hold (invalid UTF-8, control bytes, quotes). Doubles
 * must read back to themselves, or be null when not finite.
 */
#include "json.h"
#include "json_check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct input {
    const uint8_t *p, *end;
};

static size_t take(struct input *in, void *out, size_t want)
{
    size_t n = (size_t)(in->end - in->p) < want ? (size_t)(in->end - in->p) : want;
    memset(out, 0, want);
    memcpy(out, in->p, n);
    in->p += n;
    return n;
}

/* A string: a length byte, then that many bytes (fewer at the end of the input). */
static size_t take_string(struct input *in, char *out, size_t cap)
{
    uint8_t len = 0;
    take(in, &len, 1);
    size_t n = len < cap ? len : cap - 1;
    n = take(in, out, n);
    out[n] = '\0';
    return n;
}

static void check_double(double v)
{
    char text[64];
    int n = mg_json_format_double(v, text, sizeof text);
    if (n <= 0 || (size_t)n >= sizeof text)
        abort();
    if (!isfinite(v)) {
        if (strcmp(text, "null") != 0)
            abort();
        return;
    }
    if (!json_is_valid(text, (size_t)n) || strtod(text, NULL) != v)
        abort();
}

/* One value, as the next op byte says; containers are opened here and closed by op 2. */
static void write_value(struct mg_json *j, struct input *in, uint8_t op, bool *object, int *depth)
{
    char text[256];
    switch (op % 10) {
    case 0:
    case 1:
        if (*depth < MG_JSON_MAX_DEPTH) {
            bool is_object = op % 10 == 0;
            if (is_object)
                mg_json_object_begin(j);
            else
                mg_json_array_begin(j);
            object[(*depth)++] = is_object;
        } else {
            mg_json_null(j);
        }
        break;
    case 3: {
        size_t n = take_string(in, text, sizeof text);
        mg_json_string_n(j, text, n);
        break;
    }
    case 4: {
        int64_t v;
        take(in, &v, sizeof v);
        mg_json_int(j, v);
        break;
    }
    case 5: {
        uint64_t v;
        take(in, &v, sizeof v);
        mg_json_uint(j, v);
        break;
    }
    case 6: {
        double v;
        take(in, &v, sizeof v);
        check_double(v);
        mg_json_double(j, v);
        break;
    }
    case 7: {
        double v;
        uint8_t decimals = 0;
        take(in, &v, sizeof v);
        take(in, &decimals, 1);
        mg_json_double_rounded(j, v, decimals % 7);
        break;
    }
    case 8:
        mg_json_bool(j, op & 16);
        break;
    default: /* 9, and 2 where nothing can be closed */
        take_string(in, text, sizeof text);
        mg_json_string(j, (op & 16) ? NULL : text);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, data + size};
    struct mg_buf out;
    mg_buf_init(&out);
    struct mg_json j;
    mg_json_init(&j, &out);
    bool object[MG_JSON_MAX_DEPTH + 1]; /* the kind of each open container */
    int depth = 0;
    char key[256];
    mg_json_array_begin(&j); /* one top-level value, whatever the program does */
    object[depth++] = false;
    while (in.p < in.end) {
        uint8_t op = *in.p++;
        if (op % 10 == 2 && depth > 1) {
            if (object[--depth])
                mg_json_object_end(&j);
            else
                mg_json_array_end(&j);
            continue;
        }
        if (object[depth - 1]) { /* in an object a key comes first: the bytes that follow */
            take_string(&in, key, sizeof key);
            mg_json_key(&j, key);
            if (in.p >= in.end) {
                mg_json_null(&j);
                break;
            }
            op = *in.p++;
        }
        write_value(&j, &in, op, object, &depth);
    }
    while (depth > 0) {
        if (object[--depth])
            mg_json_object_end(&j);
        else
            mg_json_array_end(&j);
    }
    if (out.failed || !json_is_valid(mg_buf_cstr(&out), out.len))
        abort();

    /* The escaper alone: its output is a valid string body. */
    struct mg_buf esc;
    mg_buf_init(&esc);
    mg_buf_putc(&esc, '"');
    mg_json_escape(&esc, (const char *)data, size);
    mg_buf_putc(&esc, '"');
    if (esc.failed || !json_is_valid(mg_buf_cstr(&esc), esc.len))
        abort();
    mg_buf_free(&esc);
    mg_buf_free(&out);
    return 0;
}
