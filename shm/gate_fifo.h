/* SPDX-License-Identifier: ISC */
/*
 * gate_fifo: a counting gate for the whole process group, with a line. At most `cap`
 * permits are held at once (0: no limit, for A/B measurements); a request that finds them
 * all taken waits in arrival order, at most `queue_max` of them and each for at most
 * `wait_ns`; past either bound it is refused. The cold-scan cap of reach reports is one.
 *
 * Why not a POSIX semaphore: its count is lost when a holder dies, and sem_timedwait
 * follows the wall clock. Instead every permit and every place in line is a record that
 * names its owner (pid, worker slot, key, since when), so the master can give back exactly
 * what a dead worker held (invariant 2), and the dump tool can show who holds what. A
 * blocking wait (mg_fifo_gate_acquire) sleeps on a futex word on CLOCK_MONOTONIC (invariant
 * 3); a worker's parked request is woken through its slot's eventfd (the hand-off below).
 *
 * Invariants, each under the gate's lock:
 *   - in_flight <= cap (when cap > 0) and peak records the largest in_flight seen (1);
 *   - a waiter is admitted only when it is the next *ready* place in the line's order and a
 *     permit is free, and checking the bound and joining the line are one step, so a burst
 *     cannot overshoot queue_max. The order is fair between owners and FIFO within one: each
 *     place is given a round when it joins, the line's round (that of the permit given last)
 *     or, if later, the round after its owner's latest permit or place; places are served by
 *     round, then by arrival. So a freed permit goes round-robin over the owners waiting:
 *     an owner that joins while another holds permits and a line of places is served next,
 *     not after all of them. One owner's rounds grow with its arrivals, so its places (and a
 *     line whose places have no owner, which count as one owner) stay FIFO, and places of
 *     equal rounds go by arrival;
 *   - no starvation: a later arrival overtakes a place only with a lower round, and each
 *     owner's rounds step by one per place, so a place of round r that joined when the line's
 *     round was v is overtaken by at most r - v later places of each other owner. Each round
 *     from v to r - 1 is one of its own owner's places, still held then (fewer than its share)
 *     or given up by that owner; for an owner that held none, r = v and no one overtakes it;
 *   - a permit goes only to work that can run at once: a caller whose worker cannot start
 *     the work now (its helper thread is busy) joins or polls unready; it keeps its place,
 *     marked unready, and is passed over until it polls ready again. So a permit is never
 *     held while its work waits for a helper, and the cap is the number of builds that run
 *     (docs/architecture.md, "A permit only for work that can run");
 *   - within one worker the line's order holds: a place unready for its worker's reason
 *     (MG_FIFO_WORKER_BUSY) waits for what every other such place of that worker slot waits
 *     for, so a ready call from the slot (a join or a poll) marks them all ready in the same
 *     step, and a permit goes to the first of them in the line's order, not to whichever
 *     the worker happened to ask first. A place held back for the group's reason
 *     (MG_FIFO_HELD_BACK) is ready only when its own poll says so;
 *   - a permit is given back once: each admission has a token and only that token releases;
 *   - one owner (a client's address, for the anonymous line) holds at most its share of the
 *     permits and places together: a join given an owner and a share counts that owner's
 *     permits and places (followers aside) and refuses at once past the share, in the same
 *     step as the bound check, so a burst from one owner cannot overshoot its share either;
 *     a place keeps its owner when it takes its permit. A join without an owner (share 0)
 *     is counted by no one;
 *   - counters only grow (8);
 *   - a freed permit is handed to its next waiter, never polled for: whatever frees a
 *     permit or moves the line (release, a place that times out, is cancelled, steps aside
 *     unready or is admitted, reclaim, a raised cap) picks, in the same critical section, the
 *     next ready places, one per free permit, and after the lock wakes their workers
 *     through their slots' eventfds (shm/wake.h). The permit is theirs from that moment: no
 *     later arrival overtakes them (the order invariant above), so it stays free only until
 *     their loops' next turn. A woken place whose work cannot run after all steps aside,
 *     which wakes the next in turn. As many of the next unready places are woken too: a
 *     place unready for its worker's reason is also woken by its helper's eventfd, but one
 *     held back for the group's (the upstream's reserve for signed-in clients) can only
 *     learn at a release that it may go. So a parked waiter costs its worker nothing until
 *     it is woken or its deadline comes;
 *   - a wake is never lost: an eventfd keeps its count until the worker reads it, so a wake
 *     written between a waiter's look at the line and its worker's next wait is seen by that
 *     wait. A waiter's worker still asks it at least once a second (PARK_SAFETY_NS in
 *     workers/worker.c), which bounds a wake the code forgot, never a race;
 *   - a waiter or holder killed with SIGKILL strands nothing: reclaim gives back its permits
 *     and places and wakes the next in line, and the followers (a build it held may now be
 *     theirs to do);
 *   - a follower is woken when the build it follows ends (mg_fifo_gate_wake_followers, after
 *     the result is stored or the claim given up) or its builder is reclaimed.
 */
#ifndef MESHGATE_GATE_FIFO_H
#define MESHGATE_GATE_FIFO_H

#include "lock.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define MG_FIFO_HOLDERS_MAX 64
#define MG_FIFO_WAITERS_MAX 256
#define MG_FIFO_KEY_MAX 80
#define MG_FIFO_OWNER_BYTES 16 /* a client's address key (mg_client_key); all zero: none */

struct mg_fifo_record {
    int32_t pid; /* 0: free record */
    uint32_t slot;
    uint32_t follower; /* a place in line that waits for another's result, not a permit */
    uint32_t unready;  /* 0: ready; else why its work cannot run now (enum mg_fifo_ready) */
    uint8_t owner[MG_FIFO_OWNER_BYTES]; /* whose share it counts against; all zero: none */
    uint64_t id;                        /* token of a holder, ticket of a waiter */
    uint64_t round; /* the round a place is served in (the fair hand-off), kept by its permit */
    int64_t since_monotonic_ns;
    char key[MG_FIFO_KEY_MAX];
};

struct mg_fifo_gate {
    struct mg_lock lock;
    uint32_t cap;       /* 0: unlimited */
    uint32_t queue_max; /* places in line */
    int64_t wait_ns;    /* longest wait in line */
    /* under lock */
    uint32_t in_flight;
    uint32_t waiting;
    uint64_t next_id;
    uint64_t round; /* the round of the permit given last; a new owner's place joins in it */
    struct mg_fifo_record holder[MG_FIFO_HOLDERS_MAX];
    struct mg_fifo_record waiter[MG_FIFO_WAITERS_MAX];
    /* bumped on every release, cancel and reclaim; in-process waiters (mg_fifo_gate_acquire)
     * sleep on it; a worker's parked requests are woken through their slots instead */
    _Atomic uint32_t wake_seq;
    _Atomic uint32_t peak;
    /* counters: only grow */
    _Atomic uint64_t acquired;        /* permits given, at once or after waiting */
    _Atomic uint64_t waited;          /* requests that had to join the line */
    _Atomic uint64_t refused_full;    /* the line was full */
    _Atomic uint64_t refused_timeout; /* the wait ran out */
    _Atomic uint64_t refused_share;   /* its owner held its share of permits and places */
    _Atomic uint64_t cancelled;       /* left the line (client gone) */
    _Atomic uint64_t reclaimed;       /* permits and places of dead workers given back */
    _Atomic uint64_t background;      /* permits taken by background work (try, no line) */
    _Atomic uint64_t background_busy; /* background tries that found no permit free */
};

/*
 * Every counter of a FIFO gate, once: X(field, JSON key, what it counts). Each reader
 * (/metrics, /api/perf and /api/healthz, /server-status, meshgate-shm) shows them from this
 * list, so a counter added here appears everywhere.
 */
#define MG_FIFO_COUNTER_LIST(X)                                                                    \
    X(acquired, "acquired", "permits given, at once or after waiting")                             \
    X(waited, "waited", "requests that joined the line")                                           \
    X(refused_full, "refusedFull", "requests refused because the line was full")                   \
    X(refused_timeout, "refusedTimeout", "requests refused because their wait ran out")            \
    X(refused_share, "refusedShare",                                                               \
      "requests refused at once because their client held its share of permits and places")        \
    X(cancelled, "cancelled", "places given up because the client went away")                      \
    X(reclaimed, "reclaimed", "permits and places of dead workers given back")                     \
    X(background, "background", "permits taken by background work, which never joins the line")    \
    X(background_busy, "backgroundBusy", "background tries that found no permit free")

/* A gate's state at one moment (mg_fifo_gate_read). */
struct mg_fifo_snapshot {
    uint32_t cap;
    uint32_t queue_max;
    int64_t wait_ns;
    uint32_t in_flight;
    uint32_t waiting; /* places in line, followers included */
    uint32_t peak;
    uint64_t round; /* the round of the permit given last: a new owner's place joins in it */
#define MG_FIFO_SNAPSHOT_COUNTER(field, json, what) uint64_t field;
    MG_FIFO_COUNTER_LIST(MG_FIFO_SNAPSHOT_COUNTER)
#undef MG_FIFO_SNAPSHOT_COUNTER
};

/*
 * The one way to read a gate's numbers: copied under its lock (locked, pid: the reader), so
 * in_flight, waiting and the bounds agree with each other; or, for a private copy of the
 * segment (the dump tool, which never locks), as the copy holds them (locked false).
 */
void mg_fifo_gate_read(const struct mg_fifo_gate *g, int pid, bool locked,
                       struct mg_fifo_snapshot *out);

/* A gate's limits: what admission asks on every request, without the lock. */
struct mg_fifo_limits {
    uint32_t cap; /* 0: unlimited */
    uint32_t queue_max;
    int64_t wait_ns;
};

/*
 * The one way to read a gate's limits on the hot path: each field is loaded atomically
 * (mg_fifo_gate_configure stores them atomically under the lock), so a reload never shows a
 * torn value; the three may come from either side of a reload, which admission tolerates (a
 * request admitted under the old cap is one of the permits a lower cap waits out).
 */
struct mg_fifo_limits mg_fifo_gate_limits(const struct mg_fifo_gate *g);

/* Which records mg_fifo_gate_records copies. */
enum mg_fifo_records {
    MG_FIFO_HOLDERS,   /* permits held */
    MG_FIFO_WAITERS,   /* places in line waiting for a permit */
    MG_FIFO_FOLLOWERS, /* places waiting for another request's result */
};

/*
 * The one way to read who holds and who waits: copies the occupied records of one kind into
 * out (at most max; MG_FIFO_WAITERS_MAX always suffices), keys re-terminated, under the
 * gate's lock (locked, pid: the reader) or as a private copy of the segment holds them
 * (locked false). Returns how many. The walk is as long as a join's.
 */
unsigned mg_fifo_gate_records(const struct mg_fifo_gate *g, int pid, bool locked,
                              enum mg_fifo_records which, struct mg_fifo_record *out, unsigned max);

enum mg_fifo_result {
    MG_FIFO_ADMITTED = 0,
    MG_FIFO_REFUSED_FULL,
    MG_FIFO_REFUSED_TIMEOUT,
    MG_FIFO_CANCELLED,
    MG_FIFO_REFUSED_SHARE, /* the owner holds its share (mg_fifo_gate_join_owned) */
};

void mg_fifo_gate_init(struct mg_fifo_gate *g, uint32_t cap, uint32_t queue_max, int64_t wait_ns);

/*
 * Master, on reload: new limits, under the gate's lock. Permits held stay held (a lower cap
 * admits no one until in_flight falls below it); waiters are woken, so a raised cap admits
 * them at once. A request already in line keeps the deadline it was given.
 */
void mg_fifo_gate_configure(struct mg_fifo_gate *g, int pid, uint32_t cap, uint32_t queue_max,
                            int64_t wait_ns);

/* Says, while a request waits, whether its client is gone (then it leaves the line). */
typedef bool (*mg_fifo_cancel_fn)(void *arg);

/*
 * Takes a permit for key, waiting in line when none is free, until now + wait_ns at the most.
 * On MG_FIFO_ADMITTED *token identifies the permit. *waited_ns (may be NULL) is the time
 * spent in line. cancel (may be NULL) is asked every few milliseconds while waiting.
 */
enum mg_fifo_result mg_fifo_gate_acquire(struct mg_fifo_gate *g, int pid, unsigned slot,
                                         const char *key, mg_fifo_cancel_fn cancel,
                                         void *cancel_arg, uint64_t *token, int64_t *waited_ns);

/*
 * The same in steps, for a caller that must not block (a worker's event loop parks the
 * request and asks again when its slot is woken, or at its deadline):
 *   join:   ADMITTED (*token), REFUSED_FULL, or QUEUED with *place and *ticket;
 *   poll:   ADMITTED (*token) when the place is first in line and a permit is free,
 *           REFUSED_TIMEOUT (the place is given up) at now >= deadline, else QUEUED;
 *   cancel: gives the place up (the client went away).
 */
enum { MG_FIFO_QUEUED = 100 };
int mg_fifo_gate_join(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                      uint64_t *token, int *place, uint64_t *ticket);
int mg_fifo_gate_poll(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key, int place,
                      uint64_t ticket, int64_t now, int64_t deadline, uint64_t *token);
/* Whether a caller's work could run now, and if not, why (true and false convert to READY
 * and HELD_BACK). */
enum mg_fifo_ready {
    MG_FIFO_HELD_BACK = 0,  /* not now, for the group's reason: only its own poll says when */
    MG_FIFO_READY = 1,      /* it can run at once */
    MG_FIFO_WORKER_BUSY = 2 /* not now, for its worker's reason (the helper is busy): ready
                               when any call from the same worker slot is */
};
/* The same, for a caller that says whether its work could run now (ready): an unready one
 * is never admitted; it joins the line (or keeps its place) marked unready, passed over by
 * ready places behind it. join and poll above are these with ready MG_FIFO_READY. */
int mg_fifo_gate_join_ready(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                            enum mg_fifo_ready ready, uint64_t *token, int *place,
                            uint64_t *ticket);
int mg_fifo_gate_poll_ready(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                            int place, uint64_t ticket, enum mg_fifo_ready ready, int64_t now,
                            int64_t deadline, uint64_t *token);
/* The same again, for a caller that names the request's owner (owner, MG_FIFO_OWNER_BYTES)
 * and the most permits and places together that owner may hold (share; 0 or owner NULL: no
 * share): past it, REFUSED_SHARE at once (counted as refused_share). The others are this
 * with no owner. */
int mg_fifo_gate_join_owned(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                            enum mg_fifo_ready ready, const uint8_t *owner, uint32_t share,
                            uint64_t *token, int *place, uint64_t *ticket);
void mg_fifo_gate_cancel(struct mg_fifo_gate *g, int pid, int place, uint64_t ticket);

/*
 * For background work (the summaries pass, the group's tables): a permit when one is free and
 * no ready request waits for it, else nothing. It never joins the line, so it is counted as
 * background work (background, background_busy), never as a wait, a refusal or a cancel; the
 * permit (counted in acquired too) is given back with mg_fifo_gate_release.
 */
bool mg_fifo_gate_try_background(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                                 uint64_t *token);

/* Gives a permit back; false (and nothing changes) when token is not a current holder's. */
bool mg_fifo_gate_release(struct mg_fifo_gate *g, int pid, uint64_t token);

/*
 * A place in line for a request that waits for another request's result (an identical key
 * being built) rather than for a permit. A follower is no cold work and holds no worker (it
 * is parked), so it does not take one of the queue_max places of requests that wait for a
 * permit: followers have the records those leave, MG_FIFO_WAITERS_MAX - queue_max of them
 * (so with the default line on 4 workers, where queue_max is 0, identical requests still
 * share one build). Returns the place (>= 0), or -1 when those are all taken (counted as
 * refused_full).
 */
int mg_fifo_gate_follow(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key);
/* Wakes the workers of every follower: the build they wait for has ended (its result stored,
 * or its claim given up). */
void mg_fifo_gate_wake_followers(struct mg_fifo_gate *g, int pid);
/* Leaves a place taken by mg_fifo_gate_follow. */
void mg_fifo_gate_unfollow(struct mg_fifo_gate *g, int pid, int place);

/* Master, after reaping pid: gives back its permits and places in line; returns how many. */
unsigned mg_fifo_gate_reclaim(struct mg_fifo_gate *g, int pid);

#endif
