/* SPDX-License-Identifier: ISC */
/*
 * POST /api/decode, CoreScope's packet decoder (issue 26, decode).
 *
 *   decode        in-process: every answer CoreScope's server gave in tests/corescope-decode.json
 *                 (every transmission of its real database, packets built for every payload
 *                 type and refusal, hex texts, bodies, signed ADVERTs) given byte for byte;
 *                 ADVERTs signed here with Nettle (the recorded ones) checked valid, and
 *                 invalid with any signed byte changed; the decoder's bounds (a long text is
 *                 read once and refused for its length; nothing past the packet's 254 bytes is
 *                 kept); the stored packets' path byte as the reports read it;
 *   decode_body   the real binary: a body read whole within MG_DECODE_BODY_MAX answers, one
 *                 over it is refused with 413 and close; with an upstream the route is still
 *                 meshgate's (it used to go there).
 */
#include "harness.h"
#include "inproc.h"
#include "packet_decode.h"
#include "router.h"
#include "upstream_proc.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <nettle/eddsa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CEILING_MS 30000
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-decode.json"

static struct {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
    bool open;
    struct mg_test_upstream up; /* pid 0: none */
} fx;

static void cleanup(void)
{
    if (fx.open)
        mg_test_ctx_close(&fx.t);
    fx.open = false;
    if (fx.up.pid > 0)
        mg_test_upstream_stop(&fx.up);
    fx.up.pid = 0;
    if (fx.dir[0])
        mg_test_rmdir(fx.dir);
    fx.dir[0] = '\0';
}

TestSuite(decode, .fini = cleanup, .timeout = 120);

/* The decoder reads no database: an empty one serves. */
static void serve(void)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/empty.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, NULL), 0);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
}

static const char *decode(const char *body, int want_status)
{
    int status = mg_test_ctx_request(&fx.t, "POST", "/api/decode", body);
    const char *got = (const char *)fx.t.res.body.data;
    cr_assert_eq(status, want_status, "%.300s: status %d, want %d: %.300s", body, status,
                 want_status, got);
    return got;
}

static json_t *recorded(void)
{
    json_error_t err;
    json_t *expected = json_load_file(EXPECTED, 0, &err);
    cr_assert_not_null(expected, "%s: %s", EXPECTED, err.text);
    return expected;
}

/* s with its first "from" made "to" (malloc'ed). */
static char *replaced(const char *s, const char *from, const char *to)
{
    const char *at = strstr(s, from);
    char *out;
    if (!at)
        return strdup(s);
    cr_assert(asprintf(&out, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from)) > 0);
    return out;
}

/* Each request of set answers CoreScope's status and exactly its body; in "differences" its
 * body with signatureValid false (Nettle refuses the key's encoding, Go's ed25519 takes it). */
static size_t expect_recorded(json_t *expected, const char *set)
{
    json_t *list = json_object_get(expected, set);
    cr_assert(json_is_array(list) && json_array_size(list) > 0, "%s has no \"%s\"", EXPECTED, set);
    bool differs = strcmp(set, "differences") == 0;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *method = json_string_value(json_object_get(e, "method"));
        const char *path = json_string_value(json_object_get(e, "path"));
        const char *body = json_string_value(json_object_get(e, "body"));
        const char *text = json_string_value(json_object_get(e, "text"));
        int want = (int)json_integer_value(json_object_get(e, "status"));
        cr_assert(method && path && text, "%s[%zu]", set, i);
        int status = mg_test_ctx_request(&fx.t, method, path, body);
        const char *got = (const char *)fx.t.res.body.data;
        if (!json_is_object(json_object_get(e, "answer"))) {
            /* CoreScope's router gives a GET of the path to its front end (index.html):
             * meshgate answers 405 with Allow, as for its other POST tools. */
            cr_expect_eq(status, 405, "%s %s: %d", method, path, status);
            continue;
        }
        char *want_text =
            differs ? replaced(text, "\"signatureValid\":true", "\"signatureValid\":false")
                    : strdup(text);
        if (differs)
            cr_assert(strstr(text, "\"signatureValid\":true"), "%s", text);
        cr_expect_eq(status, want, "%s[%zu] %.200s: %d, CoreScope %d: %.300s", set, i, body, status,
                     want, got);
        cr_expect_str_eq(got, want_text, "%s[%zu] %.200s", set, i, body);
        free(want_text);
    }
    return json_array_size(list);
}

Test(decode, answers_equal_corescopes_byte_for_byte)
{
    serve();
    json_t *expected = recorded();
    static const char *const sets[] = {"real",       "built",       "text",   "bodies",
                                       "signatures", "differences", "methods"};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        total += expect_recorded(expected, sets[i]);
    cr_expect_geq(total, 600);
    json_decref(expected);
}

/* ---- signatures made here ---- */

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02X", b[i]);
}

/* An ADVERT (header and path byte 0) signed with the key of seed 00 01 .. 1f, as hex. */
static size_t signed_advert(uint8_t header, const uint8_t *app, size_t app_len, uint8_t *pkt)
{
    uint8_t seed[32], pub[32];
    for (int i = 0; i < 32; i++)
        seed[i] = (uint8_t)i;
    ed25519_sha512_public_key(pub, seed);
    const uint32_t ts = 1796536800;
    pkt[0] = header;
    pkt[1] = 0;
    memcpy(pkt + 2, pub, 32);
    for (int i = 0; i < 4; i++)
        pkt[34 + i] = (uint8_t)(ts >> (8 * i));
    uint8_t message[36 + 84];
    memcpy(message, pkt + 2, 36);
    if (app_len > 0) {
        memcpy(pkt + 102, app, app_len);
        memcpy(message + 36, app, app_len);
    }
    ed25519_sha512_sign(pub, seed, 36 + app_len, message, pkt + 38);
    return 102 + app_len;
}

static char *body_of(const uint8_t *pkt, size_t n)
{
    char hex[2 * MG_PACKET_MAX + 1];
    to_hex(pkt, n, hex);
    char *body;
    cr_assert(asprintf(&body, "{\"hex\": \"%s\"}", hex) > 0);
    return body;
}

Test(decode, adverts_signed_with_nettle_are_valid_and_any_changed_signed_byte_is_not)
{
    serve();
    static const uint8_t app[] = {0x92, 0x51, 0x66, 0x40, 0x02, 0x28, 0x07, 0xb4, 0xf8, 'm', 'e',
                                  's',  'h',  'g',  'a',  't',  'e',  ' ',  't',  'e',  's', 't'};
    uint8_t pkt[MG_PACKET_MAX];
    size_t n = signed_advert(0x11, app, sizeof app, pkt);
    char *body = body_of(pkt, n);
    /* The recorded request is this packet: CoreScope's server said valid too. */
    json_t *expected = recorded();
    json_t *first = json_array_get(json_object_get(expected, "signatures"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(first, "body")), body);
    cr_expect(strstr(json_string_value(json_object_get(first, "text")), "\"signatureValid\":true"));
    json_decref(expected);
    cr_expect(strstr(decode(body, 200), "\"signatureValid\":true,"), "%s", fx.t.res.body.data);
    free(body);
    /* Each byte the signature covers (key, time, app data) and the signature's own. */
    for (size_t at = 2; at < n; at++) {
        pkt[at] ^= 0x04;
        body = body_of(pkt, n);
        const char *got = decode(body, 200);
        cr_expect(strstr(got, "\"signatureValid\":false,"), "byte %zu: %.400s", at, got);
        free(body);
        pkt[at] ^= 0x04;
    }
    /* Without app data: a valid signature over the key and time alone. */
    n = signed_advert(0x12, NULL, 0, pkt);
    body = body_of(pkt, n);
    cr_expect(strstr(decode(body, 200), "\"signatureValid\":true}"), "%s", fx.t.res.body.data);
    free(body);
}

/* ---- the decoder's bounds ---- */

Test(decode, a_long_text_is_read_once_and_refused_for_its_length)
{
    /* 8,000 bytes of valid hex, a flood REQ: refused for its payload, counted in full. */
    size_t n = 16000;
    char *text = malloc(n);
    memcpy(text, "0100", 4);
    memset(text + 4, 'a', n - 4);
    struct mg_buf out;
    mg_buf_init(&out);
    char err[256];
    cr_assert_not(mg_packet_decode_answer(text, n, true, &out, err, sizeof err));
    cr_expect_str_eq(err, "packet payload (7998 bytes) exceeds firmware MAX_PACKET_PAYLOAD=184 "
                          "(MeshCore.h:19)");
    cr_expect_eq(out.len, 0);
    /* A bad digit at the very end is found: every character is read. */
    text[n - 1] = 'z';
    cr_assert_not(mg_packet_decode_answer(text, n, true, &out, err, sizeof err));
    cr_expect_str_eq(err, "invalid hex: encoding/hex: invalid byte: U+007A 'z'");
    /* The largest packet decodes: 254 bytes, a TRANSPORT_FLOOD GRP_TXT with 64 path bytes. */
    memcpy(text, "1412345678", 10);
    memcpy(text + 10, "7F", 2); /* wrong: 2-byte hops, 63 of them, are 126 bytes */
    cr_assert_not(mg_packet_decode_answer(text, 508, true, &out, err, sizeof err));
    memcpy(text + 10, "60", 2); /* 32 hops of 2 bytes */
    memset(text + 12, 'b', 508 - 12);
    cr_assert(mg_packet_decode_answer(text, 508, true, &out, err, sizeof err), "%s", err);
    mg_buf_cstr(&out);
    cr_expect(strstr(out.data, "\"hashSize\":2,\"hashCount\":32,"), "%s", out.data);
    cr_expect_eq(mg_test_count(out.data, "\"BBBB\""), 32, "%s", out.data);
    cr_expect(strstr(out.data, "\"encryptedData\":\"") != NULL, "%s", out.data);
    mg_buf_free(&out);
    free(text);
}

Test(decode, the_reports_read_a_stored_packets_path_byte_after_its_transport_codes)
{
    int route = -1, path_byte = -1;
    cr_expect(mg_packet_hex_path_byte("1142AABB", &route, &path_byte));
    cr_expect(route == 1 && path_byte == 0x42);
    cr_expect(mg_packet_hex_path_byte("14123456788100", &route, &path_byte));
    cr_expect(route == 0 && path_byte == 0x81);
    cr_expect(mg_packet_hex_path_byte("0fAABBCCDDc2", &route, &path_byte));
    cr_expect(route == 3 && path_byte == 0xc2);
    cr_expect_not(mg_packet_hex_path_byte("14123456", &route, &path_byte));
    cr_expect_not(mg_packet_hex_path_byte("11", &route, &path_byte));
    cr_expect_not(mg_packet_hex_path_byte("1Z42", &route, &path_byte));
    cr_expect_not(mg_packet_hex_path_byte("11G2", &route, &path_byte));
    cr_expect_not(mg_packet_hex_path_byte(NULL, &route, &path_byte));
}

/* ---- the real binary ---- */

TestSuite(decode_body, .fini = cleanup, .timeout = 180);

Test(decode_body, a_body_within_the_cap_is_decoded_and_one_over_it_is_refused)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/empty.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, NULL), 0);
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", NULL};
    cr_assert(mg_test_server_start(&s, fx.db, env));
    /* At the cap: the hex padded with spaces, which the decoder drops. */
    char *body = malloc(MG_DECODE_BODY_MAX + 1);
    const char *head = "{\"hex\":\"0D00010203040506";
    size_t n = strlen(head);
    memcpy(body, head, n);
    memset(body + n, ' ', MG_DECODE_BODY_MAX - n - 2);
    memcpy(body + MG_DECODE_BODY_MAX - 2, "\"}", 2);
    char req[256];
    int len = snprintf(req, sizeof req,
                       "POST /api/decode HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                       "Content-Length: %d\r\n\r\n",
                       MG_DECODE_BODY_MAX);
    int fd = mg_test_connect(s.port);
    cr_assert(mg_test_send(fd, req, (size_t)len));
    cr_assert(mg_test_send(fd, body, MG_DECODE_BODY_MAX));
    struct mg_test_response r;
    cr_assert(mg_test_read_response(fd, &r, false, CEILING_MS));
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.body, "\"extraHash\":\"04030201\",\"ackLen\":6,\"ackAttempt\":5,"
                             "\"ackRand\":6}"),
              "%s", r.body);
    mg_test_response_free(&r);
    close(fd);
    /* One byte over: not read, 413, closed. */
    len = snprintf(req, sizeof req,
                   "POST /api/decode HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n{",
                   MG_DECODE_BODY_MAX + 1);
    fd = mg_test_connect(s.port);
    cr_assert(mg_test_send(fd, req, (size_t)len));
    cr_assert(mg_test_read_response(fd, &r, false, CEILING_MS));
    cr_expect_eq(r.status, 413, "%s", r.body);
    mg_test_response_free(&r);
    cr_expect(mg_test_wait_closed(fd, CEILING_MS));
    close(fd);
    free(body);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
}

Test(decode_body, with_an_upstream_the_decoder_is_still_native)
{
    mg_test_upstream_start(&fx.up, 0, NULL); /* stopped by the suite's cleanup */
    char setting[64];
    snprintf(setting, sizeof setting, "MESHGATE_UPSTREAM=127.0.0.1:%d", fx.up.port);
    const char *env[] = {setting, "MESHGATE_WORKERS=1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    static const char req[] = "POST /api/decode HTTP/1.1\r\nHost: t\r\nContent-Length: 18\r\n"
                              "Connection: close\r\n\r\n{\"hex\":\"0D00AABB\"}";
    int fd = mg_test_connect(s.port);
    cr_assert(mg_test_send(fd, req, sizeof req - 1));
    struct mg_test_response r;
    cr_assert(mg_test_read_response(fd, &r, false, CEILING_MS));
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(
        strstr(r.body, "\"payload\":{\"type\":\"ACK\",\"raw\":\"aabb\",\"error\":\"too short\"}"),
        "%s", r.body);
    mg_test_response_free(&r);
    close(fd);
    struct stat st;
    cr_expect(stat(fx.up.log, &st) != 0 || st.st_size == 0, "the upstream was asked");
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
}
