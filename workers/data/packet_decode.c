/* SPDX-License-Identifier: ISC */
#include "packet_decode.h"

#include "json.h"
#include "text.h"

#include <nettle/eddsa.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- the text: trimmed, spaces dropped, hex ------------------------------------------- */

/* The length of the white space character (Unicode's White_Space, as Go's unicode.IsSpace)
 * that s[0..n) starts with (end: that it ends with), 0 when it does not. The encodings are
 * exact, so a match is that character and nothing else. */
static const char *const wide_spaces[] = {
    "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
    "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86",
    "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8",
    "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80",
};

static size_t space_at(const char *s, size_t n, bool end)
{
    if (n == 0)
        return 0;
    unsigned char c = (unsigned char)s[end ? n - 1 : 0];
    if (c == ' ' || (c >= '\t' && c <= '\r'))
        return 1;
    for (size_t i = 0; i < sizeof wide_spaces / sizeof wide_spaces[0]; i++) {
        size_t w = strlen(wide_spaces[i]);
        if (w <= n && memcmp(end ? s + n - w : s, wide_spaces[i], w) == 0)
            return w;
    }
    return 0;
}

/* Whether Go's strconv.IsPrint holds for the code point c (0..255). */
static bool latin1_printable(unsigned c)
{
    return (c >= 0x20 && c < 0x7f) || (c >= 0xa1 && c != 0xad);
}

/* The packet's bytes: the first MG_PACKET_MAX of them, and how many there are in all. */
struct packet {
    uint8_t b[MG_PACKET_MAX];
    size_t len;
};

static bool fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return false;
}

/* s[0..n) with spaces, CRs and LFs dropped, read as hex into p. The first character that is
 * not a hex digit is named as Go's encoding/hex names a byte it refuses; an odd count of
 * digits is refused after that. */
static bool unhex(const char *s, size_t n, struct packet *p, char *err, size_t cap)
{
    size_t digits = 0;
    int high = 0;
    p->len = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\r' || c == '\n')
            continue;
        int d = mg_hex_digit(c);
        if (d < 0) {
            if (!latin1_printable(c))
                return fail(err, cap, "invalid hex: encoding/hex: invalid byte: U+%04X", c);
            /* The byte as a code point, in UTF-8. */
            char shown[3] = {(char)c, 0, 0};
            if (c >= 0x80)
                shown[0] = (char)(0xc0 | c >> 6), shown[1] = (char)(0x80 | (c & 0x3f));
            return fail(err, cap, "invalid hex: encoding/hex: invalid byte: U+%04X '%s'", c, shown);
        }
        if (digits++ % 2 == 0) {
            high = d;
            continue;
        }
        if (p->len < MG_PACKET_MAX)
            p->b[p->len] = (uint8_t)(high << 4 | d);
        p->len++;
    }
    if (digits % 2)
        return fail(err, cap, "invalid hex: encoding/hex: odd length hex string");
    return true;
}

/* ---- writing ----------------------------------------------------------------------------- */

static void kv_hex(struct mg_json *j, const char *key, const uint8_t *b, size_t n, bool upper)
{
    static const char lower_digits[] = "0123456789abcdef", upper_digits[] = "0123456789ABCDEF";
    const char *digits = upper ? upper_digits : lower_digits;
    char text[2 * MG_PACKET_MAX];
    if (n == 0)
        return; /* CoreScope leaves an empty one out */
    for (size_t i = 0; i < n; i++) {
        text[2 * i] = digits[b[i] >> 4];
        text[2 * i + 1] = digits[b[i] & 15];
    }
    mg_json_key(j, key);
    mg_json_string_n(j, text, 2 * n);
}

static void kv_text(struct mg_json *j, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void kv_text(struct mg_json *j, const char *key, const char *fmt, ...)
{
    char text[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    mg_json_kv_string(j, key, text);
}

/* A number CoreScope leaves out when it is 0. */
static void kv_nonzero(struct mg_json *j, const char *key, uint32_t v)
{
    if (v)
        mg_json_kv_uint(j, key, v);
}

static uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static const char *const payload_names[16] = {
    "REQ",  "RESPONSE", "TXT_MSG",   "ACK",     "ADVERT",  "GRP_TXT", "GRP_DATA", "ANON_REQ",
    "PATH", "TRACE",    "MULTIPART", "CONTROL", "UNKNOWN", "UNKNOWN", "UNKNOWN",  "RAW_CUSTOM",
};
static const char *const route_names[4] = {"TRANSPORT_FLOOD", "FLOOD", "DIRECT",
                                           "TRANSPORT_DIRECT"};

enum { PT_ACK = 3, PT_ADVERT = 4, PT_TRACE = 9 };

/* A payload too short for its type: its bytes and the error, as CoreScope answers it. */
static void too_short(struct mg_json *j, const uint8_t *b, size_t n, const char *error)
{
    kv_hex(j, "raw", b, n, false);
    mg_json_kv_string(j, "error", error);
}

/* REQ, RESPONSE, TXT_MSG: destination and source hashes, MAC, ciphertext. */
static void encrypted(struct mg_json *j, const uint8_t *b, size_t n)
{
    if (n < 4)
        return too_short(j, b, n, "too short");
    kv_hex(j, "destHash", b, 1, false);
    kv_hex(j, "srcHash", b + 1, 1, false);
    kv_hex(j, "mac", b + 2, 2, false);
    kv_hex(j, "encryptedData", b + 4, n - 4, false);
}

/* An ACK's checksum, then (firmware 1.16's extended ACK) its attempt and random bytes. */
static void ack(struct mg_json *j, const uint8_t *b, size_t n, const char *prefix)
{
    char key[32];
    snprintf(key, sizeof key, "%sLen", prefix);
    mg_json_kv_uint(j, key, n > 6 ? 6 : n);
    if (n >= 5) {
        snprintf(key, sizeof key, "%sAttempt", prefix);
        mg_json_kv_uint(j, key, b[4]);
    }
    if (n >= 6) {
        snprintf(key, sizeof key, "%sRand", prefix);
        mg_json_kv_uint(j, key, b[5]);
    }
}

/* Go's reading of one UTF-8 sequence at s[0..n): its length, and *r the code point, or
 * U+FFFD with length 1 for a byte that does not start a valid one. */
static size_t utf8_rune(const uint8_t *s, size_t n, uint32_t *r)
{
    uint8_t c = s[0];
    size_t len = c < 0x80                 ? 1
                 : c >= 0xc2 && c <= 0xdf ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (len == 1) {
        *r = c;
        return 1;
    }
    uint8_t lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    uint8_t hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    if (len == 0 || n < len || s[1] < lo || s[1] > hi)
        goto bad;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            goto bad;
    *r = len == 2 ? (uint32_t)(c & 0x1f) : len == 3 ? (uint32_t)(c & 0x0f) : (uint32_t)(c & 0x07);
    for (size_t i = 1; i < len; i++)
        *r = *r << 6 | (s[i] & 0x3f);
    return len;
bad:
    *r = 0xfffd;
    return 1;
}

/* An ADVERT's name as CoreScope keeps it: trailing NULs cut, then every control character
 * but tab and newline dropped and each byte that is not UTF-8 made U+FFFD, then at most 32
 * bytes (which may cut a character; the JSON writer makes each byte of it U+FFFD). */
static size_t advert_name(const uint8_t *s, size_t n, char *out)
{
    while (n > 0 && s[n - 1] == 0)
        n--;
    size_t len = 0;
    for (size_t i = 0; i < n && len < 32;) {
        uint32_t r;
        size_t w = utf8_rune(s + i, n - i, &r);
        if (r == '\t' || r == '\n' || (r >= 0x20 && r != 0x7f)) {
            const char *from = r == 0xfffd && w == 1 ? "\xef\xbf\xbd" : (const char *)s + i;
            size_t k = r == 0xfffd && w == 1 ? 3 : w;
            memcpy(out + len, from, k); /* out holds 32 + 3 */
            len += k;
        }
        i += w;
    }
    return len > 32 ? 32 : len;
}

static void advert(struct mg_json *j, const uint8_t *b, size_t n, bool check_signature)
{
    if (n < 100)
        return too_short(j, b, n, "too short for advert");
    uint32_t ts = le32(b + 32);
    kv_hex(j, "pubKey", b, 32, false);
    kv_nonzero(j, "timestamp", ts);
    time_t t = (time_t)ts;
    struct tm tm;
    char iso[40];
    gmtime_r(&t, &tm);
    strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%S.000Z", &tm);
    mg_json_kv_string(j, "timestampISO", iso);
    kv_hex(j, "signature", b + 36, 64, false);
    const uint8_t *app = b + 100;
    size_t app_len = n - 100;
    if (check_signature) {
        /* Signed: the key, the time (as sent: little-endian) and the app data. */
        uint8_t message[36 + MG_PACKET_MAX_PAYLOAD - 100];
        memcpy(message, b, 36);
        memcpy(message + 36, app, app_len);
        mg_json_kv_bool(j, "signatureValid",
                        ed25519_sha512_verify(b, 36 + app_len, message, b + 36) != 0);
    }
    if (app_len == 0)
        return;
    uint8_t flags = app[0];
    int type = flags & 0x0f;
    bool location = flags & 0x10, feat1 = flags & 0x20, feat2 = flags & 0x40, named = flags & 0x80;
    mg_json_key(j, "flags");
    mg_json_object_begin(j);
    mg_json_kv_uint(j, "raw", flags);
    mg_json_kv_uint(j, "type", (unsigned)type);
    mg_json_kv_bool(j, "chat", type == 1);
    mg_json_kv_bool(j, "repeater", type == 2);
    mg_json_kv_bool(j, "room", type == 3);
    mg_json_kv_bool(j, "sensor", type == 4);
    mg_json_kv_bool(j, "hasLocation", location);
    mg_json_kv_bool(j, "hasFeat1", feat1);
    mg_json_kv_bool(j, "hasFeat2", feat2);
    mg_json_kv_bool(j, "hasName", named);
    mg_json_object_end(j);
    size_t at = 1;
    if (location && app_len >= at + 8) {
        mg_json_kv_double(j, "lat", (double)(int32_t)le32(app + at) / 1e6);
        mg_json_kv_double(j, "lon", (double)(int32_t)le32(app + at + 4) / 1e6);
        at += 8;
    }
    if (feat1 && app_len >= at + 2)
        at += 2;
    if (feat2 && app_len >= at + 2)
        at += 2;
    if (named) {
        char name[32 + 3];
        size_t len = advert_name(app + at, app_len - at, name);
        if (len > 0) {
            mg_json_key(j, "name");
            mg_json_string_n(j, name, len);
        }
    }
}

/* GRP_TXT and GRP_DATA: the channel's hash byte, the MAC and the ciphertext. */
static void group(struct mg_json *j, const uint8_t *b, size_t n, bool data)
{
    if (n < 3)
        return too_short(j, b, n, "too short");
    kv_hex(j, "mac", b + 1, 2, false);
    kv_hex(j, "encryptedData", b + 3, n - 3, false);
    kv_nonzero(j, "channelHash", b[0]);
    if (data)
        kv_text(j, "channelHashHex", "%02X", b[0]);
}

static void multipart(struct mg_json *j, const uint8_t *b, size_t n)
{
    if (n < 1)
        return too_short(j, b, n, "too short");
    int inner = b[0] & 0x0f;
    mg_json_kv_uint(j, "remaining", b[0] >> 4);
    mg_json_kv_uint(j, "innerType", (unsigned)inner);
    mg_json_kv_string(j, "innerTypeName", payload_names[inner]);
    if (inner == PT_ACK && n >= 5) {
        kv_text(j, "innerAckCrc", "%08x", le32(b + 1));
        ack(j, b + 1, n - 1, "innerAck");
    } else {
        kv_hex(j, "innerPayload", b + 1, n - 1, false);
    }
}

/* A TRACE's hops: its header path is the SNR of each hop that forwarded it (a signed
 * quarter dB when hops are one byte), and the hops it is to take are in its payload after
 * the flags byte, of 1, 2, 4 or 8 bytes as the flags say. */
struct trace_path {
    bool shown;         /* it carries hops (CoreScope's pathData is not empty) */
    const uint8_t *snr; /* the header path's bytes, one a hop */
    size_t snr_count;   /* 0: no snrValues */
};

/* The payload's keys (after "type"), in CoreScope's order. */
static void payload(struct mg_json *j, int type, const uint8_t *b, size_t n, bool check_signature,
                    const struct trace_path *trace)
{
    switch (type) {
    case 0:
    case 1:
    case 2:
        return encrypted(j, b, n);
    case PT_ACK:
        if (n < 4)
            return too_short(j, b, n, "too short");
        kv_text(j, "extraHash", "%08x", le32(b));
        return ack(j, b, n, "ack");
    case PT_ADVERT:
        return advert(j, b, n, check_signature);
    case 5:
    case 6:
        return group(j, b, n, type == 6);
    case 7: /* ANON_REQ */
        if (n < 35)
            return too_short(j, b, n, "too short");
        kv_hex(j, "destHash", b, 1, false);
        kv_hex(j, "mac", b + 33, 2, false);
        kv_hex(j, "encryptedData", b + 35, n - 35, false);
        kv_hex(j, "ephemeralPubKey", b + 1, 32, false);
        return;
    case 8: /* PATH */
        if (n < 4)
            return too_short(j, b, n, "too short");
        kv_hex(j, "destHash", b, 1, false);
        kv_hex(j, "srcHash", b + 1, 1, false);
        kv_hex(j, "mac", b + 2, 2, false);
        kv_hex(j, "pathData", b + 4, n - 4, false);
        return;
    case PT_TRACE:
        if (n < 9)
            return too_short(j, b, n, "too short");
        kv_hex(j, "pathData", b + 9, n - 9, false);
        kv_nonzero(j, "tag", le32(b));
        kv_nonzero(j, "authCode", le32(b + 4));
        mg_json_kv_uint(j, "traceFlags", b[8]);
        if (trace->snr_count > 0) {
            mg_json_key(j, "snrValues");
            mg_json_array_begin(j);
            for (size_t i = 0; i < trace->snr_count; i++)
                mg_json_double(j, (double)(int8_t)trace->snr[i] / 4.0);
            mg_json_array_end(j);
        }
        return;
    case 10:
        return multipart(j, b, n);
    case 11: /* CONTROL */
        if (n < 1)
            return too_short(j, b, n, "too short");
        kv_hex(j, "raw", b, n, false);
        kv_text(j, "ctrlFlags", "%02x", b[0]);
        mg_json_kv_bool(j, "ctrlZeroHop", b[0] & 0x80);
        mg_json_kv_uint(j, "ctrlLength", n);
        return;
    case 15: /* RAW_CUSTOM */
        kv_hex(j, "raw", b, n, false);
        mg_json_kv_uint(j, "rawLength", n);
        if (n > 0)
            kv_text(j, "firstByteTag", "%02X", b[0]);
        return;
    default:
        kv_hex(j, "raw", b, n, false);
        return;
    }
}

/* A path's hops: count of size bytes each from b, in upper-case hex. */
static void hops(struct mg_json *j, const uint8_t *b, size_t count, size_t size)
{
    mg_json_key(j, "hops");
    mg_json_array_begin(j);
    for (size_t i = 0; i < count; i++) {
        char text[2 * 8 + 1];
        for (size_t k = 0; k < size; k++)
            snprintf(text + 2 * k, 3, "%02X", b[i * size + k]);
        mg_json_string_n(j, text, 2 * size);
    }
    mg_json_array_end(j);
}

/* ---- the packet ------------------------------------------------------------------------- */

static bool decode(const struct packet *p, bool check_signature, struct mg_buf *out, char *err,
                   size_t cap)
{
    const uint8_t *b = p->b;
    if (p->len < 2)
        return fail(err, cap, "packet too short (need at least header + pathLength)");
    int route = b[0] & 3, type = b[0] >> 2 & 15, version = b[0] >> 6;
    size_t at = 1;
    if (route == 0 || route == 3) {
        if (p->len < 5)
            return fail(err, cap, "packet too short for transport codes");
        at += 4; /* the transport codes: not in the answer */
    }
    if (at >= p->len)
        return fail(err, cap, "packet too short (no path byte)");
    uint8_t path_byte = b[at++];
    size_t hash_size = (size_t)(path_byte >> 6) + 1, hash_count = path_byte & 0x3f;
    if (hash_size == 4 || hash_size * hash_count > MG_PACKET_MAX_PATH)
        return fail(err, cap,
                    "invalid path encoding: pathByte 0x%02X (hash_size=%zu hash_count=%zu) "
                    "violates firmware validity (Packet.cpp:13-18, MAX_PATH_SIZE=%d)",
                    path_byte, hash_size, hash_count, MG_PACKET_MAX_PATH);
    const uint8_t *path = b + at;
    size_t path_len = hash_size * hash_count;
    at += path_len;
    if (at > p->len)
        return fail(err, cap,
                    "packet path length (%zu bytes claimed by pathByte 0x%02X) exceeds buffer "
                    "(%zu bytes)",
                    path_len, path_byte, p->len);
    size_t payload_len = p->len - at;
    if (payload_len > MG_PACKET_MAX_PAYLOAD)
        return fail(err, cap,
                    "packet payload (%zu bytes) exceeds firmware MAX_PACKET_PAYLOAD=%d "
                    "(MeshCore.h:19)",
                    payload_len, MG_PACKET_MAX_PAYLOAD);
    /* Whole now: at most MG_PACKET_MAX bytes, all kept. */
    const uint8_t *pl = b + at;

    struct trace_path trace = {.shown = type == PT_TRACE && payload_len > 9};
    size_t shown_size = hash_size, shown_count = hash_count;
    const uint8_t *shown = path;
    if (trace.shown) {
        if (hash_size == 1) {
            trace.snr = path;
            trace.snr_count = hash_count;
        }
        shown_size = (size_t)1 << (pl[8] & 3);
        shown_count = (payload_len - 9) / shown_size;
        shown = pl + 9;
    } else if ((route == 2 || route == 3) && hash_count == 0 && type != PT_TRACE) {
        shown_size = 0; /* a direct zero-hop packet's path byte says nothing of a size */
    }

    struct mg_json j;
    mg_json_init(&j, out);
    mg_json_object_begin(&j);
    mg_json_key(&j, "decoded");
    mg_json_object_begin(&j);
    mg_json_key(&j, "header");
    mg_json_object_begin(&j);
    mg_json_kv_uint(&j, "routeType", (unsigned)route);
    mg_json_kv_string(&j, "routeTypeName", route_names[route]);
    mg_json_kv_uint(&j, "payloadType", (unsigned)type);
    mg_json_kv_string(&j, "payloadTypeName", payload_names[type]);
    mg_json_kv_uint(&j, "payloadVersion", (unsigned)version);
    mg_json_object_end(&j);
    mg_json_key(&j, "path");
    mg_json_object_begin(&j);
    mg_json_kv_uint(&j, "hashSize", shown_size);
    mg_json_kv_uint(&j, "hashCount", shown_count);
    hops(&j, shown, shown_count, shown_size);
    if (trace.shown)
        mg_json_kv_uint(&j, "hopsCompleted", hash_count);
    mg_json_object_end(&j);
    mg_json_key(&j, "payload");
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "type", payload_names[type]);
    payload(&j, type, pl, payload_len, check_signature, &trace);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(out, '\n');
    return true;
}

bool mg_packet_decode_answer(const char *text, size_t n, bool check_signature, struct mg_buf *out,
                             char *err, size_t err_cap)
{
    size_t w;
    while ((w = space_at(text, n, false)) > 0)
        text += w, n -= w;
    while ((w = space_at(text, n, true)) > 0)
        n -= w;
    if (n == 0)
        return fail(err, err_cap, "hex is required");
    struct packet p;
    if (!unhex(text, n, &p, err, err_cap))
        return false;
    return decode(&p, check_signature, out, err, err_cap);
}

/* ---- stored packets ---------------------------------------------------------------------- */

bool mg_packet_hex_path_byte(const char *raw_hex, int *route, int *path_byte)
{
    size_t len = raw_hex ? strlen(raw_hex) : 0;
    if (len < 4)
        return false;
    int header = mg_hex_byte(raw_hex);
    if (header < 0)
        return false;
    *route = header & 3;
    size_t at = *route == 0 || *route == 3 ? 5 : 1;
    if ((at + 1) * 2 > len)
        return false;
    return (*path_byte = mg_hex_byte(raw_hex + at * 2)) >= 0;
}
