/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the HTTP request-head parser (workers/core/http.c), fed as bytes arrive. The first
 * two bytes choose the limits; the rest is the head. Checks: every string the parser returns
 * lies inside the buffer, the head length is within what was given, a complete head was
 * "incomplete" one byte earlier, and the query, header and percent-decoding helpers accept
 * whatever a parsed head holds without reading past it.
 */
#include "http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const struct mg_str *s, const char *buf, size_t len)
{
    if (s->len && (s->ptr < buf || s->ptr + s->len > buf + len))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    struct mg_http_limits limits = {1024 + (size_t)data[0] * 64, 64 + (size_t)data[1] * 16};
    size -= 2;
    char *buf = malloc(size ? size : 1); /* exact size: ASan sees any read past the end */
    memcpy(buf, data + 2, size);

    struct mg_http_request req;
    int status = 0;
    const char *why = NULL;
    enum mg_http_result r = mg_http_parse_request(buf, size, &limits, &req, &status, &why);
    if (r == MG_HTTP_ERROR) {
        if (!why ||
            (status != 400 && status != 414 && status != 431 && status != 501 && status != 505))
            abort();
    } else if (r == MG_HTTP_OK) {
        if (req.head_len == 0 || req.head_len > size || req.head_len > limits.max_header_bytes ||
            req.target.len > limits.max_uri_bytes || req.header_count > MG_HTTP_MAX_HEADERS)
            abort();
        inside(&req.method, buf, req.head_len);
        inside(&req.target, buf, req.head_len);
        inside(&req.path, buf, req.head_len);
        inside(&req.query, buf, req.head_len);
        for (size_t i = 0; i < req.header_count; i++) {
            inside(&req.headers[i].name, buf, req.head_len);
            inside(&req.headers[i].value, buf, req.head_len);
        }
        /* As the worker reads it: the head, one byte short, must still be incomplete. */
        struct mg_http_request again;
        if (mg_http_parse_request(buf, req.head_len - 1, &limits, &again, &status, &why) !=
            MG_HTTP_INCOMPLETE)
            abort();

        size_t cap = 2 * req.query.len + 2;
        char *storage = malloc(cap);
        struct mg_query q;
        if (mg_query_parse(&q, req.query.ptr, req.query.len, storage, cap, &why) == 0) {
            if (q.count > MG_HTTP_MAX_PARAMS)
                abort();
            for (size_t i = 0; i < q.count; i++)
                if (mg_query_get(&q, q.param[i].name) == NULL)
                    abort();
        }
        free(storage);

        char *path = malloc(req.path.len + 1);
        long n = mg_url_decode(req.path.ptr, req.path.len, path, req.path.len + 1, false);
        if (n > (long)req.path.len || (n >= 0 && strlen(path) != (size_t)n))
            abort();
        free(path);

        static const char *const names[] = {"Accept-Encoding", "Connection", "Host",
                                            "X-Forwarded-For", "Authorization"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const struct mg_str *v = mg_http_header_get(&req, names[i]);
            if (v) {
                inside(v, buf, req.head_len);
                (void)mg_http_has_token(v, "gzip");
                (void)mg_http_has_token(v, "close");
            }
        }
    }
    free(buf);
    return 0;
}
