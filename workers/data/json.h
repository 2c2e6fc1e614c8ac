/* SPDX-License-Identifier: ISC */
/*
 * json: the one JSON writer every endpoint uses. It writes into a struct mg_buf and keeps
 * track of commas itself, so callers only say what comes next.
 *
 * The rules of the CoreScope contract live here and nowhere else:
 *   - strings escape '"', '\\', U+0000..U+001F, and also '<', '>', '&', U+2028 and U+2029 as
 *     \u003c-style escapes; other valid UTF-8 passes through; each byte of invalid UTF-8
 *     (bad lead or continuation bytes, overlong forms, surrogates, above U+10FFFF, cut-off
 *     sequences) becomes U+FFFD;
 *   - doubles print as the shortest decimal that reads back to the same double ("36.664",
 *     an integral value without ".0", "-0" as "0"); NaN and infinities print as null;
 *   - keys are written in the order the caller gives: callers that must sort (maps in the
 *     contract) write their keys in bytewise order.
 */
#ifndef MESHGATE_JSON_H
#define MESHGATE_JSON_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_JSON_MAX_DEPTH 32

struct mg_json {
    struct mg_buf *out;
    int depth;
    bool need_comma[MG_JSON_MAX_DEPTH + 1];
    bool after_key;
};

void mg_json_init(struct mg_json *j, struct mg_buf *out);

void mg_json_object_begin(struct mg_json *j);
void mg_json_object_end(struct mg_json *j);
void mg_json_array_begin(struct mg_json *j);
void mg_json_array_end(struct mg_json *j);
void mg_json_key(struct mg_json *j, const char *key);

void mg_json_string(struct mg_json *j, const char *s); /* NULL writes null */
void mg_json_string_n(struct mg_json *j, const char *s, size_t len);
void mg_json_int(struct mg_json *j, int64_t v);
void mg_json_uint(struct mg_json *j, uint64_t v);
void mg_json_double(struct mg_json *j, double v);
/* v rounded to `decimals` places, then printed shortest ("12.5", not "12.50"). */
void mg_json_double_rounded(struct mg_json *j, double v, int decimals);
void mg_json_bool(struct mg_json *j, bool v);
void mg_json_null(struct mg_json *j);
/* A value that is already JSON (a cached fragment), written as it is. */
void mg_json_raw(struct mg_json *j, const char *json, size_t len);

/* Key and value in one call. */
void mg_json_kv_string(struct mg_json *j, const char *key, const char *s);
void mg_json_kv_int(struct mg_json *j, const char *key, int64_t v);
void mg_json_kv_uint(struct mg_json *j, const char *key, uint64_t v);
void mg_json_kv_double(struct mg_json *j, const char *key, double v);
void mg_json_kv_bool(struct mg_json *j, const char *key, bool v);
void mg_json_kv_null(struct mg_json *j, const char *key);

/* Escaped string body (without quotes) appended to out; for tests and the access log. */
void mg_json_escape(struct mg_buf *out, const char *s, size_t len);
/* Writes the shortest round-trip form of v into out (at least 32 bytes); returns its length. */
int mg_json_format_double(double v, char *out, size_t outlen);

#endif
