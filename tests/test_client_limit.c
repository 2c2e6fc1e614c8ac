/* SPDX-License-Identifier: ISC */
/*
 * The per-client rate table (GCRA) as a module: times are injected, so no test sleeps;
 * real processes share it through MAP_SHARED memory, as workers share the segment.
 */
#include "clock.h"
#include "client_limit.h"

#include <criterion/criterion.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(client_limit, .timeout = 30);

#define MINUTE (60 * MG_NS_PER_SEC)
/* Any CLOCK_MONOTONIC-like time far from 0. */
#define T0 (1000 * MG_NS_PER_SEC)

static void *shared(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    memset(p, 0, n);
    return p;
}

/* The two sections as the segment lays them out: the table, then the sets on a line. */
static struct mg_client_view new_limit(uint32_t sets, uint32_t per_minute, uint32_t burst)
{
    size_t head = (sizeof(struct mg_client_table) + 63) / 64 * 64;
    char *base = shared(head + (size_t)sets * sizeof(struct mg_client_set));
    struct mg_client_view v = {(struct mg_client_table *)base,
                               (struct mg_client_set *)(base + head)};
    mg_client_limit_init(&v, sets, per_minute, burst);
    return v;
}

/* Client n as the server keys it: the IPv4-mapped address ::ffff:10.n.n.n. */
static const uint8_t *client(unsigned n)
{
    static uint8_t keys[64][MG_CLIENT_KEY_BYTES];
    uint8_t *k = keys[n % 64];
    memset(k, 0, MG_CLIENT_KEY_BYTES);
    k[10] = k[11] = 0xff;
    k[12] = 10;
    k[13] = (uint8_t)(n >> 16);
    k[14] = (uint8_t)(n >> 8);
    k[15] = (uint8_t)n;
    return k;
}

static bool take(struct mg_client_view *v, unsigned who, int64_t now, int64_t *retry)
{
    return mg_client_limit_take(v, getpid(), client(who), now, retry);
}

/* How many requests of who pass at now, taken until the first refusal (at most 100). */
static int passes_at(struct mg_client_view *v, unsigned who, int64_t now)
{
    int n = 0;
    while (n < 100 && take(v, who, now, NULL))
        n++;
    return n;
}

Test(client_limit, init_derives_the_interval_and_draws_a_seed)
{
    struct mg_client_view a = new_limit(4, 120, 10);
    cr_expect_eq(a.table->sets, 4);
    cr_expect_eq(a.table->per_minute, 120);
    cr_expect_eq(a.table->burst, 10);
    cr_expect_eq(a.table->interval_ns, MG_NS_PER_SEC / 2);
    cr_expect_eq(a.table->tolerance_ns, 9 * MG_NS_PER_SEC / 2);
    struct mg_client_view b = new_limit(4, 120, 0);
    cr_expect_eq(b.table->burst, 1, "a burst of 0 would refuse everyone");
    cr_expect(a.table->seed[0] != b.table->seed[0] || a.table->seed[1] != b.table->seed[1],
              "two tables drew the same seed");
    cr_expect(a.table->seed[0] != 0 || a.table->seed[1] != 0, "the seed was not drawn");
}

Test(client_limit, sets_for_rounds_up_to_whole_sets)
{
    cr_expect_eq(mg_client_limit_sets_for(0), 1);
    cr_expect_eq(mg_client_limit_sets_for(1), 1);
    cr_expect_eq(mg_client_limit_sets_for(MG_CLIENT_WAYS), 1);
    cr_expect_eq(mg_client_limit_sets_for(MG_CLIENT_WAYS + 1), 2);
    cr_expect_eq(mg_client_limit_sets_for(4096), 4096 / MG_CLIENT_WAYS);
    cr_expect_eq(mg_client_limit_sets_for(UINT32_MAX), UINT32_MAX / MG_CLIENT_WAYS + 1);
}

Test(client_limit, the_burst_passes_then_one_request_every_interval)
{
    /* 60 a minute: T = 1 s; a burst of 5. */
    struct mg_client_view v = new_limit(16, 60, 5);
    int64_t retry = -1;
    for (int i = 0; i < 5; i++)
        cr_assert(take(&v, 1, T0, &retry), "request %d of the burst was refused", i + 1);
    cr_expect_eq(retry, 0);
    cr_assert_not(take(&v, 1, T0, &retry), "the request after the burst passed");
    cr_expect_eq(retry, MG_NS_PER_SEC, "retry after %lld ns", (long long)retry);

    int64_t later = T0 + retry;
    cr_expect_not(take(&v, 1, later - 1, NULL), "passed before the retry time");
    cr_expect(take(&v, 1, later, &retry), "refused at the retry time it was given");
    cr_expect_not(take(&v, 1, later, &retry), "two passed where one interval allows one");
    cr_expect_eq(retry, MG_NS_PER_SEC, "retry after %lld ns", (long long)retry);

    cr_expect_eq(atomic_load(&v.table->allowed), 6);
    cr_expect_eq(atomic_load(&v.table->limited), 3);
    cr_expect_eq(atomic_load(&v.table->evicted), 0);
}

Test(client_limit, a_full_burst_comes_back_after_burst_intervals)
{
    struct mg_client_view v = new_limit(16, 60, 5);
    cr_assert_eq(passes_at(&v, 1, T0), 5);
    cr_expect_eq(passes_at(&v, 1, T0 + 2 * MG_NS_PER_SEC), 2);
    cr_expect_eq(passes_at(&v, 1, T0 + 100 * MG_NS_PER_SEC), 5, "the burst exceeded its size");
    cr_expect_eq(mg_client_limit_tracked(&v, T0 + 100 * MG_NS_PER_SEC), 1);
    cr_expect_eq(mg_client_limit_tracked(&v, T0 + 105 * MG_NS_PER_SEC), 0,
                 "a client back to a full burst is still counted");
}

Test(client_limit, retry_after_rounds_up_to_whole_seconds)
{
    cr_expect_eq(mg_client_limit_retry_after_s(1), 1);
    cr_expect_eq(mg_client_limit_retry_after_s(0), 1);
    cr_expect_eq(mg_client_limit_retry_after_s(MG_NS_PER_SEC - 1), 1);
    cr_expect_eq(mg_client_limit_retry_after_s(MG_NS_PER_SEC + 1), 2);
    cr_expect_eq(mg_client_limit_retry_after_s(2 * MG_NS_PER_SEC), 2);
    cr_expect_eq(mg_client_limit_retry_after_s(2 * MG_NS_PER_SEC + 1), 3);
    cr_expect_eq(mg_client_limit_retry_after_s(MINUTE), 60);
}

Test(client_limit, a_refused_request_changes_no_state)
{
    struct mg_client_view v = new_limit(1, 60, 2);
    cr_assert_eq(passes_at(&v, 7, T0), 2);
    struct mg_client_set before = v.sets[0];
    for (int i = 0; i < 100; i++) {
        int64_t retry = 0;
        cr_assert_not(take(&v, 7, T0 + i * MG_NS_PER_MS, &retry), "refusal %d passed", i);
        cr_assert_eq(retry, MG_NS_PER_SEC - i * MG_NS_PER_MS,
                     "refusal %d pushed the next allowed time to %lld ns away", i,
                     (long long)retry);
    }
    cr_expect_eq(memcmp(&before, &v.sets[0], sizeof before), 0, "refusals wrote in the set");
    cr_expect_not(take(&v, 7, T0 + MG_NS_PER_SEC - 1, NULL));
    cr_expect(take(&v, 7, T0 + MG_NS_PER_SEC, NULL), "the refusals delayed the next request");
    cr_expect_eq(atomic_load(&v.table->limited), 102); /* passes_at's, the 100, the one at T - 1 */
    cr_expect_eq(atomic_load(&v.table->allowed), 3);
}

Test(client_limit, two_clients_are_independent)
{
    struct mg_client_view v = new_limit(64, 1, 3);
    cr_assert_eq(passes_at(&v, 1, T0), 3);
    cr_expect_eq(passes_at(&v, 2, T0), 3, "client 2 paid for client 1's requests");
    cr_expect_not(take(&v, 1, T0 + 1, NULL), "client 1 got client 2's allowance");
    /* The same in one set, where both share the lock and the entries. */
    struct mg_client_view one = new_limit(1, 1, 3);
    cr_assert_eq(passes_at(&one, 1, T0), 3);
    cr_expect_eq(passes_at(&one, 2, T0), 3);
    cr_expect_eq(passes_at(&one, 1, T0 + 1), 0);
    cr_expect_eq(mg_client_limit_tracked(&one, T0), 2);
}

Test(client_limit, per_minute_zero_allows_everything_and_touches_nothing)
{
    struct mg_client_view v = new_limit(2, 0, 5);
    struct mg_client_set zero[2];
    memset(zero, 0, sizeof zero);
    for (int i = 0; i < 1000; i++) {
        int64_t retry = -1;
        cr_assert(take(&v, (unsigned)i % 3, T0, &retry), "request %d refused", i);
        cr_assert_eq(retry, 0);
    }
    cr_expect_eq(atomic_load(&v.table->allowed), 0);
    cr_expect_eq(atomic_load(&v.table->limited), 0);
    cr_expect_eq(atomic_load(&v.table->evicted), 0);
    cr_expect_eq(memcmp(v.sets, zero, sizeof zero), 0, "the sets were written");
}

Test(client_limit, keys_spread_over_the_sets)
{
    struct mg_client_view v = new_limit(8, 60, 1);
    unsigned per_set[8] = {0};
    for (unsigned n = 0; n < 8000; n++) {
        uint32_t s = mg_client_limit_set_of(&v, client(n));
        cr_assert_lt(s, 8);
        per_set[s]++;
    }
    for (unsigned s = 0; s < 8; s++)
        cr_expect(per_set[s] > 800 && per_set[s] < 1200, "set %u holds %u of 8000 keys", s,
                  per_set[s]);
    /* Keys that differ only in their first half spread too (IPv6 /64 prefixes). */
    unsigned first_half[8] = {0};
    uint8_t k[MG_CLIENT_KEY_BYTES] = {0x20, 0x01, 0x0d, 0xb8};
    for (unsigned n = 0; n < 8000; n++) {
        k[6] = (uint8_t)(n >> 8);
        k[7] = (uint8_t)n;
        first_half[mg_client_limit_set_of(&v, k)]++;
    }
    for (unsigned s = 0; s < 8; s++)
        cr_expect(first_half[s] > 800 && first_half[s] < 1200, "set %u holds %u of 8000 keys", s,
                  first_half[s]);
    /* Another seed, another placement: which keys share a set cannot be known in advance. */
    struct mg_client_view other = new_limit(8, 60, 1);
    unsigned same = 0;
    for (unsigned n = 0; n < 8000; n++)
        same += mg_client_limit_set_of(&v, client(n)) == mg_client_limit_set_of(&other, client(n));
    cr_expect(same > 800 && same < 1200, "%u of 8000 keys share their set under both seeds", same);
}

Test(client_limit, a_full_set_pushes_out_the_client_used_longest_ago)
{
    /* One set of 8; T = 60 s, a burst of 2. */
    struct mg_client_view v = new_limit(1, 1, 2);
    cr_assert_eq(passes_at(&v, 0, T0), 2);
    for (unsigned k = 1; k < 8; k++)
        cr_assert_eq(passes_at(&v, k, T0 + MINUTE / 2 + k * MG_NS_PER_MS), 2);
    /* Client 0 comes back for one more: client 1 is now the one used longest ago. */
    int64_t t = T0 + MINUTE;
    cr_assert(take(&v, 0, t, NULL));
    for (unsigned k = 0; k < 8; k++)
        cr_assert_not(take(&v, k, t + 1, NULL), "client %u is not limited", k);
    cr_assert_eq(mg_client_limit_tracked(&v, t + 1), 8);

    cr_expect_eq(passes_at(&v, 8, t + 2), 2, "a new client in a full set got no fresh burst");
    cr_expect_eq(atomic_load(&v.table->evicted), 1);
    for (unsigned k = 0; k < 9; k++)
        if (k != 1)
            cr_expect_not(take(&v, k, t + 3, NULL), "client %u lost its state", k);
    cr_expect_eq(passes_at(&v, 1, t + 4), 2, "client 1 (used longest ago) was not pushed out");
    cr_expect_eq(atomic_load(&v.table->evicted), 2);
    cr_expect_eq(mg_client_limit_tracked(&v, t + 4), 8);
}

Test(client_limit, recovered_entries_are_reused_before_evicting)
{
    /* One set of 8; T = 60 s, a burst of 3 (tolerance 120 s). */
    struct mg_client_view v = new_limit(1, 1, 3);
    for (unsigned k = 0; k < 7; k++)
        cr_assert_eq(passes_at(&v, k, T0), 3);             /* tat T0 + 180 s */
    cr_assert(take(&v, 7, T0 + 10 * MG_NS_PER_SEC, NULL)); /* tat T0 + 70 s */
    /* At T0 + 100 s, client 7 is back to a full burst; 0..6 are not, and were used longer
     * ago: taking theirs would throw away a limit still in force. */
    int64_t t = T0 + 100 * MG_NS_PER_SEC;
    cr_assert_eq(mg_client_limit_tracked(&v, t), 7);
    cr_expect_eq(passes_at(&v, 8, t), 3);
    cr_expect_eq(atomic_load(&v.table->evicted), 0, "a client still limited was pushed out");
    for (unsigned k = 0; k < 7; k++)
        cr_expect_eq(passes_at(&v, k, t), 1, "client %u lost its state", k);
    cr_expect_eq(mg_client_limit_tracked(&v, t), 8);
}

struct board {
    _Atomic int ready;
    _Atomic int go;
    uint32_t allowed[8];
};

Test(client_limit, many_processes_share_one_allowance)
{
    /* T = 60 s, a burst of 4000: at one instant, 4000 of the 8000 pass in all, whoever asks.
     * A burst that large keeps the processes racing on the entry for half the run. */
    struct mg_client_view v = new_limit(4, 1, 4000);
    struct board *b = shared(sizeof *b);
    pid_t kids[8];
    for (int k = 0; k < 8; k++) {
        kids[k] = fork();
        cr_assert_geq(kids[k], 0);
        if (kids[k] == 0) {
            alarm(20);
            atomic_fetch_add(&b->ready, 1);
            while (!atomic_load(&b->go))
                sched_yield();
            uint32_t mine = 0;
            for (int i = 0; i < 1000; i++)
                mine += mg_client_limit_take(&v, getpid(), client(42), T0, NULL);
            b->allowed[k] = mine;
            _exit(0);
        }
    }
    while (atomic_load(&b->ready) < 8)
        sched_yield();
    atomic_store(&b->go, 1);
    uint32_t total = 0;
    for (int k = 0; k < 8; k++) {
        int status;
        cr_assert_eq(waitpid(kids[k], &status, 0), kids[k]);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: %d", k, status);
        total += b->allowed[k];
    }
    cr_expect_eq(total, 4000, "%u requests passed a burst of 4000", total);
    cr_expect_eq(atomic_load(&v.table->allowed), 4000);
    cr_expect_eq(atomic_load(&v.table->limited), 8000 - 4000);
}

/* A take in a child that is killed by SIGALRM after ms: the exit status tells whether it
 * completed (0), or hung on the lock (SIGALRM). */
static int take_in_child(struct mg_client_view *v, unsigned who, int ms)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct itimerval it = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
        setitimer(ITIMER_REAL, &it, NULL);
        mg_client_limit_take(v, getpid(), client(who), T0, NULL);
        _exit(0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return status;
}

Test(client_limit, a_lock_held_by_a_killed_worker_is_reclaimed)
{
    struct mg_client_view v = new_limit(4, 60, 5);
    struct mg_lock *lock = &v.sets[mg_client_limit_set_of(&v, client(3))].lock;
    pid_t dying = fork();
    cr_assert_geq(dying, 0);
    if (dying == 0) {
        mg_lock_acquire(lock, getpid());
        raise(SIGKILL); /* dies inside the critical section */
        _exit(0);
    }
    int status;
    cr_assert_eq(waitpid(dying, &status, 0), dying);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    cr_assert_eq(atomic_load(&lock->owner_pid), dying, "the dead worker did not hold the lock");

    status = take_in_child(&v, 3, 200);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM,
              "a take completed on a lock a dead worker holds");

    cr_expect_eq(mg_client_limit_reclaim(&v, getpid()), 0, "freed a lock its pid did not hold");
    cr_expect_eq(mg_client_limit_reclaim(&v, dying), 1);
    cr_expect_eq(atomic_load(&lock->owner_pid), 0);
    cr_expect_eq(mg_client_limit_reclaim(&v, dying), 0, "reclaimed twice");

    status = take_in_child(&v, 3, 5000);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the take still hangs after the reclaim: %d", status);
    cr_expect_eq(atomic_load(&v.table->allowed), 1);
}
