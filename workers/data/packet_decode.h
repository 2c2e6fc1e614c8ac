/* SPDX-License-Identifier: ISC */
/*
 * packet_decode: a MeshCore packet, given as hex text, decoded as CoreScope's decode tool
 * (POST /api/decode) answers it: its header, its path and its payload (every payload type
 * CoreScope decodes, the same keys in the same order, the ADVERT's Ed25519 signature
 * checked), or CoreScope's message for text that is not such a packet.
 *
 * The text is hostile: it is read once, front to back, and only the first MG_PACKET_MAX
 * bytes are kept (a longer packet is refused for its length: CoreScope's payload limit);
 * nothing is allocated here, and the work is bounded by the text's length.
 *
 * Also the packet's route type and path byte read straight from stored hex
 * (transmissions.raw_hex), for the reports that look only at those.
 */
#ifndef MESHGATE_PACKET_DECODE_H
#define MESHGATE_PACKET_DECODE_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The firmware's limits, which CoreScope's decoder holds a packet to: the path's bytes and
 * the payload's; with the header byte, 4 transport code bytes and the path byte, the largest
 * packet it decodes. */
#define MG_PACKET_MAX_PATH 64
#define MG_PACKET_MAX_PAYLOAD 184
#define MG_PACKET_MAX (1 + 4 + 1 + MG_PACKET_MAX_PATH + MG_PACKET_MAX_PAYLOAD)

/*
 * POST /api/decode's answer for the "hex" text of its body (n bytes, any bytes): true with
 * {"decoded":{"header":...,"path":...,"payload":...}} and a newline appended to out; false
 * with CoreScope's 400 message in err ("hex is required", "invalid hex: ...", "packet too
 * short ...", ...). As CoreScope: white space (Unicode's) is trimmed from both ends, then
 * every space, CR and LF is dropped; what is left must be hex digits, two a byte.
 * check_signature: an ADVERT's signatureValid is given (Ed25519 over its key, time and app
 * data; GNU Nettle).
 */
bool mg_packet_decode_answer(const char *text, size_t n, bool check_signature, struct mg_buf *out,
                             char *err, size_t err_cap);

/* A stored packet's route type (its header's low two bits) and path byte (after the 4
 * transport code bytes of route types 0 and 3), as CoreScope's reports read them from
 * raw_hex; false when the text is shorter than that or not hex there. */
bool mg_packet_hex_path_byte(const char *raw_hex, int *route, int *path_byte);

#endif
