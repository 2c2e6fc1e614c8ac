/* SPDX-License-Identifier: ISC */
/*
 * meshgate's own live feed (issue 26, item 3; docs/architecture.md, "The live feed"):
 *
 *   the ring in the shared segment (shm/live_ring.h): events read whole or reported lost,
 *   never torn; the watcher's lease; the clients' cap; what the master takes back;
 *   the WebSocket pieces (workers/core/websocket.h): the handshake's accept value (RFC 6455's
 *   own example), its checks, the frames meshgate writes and the bounded reader of a client's;
 *   end to end, with the real binary on a free port and a writer of its own (a test-side
 *   SQLite connection with a busy timeout): a committed transmission and observation reach
 *   every client of every worker once, with CoreScope's fields; a client that stops reading
 *   is dropped with a close frame once the ring laps it; the per-address and group caps;
 *   pings answered, bad frames closed; a drain closes clients with 1001.
 */
#include "harness.h"
#include "live_ring.h"
#include "segment.h"
#include "stats.h"
#include "websocket.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(live, .timeout = 240);

#define CEILING_MS 60000

/* ---- the ring ---- */

static struct {
    struct mg_live_ring ring;
    struct mg_live_slot slots[MG_LIVE_SLOTS];
} mem;

static void ring_fresh(uint32_t cap)
{
    memset(&mem, 0, sizeof mem);
    mg_live_ring_init(&mem.ring, mem.slots, cap);
}

Test(live, ring_reads_what_was_published_and_reports_lapped_events_lost)
{
    ring_fresh(4);
    static char out[MG_LIVE_EVENT_MAX];
    size_t len = 0;
    cr_expect_eq(mg_live_read(&mem.ring, mem.slots, 1, out, &len), MG_LIVE_NONE);
    cr_expect_eq(mg_live_publish(&mem.ring, mem.slots, "one", 3), 1);
    cr_expect_eq(mg_live_publish(&mem.ring, mem.slots, "two!", 4), 2);
    cr_assert_eq(mg_live_read(&mem.ring, mem.slots, 1, out, &len), MG_LIVE_OK);
    cr_expect(len == 3 && memcmp(out, "one", 3) == 0);
    cr_assert_eq(mg_live_read(&mem.ring, mem.slots, 2, out, &len), MG_LIVE_OK);
    cr_expect(len == 4 && memcmp(out, "two!", 4) == 0);
    cr_expect_eq(mg_live_read(&mem.ring, mem.slots, 3, out, &len), MG_LIVE_NONE);
    cr_expect_eq(mg_live_read(&mem.ring, mem.slots, 0, out, &len), MG_LIVE_LOST);
    /* Too long for a slot: nothing written, the head stays. */
    static char big[MG_LIVE_EVENT_MAX + 1];
    cr_expect_eq(mg_live_publish(&mem.ring, mem.slots, big, sizeof big), 0);
    cr_expect_eq(mg_live_head(&mem.ring), 3);
    /* A whole lap later event 1 and 2 are gone; the newest MG_LIVE_SLOTS are all there. */
    char text[32];
    for (unsigned i = 0; i < MG_LIVE_SLOTS; i++) {
        int n = snprintf(text, sizeof text, "e%u", i + 3);
        mg_live_publish(&mem.ring, mem.slots, text, (size_t)n);
    }
    cr_expect_eq(mg_live_read(&mem.ring, mem.slots, 1, out, &len), MG_LIVE_LOST);
    cr_expect_eq(mg_live_read(&mem.ring, mem.slots, 2, out, &len), MG_LIVE_LOST);
    cr_assert_eq(mg_live_read(&mem.ring, mem.slots, 3, out, &len), MG_LIVE_OK);
    cr_expect(len == 2 && memcmp(out, "e3", 2) == 0);
    uint64_t last = mg_live_head(&mem.ring) - 1;
    cr_assert_eq(mg_live_read(&mem.ring, mem.slots, last, out, &len), MG_LIVE_OK);
    snprintf(text, sizeof text, "e%llu", (unsigned long long)last);
    cr_expect(len == strlen(text) && memcmp(out, text, len) == 0);
    /* A slot being written (seq 0) is never read as its old event. */
    atomic_store(&mem.slots[last % MG_LIVE_SLOTS].seq, 0);
    cr_expect_eq(mg_live_read(&mem.ring, mem.slots, last, out, &len), MG_LIVE_LOST);
    struct mg_live_snapshot snap;
    mg_live_ring_read(&mem.ring, &snap);
    cr_expect_eq(snap.events, MG_LIVE_SLOTS + 2);
    cr_expect_eq(snap.fill, MG_LIVE_SLOTS);
}

Test(live, ring_lease_has_one_holder_and_the_master_takes_a_dead_ones_back)
{
    ring_fresh(2);
    cr_expect(mg_live_lease_take(&mem.ring, 100, 0));
    cr_expect(mg_live_lease_take(&mem.ring, 100, 0), "the holder holds it still");
    cr_expect(!mg_live_lease_take(&mem.ring, 200, 1));
    cr_expect_eq(mg_live_ring_reclaim(&mem.ring, 1, 200), 0, "not 200's");
    cr_expect_eq(mg_live_ring_reclaim(&mem.ring, 0, 100), 1);
    cr_expect(mg_live_lease_take(&mem.ring, 200, 1));
    mg_live_lease_release(&mem.ring, 100); /* not its own any more: nothing happens */
    cr_expect_eq(atomic_load(&mem.ring.writer_pid), 200);
    mg_live_lease_release(&mem.ring, 200);
    cr_expect_eq(atomic_load(&mem.ring.writer_pid), 0);
}

Test(live, ring_counts_clients_against_the_cap_and_reclaims_a_slots)
{
    ring_fresh(2);
    cr_expect(mg_live_client_open(&mem.ring, 0));
    cr_expect(mg_live_client_open(&mem.ring, 1));
    cr_expect(!mg_live_client_open(&mem.ring, 1), "the cap is 2");
    mg_live_client_close(&mem.ring, 0);
    cr_expect(mg_live_client_open(&mem.ring, 1));
    cr_expect_eq(atomic_load(&mem.ring.clients_open), 2);
    cr_expect_eq(mg_live_ring_reclaim(&mem.ring, 1, 4242), 2, "slot 1's two clients");
    cr_expect_eq(atomic_load(&mem.ring.clients_open), 0);
    mg_live_client_close(&mem.ring, 1); /* its worker closing one after the reap: no underflow */
    cr_expect_eq(atomic_load(&mem.ring.clients_open), 0);
    cr_expect_eq(atomic_load(&mem.ring.clients_peak), 2);
    mg_live_ring_configure(&mem.ring, 0);
    cr_expect(!mg_live_client_open(&mem.ring, 0), "cap 0: no client");
}

/* ---- the WebSocket pieces ---- */

Test(live, websocket_accept_value_is_the_rfcs_example)
{
    char out[MG_WS_ACCEPT_LEN + 1];
    mg_ws_accept_value("dGhlIHNhbXBsZSBub25jZQ==", 24, out);
    cr_expect_str_eq(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

static int check_head(const char *head, char *accept, const char **why)
{
    static struct mg_http_request hr;
    struct mg_http_limits limits = {.max_header_bytes = 8192, .max_uri_bytes = 4096};
    int status = 0;
    cr_assert_eq(mg_http_parse_request(head, strlen(head), &limits, &hr, &status, why), MG_HTTP_OK,
                 "%s", head);
    return mg_ws_handshake_check(&hr, accept, why);
}

Test(live, websocket_handshake_is_checked_as_corescopes_server_checks_it)
{
    char accept[MG_WS_ACCEPT_LEN + 1];
    const char *why = NULL;
    cr_expect_eq(check_head("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: "
                            "keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
                            accept, &why),
                 0);
    cr_expect_str_eq(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    cr_expect_eq(check_head("POST / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: "
                            "Upgrade\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n"
                            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
                            accept, &why),
                 405);
    cr_expect_eq(check_head("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
                            "Sec-WebSocket-Version: 13\r\n"
                            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
                            accept, &why),
                 400, "no Connection: upgrade");
    cr_expect_eq(check_head("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: "
                            "Upgrade\r\nSec-WebSocket-Version: 8\r\n"
                            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
                            accept, &why),
                 400);
    cr_expect(strstr(why, "unsupported version"), "%s", why);
    cr_expect_eq(check_head("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: "
                            "Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                            "Sec-WebSocket-Key: short==\r\n\r\n",
                            accept, &why),
                 400);
}

Test(live, websocket_origin_check_is_same_host_or_the_list_never_a_star)
{
    static struct mg_http_request hr;
    struct mg_http_limits limits = {.max_header_bytes = 8192, .max_uri_bytes = 4096};
    int status;
    const char *why;
    const char *heads[] = {
        "GET / HTTP/1.1\r\nHost: mesh.example:8080\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: mesh.example:8080\r\nOrigin: https://MESH.example:8080\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: mesh.example\r\nOrigin: https://evil.example\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: mesh.example\r\nOrigin: https://friend.example\r\n\r\n",
    };
    const bool with_list[] = {true, true, false, true};
    const bool with_star[] = {true, true, false, false};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        cr_assert_eq(mg_http_parse_request(heads[i], strlen(heads[i]), &limits, &hr, &status, &why),
                     MG_HTTP_OK);
        cr_expect_eq(mg_ws_origin_allowed(&hr, "https://other.example, https://Friend.example"),
                     with_list[i], "%s", heads[i]);
        cr_expect_eq(mg_ws_origin_allowed(&hr, "*"), with_star[i], "%s", heads[i]);
    }
}

/* A client's frame: masked with a fixed key. */
static size_t client_frame(uint8_t *out, unsigned first_byte, const void *payload, size_t len)
{
    static const uint8_t key[4] = {0x11, 0x22, 0x33, 0x44};
    size_t n = 0;
    out[n++] = (uint8_t)first_byte;
    if (len < 126) {
        out[n++] = (uint8_t)(0x80 | len);
    } else {
        out[n++] = 0x80 | 126;
        out[n++] = (uint8_t)(len >> 8);
        out[n++] = (uint8_t)len;
    }
    memcpy(out + n, key, 4);
    n += 4;
    for (size_t i = 0; i < len; i++)
        out[n + i] = ((const uint8_t *)payload)[i] ^ key[i & 3];
    return n + len;
}

Test(live, websocket_reader_takes_whole_masked_frames_within_bounds)
{
    uint8_t buf[2048];
    struct mg_ws_reader r = {0};
    struct mg_ws_frame f;
    uint16_t code = 0;
    size_t n = client_frame(buf, 0x89, "hi", 2);
    for (size_t part = 0; part < n; part++)
        cr_expect_eq(mg_ws_read(&r, buf, part, &f, &code), MG_WS_MORE, "%zu bytes", part);
    cr_assert_eq(mg_ws_read(&r, buf, n, &f, &code), MG_WS_FRAME);
    cr_expect(f.opcode == MG_WS_PING && f.used == n && f.payload_len == 2 &&
              memcmp(f.payload, "hi", 2) == 0);
    /* A fragmented message of 300 + 200 bytes, with a ping between its frames. */
    static char text[600];
    memset(text, 'x', sizeof text);
    n = client_frame(buf, 0x01, text, 300);
    cr_assert_eq(mg_ws_read(&r, buf, n, &f, &code), MG_WS_FRAME);
    cr_expect(r.in_message);
    n = client_frame(buf, 0x89, "", 0);
    cr_assert_eq(mg_ws_read(&r, buf, n, &f, &code), MG_WS_FRAME);
    n = client_frame(buf, 0x80, text, 200);
    cr_assert_eq(mg_ws_read(&r, buf, n, &f, &code), MG_WS_FRAME);
    cr_expect(!r.in_message);
    /* Past 512 bytes in one message: 1009. */
    n = client_frame(buf, 0x01, text, 300);
    cr_assert_eq(mg_ws_read(&r, buf, n, &f, &code), MG_WS_FRAME);
    n = client_frame(buf, 0x80, text, 213);
    cr_expect_eq(mg_ws_read(&r, buf, n, &f, &code), MG_WS_FAIL);
    cr_expect_eq(code, MG_WS_CLOSE_TOO_BIG);
    struct mg_ws_reader fresh = {0};
    n = client_frame(buf, 0x82, text, 513);
    cr_expect_eq(mg_ws_read(&fresh, buf, 4, &f, &code), MG_WS_FAIL, "known from the head alone");
    cr_expect_eq(code, MG_WS_CLOSE_TOO_BIG);
    /* Unmasked, a reserved bit, an unknown opcode, a long or fragmented control frame, a
     * continuation with no message: 1002. */
    const uint8_t bad[][2] = {{0x81, 0x00}, {0xc1, 0x80}, {0x83, 0x80},
                              {0x89, 0xfe}, {0x09, 0x80}, {0x80, 0x80}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct mg_ws_reader any = {0};
        uint8_t frame[16] = {bad[i][0], bad[i][1], 0, 0, 0, 0, 0, 0};
        cr_expect_eq(mg_ws_read(&any, frame, sizeof frame, &f, &code), MG_WS_FAIL, "%zu", i);
        cr_expect_eq(code, MG_WS_CLOSE_PROTOCOL, "%zu", i);
    }
}

Test(live, websocket_frames_meshgate_writes_have_the_three_length_forms)
{
    struct mg_buf b;
    mg_buf_init(&b);
    static char payload[70000];
    const size_t lens[] = {0, 125, 126, 65535, 65536};
    const size_t heads[] = {2, 2, 4, 4, 10};
    for (size_t i = 0; i < 5; i++) {
        mg_buf_reset(&b);
        mg_ws_frame_append(&b, MG_WS_TEXT, payload, lens[i]);
        cr_expect_eq(b.len, heads[i] + lens[i], "%zu", lens[i]);
        cr_expect_eq((uint8_t)b.data[0], 0x81);
        cr_expect_eq((uint8_t)b.data[1] & 0x80, 0, "unmasked");
    }
    mg_buf_reset(&b);
    mg_ws_close_append(&b, 1008);
    cr_expect(b.len == 4 && (uint8_t)b.data[0] == 0x88 && (uint8_t)b.data[2] == 0x03 &&
              (uint8_t)b.data[3] == 0xf0);
    mg_buf_free(&b);
}

/* ---- end to end ---- */

struct ws {
    int fd;
    uint8_t buf[1 << 16];
    size_t len;
};

static const char handshake[] = "GET /%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                                "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n%s\r\n";

/* A plain blocking connection; rcvbuf > 0 sets the receive buffer first. */
static int connect_to(int port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sin, sizeof sin) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Bytes into c->buf within timeout_ms: 1; 0 on timeout; -1 on EOF or error. */
static int ws_fill(struct ws *c, int timeout_ms)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    if (c->len == sizeof c->buf)
        return -1;
    if (poll(&p, 1, timeout_ms) != 1)
        return 0;
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    if (n <= 0)
        return -1;
    c->len += (size_t)n;
    return 1;
}

/* The handshake on c's connection; returns the status of the answer (101 when it is one),
 * the client ready to read frames. */
static int ws_handshake(struct ws *c, int port, const char *extra)
{
    char req[1024];
    int n = snprintf(req, sizeof req, handshake, "", port, extra ? extra : "");
    cr_assert(mg_test_send(c->fd, req, (size_t)n));
    char *end = NULL;
    int64_t until = mg_test_now_ms() + CEILING_MS;
    while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4))) {
        cr_assert(mg_test_now_ms() < until, "no answer to the handshake");
        cr_assert_geq(ws_fill(c, 1000), 0, "the connection ended before the answer");
    }
    int status = 0;
    sscanf((const char *)c->buf, "HTTP/1.1 %d", &status);
    if (status == 101)
        cr_expect(memmem(c->buf, (size_t)(end - (char *)c->buf),
                         "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", 49),
                  "%.*s", (int)(end - (char *)c->buf), c->buf);
    size_t head = (size_t)(end + 4 - (char *)c->buf);
    memmove(c->buf, c->buf + head, c->len - head);
    c->len -= head;
    return status;
}

/* Opens a WebSocket (rcvbuf > 0: with that receive buffer); the handshake's status. */
static int ws_open(struct ws *c, int port, const char *extra, int rcvbuf)
{
    memset(c, 0, sizeof *c);
    c->fd = connect_to(port, rcvbuf);
    cr_assert_geq(c->fd, 0);
    return ws_handshake(c, port, extra);
}

/* The next frame of the server within timeout_ms: its opcode (-1: none), its payload
 * (malloc'ed, NUL-terminated) and length. */
static int ws_next(struct ws *c, char **payload, size_t *len, int timeout_ms)
{
    int64_t until = mg_test_now_ms() + timeout_ms;
    for (;;) {
        if (c->len >= 2) {
            size_t plen = c->buf[1] & 0x7f, head = 2;
            if (plen == 126 && c->len >= 4) {
                plen = (size_t)c->buf[2] << 8 | c->buf[3];
                head = 4;
            } else if (plen == 127 && c->len >= 10) {
                plen = 0;
                for (int i = 0; i < 8; i++)
                    plen = plen << 8 | c->buf[2 + i];
                head = 10;
            }
            cr_assert_eq(c->buf[1] & 0x80, 0, "a server's frame is never masked");
            if (plen < 126 || head > 2) {
                if (c->len >= head + plen) {
                    int op = c->buf[0] & 0x0f;
                    cr_assert(c->buf[0] & 0x80, "meshgate sends whole frames");
                    if (payload) {
                        *payload = malloc(plen + 1);
                        memcpy(*payload, c->buf + head, plen);
                        (*payload)[plen] = '\0';
                    }
                    if (len)
                        *len = plen;
                    memmove(c->buf, c->buf + head + plen, c->len - head - plen);
                    c->len -= head + plen;
                    return op;
                }
            }
        }
        int64_t left = until - mg_test_now_ms();
        if (left <= 0 || ws_fill(c, (int)left) <= 0)
            return -1;
    }
}

static void ws_send(struct ws *c, unsigned first_byte, const void *payload, size_t len)
{
    uint8_t frame[1024];
    cr_assert_leq(len, 900);
    size_t n = client_frame(frame, first_byte, payload, len);
    cr_assert(mg_test_send(c->fd, (const char *)frame, n));
}

/* The close frame's code that ends the stream (after any other frames), or -1. */
static int ws_close_code(struct ws *c, int timeout_ms)
{
    int64_t until = mg_test_now_ms() + timeout_ms;
    for (;;) {
        char *p = NULL;
        size_t len = 0;
        int64_t left = until - mg_test_now_ms();
        int op = ws_next(c, &p, &len, left > 0 ? (int)left : 0);
        int code = op == MG_WS_CLOSE ? (len >= 2 ? ((uint8_t)p[0] << 8 | (uint8_t)p[1]) : 1005) : 0;
        free(p);
        if (op == MG_WS_CLOSE)
            return code;
        if (op < 0)
            return -1;
    }
}

static struct {
    char dir[128];
    char db[300];
    struct mg_test_server server;
    bool running;
    struct mg_segment seg;
    bool attached;
} e;

static void stop_all(void)
{
    if (e.attached)
        mg_segment_detach(&e.seg);
    e.attached = false;
    if (e.running)
        mg_test_server_stop(&e.server, CEILING_MS);
    e.running = false;
    if (e.dir[0])
        mg_test_rmdir(e.dir);
    e.dir[0] = '\0';
}

static void start_server(const char *const *extra)
{
    const char *env[16] = {"MESHGATE_WORKERS=2", "MESHGATE_LIVE_POLL_MS=50"};
    size_t n = 2;
    for (; extra && *extra && n < 15; extra++)
        env[n++] = *extra;
    env[n] = NULL;
    cr_assert(mg_test_server_start(&e.server, e.db, env));
    e.running = true;
    char err[512];
    cr_assert_eq(mg_segment_attach(&e.seg, e.server.shm_name, true, err, sizeof err), 0, "%s", err);
    e.attached = true;
}

/* A small database with one observer and one transmission heard once, and the server on
 * it with a fast poll; extra: more settings (NULL-terminated). */
static void start(const char *const *extra)
{
    mg_test_tmpdir(e.dir, sizeof e.dir);
    cr_assert(e.dir[0]);
    snprintf(e.db, sizeof e.db, "%s/live.db", e.dir);
    cr_assert_eq(mg_test_make_db(e.db, true,
                                 "INSERT INTO observers (id, name, iata) VALUES ('obs1', "
                                 "'Observer One', 'SEA');"
                                 "INSERT INTO transmissions (raw_hex, hash, first_seen, route_type,"
                                 " payload_type) VALUES ('0100', 'h0', '2026-01-01T00:00:00.000Z',"
                                 " 1, 4);"
                                 "INSERT INTO observations (transmission_id, observer_idx, snr,"
                                 " rssi, path_json, timestamp) VALUES (1, 1, 5.5, -90, '[]', "
                                 "1767225600);"),
                 0);
    start_server(extra);
}

static bool watcher_ready(void *arg)
{
    (void)arg;
    return atomic_load(&e.seg.live->hw_set) != 0;
}

/* Appends `count` transmissions heard by obs1 in one transaction, each decoded_json
 * padded to `pad` bytes; returns the first new transmission's id. */
static int64_t write_rows(int count, int pad)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(e.db, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *tx, *obs;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "INSERT INTO transmissions (raw_hex, hash, first_seen, "
                                    "route_type, payload_type, decoded_json) VALUES ('11aa22', "
                                    "printf('live%d', ?1), '2026-02-03T04:05:06.789Z', 2, 5, "
                                    "json_object('type', 'GRP_TXT', 'text', ?2, 'n', 7))",
                                    -1, &tx, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "INSERT INTO observations (transmission_id, observer_idx, "
                                    "direction, snr, rssi, path_json, timestamp) VALUES (?1, 1, "
                                    "'rx', 7.25, -101, '[\"ab\"]', 1770091506)",
                                    -1, &obs, NULL),
                 SQLITE_OK);
    char *text = malloc((size_t)pad + 1);
    memset(text, 'p', (size_t)pad);
    text[pad] = '\0';
    static int serial;
    int64_t first = 0;
    for (int i = 0; i < count; i++) {
        sqlite3_bind_int(tx, 1, ++serial);
        sqlite3_bind_text(tx, 2, text, -1, SQLITE_STATIC);
        cr_assert_eq(sqlite3_step(tx), SQLITE_DONE, "%s", sqlite3_errmsg(db));
        sqlite3_reset(tx);
        int64_t id = sqlite3_last_insert_rowid(db);
        if (!first)
            first = id;
        sqlite3_bind_int64(obs, 1, id);
        cr_assert_eq(sqlite3_step(obs), SQLITE_DONE, "%s", sqlite3_errmsg(db));
        sqlite3_reset(obs);
    }
    sqlite3_finalize(tx);
    sqlite3_finalize(obs);
    cr_assert_eq(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    free(text);
    return first;
}

/* Opens MAX_CLIENTS clients one at a time on a server whose 2 workers keep 4 connections each
 * (live clients at most 6 of the 8, mg_live_clients_cap): a full worker stops accepting, so
 * the other gets the rest. */
#define MAX_CLIENTS 6
static int open_on_both_workers(struct ws *clients)
{
    for (int i = 0; i < MAX_CLIENTS; i++)
        cr_assert_eq(ws_open(&clients[i], e.server.port, NULL, 0), 101);
    return MAX_CLIENTS;
}

static json_t *get_obj(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    cr_assert_not_null(v, "no %s", key);
    return v;
}

Test(live, a_committed_row_reaches_every_client_of_every_worker_once, .fini = stop_all)
{
    start((const char *[]){"MESHGATE_MAX_CONNS_PER_WORKER=4", NULL});
    cr_assert(mg_test_wait_until(watcher_ready, NULL, CEILING_MS, 20), "no watcher");
    static struct ws clients[MAX_CLIENTS];
    int n = open_on_both_workers(clients);
    cr_expect(atomic_load(&e.seg.live->clients_by_slot[0]) > 0 &&
                  atomic_load(&e.seg.live->clients_by_slot[1]) > 0,
              "%d clients all went to one worker", n);
    int64_t id = write_rows(1, 3);
    for (int i = 0; i < n; i++) {
        char *p = NULL;
        int op = ws_next(&clients[i], &p, NULL, CEILING_MS);
        cr_assert_eq(op, MG_WS_TEXT, "client %d got no message", i);
        json_error_t jerr;
        json_t *m = json_loads(p, 0, &jerr);
        cr_assert_not_null(m, "%s: %s", jerr.text, p);
        cr_expect_str_eq(json_string_value(get_obj(m, "type")), "packet");
        json_t *d = get_obj(m, "data");
        cr_expect_eq(json_integer_value(get_obj(d, "id")), id);
        cr_expect_str_eq(json_string_value(get_obj(d, "hash")), "live1");
        cr_expect_str_eq(json_string_value(get_obj(d, "observer_id")), "obs1");
        cr_expect_str_eq(json_string_value(get_obj(d, "observer_name")), "Observer One");
        cr_expect_str_eq(json_string_value(get_obj(d, "direction")), "rx");
        cr_expect_str_eq(json_string_value(get_obj(d, "path_json")), "[\"ab\"]");
        cr_expect_str_eq(json_string_value(get_obj(d, "timestamp")), "2026-02-03T04:05:06.789Z");
        cr_expect_eq(json_number_value(get_obj(d, "snr")), 7.25);
        cr_expect_eq(json_number_value(get_obj(d, "rssi")), -101);
        cr_expect_eq(json_integer_value(get_obj(d, "observation_count")), 1);
        cr_expect_eq(json_integer_value(get_obj(d, "payload_type")), 5);
        json_t *dec = get_obj(d, "decoded");
        cr_expect_str_eq(json_string_value(get_obj(get_obj(dec, "header"), "payloadTypeName")),
                         "GRP_TXT");
        cr_expect_str_eq(json_string_value(get_obj(get_obj(dec, "payload"), "text")), "ppp");
        json_t *pk = get_obj(d, "packet");
        cr_expect_str_eq(json_string_value(get_obj(pk, "hash")), "live1");
        cr_expect_null(json_object_get(pk, "packet"));
        cr_expect_null(json_object_get(pk, "decoded"));
        /* Keys in Go's order: "decoded" first, "type" before "data" at the top. */
        cr_expect(strncmp(p, "{\"type\":\"packet\",\"data\":{\"decoded\":{\"header\":", 45) == 0,
                  "%s", p);
        json_decref(m);
        free(p);
    }
    /* Once: nothing more comes for it. */
    for (int i = 0; i < n; i++)
        cr_expect_eq(ws_next(&clients[i], NULL, NULL, 300), -1, "client %d got a second frame", i);
    cr_expect_eq(mg_counter_get(&e.seg, MG_CTR_LIVE_EVENTS), 1);
    for (int i = 0; i < n; i++)
        close(clients[i].fd);
}

static bool dropped(void *arg)
{
    (void)arg;
    return mg_counter_get(&e.seg, MG_CTR_LIVE_DROPPED_SLOW) > 0;
}

Test(live, a_client_that_stops_reading_is_dropped_with_a_close_frame_when_lapped, .fini = stop_all)
{
    start(NULL);
    cr_assert(mg_test_wait_until(watcher_ready, NULL, CEILING_MS, 20));
    static struct ws slow;
    cr_assert_eq(ws_open(&slow, e.server.port, NULL, 4096), 101);
    /* Two laps of the ring, about 5 KB each: far more than the buffers hold. */
    for (int batch = 0; batch < 4 && !dropped(NULL); batch++)
        write_rows(MG_LIVE_SLOTS / 2, 1500);
    cr_assert(mg_test_wait_until(dropped, NULL, CEILING_MS, 20), "the slow client was kept");
    cr_expect_eq(ws_close_code(&slow, CEILING_MS), MG_WS_CLOSE_POLICY);
    close(slow.fd);
}

Test(live, clients_are_capped_per_address_and_per_group, .fini = stop_all)
{
    start((const char *[]){"MESHGATE_LIVE_PER_CLIENT=2", "MESHGATE_LIVE_CLIENTS=3", NULL});
    static struct ws c[4];
    cr_expect_eq(ws_open(&c[0], e.server.port, NULL, 0), 101);
    cr_expect_eq(ws_open(&c[1], e.server.port, NULL, 0), 101);
    cr_expect_eq(ws_open(&c[2], e.server.port, NULL, 0), 503, "a third from one address");
    cr_expect_eq(mg_counter_get(&e.seg, MG_CTR_LIVE_CLIENTS_OVER_SHARE), 1);
    close(c[2].fd);
    close(c[0].fd);
    close(c[1].fd);
}

Test(live, the_group_cap_refuses_past_it, .fini = stop_all)
{
    start((const char *[]){"MESHGATE_LIVE_PER_CLIENT=0", "MESHGATE_LIVE_CLIENTS=2", NULL});
    static struct ws c[3];
    cr_expect_eq(ws_open(&c[0], e.server.port, NULL, 0), 101);
    cr_expect_eq(ws_open(&c[1], e.server.port, NULL, 0), 101);
    cr_expect_eq(ws_open(&c[2], e.server.port, NULL, 0), 503);
    cr_expect_eq(mg_counter_get(&e.seg, MG_CTR_LIVE_CLIENTS_REFUSED), 1);
    for (int i = 0; i < 3; i++)
        close(c[i].fd);
}

/* A live client holds a connection of its worker: live clients never take more than three
 * quarters of the group's connections (2 workers x 4 here), so a page's request still finds a
 * worker (1,000 clients on 2 workers of 256 connections took them all, and every request
 * waited in the listen queue). */
Test(live, live_clients_leave_a_quarter_of_the_connections_to_requests, .fini = stop_all)
{
    start((const char *[]){"MESHGATE_MAX_CONNS_PER_WORKER=4", "MESHGATE_LIVE_PER_CLIENT=0", NULL});
    cr_expect_eq(atomic_load(&e.seg.live->clients_cap), 6, "MESHGATE_LIVE_CLIENTS=1024 capped");
    static struct ws c[7];
    for (int i = 0; i < 6; i++)
        cr_assert_eq(ws_open(&c[i], e.server.port, NULL, 0), 101, "client %d", i);
    cr_expect_eq(ws_open(&c[6], e.server.port, NULL, 0), 503, "a seventh of 8 connections");
    close(c[6].fd);
    struct mg_test_response r;
    cr_assert(mg_test_get(e.server.port, "/api/healthz", NULL, &r), "no answer beside 6 clients");
    cr_expect_eq(r.status, 200);
    mg_test_response_free(&r);
    for (int i = 0; i < 6; i++)
        close(c[i].fd);
}

Test(live, handshakes_are_refused_as_corescope_refuses_them, .fini = stop_all)
{
    start(NULL);
    static struct ws c;
    cr_expect_eq(ws_open(&c, e.server.port, "Origin: https://evil.example\r\n", 0), 403);
    close(c.fd);
    char same[128];
    snprintf(same, sizeof same, "Origin: http://127.0.0.1:%d\r\n", e.server.port);
    cr_expect_eq(ws_open(&c, e.server.port, same, 0), 101);
    close(c.fd);
    /* An API route is never upgraded, as in CoreScope, where routes come first. */
    int fd = mg_test_connect(e.server.port);
    const char req[] = "GET /api/healthz HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                       "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    cr_assert(mg_test_send(fd, req, sizeof req - 1));
    struct mg_test_response r;
    cr_assert(mg_test_read_response(fd, &r, false, CEILING_MS));
    cr_expect_eq(r.status, 200);
    mg_test_response_free(&r);
    close(fd);
}

Test(live, pings_are_answered_and_bad_frames_closed, .fini = stop_all)
{
    start(NULL);
    static struct ws c;
    cr_assert_eq(ws_open(&c, e.server.port, NULL, 0), 101);
    ws_send(&c, 0x89, "abc", 3);
    char *p = NULL;
    size_t len = 0;
    cr_assert_eq(ws_next(&c, &p, &len, CEILING_MS), MG_WS_PONG);
    cr_expect(len == 3 && memcmp(p, "abc", 3) == 0);
    free(p);
    ws_send(&c, 0x81, "ignored, as CoreScope ignores it", 32);
    static char big[600];
    memset(big, 'b', sizeof big);
    ws_send(&c, 0x81, big, sizeof big);
    cr_expect_eq(ws_close_code(&c, CEILING_MS), MG_WS_CLOSE_TOO_BIG);
    close(c.fd);
    /* Unmasked: 1002. */
    cr_assert_eq(ws_open(&c, e.server.port, NULL, 0), 101);
    const uint8_t unmasked[] = {0x81, 0x02, 'h', 'i'};
    cr_assert(mg_test_send(c.fd, (const char *)unmasked, sizeof unmasked));
    cr_expect_eq(ws_close_code(&c, CEILING_MS), MG_WS_CLOSE_PROTOCOL);
    close(c.fd);
    /* A client's close is echoed. */
    cr_assert_eq(ws_open(&c, e.server.port, NULL, 0), 101);
    const uint8_t bye[] = {0x03, 0xe8};
    ws_send(&c, 0x88, bye, 2);
    cr_expect_eq(ws_close_code(&c, CEILING_MS), MG_WS_CLOSE_NORMAL);
    close(c.fd);
    cr_expect_eq(mg_counter_get(&e.seg, MG_CTR_LIVE_CLOSED_BAD_FRAME), 2);
}

Test(live, a_silent_client_is_pinged_then_closed, .fini = stop_all)
{
    start((const char *[]){"MESHGATE_LIVE_PING_MS=200", NULL});
    static struct ws c;
    cr_assert_eq(ws_open(&c, e.server.port, NULL, 0), 101);
    cr_expect_eq(ws_next(&c, NULL, NULL, CEILING_MS), MG_WS_PING);
    cr_expect_eq(ws_close_code(&c, CEILING_MS), MG_WS_CLOSE_GOING_AWAY);
    cr_expect_eq(mg_counter_get(&e.seg, MG_CTR_LIVE_CLOSED_IDLE), 1);
    close(c.fd);
}

Test(live, a_drain_closes_clients_with_going_away, .fini = stop_all)
{
    start(NULL);
    static struct ws c[2];
    cr_assert_eq(ws_open(&c[0], e.server.port, NULL, 0), 101);
    cr_assert_eq(ws_open(&c[1], e.server.port, NULL, 0), 101);
    mg_segment_detach(&e.seg);
    e.attached = false;
    cr_assert_eq(kill(e.server.pid, SIGTERM), 0);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(ws_close_code(&c[i], CEILING_MS), MG_WS_CLOSE_GOING_AWAY, "client %d", i);
        close(c[i].fd);
    }
    cr_expect_eq(mg_test_server_stop(&e.server, CEILING_MS), 0);
    e.running = false;
}

#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"

/* On a copy of CoreScope's real end-to-end database: a row a writer appends (heard by the
 * database's first observer) reaches a client with that observer's id and name. */
Test(live, on_a_copy_of_the_fixture_a_new_row_reaches_a_client, .fini = stop_all)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0)
        cr_skip_test("%s not present", FIXTURE_MIGRATED_DB);
    mg_test_tmpdir(e.dir, sizeof e.dir);
    snprintf(e.db, sizeof e.db, "%s/fixture.db", e.dir);
    char cmd[1024], out[256];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", FIXTURE_MIGRATED_DB, e.db);
    cr_assert_eq(mg_test_shell(cmd, out, sizeof out), 0, "%s", out);
    start_server(NULL);
    cr_assert(mg_test_wait_until(watcher_ready, NULL, CEILING_MS, 20), "no watcher");
    static struct ws c;
    cr_assert_eq(ws_open(&c, e.server.port, NULL, 0), 101);
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(e.db, &db), SQLITE_OK);
    char *err = NULL;
    cr_assert_eq(sqlite3_exec(db,
                              "INSERT INTO transmissions (raw_hex, hash, first_seen, route_type,"
                              " payload_type, decoded_json) VALUES ('0011', 'livefixture1',"
                              " '2026-12-06T06:00:00.000Z', 1, 4, '{\"name\":\"x<y\"}');"
                              "INSERT INTO observations (transmission_id, observer_idx, snr, "
                              "rssi, path_json, timestamp) SELECT last_insert_rowid(), "
                              "(SELECT MIN(rowid) FROM observers), -3.5, -110, '[]', 1796536800",
                              NULL, NULL, &err),
                 SQLITE_OK, "%s", err ? err : "");
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT id, name FROM observers ORDER BY rowid LIMIT 1", -1,
                                    &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    char observer[128], name[128];
    snprintf(observer, sizeof observer, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(name, sizeof name, "%s", (const char *)sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    sqlite3_close(db);
    char *p = NULL;
    cr_assert_eq(ws_next(&c, &p, NULL, CEILING_MS), MG_WS_TEXT);
    json_t *m = json_loads(p, 0, NULL);
    cr_assert_not_null(m, "%s", p);
    json_t *d = get_obj(m, "data");
    cr_expect_str_eq(json_string_value(get_obj(d, "hash")), "livefixture1");
    cr_expect_str_eq(json_string_value(get_obj(d, "observer_id")), observer);
    cr_expect_str_eq(json_string_value(get_obj(d, "observer_name")), name);
    cr_expect_str_eq(
        json_string_value(get_obj(get_obj(get_obj(d, "decoded"), "header"), "payloadTypeName")),
        "ADVERT");
    /* Go escapes <, > and & in strings. */
    cr_expect(strstr(p, "x\\u003cy"), "%s", p);
    json_decref(m);
    free(p);
    close(c.fd);
}

/* Every key of the object at `ours` is in `theirs` and the other way round, but for those
 * listed in `except` (CoreScope's only). */
static void same_keys(json_t *ours, json_t *theirs, const char *where, const char *except)
{
    const char *k;
    json_t *v;
    json_object_foreach(theirs, k, v)
    {
        if (except && strcmp(k, except) == 0)
            continue;
        cr_expect_not_null(json_object_get(ours, k), "%s: CoreScope sends \"%s\", meshgate not",
                           where, k);
    }
    json_object_foreach(ours, k, v) cr_expect_not_null(
        json_object_get(theirs, k), "%s: meshgate sends \"%s\", CoreScope does not", where, k);
}

/* The shape of CoreScope's own message, recorded from its server (tests/corescope-live.json:
 * how, in its _comment): the same keys at every level, but resolved_path, which meshgate does
 * not compute. */
Test(live, messages_have_the_keys_of_corescopes_own, .fini = stop_all)
{
    json_error_t jerr;
    json_t *cs = json_load_file(MESHGATE_SOURCE_DIR "/tests/corescope-live.json", 0, &jerr);
    cr_assert_not_null(cs, "tests/corescope-live.json: %s", jerr.text);
    json_t *theirs = get_obj(cs, "message");
    start(NULL);
    cr_assert(mg_test_wait_until(watcher_ready, NULL, CEILING_MS, 20), "no watcher");
    static struct ws c;
    cr_assert_eq(ws_open(&c, e.server.port, NULL, 0), 101);
    write_rows(1, 3);
    char *p = NULL;
    cr_assert_eq(ws_next(&c, &p, NULL, CEILING_MS), MG_WS_TEXT);
    json_t *ours = json_loads(p, 0, &jerr);
    cr_assert_not_null(ours, "%s", p);
    same_keys(ours, theirs, "the message", NULL);
    json_t *od = get_obj(ours, "data"), *td = get_obj(theirs, "data");
    same_keys(od, td, "data", "resolved_path");
    same_keys(get_obj(od, "packet"), get_obj(td, "packet"), "data.packet", "resolved_path");
    same_keys(get_obj(od, "decoded"), get_obj(td, "decoded"), "data.decoded", "path");
    same_keys(get_obj(get_obj(od, "decoded"), "header"), get_obj(get_obj(td, "decoded"), "header"),
              "data.decoded.header", NULL);
    json_decref(ours);
    json_decref(cs);
    free(p);
    close(c.fd);
}
