/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: CoreScope's packet decoder (workers/data/packet_decode.c), what a client sends
 * as POST /api/decode's hex. The first byte picks the form: even, the rest is the text as
 * sent; odd, the rest is a packet's bytes, written as hex (upper or lower case as the byte
 * says, a space between bytes when it says so), so the payload decoders see every shape.
 * Checks: an answer is one valid JSON object of CoreScope's three keys, ending in a newline,
 * and small (under 4 KiB: a packet is at most 254 bytes); a refusal says why and writes
 * nothing; a packet given as hex is never refused for its text; a stored packet's path byte
 * reads from the same text without harm.
 */
#include "json_check.h"
#include "packet_decode.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    bool as_bytes = data[0] & 1;
    size_t n = size - 1;
    char *text = malloc(3 * n + 1);
    size_t len = 0;
    if (as_bytes) {
        const char *digits = data[0] & 2 ? "0123456789ABCDEF" : "0123456789abcdef";
        for (size_t i = 0; i < n; i++) {
            text[len++] = digits[data[1 + i] >> 4];
            text[len++] = digits[data[1 + i] & 15];
            if (data[0] & 4)
                text[len++] = ' ';
        }
    } else {
        memcpy(text, data + 1, n);
        len = n;
    }
    text[len] = '\0';
    struct mg_buf out;
    mg_buf_init(&out);
    char err[256] = "";
    if (mg_packet_decode_answer(text, len, true, &out, err, sizeof err)) {
        const char *a = mg_buf_cstr(&out);
        if (out.failed || out.len >= 4096 || out.len < 2 || a[out.len - 1] != '\n' ||
            strncmp(a, "{\"decoded\":{\"header\":{", 22) != 0 || !json_is_valid(a, out.len - 1)) {
            fprintf(stderr, "fuzz-packet_decode: bad answer (%zu bytes): %.600s\n", out.len, a);
            abort();
        }
    } else if (!err[0] || out.len != 0 ||
               (as_bytes && n > 0 && strncmp(err, "invalid hex", 11) == 0)) {
        fprintf(stderr, "fuzz-packet_decode: bad refusal \"%s\" (%zu bytes written)\n", err,
                out.len);
        abort();
    }
    int route, path_byte;
    if (mg_packet_hex_path_byte(text, &route, &path_byte) &&
        (route < 0 || route > 3 || path_byte < 0 || path_byte > 255))
        abort();
    mg_buf_free(&out);
    free(text);
    return 0;
}
