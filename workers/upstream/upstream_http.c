/* SPDX-License-Identifier: ISC */
#include "upstream_http.h"

#include "text.h"

#include <string.h>
#include <strings.h>

static bool name_is(const struct mg_str *name, const char *want)
{
    size_t n = strlen(want);
    return name->len == n && strncasecmp(name->ptr, want, n) == 0;
}

static size_t count_headers(const struct mg_http_request *hr, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < hr->header_count; i++)
        n += name_is(&hr->headers[i].name, name);
    return n;
}

/* Headers meshgate frames, routes or admits the request by: a Connection header that names
 * one would have it dropped on the way up, and the upstream would read another request than
 * the one meshgate admitted (issue 23: "Connection: Content-Length" smuggled a body of
 * pipelined requests). */
static const char *const end_to_end[] = {
    "Content-Length",  "Transfer-Encoding", "Host",      "Authorization", "X-API-Key",
    "X-Forwarded-For", "X-Forwarded-Proto", "Forwarded", "Via",
};

int mg_upstream_request_check(const struct mg_http_request *hr, int64_t max_body_bytes,
                              const char **why)
{
    if (count_headers(hr, "Transfer-Encoding") > 0 || hr->chunked) {
        *why = "a request body for the upstream must have a Content-Length, not a "
               "Transfer-Encoding";
        return hr->content_length >= 0 ? 400 : 411;
    }
    if (count_headers(hr, "Content-Length") > 1) {
        *why = "the request has more than one Content-Length";
        return 400;
    }
    if (count_headers(hr, "Host") > 1) {
        *why = "the request has more than one Host";
        return 400;
    }
    for (size_t i = 0; i < hr->header_count; i++) {
        if (!name_is(&hr->headers[i].name, "Connection"))
            continue;
        for (size_t k = 0; k < sizeof end_to_end / sizeof end_to_end[0]; k++)
            if (mg_http_has_token(&hr->headers[i].value, end_to_end[k])) {
                *why = "the Connection header names a header that frames or admits the request "
                       "(Content-Length, Transfer-Encoding, Host, Authorization, X-API-Key, "
                       "X-Forwarded-For, X-Forwarded-Proto, Forwarded or Via); it cannot be "
                       "dropped on the way to the upstream";
                return 400;
            }
    }
    if (hr->content_length > 0 && mg_upstream_is_websocket(hr)) {
        *why = "a WebSocket handshake cannot carry a body";
        return 400;
    }
    if (hr->content_length > max_body_bytes) {
        *why = "the request body is larger than MESHGATE_UPSTREAM_MAX_BODY_BYTES";
        return 413;
    }
    return 0;
}

bool mg_upstream_is_websocket(const struct mg_http_request *hr)
{
    const struct mg_str *upgrade = mg_http_header_get(hr, "Upgrade");
    const struct mg_str *connection = mg_http_header_get(hr, "Connection");
    return hr->method_id == MG_METHOD_GET && hr->minor_version == 1 && upgrade && connection &&
           mg_http_has_token(upgrade, "websocket") && mg_http_has_token(connection, "upgrade");
}

/* True when name is hop-by-hop for this message: a fixed list, and what Connection names. */
static bool hop_by_hop(const struct mg_str *name, const struct mg_http_header *headers,
                       size_t count)
{
    static const char *const fixed[] = {"Connection",
                                        "Keep-Alive",
                                        "Proxy-Connection",
                                        "TE",
                                        "Trailer",
                                        "Transfer-Encoding",
                                        "Upgrade",
                                        "Proxy-Authenticate",
                                        "Proxy-Authorization"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (name_is(name, fixed[i]))
            return true;
    char token[64];
    if (name->len >= sizeof token)
        return false;
    memcpy(token, name->ptr, name->len);
    token[name->len] = '\0';
    for (size_t i = 0; i < count; i++)
        if (name_is(&headers[i].name, "Connection") && mg_http_has_token(&headers[i].value, token))
            return true;
    return false;
}

static void put_header(struct mg_buf *out, const struct mg_http_header *h)
{
    mg_buf_append(out, h->name.ptr, h->name.len);
    mg_buf_puts(out, ": ");
    mg_buf_append(out, h->value.ptr, h->value.len);
    mg_buf_puts(out, "\r\n");
}

void mg_upstream_request_head(const struct mg_http_request *hr, const char *client_addr,
                              const char *proto, bool websocket, struct mg_buf *out)
{
    mg_buf_append(out, hr->method.ptr, hr->method.len);
    mg_buf_putc(out, ' ');
    mg_buf_append(out, hr->target.ptr, hr->target.len);
    mg_buf_puts(out, " HTTP/1.1\r\n");
    const struct mg_str *via = NULL;
    for (size_t i = 0; i < hr->header_count; i++) {
        const struct mg_http_header *h = &hr->headers[i];
        /* The body's framing is meshgate's (below), whatever the client's lines say. */
        if (name_is(&h->name, "Content-Length") || name_is(&h->name, "Transfer-Encoding"))
            continue;
        if ((!name_is(&h->name, "Host") && hop_by_hop(&h->name, hr->headers, hr->header_count)) ||
            name_is(&h->name, "X-Forwarded-For") || name_is(&h->name, "X-Forwarded-Proto") ||
            name_is(&h->name, "Forwarded"))
            continue;
        if (name_is(&h->name, "Via")) {
            via = &h->value;
            continue;
        }
        put_header(out, h);
    }
    /* Exactly the length meshgate reads the body by and forwards (mg_upstream_begin). */
    if (hr->content_length >= 0)
        mg_buf_printf(out, "Content-Length: %lld\r\n", (long long)hr->content_length);
    mg_buf_printf(out, "X-Forwarded-For: %s\r\n", client_addr);
    mg_buf_printf(out, "X-Forwarded-Proto: %s\r\n", proto && *proto ? proto : "http");
    if (via)
        mg_buf_printf(out, "Via: %.*s, 1.%d meshgate\r\n", (int)via->len, via->ptr,
                      hr->minor_version);
    else
        mg_buf_printf(out, "Via: 1.%d meshgate\r\n", hr->minor_version);
    if (websocket)
        mg_buf_puts(out, "Connection: Upgrade\r\nUpgrade: websocket\r\n");
    mg_buf_puts(out, "\r\n");
}

static const char *find_line_end(const char *p, const char *end)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    return nl;
}

/* RFC 9110 5.6.2. */
static bool is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Field values and the reason phrase: HTAB, SP, visible ASCII and obs-text; never a CR
 * (which some clients take as a line's end), NUL or another control. */
static bool clean_text(const char *p, const char *end)
{
    for (; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

static bool parse_length(const struct mg_str *v, int64_t *out)
{
    if (v->len == 0 || v->len > 18)
        return false;
    int64_t n = 0;
    for (size_t i = 0; i < v->len; i++) {
        if (v->ptr[i] < '0' || v->ptr[i] > '9')
            return false;
        n = n * 10 + (v->ptr[i] - '0');
    }
    *out = n;
    return true;
}

enum mg_http_result mg_upstream_parse_response(const char *buf, size_t len, bool head_request,
                                               struct mg_upstream_response *r)
{
    memset(r, 0, sizeof *r);
    const char *end = buf + len, *p = buf;
    const char *nl = find_line_end(p, end);
    if (!nl)
        return len >= MG_UPSTREAM_HEAD_MAX ? MG_HTTP_ERROR : MG_HTTP_INCOMPLETE;
    /* HTTP/1.x NNN reason */
    if (nl - p < 12 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
        p[8] != ' ' || p[9] < '1' || p[9] > '5' || p[10] < '0' || p[10] > '9' || p[11] < '0' ||
        p[11] > '9' || (nl - p > 12 && p[12] != ' ' && p[12] != '\r'))
        return MG_HTTP_ERROR;
    r->minor_version = p[7] - '0';
    r->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    const char *reason = p + 12 + (nl - p > 12 && p[12] == ' ');
    const char *reason_end = nl > reason && nl[-1] == '\r' ? nl - 1 : nl;
    r->reason = (struct mg_str){reason, reason_end > reason ? (size_t)(reason_end - reason) : 0};
    if (!clean_text(r->reason.ptr, r->reason.ptr + r->reason.len))
        return MG_HTTP_ERROR;
    p = nl + 1;
    bool has_te = false, chunked = false, close = false;
    int lengths = 0;
    for (;;) {
        nl = find_line_end(p, end);
        if (!nl)
            return len >= MG_UPSTREAM_HEAD_MAX ? MG_HTTP_ERROR : MG_HTTP_INCOMPLETE;
        if ((size_t)(nl + 1 - buf) > MG_UPSTREAM_HEAD_MAX)
            return MG_HTTP_ERROR;
        const char *line_end = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        if (line_end == p) {
            r->head_len = (size_t)(nl + 1 - buf);
            break;
        }
        if (*p == ' ' || *p == '\t' || r->header_count == MG_HTTP_MAX_HEADERS)
            return MG_HTTP_ERROR; /* obsolete folding, or too many */
        const char *colon = memchr(p, ':', (size_t)(line_end - p));
        if (!colon || colon == p)
            return MG_HTTP_ERROR;
        for (const char *q = p; q < colon; q++)
            if (!is_tchar((unsigned char)*q))
                return MG_HTTP_ERROR;
        if (!clean_text(colon + 1, line_end))
            return MG_HTTP_ERROR;
        const char *v = colon + 1, *ve = line_end;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        struct mg_http_header *h = &r->headers[r->header_count++];
        h->name = (struct mg_str){p, (size_t)(colon - p)};
        h->value = (struct mg_str){v, (size_t)(ve - v)};
        if (name_is(&h->name, "Content-Length")) {
            int64_t n;
            if (!parse_length(&h->value, &n) || (lengths && n != r->content_length))
                return MG_HTTP_ERROR;
            r->content_length = n;
            lengths++;
        } else if (name_is(&h->name, "Transfer-Encoding")) {
            has_te = true;
            /* the last coding must be chunked (RFC 9112 6.1) */
            const char *t = h->value.ptr + h->value.len;
            while (t > h->value.ptr && t[-1] != ',')
                t--;
            while (t < h->value.ptr + h->value.len && (*t == ' ' || *t == '\t'))
                t++;
            chunked =
                (size_t)(h->value.ptr + h->value.len - t) == 7 && strncasecmp(t, "chunked", 7) == 0;
        } else if (name_is(&h->name, "Connection")) {
            close |= mg_http_has_token(&h->value, "close");
        }
        p = nl + 1;
    }
    if (head_request || (r->status >= 100 && r->status < 200) || r->status == 204 ||
        r->status == 304) {
        r->framing = MG_BODY_NONE;
    } else if (has_te) {
        if (!chunked)
            return MG_HTTP_ERROR;
        r->framing = MG_BODY_CHUNKED;
    } else if (lengths) {
        r->framing = MG_BODY_LENGTH;
    } else {
        r->framing = MG_BODY_CLOSE;
    }
    r->has_length = lengths > 0 && !has_te;
    if (has_te && lengths)
        r->content_length = 0; /* RFC 9112 6.3: Transfer-Encoding wins; never kept alive */
    /* Kept alive only when where the answer ends is beyond doubt: one length or chunked,
     * not both, not repeated, and none on a status that has no body (a 1xx or 204 that
     * announces one may send one). */
    bool unclear = (has_te && lengths) || lengths > 1 ||
                   (((r->status >= 100 && r->status < 200) || r->status == 204) &&
                    (has_te || (lengths && r->content_length != 0)));
    r->keep_alive = r->minor_version == 1 && !close && r->framing != MG_BODY_CLOSE && !unclear &&
                    r->status != 101;
    return MG_HTTP_OK;
}

void mg_upstream_response_head(const struct mg_upstream_response *r, int client_minor_version,
                               bool keep_alive, struct mg_buf *out, bool *dechunk,
                               bool *close_after)
{
    bool upgrade = r->status == 101;
    *dechunk = r->framing == MG_BODY_CHUNKED && client_minor_version == 0;
    *close_after = !keep_alive || *dechunk || r->framing == MG_BODY_CLOSE;
    mg_buf_printf(out, "HTTP/1.1 %03d %.*s\r\n", r->status, (int)r->reason.len, r->reason.ptr);
    for (size_t i = 0; i < r->header_count; i++) {
        const struct mg_http_header *h = &r->headers[i];
        /* The framing is written below, as meshgate relays the body: whatever the upstream's
         * Connection header names, the client can always tell where the answer ends. */
        if (name_is(&h->name, "Content-Length") || name_is(&h->name, "Transfer-Encoding") ||
            hop_by_hop(&h->name, r->headers, r->header_count))
            continue;
        put_header(out, h);
    }
    /* A length: the body's (LENGTH), or the one a HEAD or 304 describes (NONE). */
    bool bodiless = (r->status >= 100 && r->status < 200) || r->status == 204;
    if (r->framing == MG_BODY_LENGTH || (r->framing == MG_BODY_NONE && r->has_length && !bodiless))
        mg_buf_printf(out, "Content-Length: %lld\r\n", (long long)r->content_length);
    mg_buf_puts(out, "Via: 1.1 meshgate\r\n");
    if (upgrade) {
        mg_buf_puts(out, "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
        return;
    }
    if (r->framing == MG_BODY_CHUNKED && !*dechunk)
        mg_buf_puts(out, "Transfer-Encoding: chunked\r\n");
    if (*close_after)
        mg_buf_puts(out, "Connection: close\r\n");
    else if (client_minor_version == 0)
        mg_buf_puts(out, "Connection: keep-alive\r\n");
    mg_buf_puts(out, "\r\n");
}

enum {
    CH_SIZE = 0, /* hex digits of the size */
    CH_EXT,      /* ";ext" up to the line's end */
    CH_SIZE_LF,  /* the LF after the size line's CR */
    CH_DATA,
    CH_DATA_CR, /* the CRLF after the data */
    CH_DATA_LF,
    CH_TRAILER,    /* start of a trailer line (or the final CRLF) */
    CH_TRAILER_IN, /* inside a trailer line */
    CH_TRAILER_LF, /* after a trailer line's CR */
    CH_END_LF,     /* after the final CR */
    CH_DONE,
};

#define CHUNK_LINE_MAX 4096

long mg_chunked_feed(struct mg_chunked *c, const char *in, size_t len, char *out, size_t *out_len,
                     bool *done)
{
    size_t i = 0;
    *done = c->state == CH_DONE;
    while (i < len && c->state != CH_DONE) {
        char ch = in[i];
        switch (c->state) {
        case CH_SIZE: {
            int d = mg_hex_digit((unsigned char)ch);
            if (d >= 0) {
                if (++c->digits > 15)
                    return -1;
                c->size = c->size * 16 + (uint64_t)d;
                i++;
                break;
            }
            if (c->digits == 0)
                return -1;
            if (ch == ';' || ch == ' ' || ch == '\t') {
                c->state = CH_EXT;
                c->line_bytes = 0;
            } else if (ch == '\r') {
                c->state = CH_SIZE_LF;
            } else {
                return -1;
            }
            i++;
            break;
        }
        case CH_EXT:
            if (ch == '\r')
                c->state = CH_SIZE_LF;
            else if (ch == '\n' || ++c->line_bytes > CHUNK_LINE_MAX)
                return -1;
            i++;
            break;
        case CH_SIZE_LF:
            if (ch != '\n')
                return -1;
            i++;
            c->state = c->size ? CH_DATA : CH_TRAILER;
            break;
        case CH_DATA: {
            size_t n = len - i;
            if (n > c->size)
                n = (size_t)c->size;
            if (out) {
                memcpy(out + *out_len, in + i, n);
                *out_len += n;
            }
            c->size -= n;
            i += n;
            if (c->size == 0)
                c->state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR:
            if (ch != '\r')
                return -1;
            i++;
            c->state = CH_DATA_LF;
            break;
        case CH_DATA_LF:
            if (ch != '\n')
                return -1;
            i++;
            c->state = CH_SIZE;
            c->digits = 0;
            c->size = 0;
            break;
        case CH_TRAILER:
            i++;
            if (ch == '\r') {
                c->state = CH_END_LF;
            } else if (ch == '\n') {
                return -1;
            } else {
                c->state = CH_TRAILER_IN;
                c->line_bytes = 1;
            }
            break;
        case CH_TRAILER_IN:
            i++;
            if (ch == '\r')
                c->state = CH_TRAILER_LF;
            else if (ch == '\n' || ++c->line_bytes > CHUNK_LINE_MAX)
                return -1;
            break;
        case CH_TRAILER_LF:
            if (ch != '\n')
                return -1;
            i++;
            c->state = CH_TRAILER;
            break;
        case CH_END_LF:
            if (ch != '\n')
                return -1;
            i++;
            c->state = CH_DONE;
            break;
        }
    }
    *done = c->state == CH_DONE;
    return (long)i;
}

static unsigned ws_header_needed(const uint8_t *h, unsigned have)
{
    if (have < 2)
        return 2;
    unsigned n = 2;
    uint8_t len7 = h[1] & 0x7f;
    n += len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
    n += (h[1] & 0x80) ? 4 : 0;
    return n;
}

size_t mg_ws_frames_feed(struct mg_ws_frames *f, const uint8_t *in, size_t len,
                         bool stop_at_boundary)
{
    size_t i = 0;
    while (i < len) {
        if (f->payload_left > 0) {
            size_t n = len - i;
            if (n > f->payload_left)
                n = (size_t)f->payload_left;
            f->payload_left -= n;
            i += n;
            if (f->payload_left == 0 && stop_at_boundary)
                return i;
            continue;
        }
        if (f->header_len == 0 && stop_at_boundary && i > 0)
            return i;
        f->header[f->header_len++] = in[i++];
        if (f->header_len < ws_header_needed(f->header, f->header_len))
            continue;
        uint8_t len7 = f->header[1] & 0x7f;
        uint64_t payload = len7;
        if (len7 == 126)
            payload = (uint64_t)f->header[2] << 8 | f->header[3];
        else if (len7 == 127)
            for (int k = 0; k < 8; k++)
                payload = payload << 8 | f->header[2 + k];
        f->payload_left = payload;
        f->header_len = 0;
        if (payload == 0 && stop_at_boundary)
            return i;
    }
    return i;
}

bool mg_ws_frames_at_boundary(const struct mg_ws_frames *f)
{
    return f->header_len == 0 && f->payload_left == 0;
}
