/* SPDX-License-Identifier: ISC */
/*
 * bench/http.c: the HTTP of the client: the request head as sent, and a parser of response
 * heads that never allocates and reads nothing past the bytes it is given.
 */
#include "internal.h"

#include <string.h>
#include <strings.h>

/* Writes the request head for s with key (NULL: no {key} in the path) into out; returns its
 * length, or the length it would have when out is NULL or too small. */
size_t mg_bench_format_request(const struct mg_bench_config *cfg, const struct mg_bench_stream *s,
                               const char *key, char *out, size_t cap)
{
    struct mg_buf b;
    mg_buf_init(&b);
    mg_buf_puts(&b, "GET ");
    for (const char *p = s->path; *p;) {
        if (strncmp(p, "{key}", 5) == 0 && key) {
            mg_buf_puts(&b, key);
            p += 5;
        } else {
            mg_buf_putc(&b, *p++);
        }
    }
    mg_buf_printf(&b, " HTTP/1.1\r\nHost: %s\r\nUser-Agent: meshgate-bench\r\n", cfg->target.text);
    for (unsigned i = 0; i < s->nheaders; i++)
        mg_buf_printf(&b, "%s\r\n", s->headers[i]);
    if (s->mode == MG_BENCH_ONCE)
        mg_buf_puts(&b, "Connection: close\r\n");
    mg_buf_puts(&b, "\r\n");
    size_t len = b.failed ? (size_t)-1 : b.len;
    if (out && len < cap) {
        memcpy(out, b.data, len);
        out[len] = '\0';
    }
    mg_buf_free(&b);
    return len;
}

/* The longest request s can send: with its longest possible key in every slot. */
size_t mg_bench_longest_request(const struct mg_bench_config *cfg, const struct mg_bench_stream *s)
{
    size_t longest_key = 0;
    for (size_t i = 0; i < cfg->nkeys; i++)
        if (strlen(cfg->keys[i]) > longest_key)
            longest_key = strlen(cfg->keys[i]);
    size_t base = mg_bench_format_request(cfg, s, "", NULL, 0);
    return base + s->key_slots * longest_key;
}

static bool equals_ci(const char *p, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(p, lit, n) == 0;
}

/* --chunked, for the run under way (the parser is shared with the tests, which never set it). */
bool mg_bench_accept_chunked;

/* Content-Length: digits only, at most 15; a second one must say the same. */
static bool parse_content_length(const char *v, size_t value_len, struct mg_bench_response_head *h,
                                 const char **why)
{
    uint64_t n = 0;
    if (value_len == 0 || value_len > 15) {
        *why = "a Content-Length that is not a number";
        return false;
    }
    for (size_t i = 0; i < value_len; i++) {
        if (v[i] < '0' || v[i] > '9') {
            *why = "a Content-Length that is not a number";
            return false;
        }
        n = n * 10 + (uint64_t)(v[i] - '0');
    }
    if (h->has_content_length && n != h->content_length) {
        *why = "two different Content-Length headers";
        return false;
    }
    h->has_content_length = true;
    h->content_length = n;
    return true;
}

/* The tokens of a Connection header: close, keep-alive (others are ignored). */
static void parse_connection(const char *v, const char *v_end, struct mg_bench_response_head *h,
                             bool *keep_alive)
{
    for (const char *t = v; t < v_end;) {
        while (t < v_end && (*t == ' ' || *t == '\t' || *t == ','))
            t++;
        const char *t_end = t;
        while (t_end < v_end && *t_end != ',' && *t_end != ' ' && *t_end != '\t')
            t_end++;
        if (equals_ci(t, (size_t)(t_end - t), "close"))
            h->connection_close = true;
        else if (equals_ci(t, (size_t)(t_end - t), "keep-alive"))
            *keep_alive = true;
        t = t_end;
    }
}

/* One header line, p up to eol (its CRLF); only the headers that frame the response count. */
static bool parse_header_line(const char *p, const char *eol, struct mg_bench_response_head *h,
                              bool *keep_alive, const char **why)
{
    const char *colon = memchr(p, ':', (size_t)(eol - p));
    if (!colon || colon == p) {
        *why = "a header line without a name";
        return false;
    }
    for (const char *q = p; q < colon; q++)
        if (!mg_bench_token_char(*q)) {
            *why = "a header name with a character outside the token set";
            return false;
        }
    const char *v = colon + 1, *v_end = eol;
    while (v < v_end && (*v == ' ' || *v == '\t'))
        v++;
    while (v_end > v && (v_end[-1] == ' ' || v_end[-1] == '\t'))
        v_end--;
    size_t name_len = (size_t)(colon - p), value_len = (size_t)(v_end - v);
    if (equals_ci(p, name_len, "content-length"))
        return parse_content_length(v, value_len, h, why);
    if (equals_ci(p, name_len, "transfer-encoding")) {
        if (!mg_bench_accept_chunked || !equals_ci(v, value_len, "chunked")) {
            *why = "Transfer-Encoding is not supported (meshgate always sends Content-Length)";
            return false;
        }
        h->chunked = true;
    } else if (equals_ci(p, name_len, "connection")) {
        parse_connection(v, v_end, h, keep_alive);
    }
    return true;
}

enum mg_bench_parse mg_bench_parse_response_head(const char *buf, size_t len,
                                                 struct mg_bench_response_head *h, const char **why)
{
    memset(h, 0, sizeof *h);
    *why = NULL;
    static const char prefix[] = "HTTP/1.";
    size_t check = len < sizeof prefix - 1 ? len : sizeof prefix - 1;
    if (memcmp(buf, prefix, check) != 0) {
        *why = "not an HTTP/1.x status line";
        return MG_BENCH_PARSE_BAD;
    }
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end) {
        if (len >= MG_BENCH_RESPONSE_HEAD_MAX) {
            *why = "response head longer than 16384 bytes";
            return MG_BENCH_PARSE_BAD;
        }
        return MG_BENCH_PARSE_MORE;
    }
    size_t head_len = (size_t)(end - buf) + 4;
    if (head_len > MG_BENCH_RESPONSE_HEAD_MAX) {
        *why = "response head longer than 16384 bytes";
        return MG_BENCH_PARSE_BAD;
    }
    /* "HTTP/1.x SSS" then a space (and a reason) or the end of the line. */
    if (head_len < 16 || (buf[7] != '0' && buf[7] != '1') || buf[8] != ' ' || buf[9] < '1' ||
        buf[9] > '5' || buf[10] < '0' || buf[10] > '9' || buf[11] < '0' || buf[11] > '9' ||
        (buf[12] != ' ' && buf[12] != '\r')) {
        *why = "not an HTTP/1.x status line";
        return MG_BENCH_PARSE_BAD;
    }
    h->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    if (h->status < 200) {
        *why = "an interim 1xx response (meshgate sends none)";
        return MG_BENCH_PARSE_BAD;
    }
    bool http10 = buf[7] == '0', keep_alive = false;
    const char *lines_end = end + 2; /* the CRLF ending the last header line */
    for (const char *p = memmem(buf, head_len, "\r\n", 2) + 2; p < lines_end;) {
        const char *eol = memmem(p, (size_t)(lines_end - p), "\r\n", 2);
        if (!parse_header_line(p, eol, h, &keep_alive, why))
            return MG_BENCH_PARSE_BAD;
        p = eol + 2;
    }
    if (http10 && !keep_alive)
        h->connection_close = true;
    if (h->chunked && h->has_content_length) {
        *why = "both Content-Length and Transfer-Encoding";
        return MG_BENCH_PARSE_BAD;
    }
    if (!h->has_content_length && !h->chunked) {
        if (h->status != 204 && h->status != 304) {
            *why = "no Content-Length (meshgate always sends one)";
            return MG_BENCH_PARSE_BAD;
        }
        h->content_length = 0;
    }
    h->head_len = head_len;
    return MG_BENCH_PARSE_DONE;
}
