/* SPDX-License-Identifier: ISC */
/*
 * The cold-scan gate (a FIFO gate) and the shared result cache as modules, with real
 * processes sharing them through MAP_SHARED memory, as workers share the segment.
 */
#include "clock.h"
#include "buf.h"
#include "gate_fifo.h"
#include "result_body.h"
#include "result_cache.h"
#include "wake.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TestSuite(gate_fifo, .timeout = 30);
TestSuite(result_cache, .timeout = 30);

static void *shared(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    memset(p, 0, n);
    return p;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

struct board {
    _Atomic int running;
    _Atomic int most;
    _Atomic int order_next;
    int order[16];
    _Atomic int go;
};

static void note_running(struct board *b, int delta)
{
    int now = atomic_fetch_add(&b->running, delta) + delta;
    int most = atomic_load(&b->most);
    while (now > most && !atomic_compare_exchange_weak(&b->most, &most, now))
        ;
}

Test(gate_fifo, many_processes_never_exceed_the_cap)
{
    struct mg_fifo_gate *g = shared(sizeof *g);
    struct board *b = shared(sizeof *b);
    mg_fifo_gate_init(g, 2, 16, 10 * MG_NS_PER_SEC);
    pid_t kids[10];
    for (int k = 0; k < 10; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            alarm(20);
            for (int round = 0; round < 5; round++) {
                uint64_t token;
                if (mg_fifo_gate_acquire(g, getpid(), (unsigned)k, "key", NULL, NULL, &token,
                                         NULL) != MG_FIFO_ADMITTED)
                    _exit(1);
                note_running(b, 1);
                sleep_ms(3);
                note_running(b, -1);
                if (!mg_fifo_gate_release(g, getpid(), token))
                    _exit(2);
            }
            _exit(0);
        }
    }
    for (int k = 0; k < 10; k++) {
        int status;
        waitpid(kids[k], &status, 0);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: %d", k, status);
    }
    cr_expect_leq(atomic_load(&b->most), 2, "%d ran at once", atomic_load(&b->most));
    cr_expect_eq(atomic_load(&g->peak), 2);
    cr_expect_eq(atomic_load(&g->acquired), 50);
    cr_expect_eq(g->in_flight, 0);
    cr_expect_eq(g->waiting, 0);
}

Test(gate_fifo, waiters_are_admitted_in_arrival_order)
{
    struct mg_fifo_gate *g = shared(sizeof *g);
    struct board *b = shared(sizeof *b);
    mg_fifo_gate_init(g, 1, 8, 10 * MG_NS_PER_SEC);
    uint64_t first;
    cr_assert_eq(mg_fifo_gate_acquire(g, getpid(), 0, "a", NULL, NULL, &first, NULL),
                 MG_FIFO_ADMITTED);
    pid_t kids[4];
    for (int k = 0; k < 4; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            alarm(20);
            uint64_t token;
            if (mg_fifo_gate_acquire(g, getpid(), (unsigned)k + 1, "b", NULL, NULL, &token, NULL) !=
                MG_FIFO_ADMITTED)
                _exit(1);
            b->order[atomic_fetch_add(&b->order_next, 1)] = k;
            sleep_ms(2);
            mg_fifo_gate_release(g, getpid(), token);
            _exit(0);
        }
        /* Let each join the line before the next arrives. */
        while (g->waiting != (uint32_t)k + 1)
            sleep_ms(1);
    }
    cr_assert(mg_fifo_gate_release(g, getpid(), first));
    for (int k = 0; k < 4; k++)
        waitpid(kids[k], NULL, 0);
    cr_assert_eq(atomic_load(&b->order_next), 4);
    for (int k = 0; k < 4; k++)
        cr_expect_eq(b->order[k], k, "admission %d went to arrival %d", k, b->order[k]);
    cr_expect_eq(atomic_load(&g->waited), 4);
}

Test(gate_fifo, a_full_line_refuses_at_once_and_does_not_grow)
{
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 2, 10 * MG_NS_PER_SEC);
    uint64_t held;
    cr_assert_eq(mg_fifo_gate_acquire(g, getpid(), 0, "a", NULL, NULL, &held, NULL),
                 MG_FIFO_ADMITTED);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            alarm(20);
            uint64_t token;
            if (mg_fifo_gate_acquire(g, getpid(), 1, "w", NULL, NULL, &token, NULL) !=
                MG_FIFO_ADMITTED)
                _exit(1);
            mg_fifo_gate_release(g, getpid(), token);
            _exit(0);
        }
    }
    while (g->waiting != 2)
        sleep_ms(1);
    int64_t t0 = mg_monotonic_ns();
    uint64_t token;
    cr_expect_eq(mg_fifo_gate_acquire(g, getpid(), 3, "late", NULL, NULL, &token, NULL),
                 MG_FIFO_REFUSED_FULL);
    cr_expect_lt(mg_monotonic_ns() - t0, 50 * MG_NS_PER_MS, "a refusal must not wait");
    cr_expect_eq(g->waiting, 2, "the line grew past its bound");
    /* A follower waits for a result, not a permit: it takes none of the line's places. */
    int place = mg_fifo_gate_follow(g, getpid(), 3, "same");
    cr_expect_geq(place, 0, "a follower was refused by a line of permit waiters");
    cr_expect_eq(mg_fifo_gate_join(g, getpid(), 3, "late", &token, &(int){0}, &(uint64_t){0}),
                 MG_FIFO_REFUSED_FULL, "a follower made room for a third waiter");
    mg_fifo_gate_unfollow(g, getpid(), place);
    cr_expect_eq(atomic_load(&g->refused_full), 2);
    mg_fifo_gate_release(g, getpid(), held);
    for (int k = 0; k < 2; k++) {
        int status;
        waitpid(kids[k], &status, 0);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

/* One owner holds at most its share of permits and places together; past it the join is
 * refused at once, while another owner still joins, and a place keeps its owner when it takes
 * its permit. */
Test(gate_fifo, one_owner_holds_at_most_its_share_and_another_still_joins)
{
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 8, 10 * MG_NS_PER_SEC);
    const uint8_t a[MG_FIFO_OWNER_BYTES] = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1};
    const uint8_t b[MG_FIFO_OWNER_BYTES] = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 2};
    pid_t me = getpid();
    uint64_t token[4], ticket[4], t;
    int place[4];
    cr_assert_eq(
        mg_fifo_gate_join_owned(g, me, 0, "a", true, a, 3, &token[0], &place[0], &ticket[0]),
        MG_FIFO_ADMITTED);
    for (int i = 1; i < 3; i++)
        cr_assert_eq(
            mg_fifo_gate_join_owned(g, me, 0, "a", true, a, 3, &token[i], &place[i], &ticket[i]),
            MG_FIFO_QUEUED);
    int64_t t0 = mg_monotonic_ns();
    cr_expect_eq(mg_fifo_gate_join_owned(g, me, 0, "a", true, a, 3, &t, &place[3], &ticket[3]),
                 MG_FIFO_REFUSED_SHARE, "the owner took more than its share");
    cr_expect_lt(mg_monotonic_ns() - t0, 50 * MG_NS_PER_MS, "a refusal must not wait");
    cr_expect_eq(g->waiting, 2);
    cr_expect_eq(atomic_load(&g->refused_share), 1);
    cr_expect_eq(atomic_load(&g->refused_full), 0);
    /* Another owner, and a join with no owner, still join the line. */
    cr_expect_eq(mg_fifo_gate_join_owned(g, me, 1, "b", true, b, 3, &t, &place[3], &ticket[3]),
                 MG_FIFO_QUEUED, "another owner was refused");
    int other;
    uint64_t other_ticket;
    cr_expect_eq(mg_fifo_gate_join(g, me, 1, "none", &t, &other, &other_ticket), MG_FIFO_QUEUED);
    /* They leave (they would be served before a's places: the fair hand-off, below). */
    mg_fifo_gate_cancel(g, me, place[3], ticket[3]);
    mg_fifo_gate_cancel(g, me, other, other_ticket);
    /* The permit passes to a's first place, which keeps its owner: a holds two, so one more
     * joins and the next is refused. */
    cr_assert(mg_fifo_gate_release(g, me, token[0]));
    cr_assert_eq(mg_fifo_gate_poll(g, me, 0, "a", place[1], ticket[1], mg_monotonic_ns(),
                                   mg_monotonic_ns() + MG_NS_PER_SEC, &token[1]),
                 MG_FIFO_ADMITTED);
    cr_expect_eq(mg_fifo_gate_join_owned(g, me, 0, "a", true, a, 3, &t, &place[0], &ticket[0]),
                 MG_FIFO_QUEUED);
    cr_expect_eq(mg_fifo_gate_join_owned(g, me, 0, "a", true, a, 3, &t, &place[3], &ticket[3]),
                 MG_FIFO_REFUSED_SHARE, "a permit taken from the line lost its owner");
    /* Given back, the share has room again. */
    cr_assert(mg_fifo_gate_release(g, me, token[1]));
    cr_expect_eq(mg_fifo_gate_join_owned(g, me, 0, "a", true, a, 3, &t, &place[0], &ticket[0]),
                 MG_FIFO_QUEUED);
    cr_expect_eq(atomic_load(&g->refused_share), 2);
    /* Share 0: no share. */
    cr_expect_eq(mg_fifo_gate_join_owned(g, me, 0, "a", true, a, 0, &t, &place[0], &ticket[0]),
                 MG_FIFO_QUEUED);
}

Test(gate_fifo, a_wait_ends_at_its_bound)
{
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 4, 150 * MG_NS_PER_MS);
    uint64_t held, token;
    cr_assert_eq(mg_fifo_gate_acquire(g, getpid(), 0, "a", NULL, NULL, &held, NULL),
                 MG_FIFO_ADMITTED);
    int64_t waited = 0;
    cr_expect_eq(mg_fifo_gate_acquire(g, getpid(), 1, "b", NULL, NULL, &token, &waited),
                 MG_FIFO_REFUSED_TIMEOUT);
    cr_expect_geq(waited, 150 * MG_NS_PER_MS);
    cr_expect_lt(waited, 400 * MG_NS_PER_MS, "waited %lld ns", (long long)waited);
    cr_expect_eq(g->waiting, 0);
    cr_expect_eq(atomic_load(&g->refused_timeout), 1);
}

static int polls;
static bool gone_after_three_polls(void *arg)
{
    (void)arg;
    return ++polls > 3;
}

Test(gate_fifo, a_cancelled_waiter_leaves_the_line)
{
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 4, 10 * MG_NS_PER_SEC);
    uint64_t held, token;
    cr_assert_eq(mg_fifo_gate_acquire(g, getpid(), 0, "a", NULL, NULL, &held, NULL),
                 MG_FIFO_ADMITTED);
    int64_t waited = 0;
    cr_expect_eq(
        mg_fifo_gate_acquire(g, getpid(), 1, "b", gone_after_three_polls, NULL, &token, &waited),
        MG_FIFO_CANCELLED);
    cr_expect_lt(waited, MG_NS_PER_SEC, "the client was gone but the wait went on");
    cr_expect_eq(g->waiting, 0, "the cancelled waiter kept its place");
    cr_expect_eq(atomic_load(&g->cancelled), 1);
}

Test(gate_fifo, release_is_single_use)
{
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 2, 4, MG_NS_PER_SEC);
    uint64_t a, b;
    cr_assert_eq(mg_fifo_gate_acquire(g, getpid(), 0, "a", NULL, NULL, &a, NULL), MG_FIFO_ADMITTED);
    cr_assert_eq(mg_fifo_gate_acquire(g, getpid(), 0, "b", NULL, NULL, &b, NULL), MG_FIFO_ADMITTED);
    cr_expect(mg_fifo_gate_release(g, getpid(), a));
    cr_expect_not(mg_fifo_gate_release(g, getpid(), a), "released twice");
    cr_expect_eq(g->in_flight, 1, "the second release freed b's permit");
}

Test(gate_fifo, a_dead_holders_permit_is_reclaimed_and_the_next_waiter_admitted)
{
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 4, 10 * MG_NS_PER_SEC);
    pid_t holder = fork();
    if (holder == 0) {
        uint64_t token;
        mg_fifo_gate_acquire(g, getpid(), 0, "dies", NULL, NULL, &token, NULL);
        pause(); /* holds it until killed */
        _exit(0);
    }
    while (g->in_flight == 0)
        sleep_ms(1);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    cr_expect_eq(g->holder[0].pid == holder || g->holder[1].pid == holder || g->in_flight == 1,
                 true);
    cr_expect_eq(mg_fifo_gate_reclaim(g, holder), 1);
    cr_expect_eq(g->in_flight, 0);
    cr_expect_eq(atomic_load(&g->reclaimed), 1);
    uint64_t token;
    cr_expect_eq(mg_fifo_gate_acquire(g, getpid(), 1, "next", NULL, NULL, &token, NULL),
                 MG_FIFO_ADMITTED);
}

Test(gate_fifo, cap_zero_admits_everyone)
{
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 0, 0, 0);
    uint64_t t;
    for (int i = 0; i < 10; i++)
        cr_expect_eq(mg_fifo_gate_acquire(g, getpid(), 0, "k", NULL, NULL, &t, NULL),
                     MG_FIFO_ADMITTED);
    cr_expect_eq(atomic_load(&g->peak), 10);
}

/* --- the hand-off: a freed permit wakes its next waiter's worker (shm/wake.h) ------------ */

/* Each slot's wakes since the last look. */
static void take_wakes(unsigned *out, unsigned slots)
{
    for (unsigned i = 0; i < slots; i++)
        out[i] = mg_wake_take(i);
}

/* Places in line in slots 1, 2, 3 (in that order) behind a holder in slot 0: each release
 * wakes the worker of the oldest place only, and the woken place takes the permit. Before,
 * a release woke nobody: every waiter asked again every 2 ms. */
Test(gate_fifo, a_release_wakes_only_the_oldest_waiters_slot)
{
    char err[128];
    cr_assert(mg_wake_open(4, err, sizeof err), "%s", err);
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 8, 10 * MG_NS_PER_SEC);
    int me = getpid();
    uint64_t token, ticket[4];
    int place[4];
    cr_assert_eq(mg_fifo_gate_join(g, me, 0, "holder", &token, &place[0], &ticket[0]),
                 MG_FIFO_ADMITTED);
    for (unsigned s = 1; s <= 3; s++)
        cr_assert_eq(mg_fifo_gate_join(g, me, s, "w", &token, &place[s], &ticket[s]),
                     MG_FIFO_QUEUED);
    unsigned w[4];
    take_wakes(w, 4);
    cr_expect_eq(w[0] + w[1] + w[2] + w[3], 0, "joining wakes nobody");
    for (unsigned s = 1; s <= 3; s++) {
        cr_assert(mg_fifo_gate_release(g, me, token));
        take_wakes(w, 4);
        for (unsigned o = 0; o < 4; o++)
            cr_expect_eq(w[o], o == s, "release %u: slot %u woken %u times", s, o, w[o]);
        /* The woken place takes it; nobody else is woken (no permit is free). */
        int64_t now = mg_monotonic_ns();
        cr_assert_eq(
            mg_fifo_gate_poll(g, me, s, "w", place[s], ticket[s], now, now + MG_NS_PER_SEC, &token),
            MG_FIFO_ADMITTED);
        take_wakes(w, 4);
        cr_expect_eq(w[0] + w[1] + w[2] + w[3], 0);
    }
    mg_wake_close();
}

/* Which of n places takes the free permit when each is asked (-1: none). */
static int admitted_place(struct mg_fifo_gate *g, const int *place, const uint64_t *ticket, int n,
                          uint64_t *token)
{
    int64_t now = mg_monotonic_ns();
    for (int i = 0; i < n; i++)
        if (place[i] >= 0 &&
            mg_fifo_gate_poll(g, getpid(), (unsigned)i + 1, "p", place[i], ticket[i], now,
                              now + 10 * MG_NS_PER_SEC, token) == MG_FIFO_ADMITTED)
            return i;
    return -1;
}

/* The fair hand-off: a holds the permit and six places; b joins after them with two. Each
 * freed permit goes round-robin over the owners: b's first place next, not after a's six;
 * then a's and b's second places by arrival (equal rounds), then the rest of a's in order.
 * The released permit's slot (1 + its index) is the one woken. */
Test(gate_fifo, a_freed_permit_goes_round_robin_over_owners_not_to_the_oldest_place)
{
    char err[128];
    cr_assert(mg_wake_open(12, err, sizeof err), "%s", err);
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 16, 10 * MG_NS_PER_SEC);
    const uint8_t a[MG_FIFO_OWNER_BYTES] = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1};
    const uint8_t b[MG_FIFO_OWNER_BYTES] = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 2};
    pid_t me = getpid();
    uint64_t token, ticket[8];
    int place[8];
    cr_assert_eq(mg_fifo_gate_join_owned(g, me, 0, "a", true, a, 7, &token, &place[0], &ticket[0]),
                 MG_FIFO_ADMITTED);
    /* places 0-5: a's six; 6, 7: b's two */
    for (int i = 0; i < 8; i++)
        cr_assert_eq(mg_fifo_gate_join_owned(g, me, (unsigned)i + 1, "p", true, i < 6 ? a : b, 7,
                                             &(uint64_t){0}, &place[i], &ticket[i]),
                     MG_FIFO_QUEUED);
    const int want[8] = {6, 0, 7, 1, 2, 3, 4, 5};
    unsigned w[12];
    take_wakes(w, 12);
    for (int k = 0; k < 8; k++) {
        cr_assert(mg_fifo_gate_release(g, me, token));
        take_wakes(w, 12);
        cr_expect_eq(w[want[k] + 1], 1, "release %d did not wake place %d's slot", k, want[k]);
        int got = admitted_place(g, place, ticket, 8, &token);
        cr_assert_eq(got, want[k], "release %d: place %d served, want %d", k, got, want[k]);
        place[got] = -1;
    }
    cr_expect_eq(g->waiting, 0);
    cr_assert(mg_fifo_gate_release(g, me, token));
    mg_wake_close();
}

/* Places with no owner, and one owner's places, keep their arrival order whoever holds the
 * permit: fairness only reorders between owners. */
Test(gate_fifo, without_owners_or_with_one_owner_the_line_stays_fifo)
{
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 16, 10 * MG_NS_PER_SEC);
    const uint8_t a[MG_FIFO_OWNER_BYTES] = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1};
    pid_t me = getpid();
    for (int owned = 0; owned < 2; owned++) {
        uint64_t token, ticket[6];
        int place[6];
        cr_assert_eq(mg_fifo_gate_join_owned(g, me, 0, "h", true, owned ? a : NULL, 8, &token,
                                             &place[0], &ticket[0]),
                     MG_FIFO_ADMITTED);
        for (int i = 0; i < 6; i++)
            cr_assert_eq(mg_fifo_gate_join_owned(g, me, (unsigned)i + 1, "p", true,
                                                 owned ? a : NULL, 8, &(uint64_t){0}, &place[i],
                                                 &ticket[i]),
                         MG_FIFO_QUEUED);
        for (int k = 0; k < 6; k++) {
            cr_assert(mg_fifo_gate_release(g, me, token));
            cr_assert_eq(admitted_place(g, place, ticket, 6, &token), k, "owned %d", owned);
            place[k] = -1;
        }
        cr_assert(mg_fifo_gate_release(g, me, token));
    }
}

/* A holder killed with SIGKILL: reclaim hands its permit to the next in line and wakes that
 * worker; a place that gives up (cancelled, or timed out) hands on the same way. */
Test(gate_fifo, reclaim_and_a_place_given_up_wake_the_next_waiter)
{
    char err[128];
    cr_assert(mg_wake_open(4, err, sizeof err), "%s", err);
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 8, 10 * MG_NS_PER_SEC);
    pid_t holder = fork();
    if (holder == 0) {
        uint64_t token;
        mg_fifo_gate_acquire(g, getpid(), 0, "dies", NULL, NULL, &token, NULL);
        pause();
        _exit(0);
    }
    while (atomic_load(&g->acquired) == 0)
        sleep_ms(1);
    int me = getpid();
    uint64_t token, ticket[4];
    int place[4];
    for (unsigned s = 1; s <= 3; s++)
        cr_assert_eq(mg_fifo_gate_join(g, me, s, "w", &token, &place[s], &ticket[s]),
                     MG_FIFO_QUEUED);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    unsigned w[4];
    take_wakes(w, 4);
    cr_expect_eq(mg_fifo_gate_reclaim(g, holder), 1);
    take_wakes(w, 4);
    cr_expect(w[1] == 1 && w[2] == 0 && w[3] == 0, "reclaim woke %u %u %u", w[1], w[2], w[3]);
    /* The first place goes away instead of taking the permit: the second is woken. */
    mg_fifo_gate_cancel(g, me, place[1], ticket[1]);
    take_wakes(w, 4);
    cr_expect(w[1] == 0 && w[2] == 1 && w[3] == 0, "cancel woke %u %u %u", w[1], w[2], w[3]);
    /* The second takes it; when it gives it back, the third is woken. */
    int64_t now = mg_monotonic_ns();
    cr_expect_eq(
        mg_fifo_gate_poll(g, me, 2, "w", place[2], ticket[2], now, now + MG_NS_PER_SEC, &token),
        MG_FIFO_ADMITTED);
    take_wakes(w, 4);
    cr_expect(w[1] == 0 && w[2] == 0 && w[3] == 0);
    cr_assert(mg_fifo_gate_release(g, me, token));
    take_wakes(w, 4);
    cr_expect(w[1] == 0 && w[2] == 0 && w[3] == 1, "release woke %u %u %u", w[1], w[2], w[3]);
    mg_wake_close();
}

/* A place woken whose work cannot run after all (its helper is busy) steps aside: the next
 * ready place is woken in turn and takes the permit. */
Test(gate_fifo, a_woken_place_that_cannot_run_wakes_the_next)
{
    char err[128];
    cr_assert(mg_wake_open(3, err, sizeof err), "%s", err);
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 8, 10 * MG_NS_PER_SEC);
    int me = getpid();
    uint64_t token, held, ticket[3];
    int place[3];
    cr_assert_eq(mg_fifo_gate_join(g, me, 0, "holder", &held, &place[0], &ticket[0]),
                 MG_FIFO_ADMITTED);
    for (unsigned s = 1; s <= 2; s++)
        cr_assert_eq(mg_fifo_gate_join(g, me, s, "w", &token, &place[s], &ticket[s]),
                     MG_FIFO_QUEUED);
    cr_assert(mg_fifo_gate_release(g, me, held));
    unsigned w[3];
    take_wakes(w, 3);
    cr_expect(w[1] == 1 && w[2] == 0);
    int64_t now = mg_monotonic_ns();
    cr_expect_eq(mg_fifo_gate_poll_ready(g, me, 1, "w", place[1], ticket[1], false, now,
                                         now + MG_NS_PER_SEC, &token),
                 MG_FIFO_QUEUED);
    take_wakes(w, 3);
    cr_expect_eq(w[2], 1, "the next ready place is woken");
    cr_expect_eq(
        mg_fifo_gate_poll(g, me, 2, "w", place[2], ticket[2], now, now + MG_NS_PER_SEC, &token),
        MG_FIFO_ADMITTED);
    mg_wake_close();
}

/* A place held back for the group's reason (the upstream's reserve) learns only at a release
 * that it may go: the oldest unready place is woken with the oldest ready one. */
Test(gate_fifo, a_release_wakes_the_oldest_unready_place_as_well)
{
    char err[128];
    cr_assert(mg_wake_open(4, err, sizeof err), "%s", err);
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 8, 10 * MG_NS_PER_SEC);
    int me = getpid();
    uint64_t token, held, ticket[4];
    int place[4];
    cr_assert_eq(mg_fifo_gate_join(g, me, 0, "holder", &held, &place[0], &ticket[0]),
                 MG_FIFO_ADMITTED);
    cr_assert_eq(
        mg_fifo_gate_join_ready(g, me, 1, "held back", false, &token, &place[1], &ticket[1]),
        MG_FIFO_QUEUED);
    for (unsigned s = 2; s <= 3; s++)
        cr_assert_eq(mg_fifo_gate_join(g, me, s, "w", &token, &place[s], &ticket[s]),
                     MG_FIFO_QUEUED);
    unsigned w[4];
    take_wakes(w, 4);
    cr_assert(mg_fifo_gate_release(g, me, held));
    take_wakes(w, 4);
    cr_expect(w[1] == 1 && w[2] == 1 && w[3] == 0, "woken %u %u %u", w[1], w[2], w[3]);
    /* Ready now, it is the oldest ready place: the permit is its. */
    int64_t now = mg_monotonic_ns();
    cr_expect_eq(mg_fifo_gate_poll(g, me, 1, "held back", place[1], ticket[1], now,
                                   now + MG_NS_PER_SEC, &token),
                 MG_FIFO_ADMITTED);
    mg_wake_close();
}

/* Followers wait for another request's build: its end wakes them. */
Test(gate_fifo, the_end_of_a_build_wakes_its_followers)
{
    char err[128];
    cr_assert(mg_wake_open(3, err, sizeof err), "%s", err);
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 8, 10 * MG_NS_PER_SEC);
    int me = getpid();
    cr_assert_geq(mg_fifo_gate_follow(g, me, 2, "k"), 0);
    unsigned w[3];
    take_wakes(w, 3);
    mg_fifo_gate_wake_followers(g, me);
    take_wakes(w, 3);
    cr_expect(w[0] == 0 && w[1] == 0 && w[2] == 1);
    mg_wake_close();
}

/* --- the result cache ------------------------------------------------------------------- */

struct cache_mem {
    struct mg_result_cache cache;
    struct mg_cache_entry entry[4];
    unsigned char pages[4 * MG_CACHE_PAGE];
};

static struct mg_cache_view new_cache(int64_t ttl_ns)
{
    struct cache_mem *m = shared(sizeof *m);
    struct mg_cache_view v = {&m->cache, m->entry, m->pages};
    mg_result_cache_init(&v, 4, 4, ttl_ns);
    return v;
}

Test(result_cache, a_built_body_is_served_to_everyone_until_it_expires)
{
    struct mg_cache_view v = new_cache(MG_NS_PER_SEC);
    struct mg_buf out;
    mg_buf_init(&out);
    uint64_t id, other;
    int64_t t = 1000 * MG_NS_PER_SEC;
    cr_assert_eq(mg_result_cache_lookup(&v, getpid(), 0, "k|7", t, &out, &id), MG_CACHE_CLAIMED);
    cr_expect_eq(mg_result_cache_lookup(&v, getpid(), 1, "k|7", t, &out, &other), MG_CACHE_BUSY);
    mg_result_cache_store(&v, getpid(), id, "{\"a\":1}\n", 8, t);
    cr_assert_eq(mg_result_cache_lookup(&v, getpid(), 1, "k|7", t + 1, &out, &other), MG_CACHE_HIT);
    cr_expect_eq(out.len, 8);
    cr_expect_eq(memcmp(out.data, "{\"a\":1}\n", 8), 0);
    cr_expect_eq(mg_result_cache_lookup(&v, getpid(), 1, "k|7", t + MG_NS_PER_SEC, &out, &other),
                 MG_CACHE_CLAIMED, "an expired body was served");
    cr_expect_eq(atomic_load(&v.cache->hits), 1);
    cr_expect_eq(atomic_load(&v.cache->coalesced), 1);
    mg_buf_free(&out);
}

Test(result_cache, an_abandoned_build_caches_nothing)
{
    struct mg_cache_view v = new_cache(MG_NS_PER_SEC);
    struct mg_buf out;
    mg_buf_init(&out);
    uint64_t id;
    cr_assert_eq(mg_result_cache_lookup(&v, getpid(), 0, "k", 1, &out, &id), MG_CACHE_CLAIMED);
    mg_result_cache_abandon(&v, getpid(), id);
    cr_expect_eq(mg_result_cache_lookup(&v, getpid(), 0, "k", 2, &out, &id), MG_CACHE_CLAIMED);
    cr_expect_eq(out.len, 0);
    cr_expect_eq(atomic_load(&v.cache->stored), 0);
    mg_buf_free(&out);
}

Test(result_cache, a_body_too_large_is_served_but_not_stored)
{
    struct mg_cache_view v = new_cache(MG_NS_PER_SEC);
    struct mg_buf out;
    mg_buf_init(&out);
    uint64_t id;
    static char big[MG_CACHE_PAGE + 1];
    cr_assert_eq(mg_result_cache_lookup(&v, getpid(), 0, "k", 1, &out, &id), MG_CACHE_CLAIMED);
    mg_result_cache_store(&v, getpid(), id, big, sizeof big, 1);
    cr_expect_eq(atomic_load(&v.cache->too_large), 1);
    cr_expect_eq(mg_result_cache_lookup(&v, getpid(), 0, "k", 2, &out, &id), MG_CACHE_CLAIMED);
    mg_buf_free(&out);
}

Test(result_cache, a_waiter_gets_the_body_its_builder_stores)
{
    struct mg_cache_view v = new_cache(10 * MG_NS_PER_SEC);
    struct mg_buf out;
    mg_buf_init(&out);
    uint64_t id;
    cr_assert_eq(mg_result_cache_lookup(&v, getpid(), 0, "k", mg_monotonic_ns(), &out, &id),
                 MG_CACHE_CLAIMED);
    pid_t waiter = fork();
    if (waiter == 0) {
        alarm(10);
        struct mg_buf got;
        mg_buf_init(&got);
        uint64_t mine;
        enum mg_cache_outcome r = mg_result_cache_wait(
            &v, getpid(), 1, "k", mg_monotonic_ns() + 5 * MG_NS_PER_SEC, NULL, NULL, &got, &mine);
        _exit(r == MG_CACHE_HIT && got.len == 5 && memcmp(got.data, "body\n", 5) == 0 ? 0 : 1);
    }
    sleep_ms(50);
    mg_result_cache_store(&v, getpid(), id, "body\n", 5, mg_monotonic_ns());
    int status;
    waitpid(waiter, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    mg_buf_free(&out);
}

Test(result_cache, a_dead_builder_is_taken_over_and_reclaimed)
{
    struct mg_cache_view v = new_cache(10 * MG_NS_PER_SEC);
    struct mg_buf out;
    mg_buf_init(&out);
    pid_t builder = fork();
    if (builder == 0) {
        uint64_t id;
        mg_result_cache_lookup(&v, getpid(), 0, "k", mg_monotonic_ns(), &out, &id);
        _exit(0); /* dies holding the claim */
    }
    waitpid(builder, NULL, 0);
    uint64_t id;
    /* Before the master reclaims it, a waiter sees the builder dead and takes over. */
    cr_expect_eq(mg_result_cache_wait(&v, getpid(), 1, "k", mg_monotonic_ns() + MG_NS_PER_SEC, NULL,
                                      NULL, &out, &id),
                 MG_CACHE_CLAIMED);
    cr_expect_eq(atomic_load(&v.cache->takeovers), 1);
    mg_result_cache_abandon(&v, getpid(), id);
    /* And the master's reclaim frees a dead builder's claim. */
    pid_t second = fork();
    if (second == 0) {
        uint64_t mine;
        mg_result_cache_lookup(&v, getpid(), 0, "j", mg_monotonic_ns(), &out, &mine);
        _exit(0);
    }
    waitpid(second, NULL, 0);
    cr_expect_eq(mg_result_cache_reclaim(&v, second), 1);
    cr_expect_eq(mg_result_cache_lookup(&v, getpid(), 0, "j", mg_monotonic_ns(), &out, &id),
                 MG_CACHE_CLAIMED);
    mg_buf_free(&out);
}

Test(result_cache, a_full_cache_evicts_expired_then_least_recently_used)
{
    struct mg_cache_view v = new_cache(100 * MG_NS_PER_SEC);
    struct mg_buf out;
    mg_buf_init(&out);
    char key[16];
    uint64_t id;
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "k%d", i);
        cr_assert_eq(mg_result_cache_lookup(&v, getpid(), 0, key, 10 + i, &out, &id),
                     MG_CACHE_CLAIMED);
        mg_result_cache_store(&v, getpid(), id, "x", 1, 10 + i);
    }
    /* k0 is used again: k1 is now the least recently used. */
    cr_assert_eq(mg_result_cache_lookup(&v, getpid(), 0, "k0", 20, &out, &id), MG_CACHE_HIT);
    cr_assert_eq(mg_result_cache_lookup(&v, getpid(), 0, "k4", 21, &out, &id), MG_CACHE_CLAIMED);
    mg_result_cache_store(&v, getpid(), id, "y", 1, 21);
    cr_expect_eq(mg_result_cache_lookup(&v, getpid(), 0, "k1", 22, &out, &id), MG_CACHE_CLAIMED,
                 "k1 should have been evicted");
    cr_expect_eq(mg_result_cache_lookup(&v, getpid(), 0, "k0", 23, &out, &id), MG_CACHE_HIT);
    cr_expect_geq(atomic_load(&v.cache->evicted), 1);
    mg_buf_free(&out);
}

/* A hit pins its entry under the lock and copies after it (issue 12, item 5): while pinned,
 * the entry is given to no other key, even when every other entry is taken. */
Test(result_cache, a_pinned_entry_is_not_given_to_another_key_while_its_body_is_copied)
{
    struct mg_cache_view v = new_cache(100 * MG_NS_PER_SEC);
    int64_t t = 1000 * MG_NS_PER_SEC;
    uint64_t id;
    char key[16];
    for (int i = 0; i < 4; i++) { /* every entry READY, k0 the least recently used */
        snprintf(key, sizeof key, "k%d", i);
        struct mg_cache_pin none;
        cr_assert_eq(mg_result_cache_look(&v, getpid(), 0, key, t + i, true, &none, &id),
                     MG_CACHE_CLAIMED);
        mg_result_cache_store(&v, getpid(), id, key, 2, t + i);
    }
    struct mg_cache_pin pin;
    cr_assert_eq(mg_result_cache_look(&v, getpid(), 0, "k0", t + 10, true, &pin, &id),
                 MG_CACHE_HIT);
    cr_expect_eq(v.entry[pin.index].pins, 1);
    cr_expect_eq(atomic_load(&v.cache->lock.owner_pid), 0, "the copy is made without the lock");
    /* k0 is now the most recently used; make it the oldest again, pinned. */
    v.entry[pin.index].used_monotonic_ns = 0;
    struct mg_cache_pin other;
    uint64_t new_id = 0;
    cr_assert_eq(mg_result_cache_look(&v, getpid(), 0, "n", t + 11, true, &other, &new_id),
                 MG_CACHE_CLAIMED);
    cr_expect_str_eq(v.entry[pin.index].key, "k0", "a pinned entry was evicted");
    char body[2];
    cr_expect(mg_result_cache_copy(&v, getpid(), &pin, body));
    cr_expect_eq(memcmp(body, "k0", 2), 0);
    cr_expect_eq(v.entry[pin.index].pins, 0, "the copy unpins");
}

/* A reader that stays away past a stale pin (stopped, or dead) does not hold the entry for
 * ever; its copy is refused once the entry was rebuilt meanwhile. */
Test(result_cache, a_copy_overtaken_by_a_rebuild_is_refused)
{
    struct mg_cache_view v = new_cache(MG_NS_PER_SEC);
    int64_t t = 1000 * MG_NS_PER_SEC;
    uint64_t id;
    struct mg_cache_pin pin;
    cr_assert_eq(mg_result_cache_look(&v, getpid(), 0, "k", t, true, &pin, &id), MG_CACHE_CLAIMED);
    mg_result_cache_store(&v, getpid(), id, "old", 3, t);
    cr_assert_eq(mg_result_cache_look(&v, getpid(), 0, "k", t + 1, true, &pin, &id), MG_CACHE_HIT);
    /* Expired while pinned: rebuilt in another entry, the pinned one is left alone. */
    struct mg_cache_pin unused;
    uint64_t rebuild;
    cr_assert_eq(
        mg_result_cache_look(&v, getpid(), 0, "k", t + 2 * MG_NS_PER_SEC, true, &unused, &rebuild),
        MG_CACHE_CLAIMED);
    cr_expect_neq(v.entry[pin.index].build_id, rebuild, "the pinned entry was rebuilt");
    mg_result_cache_abandon(&v, getpid(), rebuild);
    /* Past a stale pin, the entry may be taken: the late copy says it is not valid. */
    int64_t later = t + (MG_CACHE_PIN_STALE_S + 5) * MG_NS_PER_SEC;
    for (int i = 0; i < 4; i++) {
        char key[16];
        snprintf(key, sizeof key, "x%d", i);
        mg_result_cache_look(&v, getpid(), 0, key, later, true, &unused, &rebuild);
    }
    char body[3];
    cr_expect_not(mg_result_cache_copy(&v, getpid(), &pin, body));
}

/* One worker's places that waited for its busy helper (anon's flood, every connection on one
 * worker): a holds the permit and two places, b's place joins after them; all three wait for
 * the helper. When the permit is given back, the worker asks its places in its own order, a's
 * first: a's ready poll shows b's place ready too (the same helper), so b, first in the line's
 * order, takes the permit, and a's place waits. Before, the first place the worker asked took
 * it. A new ready arrival from that worker waits behind them as well, and a place held back
 * for the group's reason stays passed over. */
Test(gate_fifo, a_worker_s_places_that_waited_for_its_helper_keep_the_line_s_order)
{
    char err[128];
    cr_assert(mg_wake_open(2, err, sizeof err), "%s", err);
    struct mg_fifo_gate *g = shared(sizeof *g);
    mg_fifo_gate_init(g, 1, 8, 10 * MG_NS_PER_SEC);
    const uint8_t a[MG_FIFO_OWNER_BYTES] = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1};
    const uint8_t b[MG_FIFO_OWNER_BYTES] = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 2};
    const uint8_t c[MG_FIFO_OWNER_BYTES] = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 3};
    pid_t me = getpid();
    uint64_t held, token = 0, ticket[4];
    int place[4];
    cr_assert_eq(
        mg_fifo_gate_join_owned(g, me, 1, "a", MG_FIFO_READY, a, 6, &held, &place[0], &ticket[0]),
        MG_FIFO_ADMITTED);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(mg_fifo_gate_join_owned(g, me, 1, "a", MG_FIFO_WORKER_BUSY, a, 6, &token,
                                             &place[i], &ticket[i]),
                     MG_FIFO_QUEUED);
    cr_assert_eq(mg_fifo_gate_join_owned(g, me, 1, "b", MG_FIFO_WORKER_BUSY, b, 6, &token,
                                         &place[2], &ticket[2]),
                 MG_FIFO_QUEUED);
    /* held back (the group's reason), first of all by its round: never marked ready by others */
    cr_assert_eq(mg_fifo_gate_join_owned(g, me, 1, "c", MG_FIFO_HELD_BACK, c, 6, &token, &place[3],
                                         &ticket[3]),
                 MG_FIFO_QUEUED);
    unsigned w[2];
    take_wakes(w, 2);
    cr_assert(mg_fifo_gate_release(g, me, held));
    take_wakes(w, 2);
    cr_expect_eq(w[1], 1, "the release woke the worker");
    int64_t now = mg_monotonic_ns();
    int64_t until = now + 10 * MG_NS_PER_SEC;
    for (int i = 0; i < 2; i++)
        cr_expect_eq(mg_fifo_gate_poll_ready(g, me, 1, "a", place[i], ticket[i], MG_FIFO_READY, now,
                                             until, &token),
                     MG_FIFO_QUEUED, "a's place %d took the permit before b's", i);
    /* A new ready arrival from the same worker waits too. */
    uint64_t t2;
    int p2;
    cr_expect_eq(mg_fifo_gate_join_owned(g, me, 1, "d", MG_FIFO_READY, NULL, 0, &token, &p2, &t2),
                 MG_FIFO_QUEUED);
    cr_expect_eq(mg_fifo_gate_poll_ready(g, me, 1, "b", place[2], ticket[2], MG_FIFO_READY, now,
                                         until, &held),
                 MG_FIFO_ADMITTED, "b's place, first in the line's order, is served");
    cr_expect_eq(g->waiter[place[3]].unready, 1, "the held-back place is still held back");
    /* Then the arrival (another owner, so round-robin puts it before a's places), polled
     * after a's: a's places wait again. */
    cr_assert(mg_fifo_gate_release(g, me, held));
    cr_expect_eq(mg_fifo_gate_poll_ready(g, me, 1, "a", place[0], ticket[0], MG_FIFO_READY, now,
                                         until, &token),
                 MG_FIFO_QUEUED);
    cr_expect_eq(mg_fifo_gate_poll_ready(g, me, 1, "d", p2, t2, MG_FIFO_READY, now, until, &held),
                 MG_FIFO_ADMITTED);
    mg_wake_close();
}
