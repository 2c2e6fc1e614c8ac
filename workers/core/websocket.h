/* SPDX-License-Identifier: ISC */
/*
 * websocket: the server side of RFC 6455 for meshgate's own live feed (live.h), as pure
 * functions: the handshake's checks and its Sec-WebSocket-Accept, the frames meshgate sends
 * (unmasked, whole: FIN set) and a bounded reader of what a client sends.
 *
 * What a client may send, as CoreScope's server (gorilla/websocket with a read limit of 512
 * bytes) accepts it: masked frames only; text, binary and continuation frames make messages
 * of at most MG_WS_MESSAGE_MAX bytes (read and ignored); ping (answered with a pong of the
 * same payload), pong and close. Control frames are whole (FIN) and carry at most 125 bytes.
 * Anything else is a protocol error: the reader says which close code ends the connection
 * (1002 protocol error, 1009 too big, 1007 a close reason that is not UTF-8 is not checked).
 */
#ifndef MESHGATE_WEBSOCKET_H
#define MESHGATE_WEBSOCKET_H

#include "buf.h"
#include "http.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_WS_MESSAGE_MAX 512
#define MG_WS_CONTROL_MAX 125
#define MG_WS_ACCEPT_LEN 28

enum mg_ws_opcode {
    MG_WS_CONTINUATION = 0x0,
    MG_WS_TEXT = 0x1,
    MG_WS_BINARY = 0x2,
    MG_WS_CLOSE = 0x8,
    MG_WS_PING = 0x9,
    MG_WS_PONG = 0xa,
};

/* Close codes meshgate sends. */
#define MG_WS_CLOSE_NORMAL 1000
#define MG_WS_CLOSE_GOING_AWAY 1001
#define MG_WS_CLOSE_PROTOCOL 1002
#define MG_WS_CLOSE_POLICY 1008
#define MG_WS_CLOSE_TOO_BIG 1009

/* Whether hr asks for a WebSocket (Upgrade: websocket). */
bool mg_ws_is_upgrade(const struct mg_http_request *hr);

/*
 * Checks a handshake as gorilla/websocket does: GET, Connection naming upgrade, Upgrade
 * naming websocket, Sec-WebSocket-Version 13, a Sec-WebSocket-Key of 16 bytes in base64.
 * Returns 0 and the accept value in accept (MG_WS_ACCEPT_LEN + 1 bytes); or the status to
 * answer (400, 405) with why.
 */
int mg_ws_handshake_check(const struct mg_http_request *hr, char *accept, const char **why);

/* Sec-WebSocket-Accept for key: base64(SHA-1(key + the RFC's GUID)); out holds
 * MG_WS_ACCEPT_LEN + 1 bytes. */
void mg_ws_accept_value(const char *key, size_t len, char *out);

/*
 * CoreScope's origin check: no Origin header, an Origin whose host is the request's Host
 * (case-insensitive), or one of allowed (comma-separated origins compared whole and
 * case-insensitively; "*" is not honoured) passes.
 */
bool mg_ws_origin_allowed(const struct mg_http_request *hr, const char *allowed);

/* Appends one whole server frame (FIN, unmasked) to b. */
void mg_ws_frame_append(struct mg_buf *b, enum mg_ws_opcode op, const void *payload, size_t len);
/* Appends a close frame with code (and no reason). */
void mg_ws_close_append(struct mg_buf *b, uint16_t code);

/* The state of a client's stream between frames: a fragmented message in progress. */
struct mg_ws_reader {
    bool in_message;
    size_t message_len;
};

enum mg_ws_read_result {
    MG_WS_MORE = 0, /* no whole frame yet */
    MG_WS_FRAME,    /* one frame: *used bytes of in; its payload unmasked in payload */
    MG_WS_FAIL,     /* a protocol error: close with *code */
};

struct mg_ws_frame {
    enum mg_ws_opcode opcode;
    bool fin;
    size_t used;        /* the frame's bytes in the input */
    size_t payload_len; /* control frames: the payload's bytes, unmasked; else 0 */
    uint8_t payload[MG_WS_CONTROL_MAX];
};

/* Reads the first frame of in[0..len) from a client. Never reads past len. */
enum mg_ws_read_result mg_ws_read(struct mg_ws_reader *r, const uint8_t *in, size_t len,
                                  struct mg_ws_frame *f, uint16_t *code);

#endif
