/* SPDX-License-Identifier: ISC */
/*
 * http: the request-head parser declared in http.h.
 *
 * The parser keeps no state between calls: each call scans buf[0..len) from the start, the
 * way picohttpparser does, so the caller only has to keep the bytes and call again when more
 * arrive. Heads are bounded by max_header_bytes, so the rescan costs little.
 *
 * Invariants the callers and the fuzz test rely on:
 *   - No byte at or past len is read, and no byte past max_header_bytes is looked at: the
 *     scan runs over min(len, max_header_bytes) bytes, and a head still incomplete once that
 *     many bytes are present is refused with 431.
 *   - Every check is decided by bytes already seen, in order. A prefix of a request that
 *     parses answers MG_HTTP_INCOMPLETE, and a prefix of a bad request answers
 *     MG_HTTP_INCOMPLETE or an error, never MG_HTTP_OK. A CR at the end of the buffer waits
 *     for its LF.
 *   - On MG_HTTP_OK, head_len <= len and every mg_str in req points into buf.
 *
 * Choices the RFCs leave open:
 *   - Leading empty lines before the request line are skipped (RFC 9112 section 2.2); they
 *     count toward max_header_bytes.
 *   - The request line takes exactly one SP between its three parts.
 *   - The target is origin-form ("/path?query"), "*", or absolute-form
 *     ("http://host/path?query", scheme http or https, any case). For absolute-form, target
 *     is the whole form as sent and path/query come from the part after the authority; the
 *     Host header is left as the client sent it. Absolute-form without a path
 *     ("http://host") is refused, since path must point into buf and start with '/'.
 *     Authority-form (CONNECT host:port) is refused. Target bytes must be visible ASCII.
 *   - Only HTTP/1.0 and HTTP/1.1 are served; any other well-formed "HTTP/x.y" answers 505.
 *   - Content-Length is one decimal number; a comma list is refused, and repeated header
 *     lines must agree. Transfer-Encoding must end in "chunked" (501 otherwise; codings
 *     before it are accepted and left to the caller), may not name chunked twice, and is
 *     refused in HTTP/1.0 requests (RFC 9112 section 6.1).
 *   - A missing or repeated Host header is not checked here.
 */
#include "http.h"

#include "text.h"

#include <stdint.h>
#include <string.h>

#define STRINGIFY(x) #x
#define EXPAND_STRINGIFY(x) STRINGIFY(x)
#define MAX_HEADERS_TEXT EXPAND_STRINGIFY(MG_HTTP_MAX_HEADERS)

/* RFC 9110 section 5.6.2: tchar. */
static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
        return true;
    default:
        return false;
    }
}

static bool is_ows(unsigned char c)
{
    return c == ' ' || c == '\t';
}

static unsigned char lower(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c - 'A' + 'a') : c;
}

static bool equals_nocase(const char *a, size_t a_len, const char *b, size_t b_len)
{
    if (a_len != b_len)
        return false;
    for (size_t i = 0; i < a_len; i++)
        if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
            return false;
    return true;
}

static bool str_is(const struct mg_str *s, const char *lit)
{
    return equals_nocase(s->ptr, s->len, lit, strlen(lit));
}

static void trim_ows(const char **p, size_t *n)
{
    while (*n > 0 && is_ows((unsigned char)(*p)[0])) {
        (*p)++;
        (*n)--;
    }
    while (*n > 0 && is_ows((unsigned char)(*p)[*n - 1]))
        (*n)--;
}

static enum mg_http_result refuse(int *status, const char **why, int code, const char *sentence)
{
    *status = code;
    *why = sentence;
    return MG_HTTP_ERROR;
}

/*
 * Steps over the line end at buf[*pos], which must be CR or LF. A CR must be followed by LF;
 * a CR that is the last byte so far waits for more.
 */
static enum mg_http_result end_line(const char *buf, size_t len, size_t *pos, int *status,
                                    const char **why, const char *bare_cr_why)
{
    if (buf[*pos] == '\n') {
        *pos += 1;
        return MG_HTTP_OK;
    }
    if (*pos + 1 >= len)
        return MG_HTTP_INCOMPLETE;
    if (buf[*pos + 1] != '\n')
        return refuse(status, why, 400, bare_cr_why);
    *pos += 2;
    return MG_HTTP_OK;
}

/* Checks the target's form and splits it into path and query. */
static enum mg_http_result split_target(struct mg_http_request *req, int *status, const char **why)
{
    const char *t = req->target.ptr;
    size_t n = req->target.len;
    size_t path_start = 0;

    if (n == 1 && t[0] == '*') {
        req->path = req->target;
        req->query = (struct mg_str){t + n, 0};
        return MG_HTTP_OK;
    }
    if (t[0] != '/') {
        size_t scheme_len;
        if (n >= 7 && equals_nocase(t, 7, "http://", 7))
            scheme_len = 7;
        else if (n >= 8 && equals_nocase(t, 8, "https://", 8))
            scheme_len = 8;
        else
            return refuse(status, why, 400, "request target must start with '/'");
        path_start = scheme_len;
        while (path_start < n && t[path_start] != '/' && t[path_start] != '?')
            path_start++;
        if (path_start == scheme_len)
            return refuse(status, why, 400, "request target has an empty host");
        if (path_start == n || t[path_start] != '/')
            return refuse(status, why, 400, "request target has no path after the host");
    }
    const char *path = t + path_start;
    size_t path_len = n - path_start;
    const char *mark = memchr(path, '?', path_len);
    if (mark) {
        req->path = (struct mg_str){path, (size_t)(mark - path)};
        req->query = (struct mg_str){mark + 1, path_len - (size_t)(mark - path) - 1};
    } else {
        req->path = (struct mg_str){path, path_len};
        req->query = (struct mg_str){t + n, 0};
    }
    return MG_HTTP_OK;
}

static enum mg_http_result parse_request_line(const char *buf, size_t len, size_t *pos,
                                              const struct mg_http_limits *limits,
                                              struct mg_http_request *req, int *status,
                                              const char **why)
{
    size_t p = *pos;
    enum mg_http_result r;

    /* RFC 9112 section 2.2: ignore empty lines before the request line. */
    while (p < len && (buf[p] == '\r' || buf[p] == '\n')) {
        r = end_line(buf, len, &p, status, why, "request line is malformed");
        if (r != MG_HTTP_OK)
            return r;
    }

    size_t start = p;
    while (p < len && is_tchar((unsigned char)buf[p]))
        p++;
    if (p == len)
        return MG_HTTP_INCOMPLETE;
    if (buf[p] != ' ' || p == start)
        return refuse(status, why, 400, "request method is malformed");
    req->method = (struct mg_str){buf + start, p - start};
    p++;

    start = p;
    for (; p < len && buf[p] != ' '; p++) {
        unsigned char c = (unsigned char)buf[p];
        if (c == '\r' || c == '\n')
            return refuse(status, why, 400, "request line has no HTTP version");
        if (c < 0x21 || c > 0x7e)
            return refuse(status, why, 400,
                          "request target contains a control character or a non-ASCII byte");
        if (p + 1 - start > limits->max_uri_bytes)
            return refuse(status, why, 414,
                          "request target is too long; shorten the path or the query string");
    }
    if (p == len)
        return MG_HTTP_INCOMPLETE;
    if (p == start)
        return refuse(status, why, 400, "request line is malformed");
    req->target = (struct mg_str){buf + start, p - start};
    r = split_target(req, status, why);
    if (r != MG_HTTP_OK)
        return r;
    p++;

    /* "HTTP/" DIGIT "." DIGIT, checked as far as it has arrived. */
    static const char shape[] = "HTTP/#.#";
    size_t version_start = p;
    for (size_t i = 0; i < sizeof shape - 1; i++, p++) {
        if (p == len)
            return MG_HTTP_INCOMPLETE;
        unsigned char c = (unsigned char)buf[p];
        bool fits = shape[i] == '#' ? (c >= '0' && c <= '9') : c == (unsigned char)shape[i];
        if (!fits)
            return refuse(status, why, 400, "request line has a malformed HTTP version");
    }
    if (p == len)
        return MG_HTTP_INCOMPLETE;
    if (buf[p] != '\r' && buf[p] != '\n')
        return refuse(status, why, 400, "request line has a malformed HTTP version");
    r = end_line(buf, len, &p, status, why, "request line has a CR without LF");
    if (r != MG_HTTP_OK)
        return r;

    char major = buf[version_start + 5];
    char minor = buf[version_start + 7];
    if (major != '1' || (minor != '0' && minor != '1'))
        return refuse(status, why, 505, "HTTP version is not supported; use HTTP/1.1");
    req->minor_version = minor - '0';

    *pos = p;
    return MG_HTTP_OK;
}

static enum mg_http_result parse_headers(const char *buf, size_t len, size_t *pos,
                                         struct mg_http_request *req, int *status, const char **why)
{
    size_t p = *pos;

    for (;;) {
        if (p == len)
            return MG_HTTP_INCOMPLETE;
        unsigned char c = (unsigned char)buf[p];
        if (c == '\r' || c == '\n') {
            enum mg_http_result r =
                end_line(buf, len, &p, status, why, "header section ends with a CR without LF");
            if (r == MG_HTTP_OK)
                *pos = p;
            return r;
        }
        if (is_ows(c))
            return refuse(status, why, 400,
                          "header line starts with whitespace (line folding is not accepted)");
        if (req->header_count == MG_HTTP_MAX_HEADERS)
            return refuse(status, why, 431,
                          "request has more than " MAX_HEADERS_TEXT " header fields");

        size_t name_start = p;
        while (p < len && is_tchar((unsigned char)buf[p]))
            p++;
        if (p == len)
            return MG_HTTP_INCOMPLETE;
        if (is_ows((unsigned char)buf[p]))
            return refuse(status, why, 400, "header name is followed by whitespace before ':'");
        if (buf[p] == '\r' || buf[p] == '\n')
            return refuse(status, why, 400, "header line has no ':'");
        if (buf[p] != ':')
            return refuse(status, why, 400, "header name contains a character that is not allowed");
        if (p == name_start)
            return refuse(status, why, 400, "header name is empty");
        struct mg_str name = {buf + name_start, p - name_start};
        p++;

        while (p < len && is_ows((unsigned char)buf[p]))
            p++;
        size_t value_start = p;
        for (; p < len && buf[p] != '\r' && buf[p] != '\n'; p++) {
            c = (unsigned char)buf[p];
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return refuse(status, why, 400, "header value contains a control character");
        }
        if (p == len)
            return MG_HTTP_INCOMPLETE;
        size_t value_end = p;
        while (value_end > value_start && is_ows((unsigned char)buf[value_end - 1]))
            value_end--;
        enum mg_http_result r =
            end_line(buf, len, &p, status, why, "header value contains a CR without LF");
        if (r != MG_HTTP_OK)
            return r;

        struct mg_http_header *h = &req->headers[req->header_count++];
        h->name = name;
        h->value = (struct mg_str){buf + value_start, value_end - value_start};
    }
}

static enum mg_http_result parse_content_length(const struct mg_str *value,
                                                struct mg_http_request *req, int *status,
                                                const char **why)
{
    if (value->len == 0)
        return refuse(status, why, 400, "Content-Length is not a number");
    int64_t n = 0;
    for (size_t i = 0; i < value->len; i++) {
        unsigned char c = (unsigned char)value->ptr[i];
        if (c < '0' || c > '9')
            return refuse(status, why, 400, "Content-Length is not a number");
        if (n > (INT64_MAX - (c - '0')) / 10)
            return refuse(status, why, 400, "Content-Length is too large");
        n = n * 10 + (c - '0');
    }
    if (req->content_length >= 0 && req->content_length != n)
        return refuse(status, why, 400, "Content-Length appears twice with different values");
    req->content_length = n;
    return MG_HTTP_OK;
}

struct transfer_codings {
    size_t count;
    size_t chunked_count;
    bool last_is_chunked;
};

/* Adds the codings of one Transfer-Encoding line, in order, to what earlier lines listed. */
static enum mg_http_result add_transfer_codings(const struct mg_str *value,
                                                struct transfer_codings *tc, int *status,
                                                const char **why)
{
    const char *p = value->ptr;
    const char *end = value->ptr + value->len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *element_end = comma ? comma : end;
        const char *element = p;
        size_t n = (size_t)(element_end - p);
        p = comma ? comma + 1 : end;

        trim_ows(&element, &n);
        if (n == 0)
            continue;
        /* transfer-coding = token *( OWS ";" OWS transfer-parameter ) */
        size_t token_len = 0;
        while (token_len < n && is_tchar((unsigned char)element[token_len]))
            token_len++;
        size_t after = token_len;
        while (after < n && is_ows((unsigned char)element[after]))
            after++;
        if (token_len == 0 || (after < n && element[after] != ';'))
            return refuse(status, why, 400, "Transfer-Encoding is malformed");
        bool chunked = equals_nocase(element, n, "chunked", 7);
        tc->count++;
        tc->chunked_count += chunked;
        tc->last_is_chunked = chunked;
    }
    return MG_HTTP_OK;
}

/* Reads the headers that frame the body or decide the connection. */
static enum mg_http_result interpret_headers(struct mg_http_request *req, int *status,
                                             const char **why)
{
    struct transfer_codings tc = {0, 0, false};
    bool has_transfer_encoding = false;
    bool wants_close = false;
    bool wants_keep_alive = false;
    enum mg_http_result r;

    for (size_t i = 0; i < req->header_count; i++) {
        const struct mg_http_header *h = &req->headers[i];
        if (str_is(&h->name, "content-length")) {
            r = parse_content_length(&h->value, req, status, why);
            if (r != MG_HTTP_OK)
                return r;
        } else if (str_is(&h->name, "transfer-encoding")) {
            has_transfer_encoding = true;
            r = add_transfer_codings(&h->value, &tc, status, why);
            if (r != MG_HTTP_OK)
                return r;
        } else if (str_is(&h->name, "connection")) {
            wants_close |= mg_http_has_token(&h->value, "close");
            wants_keep_alive |= mg_http_has_token(&h->value, "keep-alive");
        }
    }

    if (has_transfer_encoding) {
        if (req->content_length >= 0)
            return refuse(status, why, 400,
                          "request has both Content-Length and Transfer-Encoding");
        if (req->minor_version == 0)
            return refuse(status, why, 400, "Transfer-Encoding is not allowed in HTTP/1.0");
        if (tc.count == 0)
            return refuse(status, why, 400, "Transfer-Encoding is empty");
        if (!tc.last_is_chunked)
            return refuse(status, why, 501,
                          "Transfer-Encoding is not supported unless it ends in chunked");
        if (tc.chunked_count > 1)
            return refuse(status, why, 400, "Transfer-Encoding lists chunked more than once");
        req->chunked = true;
    }

    if (req->minor_version == 1)
        req->keep_alive = !wants_close;
    else
        req->keep_alive = wants_keep_alive && !wants_close;
    return MG_HTTP_OK;
}

enum mg_http_result mg_http_parse_request(const char *buf, size_t len,
                                          const struct mg_http_limits *limits,
                                          struct mg_http_request *req, int *status,
                                          const char **why)
{
    req->method = req->target = req->path = req->query = (struct mg_str){buf, 0};
    req->method_id = MG_METHOD_OTHER;
    req->minor_version = 0;
    req->header_count = 0;
    req->head_len = 0;
    req->content_length = -1;
    req->chunked = false;
    req->keep_alive = false;

    /* Never look past the limit: what lies beyond it cannot belong to an acceptable head. */
    size_t scan_len = len < limits->max_header_bytes ? len : limits->max_header_bytes;
    size_t pos = 0;
    enum mg_http_result r = parse_request_line(buf, scan_len, &pos, limits, req, status, why);
    if (r == MG_HTTP_OK)
        r = parse_headers(buf, scan_len, &pos, req, status, why);
    if (r == MG_HTTP_INCOMPLETE) {
        if (len >= limits->max_header_bytes)
            return refuse(status, why, 431,
                          "request header section is too large; send fewer or shorter headers");
        return r;
    }
    if (r != MG_HTTP_OK)
        return r;

    r = interpret_headers(req, status, why);
    if (r != MG_HTTP_OK)
        return r;

    if (req->method.len == 3 && memcmp(req->method.ptr, "GET", 3) == 0)
        req->method_id = MG_METHOD_GET;
    else if (req->method.len == 4 && memcmp(req->method.ptr, "HEAD", 4) == 0)
        req->method_id = MG_METHOD_HEAD;
    req->head_len = pos;
    return MG_HTTP_OK;
}

const struct mg_str *mg_http_header_get(const struct mg_http_request *req, const char *name)
{
    size_t name_len = strlen(name);
    for (size_t i = 0; i < req->header_count; i++) {
        const struct mg_http_header *h = &req->headers[i];
        if (equals_nocase(h->name.ptr, h->name.len, name, name_len))
            return &h->value;
    }
    return NULL;
}

/* Index of the first c in s[from..n) outside a quoted-string, or n. */
static size_t find_unquoted(const char *s, size_t n, size_t from, char c)
{
    bool quoted = false;
    for (size_t i = from; i < n; i++) {
        if (quoted) {
            if (s[i] == '\\')
                i++;
            else if (s[i] == '"')
                quoted = false;
        } else if (s[i] == '"') {
            quoted = true;
        } else if (s[i] == c) {
            return i;
        }
    }
    return n;
}

/* RFC 9110 section 12.4.2: "q=0", "q=0.", "q=0.0", up to three zeros after the point. */
static bool is_zero_weight(const char *param, size_t n)
{
    trim_ows(&param, &n);
    const char *eq = memchr(param, '=', n);
    if (!eq)
        return false;
    const char *name = param;
    size_t name_len = (size_t)(eq - param);
    const char *q = eq + 1;
    size_t q_len = n - name_len - 1;
    trim_ows(&name, &name_len);
    trim_ows(&q, &q_len);
    if (!equals_nocase(name, name_len, "q", 1))
        return false;
    if (q_len == 0 || q[0] != '0')
        return false;
    if (q_len == 1)
        return true;
    if (q[1] != '.' || q_len > 5)
        return false;
    for (size_t i = 2; i < q_len; i++)
        if (q[i] != '0')
            return false;
    return true;
}

bool mg_http_has_token(const struct mg_str *value, const char *token)
{
    const char *s = value->ptr;
    size_t n = value->len;
    size_t token_len = strlen(token);

    for (size_t start = 0; start < n;) {
        size_t end = find_unquoted(s, n, start, ',');
        const char *element = s + start;
        size_t element_len = end - start;
        start = end + 1;

        size_t semi = find_unquoted(element, element_len, 0, ';');
        const char *name = element;
        size_t name_len = semi;
        trim_ows(&name, &name_len);
        if (!equals_nocase(name, name_len, token, token_len))
            continue;

        bool refused = false;
        while (semi < element_len) {
            size_t next = find_unquoted(element, element_len, semi + 1, ';');
            if (is_zero_weight(element + semi + 1, next - semi - 1))
                refused = true;
            semi = next;
        }
        if (!refused)
            return true;
    }
    return false;
}

enum decode_result { DECODE_OK, DECODE_BAD_ESCAPE, DECODE_NO_ROOM };

/* Leaves dst NUL-terminated whatever the outcome, so a failed decode is never read as text. */
static enum decode_result decode(const char *src, size_t len, char *dst, size_t cap,
                                 bool plus_is_space, size_t *out_len)
{
    enum decode_result result = DECODE_OK;
    size_t out = 0;
    if (cap == 0)
        return DECODE_NO_ROOM;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '%') {
            int hi = len - i >= 3 ? mg_hex_digit((unsigned char)src[i + 1]) : -1;
            int lo = len - i >= 3 ? mg_hex_digit((unsigned char)src[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                result = DECODE_BAD_ESCAPE;
                break;
            }
            c = (unsigned char)(hi * 16 + lo);
            i += 2;
        } else if (c == '+' && plus_is_space) {
            c = ' ';
        }
        /* A NUL would silently cut the C string the caller gets. */
        if (c == '\0') {
            result = DECODE_BAD_ESCAPE;
            break;
        }
        if (out + 1 >= cap) {
            result = DECODE_NO_ROOM;
            break;
        }
        dst[out++] = (char)c;
    }
    dst[out] = '\0';
    *out_len = out;
    return result;
}

long mg_url_decode(const char *src, size_t len, char *dst, size_t cap, bool plus_is_space)
{
    size_t n = 0;
    if (decode(src, len, dst, cap, plus_is_space, &n) != DECODE_OK)
        return -1;
    return (long)n;
}

static int query_decode(const char *src, size_t len, char *storage, size_t cap, size_t *used,
                        const char **why)
{
    size_t n = 0;
    switch (decode(src, len, storage + *used, cap - *used, true, &n)) {
    case DECODE_OK:
        *used += n + 1;
        return 0;
    case DECODE_BAD_ESCAPE:
        *why = "query string has a malformed percent escape or an encoded NUL";
        return -1;
    case DECODE_NO_ROOM:
    default:
        *why = "query string does not fit in the decoding storage";
        return -1;
    }
}

int mg_query_parse(struct mg_query *q, const char *raw, size_t len, char *storage, size_t cap,
                   const char **why)
{
    size_t used = 0;
    q->count = 0;

    for (size_t start = 0; start < len;) {
        const char *amp = memchr(raw + start, '&', len - start);
        size_t end = amp ? (size_t)(amp - raw) : len;
        const char *part = raw + start;
        size_t part_len = end - start;
        start = end + 1;
        if (part_len == 0)
            continue;
        if (q->count == MG_HTTP_MAX_PARAMS) {
            *why = "too many query parameters";
            return -1;
        }

        struct mg_query_param *param = &q->param[q->count];
        const char *eq = memchr(part, '=', part_len);
        size_t name_len = eq ? (size_t)(eq - part) : part_len;
        param->name = storage + used;
        if (query_decode(part, name_len, storage, cap, &used, why) != 0)
            return -1;
        if (!eq) {
            /* The name's terminator doubles as the empty value, so 2 * len always fits. */
            param->value = storage + used - 1;
        } else {
            param->value = storage + used;
            if (query_decode(eq + 1, part_len - name_len - 1, storage, cap, &used, why) != 0)
                return -1;
        }
        q->count++;
    }
    return 0;
}

const char *mg_query_get(const struct mg_query *q, const char *name)
{
    for (size_t i = 0; i < q->count; i++)
        if (strcmp(q->param[i].name, name) == 0)
            return q->param[i].value;
    return NULL;
}

const char *mg_http_reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 416:
        return "Range Not Satisfiable";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

bool mg_path_has_encoded_slash(const struct mg_str *raw)
{
    for (size_t i = 0; i + 2 < raw->len; i++)
        if (raw->ptr[i] == '%' && raw->ptr[i + 1] == '2' &&
            (raw->ptr[i + 2] == 'f' || raw->ptr[i + 2] == 'F'))
            return true;
    return false;
}
