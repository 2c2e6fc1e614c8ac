/* SPDX-License-Identifier: ISC */
/*
 * The per-client connection cap (MESHGATE_MAX_CONNS_PER_CLIENT): the table as a module, in
 * MAP_SHARED memory as workers share the segment; then the real server under a flood of
 * connections from one address, and a worker killed while it holds counted connections.
 */
#include "conn_limit.h"
#include "harness.h"
#include "netaddr.h"
#include "scoreboard.h"
#include "segment.h"
#include "stats.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(conn_limit, .timeout = 120);

static void *shared(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    return p;
}

static struct mg_conn_view new_table(uint32_t sets, uint32_t slots, uint32_t holds, uint32_t cap)
{
    struct mg_conn_view v = {shared(sizeof(struct mg_conn_table)),
                             shared((size_t)sets * sizeof(struct mg_conn_set)),
                             shared((size_t)slots * holds * sizeof(struct mg_conn_hold) + 1)};
    mg_conn_limit_init(&v, sets, slots, holds, cap);
    return v;
}

/* Client n as the server keys it: ::ffff:10.0.n.n. */
static const uint8_t *client(unsigned n)
{
    static uint8_t keys[16][MG_CONN_KEY_BYTES];
    uint8_t *k = keys[n % 16];
    memset(k, 0, MG_CONN_KEY_BYTES);
    k[10] = k[11] = 0xff;
    k[12] = 10;
    k[14] = (uint8_t)(n >> 8);
    k[15] = (uint8_t)n;
    return k;
}

Test(conn_limit, a_client_at_its_cap_is_refused_and_the_refusal_writes_nothing)
{
    struct mg_conn_view v = new_table(4, 2, 8, 3);
    for (uint32_t h = 0; h < 3; h++)
        cr_assert_eq(mg_conn_limit_open(&v, getpid(), h % 2, h, client(1)), MG_CONN_COUNTED);
    cr_assert_eq(mg_conn_limit_count(&v, client(1)), 3);
    struct mg_conn_set before = v.sets[0];
    struct mg_conn_hold hold_before = v.holds[5];
    cr_assert_eq(mg_conn_limit_open(&v, getpid(), 1, 5, client(1)), MG_CONN_OVER_CAP);
    cr_expect(memcmp(&before, &v.sets[0], sizeof before) == 0, "a refusal changed a set");
    cr_expect(memcmp(&hold_before, &v.holds[5], sizeof hold_before) == 0);
    cr_expect_eq(mg_conn_limit_count(&v, client(1)), 3);
    cr_expect_eq(v.table->refused, 1);
    cr_expect_eq(v.table->counted, 3);
    /* Another client is not touched by the first one's cap. */
    cr_expect_eq(mg_conn_limit_open(&v, getpid(), 1, 5, client(2)), MG_CONN_COUNTED);
}

Test(conn_limit, closing_gives_the_connection_back_and_frees_the_entry)
{
    struct mg_conn_view v = new_table(4, 1, 4, 2);
    cr_assert_eq(mg_conn_limit_open(&v, getpid(), 0, 0, client(1)), MG_CONN_COUNTED);
    cr_assert_eq(mg_conn_limit_open(&v, getpid(), 0, 1, client(1)), MG_CONN_COUNTED);
    cr_assert_eq(mg_conn_limit_open(&v, getpid(), 0, 2, client(1)), MG_CONN_OVER_CAP);
    mg_conn_limit_close(&v, getpid(), 0, 0);
    cr_expect_eq(mg_conn_limit_count(&v, client(1)), 1);
    cr_expect_eq(mg_conn_limit_open(&v, getpid(), 0, 0, client(1)), MG_CONN_COUNTED);
    mg_conn_limit_close(&v, getpid(), 0, 0);
    mg_conn_limit_close(&v, getpid(), 0, 1);
    mg_conn_limit_close(&v, getpid(), 0, 1); /* twice: nothing more goes back */
    cr_expect_eq(mg_conn_limit_count(&v, client(1)), 0);
    cr_expect_eq(mg_conn_limit_clients(&v), 0, "the entry is free again");
}

Test(conn_limit, a_full_set_lets_connections_in_uncounted_and_never_refuses_them)
{
    /* One set of 8 ways: the ninth client finds no entry. */
    struct mg_conn_view v = new_table(1, 1, 16, 1);
    for (unsigned c = 0; c < MG_CONN_WAYS; c++)
        cr_assert_eq(mg_conn_limit_open(&v, getpid(), 0, c, client(c)), MG_CONN_COUNTED);
    cr_expect_eq(mg_conn_limit_open(&v, getpid(), 0, 8, client(9)), MG_CONN_UNTRACKED);
    cr_expect_eq(v.holds[8].set_plus_one, 0, "an uncounted connection holds no record");
    cr_expect_eq(v.table->untracked, 1);
}

Test(conn_limit, no_cap_counts_nothing)
{
    struct mg_conn_view v = new_table(1, 1, 4, 0);
    for (uint32_t h = 0; h < 4; h++)
        cr_expect_eq(mg_conn_limit_open(&v, getpid(), 0, h, client(1)), MG_CONN_UNTRACKED);
    cr_expect_eq(mg_conn_limit_clients(&v), 0);
}

Test(conn_limit, the_master_gives_back_a_dead_workers_connections)
{
    struct mg_conn_view v = new_table(8, 2, 8, 10);
    /* Slot 0 holds 3 of client 1 and 1 of client 2; slot 1 holds 2 of client 1. */
    for (uint32_t h = 0; h < 3; h++)
        mg_conn_limit_open(&v, 111, 0, h, client(1));
    mg_conn_limit_open(&v, 111, 0, 3, client(2));
    mg_conn_limit_open(&v, 222, 1, 0, client(1));
    mg_conn_limit_open(&v, 222, 1, 1, client(1));
    cr_assert_eq(mg_conn_limit_count(&v, client(1)), 5);
    cr_expect_eq(mg_conn_limit_reclaim(&v, 111, 0), 4);
    cr_expect_eq(mg_conn_limit_count(&v, client(1)), 2);
    cr_expect_eq(mg_conn_limit_count(&v, client(2)), 0);
    for (uint32_t h = 0; h < 8; h++)
        cr_expect_eq(v.holds[h].set_plus_one, 0, "slot 0's record %u is still held", h);
    cr_expect_eq(v.table->reclaimed, 4);
    /* The survivor's connections close as usual. */
    mg_conn_limit_close(&v, 222, 1, 0);
    mg_conn_limit_close(&v, 222, 1, 1);
    cr_expect_eq(mg_conn_limit_clients(&v), 0);
}

/* Tunnels of an address are counted on its connections' hold records (the share of
 * MESHGATE_UPSTREAM_WEBSOCKETS_PER_CLIENT): past the share a tunnel is refused, a closed
 * tunnel or connection gives its place back, and a dead worker's tunnels go with its holds,
 * by decrement or by a set's recount. */
Test(conn_limit, tunnels_have_a_share_per_address_that_a_dead_worker_gives_back)
{
    struct mg_conn_view v = new_table(1, 2, 4, 10);
    for (uint32_t h = 0; h < 3; h++)
        mg_conn_limit_open(&v, 111, 0, h, client(1));
    mg_conn_limit_open(&v, 222, 1, 0, client(1));
    mg_conn_limit_open(&v, 222, 1, 1, client(1));
    cr_expect(mg_conn_limit_tunnel_open(&v, 111, 0, 0, 2));
    cr_expect(mg_conn_limit_tunnel_open(&v, 222, 1, 0, 2));
    cr_expect_not(mg_conn_limit_tunnel_open(&v, 111, 0, 1, 2), "past the share");
    cr_expect_eq(v.holds[1].tunnel, 0, "a refusal marks nothing");
    /* A closed tunnel gives its place back; so does a closed connection still marked. */
    mg_conn_limit_tunnel_close(&v, 222, 1, 0);
    cr_expect(mg_conn_limit_tunnel_open(&v, 111, 0, 1, 2));
    mg_conn_limit_close(&v, 111, 0, 1);
    cr_expect_eq(v.sets[0].entry[0].tunnels, 1);
    cr_expect(mg_conn_limit_tunnel_open(&v, 222, 1, 1, 2));
    /* Worker 111 (slot 0, one tunnel) dies: its tunnel goes with its holds. */
    mg_conn_limit_reclaim(&v, 111, 0);
    cr_expect_eq(v.sets[0].entry[0].tunnels, 1, "only the survivor's tunnel counts");
    /* The same, dying inside the set's lock: the recount counts tunnels too. */
    mg_conn_limit_open(&v, 333, 0, 0, client(1));
    cr_expect(mg_conn_limit_tunnel_open(&v, 333, 0, 0, 2));
    v.sets[0].entry[0].tunnels++; /* a write the record never got */
    atomic_store(&v.sets[0].lock.owner_pid, 333);
    mg_conn_limit_reclaim(&v, 333, 0);
    cr_expect_eq(v.sets[0].entry[0].tunnels, 1);
    cr_expect_eq(mg_conn_limit_count(&v, client(1)), 2);
}

Test(conn_limit, a_worker_killed_inside_a_set_has_that_set_recounted)
{
    struct mg_conn_view v = new_table(1, 2, 4, 10);
    mg_conn_limit_open(&v, 222, 1, 0, client(1));
    mg_conn_limit_open(&v, 111, 0, 0, client(1));
    /* Worker 111 dies between its two writes of a new connection: the entry counted it, its
     * record was not written; and it holds the set's lock. */
    v.sets[0].entry[0].count++;
    atomic_store(&v.sets[0].lock.owner_pid, 111);
    cr_assert_eq(mg_conn_limit_count(&v, client(1)), 3);
    mg_conn_limit_reclaim(&v, 111, 0);
    cr_expect_eq(atomic_load(&v.sets[0].lock.owner_pid), 0, "the lock is free");
    cr_expect_eq(mg_conn_limit_count(&v, client(1)), 1, "only the survivor's connection counts");
}

Test(conn_limit, workers_in_processes_share_one_allowance)
{
    struct mg_conn_view v = new_table(16, 4, 64, 100);
    pid_t kids[4];
    for (int k = 0; k < 4; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            int admitted = 0;
            for (uint32_t h = 0; h < 64; h++)
                admitted +=
                    mg_conn_limit_open(&v, getpid(), (uint32_t)k, h, client(7)) == MG_CONN_COUNTED;
            _exit(admitted > 0 ? 0 : 1);
        }
    }
    for (int k = 0; k < 4; k++)
        waitpid(kids[k], NULL, 0);
    cr_expect_eq(mg_conn_limit_count(&v, client(7)), 100, "256 asked, the cap is 100");
    cr_expect_eq(v.table->counted, 100);
    cr_expect_eq(v.table->refused, 156);
}

/* ---- the real server ------------------------------------------------------------------- */

static void attach(const struct mg_test_server *s, struct mg_segment *seg)
{
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
}

static uint32_t loopback_count(const struct mg_segment *seg)
{
    uint8_t addr[MG_ADDR_BYTES], key[MG_ADDR_BYTES];
    mg_addr_parse("127.0.0.1", 9, addr);
    mg_client_key(addr, key);
    return mg_conn_limit_count(&seg->conns, key);
}

/* A TCP socket from `from` (a loopback address) to 127.0.0.1:port, not blocking. */
static int connect_from(const char *from, int port, bool blocking)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (blocking ? 0 : SOCK_NONBLOCK), 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in src = {.sin_family = AF_INET};
    inet_pton(AF_INET, from, &src.sin_addr);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0 ||
        (connect(fd, (struct sockaddr *)&dst, sizeof dst) < 0 && errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One GET /api/healthz from 127.0.0.2 on a new connection: its time in ms, -1 on failure. */
static int64_t healthz_ms(int port)
{
    int64_t start = mg_test_now_ms();
    int fd = connect_from("127.0.0.2", port, true);
    if (fd < 0)
        return -1;
    const char *req = "GET /api/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    struct mg_test_response r;
    bool ok = mg_test_send(fd, req, strlen(req)) && mg_test_read_response(fd, &r, false, 20000);
    close(fd);
    if (!ok)
        return -1;
    int status = r.status;
    mg_test_response_free(&r);
    return status == 200 ? mg_test_now_ms() - start : -1;
}

static int64_t p95_of(int64_t *ms, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && ms[j - 1] > ms[j]; j--) {
            int64_t t = ms[j];
            ms[j] = ms[j - 1];
            ms[j - 1] = t;
        }
    return ms[(n * 95 + 99) / 100 - 1];
}

static int64_t healthz_p95(int port, int n)
{
    int64_t ms[64];
    for (int i = 0; i < n; i++) {
        ms[i] = healthz_ms(port);
        cr_assert_geq(ms[i], 0, "healthz from 127.0.0.2 failed");
    }
    return p95_of(ms, n);
}

static uint64_t counter(const struct mg_segment *seg, enum mg_counter c)
{
    return mg_counter_get(seg, c);
}

/* True once *fd's peer has closed it (EOF or reset), false when it is still open. */
static bool closed_by_peer(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

#define FLOOD 2000
#define CAP 64

Test(conn_limit, two_thousand_connections_from_one_address_leave_others_answered_promptly)
{
    /* The flood's sockets and the server's: bounded, all closed at the end. */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rlim_t want = FLOOD + 512;
    cr_assert(rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want,
              "RLIMIT_NOFILE hard limit %llu is below %llu", (unsigned long long)rl.rlim_max,
              (unsigned long long)want);
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = want;
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    /* 2 workers x 256 connections: without a cap the flood takes every place. A header
     * timeout far longer than the test tells "closed at once" from "cut by the timeout". */
    const char *env[] = {"MESHGATE_WORKERS=2", "MESHGATE_MAX_CONNS_PER_WORKER=256",
                         "MESHGATE_MAX_CONNS_PER_CLIENT=64", "MESHGATE_HEADER_TIMEOUT_MS=60000",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    int64_t quiet_p95 = healthz_p95(s.port, 20);

    /* The flood: 2,000 silent connections from 127.0.0.1, in batches so the listen queue
     * never overflows (a dropped SYN would cost the probes a retransmission, not the cap). */
    static int fd[FLOOD];
    int64_t flood_start = mg_test_now_ms();
    for (int i = 0; i < FLOOD; i += 100) {
        for (int j = i; j < i + 100; j++) {
            fd[j] = connect_from("127.0.0.1", s.port, false);
            cr_assert_geq(fd[j], 0, "connection %d: %s", j, strerror(errno));
        }
        for (int j = i; j < i + 100; j++) {
            struct pollfd p = {.fd = fd[j], .events = POLLOUT};
            cr_assert_eq(poll(&p, 1, 10000), 1, "connection %d did not complete", j);
        }
    }
    /* Past the cap, each is closed at once, before a byte is read. */
    int64_t deadline = mg_test_now_ms() + 15000;
    while (counter(&seg, MG_CTR_CONNECTIONS_OVER_CLIENT_CAP) < FLOOD - CAP &&
           mg_test_now_ms() < deadline)
        mg_test_sleep_ms(10);
    int64_t all_closed_ms = mg_test_now_ms() - flood_start;
    cr_assert_eq(counter(&seg, MG_CTR_CONNECTIONS_OVER_CLIENT_CAP), FLOOD - CAP);
    cr_expect_lt(all_closed_ms, 15000, "the capped connections waited for a timeout");
    cr_expect_eq(loopback_count(&seg), CAP, "the table counts the address's open connections");
    int closed = 0;
    deadline = mg_test_now_ms() + 5000;
    do {
        closed = 0;
        for (int i = 0; i < FLOOD; i++)
            closed += closed_by_peer(fd[i]);
    } while (closed < FLOOD - CAP && mg_test_now_ms() < deadline && (mg_test_sleep_ms(10), 1));
    cr_expect_eq(closed, FLOOD - CAP, "the client saw %d of its connections closed", closed);

    /* Another client is answered as before. */
    int64_t flood_p95 = healthz_p95(s.port, 20);
    int64_t bound = quiet_p95 * 20 > 1000 ? quiet_p95 * 20 : 1000;
    cr_expect_leq(flood_p95, bound, "healthz p95 %lld ms under the flood, %lld ms without",
                  (long long)flood_p95, (long long)quiet_p95);

    /* Closed by the client: the counts go back. */
    for (int i = 0; i < FLOOD; i++)
        close(fd[i]);
    deadline = mg_test_now_ms() + 10000;
    while (loopback_count(&seg) > 0 && mg_test_now_ms() < deadline)
        mg_test_sleep_ms(10);
    cr_expect_eq(loopback_count(&seg), 0);

    /* The counter shows everywhere counters show (the client may connect again). */
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/metrics", NULL, &r));
    char line[128];
    snprintf(line, sizeof line, "meshgate_connections_over_client_cap_total %d", FLOOD - CAP);
    cr_expect(strstr(r.body, line), "not in /metrics as \"%s\"", line);
    mg_test_response_free(&r);
    cr_assert(mg_test_get(s.port, "/api/perf", NULL, &r));
    cr_expect(strstr(r.body, "\"connections_over_client_cap\""), "not in /api/perf");
    mg_test_response_free(&r);

    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(conn_limit, a_worker_killed_holding_counted_connections_gives_them_back)
{
    const char *env[] = {"MESHGATE_WORKERS=2", "MESHGATE_MAX_CONNS_PER_CLIENT=6",
                         "MESHGATE_HEADER_TIMEOUT_MS=60000", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    int fd[7];
    for (int i = 0; i < 6; i++)
        cr_assert_geq(fd[i] = connect_from("127.0.0.1", s.port, true), 0);
    int64_t deadline = mg_test_now_ms() + 5000;
    while (loopback_count(&seg) < 6 && mg_test_now_ms() < deadline)
        mg_test_sleep_ms(5);
    cr_assert_eq(loopback_count(&seg), 6);
    /* The seventh is closed at once. */
    cr_assert_geq(fd[6] = connect_from("127.0.0.1", s.port, true), 0);
    char b;
    cr_expect_eq(recv(fd[6], &b, 1, 0), 0, "the connection past the cap was not closed");
    close(fd[6]);

    /* Kill -9 the worker that holds the most of them. */
    unsigned victim =
        atomic_load(&seg.slots[0].connections) >= atomic_load(&seg.slots[1].connections) ? 0 : 1;
    unsigned held = atomic_load(&seg.slots[victim].connections);
    int pid = atomic_load(&seg.slots[victim].pid);
    cr_assert_gt(held, 0);
    cr_assert_gt(pid, 0);
    cr_assert_eq(kill(pid, SIGKILL), 0);
    deadline = mg_test_now_ms() + 5000;
    while (loopback_count(&seg) > 6 - held && mg_test_now_ms() < deadline)
        mg_test_sleep_ms(5);
    cr_expect_eq(loopback_count(&seg), 6 - held, "the dead worker's %u connections still count",
                 held);
    cr_expect_eq(atomic_load(&seg.conns.table->reclaimed), held);

    /* The client may open as many again as the dead worker held. */
    int more[6];
    for (unsigned i = 0; i < held; i++)
        cr_assert_geq(more[i] = connect_from("127.0.0.1", s.port, true), 0);
    deadline = mg_test_now_ms() + 5000;
    while (loopback_count(&seg) < 6 && mg_test_now_ms() < deadline)
        mg_test_sleep_ms(5);
    cr_expect_eq(loopback_count(&seg), 6);
    for (unsigned i = 0; i < held; i++)
        cr_expect_not(closed_by_peer(more[i]), "a connection within the cap was closed");
    for (unsigned i = 0; i < held; i++)
        close(more[i]);
    for (int i = 0; i < 6; i++)
        close(fd[i]);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(conn_limit, trusted_proxies_are_not_capped)
{
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_MAX_CONNS_PER_CLIENT=2",
                         "MESHGATE_TRUSTED_PROXIES=127.0.0.1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    int fd[5];
    for (int i = 0; i < 5; i++)
        cr_assert_geq(fd[i] = connect_from("127.0.0.1", s.port, true), 0);
    for (int i = 0; i < 5; i++) {
        const char *req = "GET /api/healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        struct mg_test_response r;
        cr_assert(mg_test_send(fd[i], req, strlen(req)));
        cr_assert(mg_test_read_response(fd[i], &r, false, 5000), "connection %d was closed", i);
        cr_expect_eq(r.status, 200);
        mg_test_response_free(&r);
    }
    for (int i = 0; i < 5; i++)
        close(fd[i]);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}
