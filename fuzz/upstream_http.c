/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the reverse proxy's HTTP (workers/upstream/upstream_http.c). The first byte chooses
 * the side and a few flags; the rest is what that side sends.
 *
 * Client side (even first byte): a request head and its body, as a client sends them. When
 * meshgate would pass the request on (the head parses, mg_upstream_request_check admits it),
 * the bytes it sends upstream (mg_upstream_request_head, then exactly the body's framed
 * length, which is what mg_upstream_begin reads from the client) must parse, with a strict
 * parser of this file's own, as exactly one request: the same method and target, CRLF line
 * ends, field names that are tokens, values without a CR, LF or other control, no
 * Transfer-Encoding, at most one Content-Length and Host, one X-Forwarded-For saying what
 * meshgate set, no Connection but a WebSocket's, and a body of exactly the framed length with
 * nothing after it. "The upstream sees exactly the requests the client was admitted for."
 *
 * Upstream side (odd first byte): a response head and body. What mg_upstream_parse_response
 * returns points into the input; a complete head was incomplete one byte earlier; the head
 * sent to the client (mg_upstream_response_head) parses strictly and frames the body the way
 * meshgate relays it (one length equal to the upstream's for MG_BODY_LENGTH, chunked alone
 * for MG_BODY_CHUNKED to an HTTP/1.1 client, neither when decoded or bodiless); a connection
 * kept alive has a framing that ends; the chunked decoder takes the rest without reading past
 * it.
 */
#include "upstream_http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CLIENT_ADDR "192.0.2.1"
#define MAX_BODY 4096

static void inside(const struct mg_str *s, const char *buf, size_t len)
{
    if (s->len && (s->ptr < buf || s->ptr + s->len > buf + len))
        abort();
}

static bool tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A head parsed strictly: CRLF lines, token names, clean values. */
struct strict_head {
    const char *start_line;
    size_t start_len;
    struct mg_http_header fields[MG_HTTP_MAX_HEADERS + 8];
    size_t count;
    size_t head_len;
};

static bool name_eq(const struct mg_str *s, const char *want)
{
    return s->len == strlen(want) && strncasecmp(s->ptr, want, s->len) == 0;
}

/* Aborts on anything a strict HTTP/1.1 recipient would take differently from meshgate. */
static void strict_parse(const char *buf, size_t len, struct strict_head *h)
{
    memset(h, 0, sizeof *h);
    const char *p = buf, *end = buf + len;
    bool first = true;
    for (;;) {
        const char *lf = memchr(p, '\n', (size_t)(end - p));
        if (!lf || lf == p || lf[-1] != '\r')
            abort(); /* every line ends in CRLF, and the head ends */
        const char *line_end = lf - 1;
        for (const char *q = p; q < line_end; q++)
            if (*q == '\r' || *q == '\0')
                abort(); /* a bare CR or a NUL */
        if (first) {
            h->start_line = p;
            h->start_len = (size_t)(line_end - p);
            first = false;
        } else if (line_end == p) {
            h->head_len = (size_t)(lf + 1 - buf);
            return;
        } else {
            if (*p == ' ' || *p == '\t')
                abort(); /* obsolete folding */
            const char *colon = memchr(p, ':', (size_t)(line_end - p));
            if (!colon || colon == p)
                abort();
            for (const char *q = p; q < colon; q++)
                if (!tchar((unsigned char)*q))
                    abort();
            const char *v = colon + 1;
            while (v < line_end && (*v == ' ' || *v == '\t'))
                v++;
            for (const char *q = v; q < line_end; q++) {
                unsigned char c = (unsigned char)*q;
                if ((c < 0x20 && c != '\t') || c == 0x7f)
                    abort();
            }
            if (h->count == sizeof h->fields / sizeof h->fields[0])
                abort();
            h->fields[h->count].name = (struct mg_str){p, (size_t)(colon - p)};
            h->fields[h->count].value = (struct mg_str){v, (size_t)(line_end - v)};
            h->count++;
        }
        p = lf + 1;
    }
}

static size_t count(const struct strict_head *h, const char *name, const struct mg_str **last)
{
    size_t n = 0;
    for (size_t i = 0; i < h->count; i++)
        if (name_eq(&h->fields[i].name, name)) {
            n++;
            if (last)
                *last = &h->fields[i].value;
        }
    return n;
}

static int64_t number(const struct mg_str *v)
{
    if (v->len == 0 || v->len > 18)
        abort();
    int64_t n = 0;
    for (size_t i = 0; i < v->len; i++) {
        if (v->ptr[i] < '0' || v->ptr[i] > '9')
            abort();
        n = n * 10 + (v->ptr[i] - '0');
    }
    return n;
}

static void client_side(const char *buf, size_t size)
{
    struct mg_http_limits limits = {8192, 2048};
    struct mg_http_request hr;
    int status = 0;
    const char *why = NULL;
    if (mg_http_parse_request(buf, size, &limits, &hr, &status, &why) != MG_HTTP_OK)
        return;
    if (mg_upstream_request_check(&hr, MAX_BODY, &why) != 0) {
        if (!why)
            abort();
        return;
    }
    /* Admitted: the body is never chunked, never longer than the limit. */
    if (hr.chunked || hr.content_length > MAX_BODY)
        abort();
    bool websocket = mg_upstream_is_websocket(&hr);
    if (websocket && hr.content_length > 0)
        abort();
    int64_t framed = hr.content_length > 0 ? hr.content_length : 0;
    struct mg_buf up;
    mg_buf_init(&up);
    mg_upstream_request_head(&hr, CLIENT_ADDR, NULL, websocket, &up);
    size_t head_sent = up.len;
    /* The body as the engine reads it: exactly the framed length of what the client sent
     * next (a client that sends less is cut off; pad here, the bytes are the client's). */
    size_t have = size - hr.head_len;
    size_t take = have < (size_t)framed ? have : (size_t)framed;
    mg_buf_append(&up, buf + hr.head_len, take);
    for (size_t i = take; i < (size_t)framed; i++)
        mg_buf_putc(&up, 'x');

    struct strict_head h;
    strict_parse(up.data, up.len, &h);
    if (h.head_len != head_sent)
        abort(); /* the head ends where meshgate's head ends */
    /* The request line: the client's method and target, HTTP/1.1. */
    size_t want = hr.method.len + 1 + hr.target.len + 9;
    if (h.start_len != want || memcmp(h.start_line, hr.method.ptr, hr.method.len) != 0 ||
        h.start_line[hr.method.len] != ' ' ||
        memcmp(h.start_line + hr.method.len + 1, hr.target.ptr, hr.target.len) != 0 ||
        memcmp(h.start_line + hr.method.len + 1 + hr.target.len, " HTTP/1.1", 9) != 0)
        abort();
    /* Framing: the length meshgate read, once; never a transfer coding. */
    const struct mg_str *v = NULL;
    size_t lengths = count(&h, "Content-Length", &v);
    if (count(&h, "Transfer-Encoding", NULL) != 0 || lengths > 1)
        abort();
    int64_t body = lengths ? number(v) : 0;
    if ((hr.content_length >= 0) != (lengths == 1) || body != framed)
        abort();
    if (up.len - h.head_len != (size_t)body)
        abort(); /* exactly one request: the body, then nothing */
    if (count(&h, "Host", NULL) > 1)
        abort();
    /* Who the client is: meshgate's word only. */
    if (count(&h, "X-Forwarded-For", &v) != 1 || !name_eq(v, CLIENT_ADDR) ||
        count(&h, "Forwarded", NULL) != 0 || count(&h, "X-Forwarded-Proto", NULL) != 1)
        abort();
    /* No Connection header names anything away at the upstream, but a WebSocket's upgrade. */
    size_t connections = count(&h, "Connection", &v);
    if (connections > (websocket ? 1u : 0u) || (connections && !name_eq(v, "Upgrade")))
        abort();
    if (!websocket && count(&h, "Upgrade", NULL) != 0)
        abort();
    mg_buf_free(&up);
}

static void upstream_side(const char *buf, size_t size, uint8_t flags)
{
    bool head_request = flags & 2, keep_alive = flags & 4;
    int client_minor = (flags & 8) ? 0 : 1;
    struct mg_upstream_response r;
    enum mg_http_result pr = mg_upstream_parse_response(buf, size, head_request, &r);
    if (pr == MG_HTTP_INCOMPLETE && size >= MG_UPSTREAM_HEAD_MAX)
        abort(); /* a head past the limit is an error, never a wait */
    if (pr != MG_HTTP_OK)
        return;
    if (r.head_len == 0 || r.head_len > size || r.head_len > MG_UPSTREAM_HEAD_MAX ||
        r.header_count > MG_HTTP_MAX_HEADERS || r.status < 100 || r.status > 599)
        abort();
    inside(&r.reason, buf, r.head_len);
    for (size_t i = 0; i < r.header_count; i++) {
        inside(&r.headers[i].name, buf, r.head_len);
        inside(&r.headers[i].value, buf, r.head_len);
    }
    struct mg_upstream_response again;
    if (mg_upstream_parse_response(buf, r.head_len - 1, head_request, &again) != MG_HTTP_INCOMPLETE)
        abort();
    /* Kept alive only with a framing that ends by itself. */
    if (r.keep_alive && (r.framing == MG_BODY_CLOSE || r.minor_version != 1 || r.status == 101))
        abort();
    if (r.framing == MG_BODY_LENGTH && (!r.has_length || r.content_length < 0))
        abort();
    if (r.status == 101)
        return; /* relayed only to a WebSocket handshake, as a tunnel */

    struct mg_buf out;
    mg_buf_init(&out);
    bool dechunk = false, close_after = false;
    mg_upstream_response_head(&r, client_minor, keep_alive, &out, &dechunk, &close_after);
    struct strict_head h;
    strict_parse(out.data, out.len, &h);
    if (h.head_len != out.len || h.start_len < 12 || memcmp(h.start_line, "HTTP/1.1 ", 9) != 0)
        abort();
    const struct mg_str *v = NULL;
    size_t lengths = count(&h, "Content-Length", &v);
    int64_t length = lengths == 1 ? number(v) : -1;
    const struct mg_str *te = NULL;
    size_t codings = count(&h, "Transfer-Encoding", &te);
    if (lengths > 1 || codings > 1 || (lengths && codings))
        abort();
    switch (r.framing) {
    case MG_BODY_LENGTH:
        if (length != r.content_length || codings)
            abort();
        break;
    case MG_BODY_CHUNKED:
        if (lengths || dechunk != (client_minor == 0) || (dechunk && (codings || !close_after)) ||
            (!dechunk && (codings != 1 || !name_eq(te, "chunked"))))
            abort();
        break;
    case MG_BODY_CLOSE:
        if (lengths || codings || !close_after)
            abort();
        break;
    case MG_BODY_NONE:
        if (codings || ((r.status < 200 || r.status == 204) && lengths))
            abort();
        break;
    }
    if (keep_alive && !close_after && client_minor == 1 && count(&h, "Connection", NULL) != 0)
        abort();
    mg_buf_free(&out);

    /* The body's rest through the chunked decoder, in two parts. */
    if (r.framing == MG_BODY_CHUNKED) {
        const char *body = buf + r.head_len;
        size_t n = size - r.head_len, cut = n / 2;
        char *decoded = malloc(n ? n : 1);
        struct mg_chunked c = {0};
        size_t out_len = 0;
        bool done = false;
        long a = mg_chunked_feed(&c, body, cut, decoded, &out_len, &done);
        if (a >= 0 && !done) {
            long b = mg_chunked_feed(&c, body + cut, n - cut, decoded, &out_len, &done);
            if (b >= 0 && (size_t)(a + b) > n)
                abort();
        } else if (a > (long)cut) {
            abort();
        }
        if (out_len > n)
            abort();
        free(decoded);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    size--;
    char *buf = malloc(size ? size : 1); /* exact size: ASan sees any read past the end */
    memcpy(buf, data + 1, size);
    if (flags & 1)
        upstream_side(buf, size, flags);
    else
        client_side(buf, size);
    free(buf);
    return 0;
}
