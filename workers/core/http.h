/* SPDX-License-Identifier: ISC */
/*
 * http: an HTTP/1.1 request-head parser in the manner of picohttpparser. It never allocates:
 * every string it returns points into the caller's buffer. It is called again with more
 * bytes until it says the head is complete (MG_HTTP_OK), needs more (MG_HTTP_INCOMPLETE), or
 * is bad (MG_HTTP_ERROR, with the status to answer and a sentence for the client).
 *
 * Limits are checked as bytes arrive, so a head that is already too large is refused before
 * it is complete: a request line whose target is longer than max_uri_bytes answers 414, a
 * head longer than max_header_bytes answers 431.
 */
#ifndef MESHGATE_HTTP_H
#define MESHGATE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_HTTP_MAX_HEADERS 64
#define MG_HTTP_MAX_PARAMS 32

struct mg_str {
    const char *ptr;
    size_t len;
};

enum mg_http_method { MG_METHOD_GET, MG_METHOD_HEAD, MG_METHOD_OTHER };

struct mg_http_header {
    struct mg_str name;
    struct mg_str value;
};

struct mg_http_limits {
    size_t max_header_bytes; /* whole head: request line, headers, final CRLF CRLF */
    size_t max_uri_bytes;    /* request target */
};

struct mg_http_request {
    struct mg_str method;
    enum mg_http_method method_id;
    struct mg_str target; /* as sent, e.g. "/api/nodes?limit=5" */
    struct mg_str path;   /* target up to '?', still percent-encoded */
    struct mg_str query;  /* after '?', without it; len 0 when absent */
    int minor_version;    /* HTTP/1.0 or HTTP/1.1 */
    struct mg_http_header headers[MG_HTTP_MAX_HEADERS];
    size_t header_count;
    size_t head_len;        /* bytes of the head, including the blank line */
    int64_t content_length; /* -1 when absent */
    bool chunked;           /* Transfer-Encoding ends in chunked */
    bool keep_alive;        /* what the client asked for (version and Connection) */
};

enum mg_http_result { MG_HTTP_OK = 0, MG_HTTP_INCOMPLETE, MG_HTTP_ERROR };

/*
 * Parses the head at buf[0..len). On MG_HTTP_ERROR, *status is 400, 414, 431, 501 or 505 and
 * *why a sentence for the error body (static storage).
 * Accepts lone LF line ends as well as CRLF (RFC 9112 section 2.2); refuses obsolete line
 * folding, whitespace before a header's colon, control characters, a Content-Length that is
 * not a number or appears twice with different values, and Content-Length together with
 * Transfer-Encoding.
 */
enum mg_http_result mg_http_parse_request(const char *buf, size_t len,
                                          const struct mg_http_limits *limits,
                                          struct mg_http_request *req, int *status,
                                          const char **why);

/* The value of the first header with this name (case-insensitive), or NULL. */
const struct mg_str *mg_http_header_get(const struct mg_http_request *req, const char *name);

/*
 * True when a comma-separated header value lists token (case-insensitive), ignoring
 * parameters; for Accept-Encoding a token with q=0 does not count.
 */
bool mg_http_has_token(const struct mg_str *value, const char *token);

/*
 * Percent-decodes src[0..len) into dst (at most cap bytes, NUL-terminated). With
 * plus_is_space ('+' in a query) '+' becomes a space. Returns the decoded length, or -1 for
 * a malformed escape, a decoded NUL byte, or not enough room.
 */
long mg_url_decode(const char *src, size_t len, char *dst, size_t cap, bool plus_is_space);

/* True when a path as sent holds "%2F" or "%2f": a slash that is data, not a separator. */
bool mg_path_has_encoded_slash(const struct mg_str *raw_path);

struct mg_query_param {
    const char *name; /* decoded, NUL-terminated, in the caller's storage */
    const char *value;
};

struct mg_query {
    struct mg_query_param param[MG_HTTP_MAX_PARAMS];
    size_t count;
};

/*
 * Splits a raw query string on '&', each part on its first '=', and percent-decodes both
 * sides into storage (cap bytes; twice the query's length is always enough). Empty parts
 * are skipped; a name without '=' has the value "". Returns 0, or -1 with a sentence in
 * *why (bad escape, too many parameters).
 */
int mg_query_parse(struct mg_query *q, const char *raw, size_t len, char *storage, size_t cap,
                   const char **why);

/* The value of the first parameter with this name, or NULL. */
const char *mg_query_get(const struct mg_query *q, const char *name);

/* The reason phrase of a status code ("Not Found"), "Unknown" for codes it does not know. */
const char *mg_http_reason(int status);

#endif
