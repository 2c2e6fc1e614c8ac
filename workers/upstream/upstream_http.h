/* SPDX-License-Identifier: ISC */
/*
 * upstream_http: the HTTP of the reverse proxy (RFC 9110, 9112), as functions of bytes only
 * (no socket, no clock), so every rule is tested on its own:
 *
 *   - which requests may go to the upstream at all: a body only with one valid
 *     Content-Length within the limit; anything ambiguous (a second Content-Length or Host
 *     line, a Transfer-Encoding, a Connection header naming a header meshgate frames or
 *     admits the request by, a WebSocket handshake with a body) is refused before a byte is
 *     sent, so no request can be smuggled past meshgate's reading of it (the head parser,
 *     http.h, already refuses Content-Length with Transfer-Encoding, lengths that disagree,
 *     obsolete folding, bare CRs and field names that are not tokens);
 *   - the head sent upstream: the client's Content-Length and Transfer-Encoding lines never
 *     pass; meshgate writes the Content-Length it reads the body by. Hop-by-hop headers are
 *     removed (Connection and what it names, Keep-Alive, Proxy-Connection, TE, Trailer,
 *     Upgrade except for a WebSocket), X-Forwarded-For set to the client as
 *     MESHGATE_TRUSTED_PROXIES resolves it (a client's own never passes),
 *     X-Forwarded-Proto, and Via;
 *   - the upstream's response head, parsed, and how its body is framed;
 *   - the head sent to the client: hop-by-hop headers removed, Via added, and the framing
 *     the client can read, written by meshgate (never the upstream's lines): a length, or a
 *     chunked body that stays chunked for HTTP/1.1 and is decoded for HTTP/1.0 (then the
 *     connection closes to end it);
 *   - an incremental chunked decoder (finds the end of a chunked body, and decodes it).
 */
#ifndef MESHGATE_UPSTREAM_HTTP_H
#define MESHGATE_UPSTREAM_HTTP_H

#include "buf.h"
#include "http.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Whether this request may be passed on. Returns 0, or the status to answer (400 for an
 * ambiguous framing, 411 for a body without Content-Length, 413 past max_body_bytes) with
 * a sentence in *why.
 */
int mg_upstream_request_check(const struct mg_http_request *hr, int64_t max_body_bytes,
                              const char **why);

/* A WebSocket handshake: GET with Upgrade: websocket and Connection: upgrade. */
bool mg_upstream_is_websocket(const struct mg_http_request *hr);

/*
 * Appends the head sent to the upstream to out. client_addr is the client as text (what
 * X-Forwarded-For will say), proto the scheme the client used ("http", or what a trusted
 * proxy's X-Forwarded-Proto said; NULL: "http"). The head asks for a kept-alive connection
 * (HTTP/1.1), or for an upgrade when websocket.
 */
void mg_upstream_request_head(const struct mg_http_request *hr, const char *client_addr,
                              const char *proto, bool websocket, struct mg_buf *out);

/* The upstream's response head. */
enum mg_body_framing {
    MG_BODY_NONE = 0, /* HEAD, 1xx, 204, 304 */
    MG_BODY_LENGTH,   /* Content-Length */
    MG_BODY_CHUNKED,  /* Transfer-Encoding: chunked */
    MG_BODY_CLOSE,    /* until the upstream closes */
};
struct mg_upstream_response {
    int status;
    int minor_version;
    struct mg_str reason;
    struct mg_http_header headers[MG_HTTP_MAX_HEADERS];
    size_t header_count;
    size_t head_len;
    enum mg_body_framing framing;
    int64_t content_length;
    bool has_length; /* one Content-Length (or several that agree) and no Transfer-Encoding */
    bool keep_alive; /* the upstream connection may carry another request after this one */
};

/* A response head longer than this is refused (502 at once, never a wait for the rest). */
#define MG_UPSTREAM_HEAD_MAX 65536

/*
 * Parses a response head at buf[0..len). Returns MG_HTTP_OK, MG_HTTP_INCOMPLETE, or
 * MG_HTTP_ERROR (malformed, conflicting lengths, a transfer coding other than chunked, a
 * control character in a field value or the reason, a field name that is not a token, or
 * MG_UPSTREAM_HEAD_MAX bytes without the head's end).
 * head_request: the request was HEAD (no body whatever the head says).
 */
enum mg_http_result mg_upstream_parse_response(const char *buf, size_t len, bool head_request,
                                               struct mg_upstream_response *r);

/*
 * Appends the head sent to the client to out, and says how the body is then sent:
 * *dechunk (decode a chunked body: an HTTP/1.0 client) and *close_after (the body ends
 * with the connection: an HTTP/1.0 client of a chunked body, or a body framed by close).
 * keep_alive is what the client may be offered otherwise.
 */
void mg_upstream_response_head(const struct mg_upstream_response *r, int client_minor_version,
                               bool keep_alive, struct mg_buf *out, bool *dechunk,
                               bool *close_after);

/* An incremental decoder of a chunked body (RFC 9112 section 7.1). */
struct mg_chunked {
    int state;
    uint64_t size; /* of the chunk being read */
    unsigned digits;
    unsigned line_bytes; /* of a chunk extension or trailer line */
};

/*
 * Feeds in[0..len): returns the bytes consumed (fewer than len only when the body ended
 * there), or -1 when malformed. When out is not NULL the chunks' data is appended there
 * (out has room for len bytes). *done becomes true at the body's end.
 */
long mg_chunked_feed(struct mg_chunked *c, const char *in, size_t len, char *out, size_t *out_len,
                     bool *done);

/*
 * WebSocket frames passing through a tunnel (RFC 6455 section 5.2): only where each frame
 * ends, so that a close frame is put between two frames, never inside one.
 */
struct mg_ws_frames {
    uint8_t header[14];
    unsigned header_len; /* bytes of the current frame's header seen */
    uint64_t payload_left;
};

/* Feeds bytes in order; returns how many it took: all of them, or, with stop_at_boundary, up
 * to the end of the frame in progress. */
size_t mg_ws_frames_feed(struct mg_ws_frames *f, const uint8_t *in, size_t len,
                         bool stop_at_boundary);
/* True between two frames. */
bool mg_ws_frames_at_boundary(const struct mg_ws_frames *f);

#endif
