/* SPDX-License-Identifier: ISC */
/*
 * The shed tarpit (MESHGATE_SHED_TARPIT, workers/core/worker.c conn_tarpit; issue 23, the
 * slowloris from 20 addresses), against the real server and real sockets from several
 * loopback addresses:
 *   - a connection shed for a new one after it began a head is held open and unread, not
 *     closed, so a slowloris that connects again whenever the server closes one has nothing
 *     to do: its connections a second fall from thousands to none;
 *   - the tarpit's bound (past it, shed connections close as before), its per-address share
 *     (a held connection goes on counting against MESHGATE_MAX_CONNS_PER_CLIENT) and its
 *     time bound (the header deadline the connection had);
 *   - a client that closes a held connection frees it at once;
 *   - a connection that has sent nothing, or one not counted (a trusted proxy's), is closed
 *     when shed, as before.
 */
#include "conn_limit.h"
#include "harness.h"
#include "netaddr.h"
#include "segment.h"
#include "stats.h"
#include "upstream_proc.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(tarpit, .timeout = 180);

#define CEILING_MS 60000
#define ADDRESSES 20
#define PER_ADDRESS 4
#define SLOTS 40 /* MESHGATE_MAX_CONNS_PER_WORKER: half of what the slowloris wants */
#define WANTED (ADDRESSES * PER_ADDRESS)

static const char half_head[] = "GET /api/healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ";

static void attach(struct mg_test_server *s, struct mg_segment *seg)
{
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
}

static void address_of(int a, char *out, size_t cap)
{
    snprintf(out, cap, "127.0.0.%d", 10 + a);
}

/* A connection from `from` that sends the start of a head and never ends it. */
static int slow_from(const char *from, int port)
{
    int fd = mg_test_connect_from(from, port);
    cr_assert_geq(fd, 0, "connect from %s: %s", from, strerror(errno));
    cr_assert(mg_test_send(fd, half_head, sizeof half_head - 1));
    return fd;
}

/* True once fd's peer has closed it (EOF or reset); false while it is open. */
static bool peer_closed(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static int closed_of(const int *fds, int n)
{
    int closed = 0;
    for (int i = 0; i < n; i++)
        closed += peer_closed(fds[i]);
    return closed;
}

/* Open connections the group counts against the address (its cap). */
static uint32_t counted(const struct mg_segment *seg, const char *from)
{
    uint8_t addr[MG_ADDR_BYTES], key[MG_ADDR_BYTES];
    cr_assert(mg_addr_parse(from, strlen(from), addr));
    mg_client_key(addr, key);
    return mg_conn_limit_count(&seg->conns, key);
}

struct counter_at_least {
    const struct mg_segment *seg;
    enum mg_counter counter;
    uint64_t value;
};

static bool counter_reached(void *arg)
{
    const struct counter_at_least *c = arg;
    return mg_counter_get(c->seg, c->counter) >= c->value;
}

static void wait_counter(const struct mg_segment *seg, enum mg_counter counter, uint64_t value)
{
    struct counter_at_least c = {seg, counter, value};
    cr_assert(mg_test_wait_until(counter_reached, &c, CEILING_MS, 10),
              "counter %d stayed at %llu, below %llu", (int)counter,
              (unsigned long long)mg_counter_get(seg, counter), (unsigned long long)value);
}

struct closed_at_least {
    const int *fds;
    int n, want;
};

static bool enough_closed(void *arg)
{
    const struct closed_at_least *c = arg;
    return closed_of(c->fds, c->n) >= c->want;
}

/* The slowloris of issue 23 in small: ADDRESSES x PER_ADDRESS connections (each address at
 * its cap), twice what the one worker holds, each sending half a head; every one accepted,
 * the second half shedding the first. */
static void slowloris(struct mg_test_server *s, struct mg_segment *seg, int *fds)
{
    for (int a = 0; a < ADDRESSES; a++) {
        char from[32];
        address_of(a, from, sizeof from);
        for (int k = 0; k < PER_ADDRESS; k++)
            fds[a * PER_ADDRESS + k] = slow_from(from, s->port);
    }
    wait_counter(seg, MG_CTR_CONNECTIONS_ACCEPTED, WANTED);
    wait_counter(seg, MG_CTR_CONNECTIONS_SHED, WANTED - SLOTS);
}

/* One worker of `slots` connections, a cap of 4 an address, and one more setting. */
static void start(struct mg_test_server *s, struct mg_segment *seg, const char *slots,
                  const char *header_timeout, const char *more)
{
    const char *env[] = {"MESHGATE_WORKERS=1", slots, "MESHGATE_MAX_CONNS_PER_CLIENT=4",
                         header_timeout,       more,  NULL};
    cr_assert(mg_test_server_start(s, NULL, env));
    attach(s, seg);
}

/* In a worker of 4: 127.0.0.10's four half heads, then 127.0.0.11's, which shed (and hold)
 * the first four. */
static void hold_four(struct mg_test_server *s, struct mg_segment *seg, int *held, int *others)
{
    for (int k = 0; k < 4; k++)
        held[k] = slow_from("127.0.0.10", s->port);
    wait_counter(seg, MG_CTR_CONNECTIONS_ACCEPTED, 4);
    for (int k = 0; k < 4; k++)
        others[k] = slow_from("127.0.0.11", s->port);
    wait_counter(seg, MG_CTR_CONNECTIONS_TARPITTED, 4);
}

/* Closes the client's side of fds, then stops the server. */
static void finish(struct mg_test_server *s, struct mg_segment *seg, const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
    mg_segment_detach(seg);
    cr_expect_eq(mg_test_server_stop(s, CEILING_MS), 0);
}

/* GET /api/healthz from `from` on a new connection: its status, -1 when none came. */
static int healthz_from(const char *from, int port)
{
    int fd = mg_test_connect_from(from, port);
    cr_assert_geq(fd, 0, "connect from %s", from);
    const char *req = "GET /api/healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    cr_assert(mg_test_send(fd, req, strlen(req)));
    struct mg_test_response r;
    int status = -1;
    if (mg_test_read_response(fd, &r, false, CEILING_MS)) {
        status = r.status;
        mg_test_response_free(&r);
    }
    close(fd);
    return status;
}

/*
 * The shed connections stay open and unread, and still count against their addresses; a
 * client that connects again as soon as the server closes one (as tools/bench-attack.py
 * does) finds none closed, so it makes no new connection: before, each one it made shed and
 * closed another, and it went round as fast as it could connect.
 */
Test(tarpit, a_shed_slowloris_connection_is_held_unread_so_the_attacker_does_not_connect_again)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg, "MESHGATE_MAX_CONNS_PER_WORKER=40", "MESHGATE_HEADER_TIMEOUT_MS=60000",
          "MESHGATE_SHED_TARPIT=1024");
    int fds[WANTED];
    slowloris(&s, &seg, fds);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_CONNECTIONS_TARPITTED), WANTED - SLOTS);
    uint32_t all = 0;
    for (int a = 0; a < ADDRESSES; a++) {
        char from[32];
        address_of(a, from, sizeof from);
        all += counted(&seg, from);
    }
    cr_expect_eq(all, WANTED, "the held connections no longer count against their addresses: %u",
                 all);
    cr_expect_eq(closed_of(fds, WANTED), 0, "shed connections were closed");

    /* The attacker's loop for a while: every connection the server closes is opened again
     * from its address with half a head. The window bounds the run, not an event: with
     * nothing closed there is nothing to wait for. */
    uint64_t accepted = mg_counter_get(&seg, MG_CTR_CONNECTIONS_ACCEPTED);
    int reopened = 0;
    for (int64_t end = mg_test_now_ms() + 2000; mg_test_now_ms() < end;) {
        struct pollfd p[WANTED];
        for (int i = 0; i < WANTED; i++)
            p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        if (poll(p, WANTED, 50) <= 0)
            continue;
        for (int i = 0; i < WANTED && reopened < 100000; i++)
            if (p[i].revents && peer_closed(fds[i])) {
                char from[32];
                address_of(i / PER_ADDRESS, from, sizeof from);
                close(fds[i]);
                fds[i] = slow_from(from, s.port);
                reopened++;
            }
    }
    uint64_t more = mg_counter_get(&seg, MG_CTR_CONNECTIONS_ACCEPTED) - accepted;
    cr_log_info("in 2 s: %d connections closed and opened again, %llu accepted", reopened,
                (unsigned long long)more);
    cr_expect_lt(reopened, 8, "%d shed connections closed (and opened again) in 2 s", reopened);
    cr_expect_lt(more, 8, "%llu connections accepted in 2 s", (unsigned long long)more);

    /* Another client is served meanwhile: it sheds one more into the tarpit. */
    cr_expect_eq(healthz_from("127.0.0.2", s.port), 200, "healthz was not answered");

    finish(&s, &seg, fds, WANTED);
}

/*
 * Past MESHGATE_SHED_TARPIT a shed connection is closed as before; a held one keeps its
 * place in its address's cap (a fifth connection from it is refused), and once its client
 * closes it the place is free at once, not at its deadline.
 */
Test(tarpit, the_tarpit_holds_its_bound_and_each_held_connection_counts_against_its_address)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg, "MESHGATE_MAX_CONNS_PER_WORKER=40", "MESHGATE_HEADER_TIMEOUT_MS=60000",
          "MESHGATE_SHED_TARPIT=10");
    int fds[WANTED];
    slowloris(&s, &seg, fds);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_CONNECTIONS_TARPITTED), 10);
    struct closed_at_least thirty = {fds, WANTED, WANTED - SLOTS - 10};
    cr_expect(mg_test_wait_until(enough_closed, &thirty, CEILING_MS, 10));
    cr_expect_eq(closed_of(fds, WANTED), WANTED - SLOTS - 10, "past the bound: closed");

    /* The oldest were shed first: 127.0.0.10's four connections are all held. */
    for (int k = 0; k < PER_ADDRESS; k++)
        cr_expect_not(peer_closed(fds[k]), "127.0.0.10's connection %d was closed", k);
    cr_expect_eq(counted(&seg, "127.0.0.10"), PER_ADDRESS);
    uint64_t refused = mg_counter_get(&seg, MG_CTR_CONNECTIONS_OVER_CLIENT_CAP);
    int fifth = mg_test_connect_from("127.0.0.10", s.port);
    cr_assert_geq(fifth, 0);
    char b;
    cr_expect_eq(recv(fifth, &b, 1, 0), 0, "a fifth connection of an address at its cap stayed");
    close(fifth);
    wait_counter(&seg, MG_CTR_CONNECTIONS_OVER_CLIENT_CAP, refused + 1);

    /* Its client lets them go: the server frees them without waiting for their deadline. */
    for (int k = 0; k < PER_ADDRESS; k++)
        close(fds[k]);
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (counted(&seg, "127.0.0.10") > 0 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(10);
    cr_expect_eq(counted(&seg, "127.0.0.10"), 0, "closed by the client, still held");
    cr_expect_eq(healthz_from("127.0.0.10", s.port), 200, "127.0.0.10 not served");

    finish(&s, &seg, fds + PER_ADDRESS, WANTED - PER_ADDRESS);
}

/* A held connection is closed at the header deadline it had when it was shed: no later
 * (every client-held thing has a time bound) and, being unread, no sooner than that. */
Test(tarpit, a_held_connection_is_closed_at_the_header_deadline_it_already_had)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg, "MESHGATE_MAX_CONNS_PER_WORKER=4", "MESHGATE_HEADER_TIMEOUT_MS=3000",
          "MESHGATE_SHED_TARPIT=1024");
    int64_t opened = mg_test_now_ms();
    int held[4], others[4];
    hold_four(&s, &seg, held, others);
    /* Bytes sent to a held connection are never read, nor do they end its head. */
    for (int k = 0; k < 4; k++)
        cr_assert(mg_test_send(held[k], "\r\n\r\n", 4));
    struct closed_at_least all = {held, 4, 4};
    cr_assert(mg_test_wait_until(enough_closed, &all, CEILING_MS, 10),
              "held connections outlived their header deadline");
    int64_t lived = mg_test_now_ms() - opened;
    cr_expect_geq(lived, 2900, "held connections closed after %lld ms, before the 3 s deadline",
                  (long long)lived);
    char b;
    for (int k = 0; k < 4; k++)
        cr_expect_leq(recv(held[k], &b, 1, MSG_DONTWAIT), 0, "a held connection was answered");
    for (int k = 0; k < 4; k++)
        close(others[k]);
    finish(&s, &seg, held, 4);
}

/* A shed connection that has sent nothing (a browser's preconnection: it may yet be used and
 * should learn at once that it is gone) and one the cap does not count (a trusted proxy's,
 * which many clients share) are closed when shed, as before: neither is held. */
Test(tarpit, a_shed_connection_that_sent_nothing_or_is_not_counted_is_closed_as_before)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg, "MESHGATE_MAX_CONNS_PER_WORKER=4", "MESHGATE_HEADER_TIMEOUT_MS=60000",
          "MESHGATE_TRUSTED_PROXIES=127.0.0.5");
    int silent[4], proxied[4], slow[4];
    for (int k = 0; k < 4; k++)
        cr_assert_geq(silent[k] = mg_test_connect_from("127.0.0.10", s.port), 0);
    wait_counter(&seg, MG_CTR_CONNECTIONS_ACCEPTED, 4);
    for (int k = 0; k < 4; k++)
        proxied[k] = slow_from("127.0.0.5", s.port);
    wait_counter(&seg, MG_CTR_CONNECTIONS_SHED, 4);
    struct closed_at_least silent_gone = {silent, 4, 4};
    cr_expect(mg_test_wait_until(enough_closed, &silent_gone, CEILING_MS, 10),
              "the silent connections were held, not closed");
    for (int k = 0; k < 4; k++)
        slow[k] = slow_from("127.0.0.11", s.port);
    wait_counter(&seg, MG_CTR_CONNECTIONS_SHED, 8);
    struct closed_at_least proxied_gone = {proxied, 4, 4};
    cr_expect(mg_test_wait_until(enough_closed, &proxied_gone, CEILING_MS, 10),
              "the trusted proxy's connections were held, not closed");
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_CONNECTIONS_TARPITTED), 0);
    for (int k = 0; k < 4; k++) {
        close(silent[k]);
        close(proxied[k]);
    }
    finish(&s, &seg, slow, 4);
}

/* A reload drains the old workers: their held connections are closed at once, so their
 * addresses' places are free for the new workers, not kept until the drain's end (here the
 * other connections, still sending their heads, keep the old worker for minutes). */
Test(tarpit, a_drain_closes_the_held_connections_at_once)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg, "MESHGATE_MAX_CONNS_PER_WORKER=4", "MESHGATE_HEADER_TIMEOUT_MS=120000",
          "MESHGATE_DRAIN_TIMEOUT_MS=120000");
    int held[4], others[4];
    hold_four(&s, &seg, held, others);
    cr_assert_eq(kill(s.pid, SIGHUP), 0);
    struct closed_at_least all = {held, 4, 4};
    cr_expect(mg_test_wait_until(enough_closed, &all, CEILING_MS, 10),
              "the held connections outlived the drain's start");
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (counted(&seg, "127.0.0.10") > 0 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(10);
    cr_expect_eq(counted(&seg, "127.0.0.10"), 0, "a drained worker kept its held places");
    cr_expect_eq(closed_of(others, 4), 0, "a connection sending its head was cut by the drain");
    for (int k = 0; k < 4; k++)
        close(held[k]);
    finish(&s, &seg, others, 4);
}
