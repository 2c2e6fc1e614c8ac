/* SPDX-License-Identifier: ISC */
/*
 * client_limit: a per-client request rate limit for the whole process group, kept in the
 * shared segment so a client gets one allowance however the kernel spreads its connections
 * over the workers. A client is a 16-byte key (an IPv4-mapped address, or an IPv6 /64
 * prefix: the caller derives it); the limit is per_minute requests a minute with bursts of
 * up to `burst` at once.
 *
 * The algorithm is GCRA (the generic cell rate algorithm, a token bucket told as one time).
 * With T = 60 s / per_minute and tolerance = T * (burst - 1), each client has a theoretical
 * arrival time tat; a request at now takes tat' = max(tat, now) and is refused when
 * tat' - now > tolerance (it may come again in tat' - now - tolerance), else allowed with
 * tat = tat' + T. A new client gets exactly `burst` requests at once, then one every T.
 * Why GCRA rather than a counted bucket: the whole state of a client is one int64 on
 * CLOCK_MONOTONIC (invariant 3), with no refill to run and no fractions; Retry-After falls
 * out of the same subtraction; and an entry whose tat <= now is the same as no entry at
 * all (a full burst), so nothing ever needs sweeping: such entries are simply reused.
 *
 * The table is set-associative: a header record (parameters, hash seed, counters) and
 * `sets` sets of MG_CLIENT_WAYS entries, each set with its own lock, so workers serving
 * different clients rarely meet, and a lookup scans 8 entries at the most. The set of a
 * key is a hash keyed with a random seed drawn at init, so a client cannot choose keys that
 * all land in one set to push the others out. Within its set a new client takes a free
 * entry, else a recovered one (tat <= now: nothing is lost), else the one used longest ago
 * (by last_ns, the time of its last allowed request), which is counted as `evicted`: that
 * client starts again from a full burst. So the table keeps working when full, and a
 * growing `evicted` says it is too small for the clients it sees (or that someone floods
 * it from many addresses).
 *
 * Invariants:
 *   - a key is in at most one used entry (tat_ns != 0) of its set, and only in its set;
 *   - an allowed request moves its entry's tat forward by exactly T and sets last_ns;
 *     a refused one writes nothing in the table but the `limited` counter;
 *   - tat_ns == 0 marks a free entry (CLOCK_MONOTONIC is never 0 on a running system);
 *   - counters only grow (8).
 *
 * Who writes what: mg_client_limit_init (the master, before any worker runs) writes the
 * header and zeroes the sets; afterwards the seed is only read, and the parameters change
 * only when the master applies a reload (mg_client_limit_set_rate): each is atomic, so a
 * request that meets a reload is judged by the old or the new values, never by torn ones.
 * Workers write entries under their set's lock only, for a few dozen instructions that
 * never block, and add to the counters atomically after. The master, after reaping a
 * worker, frees any set lock it died holding (invariant 2); entries name no owner, so
 * there is nothing else to give back, and a worker killed inside the critical section
 * leaves at most one entry half-written: one client limited by another's time, or given a
 * fresh burst. The dump tool reads without locks (mg_client_limit_tracked).
 */
#ifndef MESHGATE_CLIENT_LIMIT_H
#define MESHGATE_CLIENT_LIMIT_H

#include "lock.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define MG_CLIENT_WAYS 8 /* entries per set */
#define MG_CLIENT_KEY_BYTES 16

struct mg_client_entry {
    uint8_t key[MG_CLIENT_KEY_BYTES]; /* an IPv4-mapped address, or an IPv6 /64 prefix */
    int64_t tat_ns;                   /* GCRA theoretical arrival time (monotonic); 0: free */
    int64_t last_ns;                  /* last allowed request, for eviction */
};

/* One cache line of lock, then the entries: a set is 5 lines, never shared with another. */
struct mg_client_set {
    _Alignas(64) struct mg_lock lock;
    uint8_t reserved[64 - sizeof(struct mg_lock)];
    struct mg_client_entry entry[MG_CLIENT_WAYS];
};

struct mg_client_table {
    uint32_t sets;               /* number of sets (>= 1; 0 turns the limit off) */
    _Atomic uint32_t burst;      /* requests allowed at once (>= 1) */
    _Atomic uint32_t per_minute; /* 0: the limit is off */
    uint32_t reserved;
    _Atomic int64_t interval_ns;  /* T = 60 s / per_minute */
    _Atomic int64_t tolerance_ns; /* T * (burst - 1), bounded so times cannot overflow */
    uint64_t seed[2];             /* hash key, random at init */
    /* counters: only grow */
    _Atomic uint64_t allowed;
    _Atomic uint64_t limited;
    _Atomic uint64_t evicted; /* entries still limiting pushed out by a new client (set full) */
};

/* The table and its sets, as the segment holds them (two sections). */
struct mg_client_view {
    struct mg_client_table *table;
    struct mg_client_set *sets; /* table->sets of them */
};

/*
 * sets: how many sets (sets * MG_CLIENT_WAYS entries; mg_client_limit_sets_for gives it);
 * per_minute 0 turns the limit off; burst 0 is taken as 1. Zeroes the sets and the
 * counters and draws a new hash seed.
 */
void mg_client_limit_init(struct mg_client_view *v, uint32_t sets, uint32_t per_minute,
                          uint32_t burst);

/* Master, on reload: a new rate and burst (per_minute 0 turns the limit off). Entries keep
 * their times: a client limited now stays limited only as long as the new rate says. */
void mg_client_limit_set_rate(struct mg_client_view *v, uint32_t per_minute, uint32_t burst);

/* How many sets hold at least `entries` entries: ceil(entries / MG_CLIENT_WAYS), at least 1. */
uint32_t mg_client_limit_sets_for(uint32_t entries);

/*
 * One request of client key at now_ns (CLOCK_MONOTONIC). true: allowed, and counted
 * (*retry_after_ns is 0). false: refused, and *retry_after_ns (> 0) is how long until a
 * request of this client would pass; a refused request changes nothing but the `limited`
 * counter. retry_after_ns may be NULL. When the limit is off, always true and the table is
 * not touched.
 */
bool mg_client_limit_take(struct mg_client_view *v, int pid, const uint8_t key[MG_CLIENT_KEY_BYTES],
                          int64_t now_ns, int64_t *retry_after_ns);

/* Which set key belongs to (0 .. sets - 1): for tests and the dump tool. */
uint32_t mg_client_limit_set_of(const struct mg_client_view *v,
                                const uint8_t key[MG_CLIENT_KEY_BYTES]);

/* Master, after reaping pid: frees any set lock pid held; returns how many. */
unsigned mg_client_limit_reclaim(struct mg_client_view *v, int pid);

/*
 * For display, read without locks: how many entries have tat_ns > now_ns (clients that are
 * not back to a full burst). A count taken while workers write may be off by the few
 * entries that change meanwhile.
 */
uint32_t mg_client_limit_tracked(const struct mg_client_view *v, int64_t now_ns);

/*
 * The table's counters, once: X(field, JSON key, what it counts). /metrics
 * (meshgate_anon_rate_FIELD_total), /api/perf, /server-status and meshgate-shm show them
 * from this list, so a counter added here appears everywhere. The refusals (`limited`) are
 * not in it: the group counter anon_rate_limited (stats.h) counts the same refusals where
 * the dispatcher answers them, under the name every reader already shows.
 */
#define MG_CLIENT_COUNTER_LIST(X)                                                                  \
    X(allowed, "allowed", "anonymous heavy requests the per-client rate let through")              \
    X(evicted, "evicted", "rate table entries pushed out by new clients while still limiting")

/* The table's state at one moment (mg_client_limit_read). */
struct mg_client_snapshot {
    uint32_t per_minute; /* 0: the limit is off */
    uint32_t burst;
    uint32_t entries; /* sets * MG_CLIENT_WAYS */
    uint32_t tracked; /* as mg_client_limit_tracked */
#define MG_CLIENT_SNAPSHOT_COUNTER(field, json, what) uint64_t field;
    MG_CLIENT_COUNTER_LIST(MG_CLIENT_SNAPSHOT_COUNTER)
#undef MG_CLIENT_SNAPSHOT_COUNTER
};

/*
 * The one way to read the table's numbers. The table has no lock of its own (each set has
 * one, and the parameters are atomic words), so nothing here locks: each value is whole,
 * and a rate and burst read across a reload may be one old and one new.
 */
void mg_client_limit_read(const struct mg_client_view *v, int64_t now_ns,
                          struct mg_client_snapshot *out);

/* A Retry-After header value: retry_after_ns in whole seconds, rounded up, at least 1. */
int mg_client_limit_retry_after_s(int64_t retry_after_ns);

#endif
