/* SPDX-License-Identifier: ISC */
#include "websocket.h"

#include <sha1.h>
#include <string.h>
#include <strings.h>

/* RFC 6455, section 1.3. */
static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

bool mg_ws_is_upgrade(const struct mg_http_request *hr)
{
    const struct mg_str *up = mg_http_header_get(hr, "Upgrade");
    return up && mg_http_has_token(up, "websocket");
}

void mg_ws_accept_value(const char *key, size_t len, char *out)
{
    SHA1_CTX ctx;
    uint8_t digest[SHA1_DIGEST_LENGTH];
    SHA1Init(&ctx);
    SHA1Update(&ctx, (const uint8_t *)key, len);
    SHA1Update(&ctx, (const uint8_t *)ws_guid, sizeof ws_guid - 1);
    SHA1Final(digest, &ctx);
    size_t o = 0;
    for (size_t i = 0; i < sizeof digest; i += 3) {
        uint32_t v = (uint32_t)digest[i] << 16;
        size_t n = sizeof digest - i < 3 ? sizeof digest - i : 3;
        if (n > 1)
            v |= (uint32_t)digest[i + 1] << 8;
        if (n > 2)
            v |= digest[i + 2];
        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = n > 1 ? b64[(v >> 6) & 63] : '=';
        out[o++] = n > 2 ? b64[v & 63] : '=';
    }
    out[o] = '\0';
}

/* 16 bytes in base64: 22 characters of the alphabet and "==". */
static bool key_valid(const struct mg_str *key)
{
    if (!key || key->len != 24 || key->ptr[22] != '=' || key->ptr[23] != '=')
        return false;
    for (size_t i = 0; i < 22; i++)
        if (!memchr(b64, key->ptr[i], sizeof b64 - 1))
            return false;
    return true;
}

int mg_ws_handshake_check(const struct mg_http_request *hr, char *accept, const char **why)
{
    const struct mg_str *conn = mg_http_header_get(hr, "Connection");
    const struct mg_str *version = mg_http_header_get(hr, "Sec-WebSocket-Version");
    const struct mg_str *key = mg_http_header_get(hr, "Sec-WebSocket-Key");
    if (hr->method_id != MG_METHOD_GET) {
        *why = "websocket: the client is not using the websocket protocol: request method is "
               "not GET";
        return 405;
    }
    if (!conn || !mg_http_has_token(conn, "upgrade")) {
        *why = "websocket: the client is not using the websocket protocol: 'upgrade' token not "
               "found in 'Connection' header";
        return 400;
    }
    if (!mg_ws_is_upgrade(hr)) {
        *why = "websocket: the client is not using the websocket protocol: 'websocket' token "
               "not found in 'Upgrade' header";
        return 400;
    }
    if (!version || version->len != 2 || memcmp(version->ptr, "13", 2) != 0) {
        *why = "websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header";
        return 400;
    }
    if (!key_valid(key)) {
        *why = "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header must be "
               "Base64 encoded value of 16-byte length";
        return 400;
    }
    mg_ws_accept_value(key->ptr, key->len, accept);
    return 0;
}

/* The host of an origin "scheme://host[:port]" (whatever follows "//", up to a '/'). */
static struct mg_str origin_host(const struct mg_str *origin)
{
    const char *p = origin->ptr, *end = origin->ptr + origin->len;
    const char *sep = memmem(p, origin->len, "://", 3);
    struct mg_str host = {NULL, 0};
    if (!sep)
        return host;
    host.ptr = sep + 3;
    const char *slash = memchr(host.ptr, '/', (size_t)(end - host.ptr));
    host.len = (size_t)((slash ? slash : end) - host.ptr);
    return host;
}

bool mg_ws_origin_allowed(const struct mg_http_request *hr, const char *allowed)
{
    const struct mg_str *origin = mg_http_header_get(hr, "Origin");
    if (!origin || origin->len == 0)
        return true;
    struct mg_str host = origin_host(origin);
    const struct mg_str *req_host = mg_http_header_get(hr, "Host");
    if (host.ptr && req_host && host.len == req_host->len &&
        strncasecmp(host.ptr, req_host->ptr, host.len) == 0)
        return true;
    for (const char *p = allowed ? allowed : ""; *p;) {
        size_t n = strcspn(p, ",");
        const char *s = p;
        size_t len = n;
        while (len && (*s == ' ' || *s == '\t'))
            s++, len--;
        while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
            len--;
        if (!(len == 1 && *s == '*') && len == origin->len && strncasecmp(s, origin->ptr, len) == 0)
            return true;
        p += n;
        if (*p == ',')
            p++;
    }
    return false;
}

void mg_ws_frame_append(struct mg_buf *b, enum mg_ws_opcode op, const void *payload, size_t len)
{
    uint8_t head[10];
    size_t n = 2;
    head[0] = (uint8_t)(0x80 | op);
    if (len < 126) {
        head[1] = (uint8_t)len;
    } else if (len <= 0xffff) {
        head[1] = 126;
        head[2] = (uint8_t)(len >> 8);
        head[3] = (uint8_t)len;
        n = 4;
    } else {
        head[1] = 127;
        for (int i = 0; i < 8; i++)
            head[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
        n = 10;
    }
    mg_buf_append(b, head, n);
    if (len)
        mg_buf_append(b, payload, len);
}

void mg_ws_close_append(struct mg_buf *b, uint16_t code)
{
    uint8_t body[2] = {(uint8_t)(code >> 8), (uint8_t)code};
    mg_ws_frame_append(b, MG_WS_CLOSE, body, sizeof body);
}

static enum mg_ws_read_result fail(uint16_t *code, uint16_t value)
{
    *code = value;
    return MG_WS_FAIL;
}

enum mg_ws_read_result mg_ws_read(struct mg_ws_reader *r, const uint8_t *in, size_t len,
                                  struct mg_ws_frame *f, uint16_t *code)
{
    if (len < 2)
        return MG_WS_MORE;
    unsigned op = in[0] & 0x0f;
    bool fin = (in[0] & 0x80) != 0;
    if (in[0] & 0x70)
        return fail(code, MG_WS_CLOSE_PROTOCOL); /* no extension was agreed */
    if (!(in[1] & 0x80))
        return fail(code, MG_WS_CLOSE_PROTOCOL); /* a client's frames are masked */
    bool control = op >= 0x8;
    if (op != MG_WS_CONTINUATION && op != MG_WS_TEXT && op != MG_WS_BINARY && op != MG_WS_CLOSE &&
        op != MG_WS_PING && op != MG_WS_PONG)
        return fail(code, MG_WS_CLOSE_PROTOCOL);
    uint64_t plen = in[1] & 0x7f;
    size_t head = 2;
    if (control && (!fin || plen > MG_WS_CONTROL_MAX))
        return fail(code, MG_WS_CLOSE_PROTOCOL);
    if (plen == 126) {
        if (len < 4)
            return MG_WS_MORE;
        plen = (uint64_t)in[2] << 8 | in[3];
        head = 4;
    } else if (plen == 127) {
        if (len < 10)
            return MG_WS_MORE;
        plen = 0;
        for (int i = 0; i < 8; i++)
            plen = plen << 8 | in[2 + i];
        head = 10;
        if (plen >> 63)
            return fail(code, MG_WS_CLOSE_PROTOCOL);
    }
    if (!control) {
        if ((op == MG_WS_CONTINUATION) != r->in_message)
            return fail(code, MG_WS_CLOSE_PROTOCOL);
        size_t so_far = op == MG_WS_CONTINUATION ? r->message_len : 0;
        if (plen > MG_WS_MESSAGE_MAX - so_far)
            return fail(code, MG_WS_CLOSE_TOO_BIG);
    }
    if (len - head < 4 || len - head - 4 < plen)
        return MG_WS_MORE;
    const uint8_t *mask = in + head;
    const uint8_t *data = in + head + 4;
    f->opcode = (enum mg_ws_opcode)op;
    f->fin = fin;
    f->used = head + 4 + (size_t)plen;
    f->payload_len = 0;
    if (control) {
        for (size_t i = 0; i < plen; i++)
            f->payload[i] = data[i] ^ mask[i & 3];
        f->payload_len = (size_t)plen;
        if (op == MG_WS_CLOSE && plen == 1)
            return fail(code, MG_WS_CLOSE_PROTOCOL);
    } else {
        r->message_len = (op == MG_WS_CONTINUATION ? r->message_len : 0) + (size_t)plen;
        r->in_message = !fin;
    }
    return MG_WS_FRAME;
}
