/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the reader of a live feed client's frames (workers/core/websocket.c), fed
 * the input as one stream, in pieces whose sizes the input's first byte chooses. Checks: a
 * frame never claims more bytes than it was given nor fewer than a head and mask; a control
 * frame's payload is at most 125 bytes; a message never passes MG_WS_MESSAGE_MAX; a failure
 * names a close code meshgate sends; the same bytes read at once or piecewise give the same
 * frames and the same end.
 */
#include "websocket.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads the whole stream, handing the reader at most `step` new bytes at a time; writes
 * each frame's opcode and length to log (up to cap entries); returns the number of frames,
 * negative (-1 - n) after a failure with code. */
static long run(const uint8_t *in, size_t len, size_t step, uint32_t *log, size_t cap,
                uint16_t *code)
{
    struct mg_ws_reader r = {0};
    size_t off = 0, avail = 0;
    long frames = 0;
    while (off < len) {
        avail = avail + step > len - off ? len - off : avail + step;
        struct mg_ws_frame f;
        enum mg_ws_read_result res = mg_ws_read(&r, in + off, avail, &f, code);
        if (res == MG_WS_MORE) {
            if (off + avail >= len)
                break;
            continue;
        }
        if (res == MG_WS_FAIL) {
            if (*code != MG_WS_CLOSE_PROTOCOL && *code != MG_WS_CLOSE_TOO_BIG)
                abort();
            return -1 - frames;
        }
        if (f.used > avail || f.used < 6 || f.payload_len > MG_WS_CONTROL_MAX)
            abort();
        if (f.opcode < 0x8 && r.message_len > MG_WS_MESSAGE_MAX)
            abort();
        if ((size_t)frames < cap)
            log[frames] = (uint32_t)f.opcode << 24 | (uint32_t)f.used;
        frames++;
        off += f.used;
        avail -= f.used;
    }
    return frames;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 8192)
        return 0;
    size_t step = (size_t)(data[0] % 17) + 1;
    uint32_t a[256], b[256];
    uint16_t ca = 0, cb = 0;
    long na = run(data + 1, size - 1, size, a, 256, &ca);
    long nb = run(data + 1, size - 1, step, b, 256, &cb);
    if (na != nb || (na < 0 && ca != cb))
        abort();
    long n = na < 0 ? -1 - na : na;
    if (memcmp(a, b, (size_t)(n < 256 ? n : 256) * sizeof a[0]) != 0)
        abort();
    return 0;
}
