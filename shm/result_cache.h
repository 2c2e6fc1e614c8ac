/* SPDX-License-Identifier: ISC */
/*
 * result_cache: rendered bodies shared by the whole process group (the reach reports), with
 * the in-flight table that makes identical cold requests share one build.
 *
 * An entry is FREE, BUILDING (one request claimed the key and builds it: its pid and a build
 * id are recorded) or READY (the body is stored until it expires). A request that finds its
 * key READY copies the body (a hit: no gate, no database); BUILDING, it waits for that build
 * (coalesced); FREE, it claims the key and builds. Nothing half-written is ever served: a
 * body is copied in while the entry is BUILDING and becomes visible with the switch to READY,
 * under the lock. A builder that dies leaves its entry BUILDING until the master reclaims it
 * (FREE again), and a waiter that sees its builder dead takes the build over, so no one hangs.
 * Errors, 404s and refusals store nothing: the builder abandons its claim.
 *
 * The lock is held only around lookups and state changes, never around a copy or a system
 * call: a hit pins the entry under the lock and copies the body after it (a pinned entry is
 * neither rebuilt nor given to another key), and then checks, under the lock again, that the
 * entry was not rebuilt meanwhile (a reader stopped longer than a stale pin lasts); a store
 * copies into its BUILDING entry, which no one else reads or writes, before it takes the lock
 * to make it READY; whether a builder is alive is asked after the lock.
 *
 * Bodies live in one pool of pages after the entry table, shared by all entries: an entry
 * owns one contiguous run of as many pages as its body needs ([first_page, first_page +
 * page_count)), so a hit's copy after the lock reads one range. A BUILDING entry owns no
 * pages: its store, which knows the size, reserves a run under the lock, copies into it after
 * the lock, and makes it READY under the lock again. The run is chosen in this order:
 *   1. free pages, in the smallest free stretch that holds the body (best fit);
 *   2. else pages of expired entries (the run that evicts the fewest);
 *   3. else pages of READY entries in least-recently-used order: the run whose most recently
 *      used victim was used longest ago, so an entry is evicted only when every run that
 *      spares it takes one used more recently, and only the entries in the run's way go.
 * The pages of a pinned entry and of an entry being copied into (BUILDING with a run) are
 * never part of a run. A body larger than a quarter of the pool (MG_CACHE_POOL_SHARE) is
 * served but not stored (counted as too_large): so one report never evicts more than a
 * quarter of what is cached, and a run of that length is found around pins and copies
 * (which last a copy) in all but a pathological pool; where none is found, the body is
 * served and not stored. Entries are counted apart from pages: a claim that finds no free
 * entry takes an expired one, then the least recently used READY one, and its pages go free
 * with it.
 *
 * Invariants: the runs of two entries never overlap and lie inside the pool; an entry owns a
 * run only while READY or while its builder copies (BUILDING), so the master's reclaim of a
 * dead builder frees its pages with its entry; a run is chosen, and its victims evicted, in
 * one critical section, whose cost is a sort of the entries that own pages (at most
 * MG_CACHE_ENTRIES_MAX) and one pass over them.
 */
#ifndef MESHGATE_RESULT_CACHE_H
#define MESHGATE_RESULT_CACHE_H

#include "gate_fifo.h"
#include "lock.h"
#include "table_stats.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_CACHE_PAGE 4096
#define MG_CACHE_KEY_MAX MG_FIFO_KEY_MAX
#define MG_CACHE_ENTRIES_MAX 4096 /* MESHGATE_REACH_CACHE_ENTRIES' bound */
/* A body longer than 1/MG_CACHE_POOL_SHARE of the pool (at least one page) is not stored. */
#define MG_CACHE_POOL_SHARE 4

enum mg_cache_state { MG_CACHE_FREE = 0, MG_CACHE_BUILDING, MG_CACHE_READY };

struct mg_cache_entry {
    uint32_t state;
    uint32_t body_len;
    char key[MG_CACHE_KEY_MAX];
    int32_t builder_pid;
    uint32_t builder_slot;
    uint64_t build_id;
    int64_t since_monotonic_ns; /* build start (BUILDING) or store time (READY) */
    int64_t expires_monotonic_ns;
    int64_t used_monotonic_ns;
    /* Readers copying the body after the lock (a pin keeps the entry from being rebuilt or
     * given to another key meanwhile), and the monotonic second of the last pin: a pin
     * older than MG_CACHE_PIN_STALE_S is one its reader left by dying, and no longer holds. */
    uint32_t pins;
    uint32_t pinned_s;
    /* The body's run of pool pages; page_count 0: none (FREE, or BUILDING before its store
     * reserved one, or an empty body). */
    uint32_t first_page;
    uint32_t page_count;
};

struct mg_result_cache {
    struct mg_lock lock;
    uint32_t entries;
    uint32_t pages; /* the pool, shared by all entries */
    int64_t ttl_ns;
    uint64_t next_build_id;
    _Atomic uint32_t wake_seq; /* bumped when a build ends or is abandoned */
    uint32_t reserved;
    /* counters: only grow */
    _Atomic uint64_t hits;
    _Atomic uint64_t misses;
    _Atomic uint64_t coalesced;
    _Atomic uint64_t stale; /* answered with the previous answer (cold_report.c) */
    _Atomic uint64_t stored;
    _Atomic uint64_t evicted;
    _Atomic uint64_t too_large;
    _Atomic uint64_t takeovers;
    _Atomic uint64_t reclaimed;
    /* The relay table (workers/data/node_relay.c) shared through the cache: its passes over the
     * observations in the group, and the copies workers decoded from a stored one. */
    _Atomic uint64_t relay_builds;
    _Atomic uint64_t relay_copies;
    /* The same for its probe: whether the node list needs the table at all. */
    _Atomic uint64_t relay_probe_builds;
    _Atomic uint64_t relay_probe_copies;
    /* The same for the node list's hash sizes (workers/data/node_hash_sizes.c). */
    _Atomic uint64_t hash_size_builds;
    _Atomic uint64_t hash_size_copies;
    /* The same for the region map of /api/nodes?region= (workers/data/region_map.c). */
    _Atomic uint64_t region_builds;
    _Atomic uint64_t region_copies;
    /* The same for the neighbour graph (workers/data/neighbor_graph.c). */
    _Atomic uint64_t neighbor_builds;
    _Atomic uint64_t neighbor_copies;
    /* The same for the node usefulness scores (workers/data/node_usefulness.c). */
    _Atomic uint64_t usefulness_builds;
    _Atomic uint64_t usefulness_copies;
    /* The same for the nodes' multi-byte capability (workers/data/node_multibyte.c). */
    _Atomic uint64_t multibyte_builds;
    _Atomic uint64_t multibyte_copies;
    /* Static files' compressed bodies (workers/core/static_files.c): compressions made, and
     * answers given from a stored one. */
    _Atomic uint64_t static_gzips;
    _Atomic uint64_t static_gzip_hits;
    /* The group tables kept across restarts (MESHGATE_STATE_DIR, workers/data/state_file.h):
     * files put into the cache at a start, refused by reason, written after a pass. */
    _Atomic uint64_t state_loaded;
    _Atomic uint64_t state_rejected_bad;
    _Atomic uint64_t state_rejected_unsafe;
    _Atomic uint64_t state_rejected_other_db;
    _Atomic uint64_t state_written;
    _Atomic uint64_t state_write_failures;
    /* What each shared table reports (table_stats.h), kept here with the group's counters. */
    struct mg_table_stats tables[MG_TABLE_COUNT];
};

/* The cache and its two tables, as the segment holds them. */
struct mg_cache_view {
    struct mg_result_cache *cache;
    struct mg_cache_entry *entry; /* cache->entries of them */
    unsigned char *pages;         /* cache->pages pages */
};

void mg_result_cache_init(struct mg_cache_view *v, uint32_t entries, uint32_t pages,
                          int64_t ttl_ns);

/* The longest body a store keeps, in bytes (longer ones are too_large). */
size_t mg_result_cache_max_body(const struct mg_result_cache *c);

/* Master, on reload: how long entries built from now on are kept, under the cache's lock
 * (entries already built keep their expiry). */
void mg_result_cache_set_ttl(struct mg_cache_view *v, int pid, int64_t ttl_ns);

enum mg_cache_outcome {
    MG_CACHE_HIT = 0, /* *out holds the body */
    MG_CACHE_CLAIMED, /* the caller builds; *build_id identifies the claim */
    MG_CACHE_BUSY,    /* another request builds this key: wait for it */
};

#define MG_CACHE_PIN_STALE_S 10

/* A READY entry pinned by a hit, for the copy after the lock. */
struct mg_cache_pin {
    uint32_t index;
    uint32_t len; /* bytes of body */
    uint64_t build_id;
    uint32_t first_page; /* where the body is in the pool */
};

/*
 * Looks key up at now. HIT pins the entry (*pin): the caller copies the body with
 * mg_result_cache_copy, which unpins it; CLAIMED when the key is absent or expired (or its
 * builder is dead: a takeover); BUSY when a live build runs. count: the hit, miss or
 * coalesced counter grows (a request's first look; a request that follows a build looks
 * again without counting). workers/data/result_body.h copies into a buffer.
 */
enum mg_cache_outcome mg_result_cache_look(struct mg_cache_view *v, int pid, unsigned slot,
                                           const char *key, int64_t now, bool count,
                                           struct mg_cache_pin *pin, uint64_t *build_id);
/* Copies the pinned body into dst (len bytes; NULL: none) without the lock, then unpins;
 * false when the entry was rebuilt during the copy (dst holds nothing valid: look again). */
bool mg_result_cache_copy(struct mg_cache_view *v, int pid, const struct mg_cache_pin *pin,
                          void *dst);
/* True when key has a stored body that has not expired at now; copies nothing, counts
 * nothing (what admission asks to tell a warm answer from a cold build). */
bool mg_result_cache_warm(struct mg_cache_view *v, int pid, const char *key, int64_t now);
/* True when a live build of key is under way (a request for it would follow that build, not
 * build): what admission asks so that followers are not counted as cold work. */
bool mg_result_cache_building(struct mg_cache_view *v, int pid, const char *key);
/* The previous answer of a report (workers/core/cold_report.c): pins, as a hit does, the READY
 * body stored last (at or after oldest, not expired at now) among the keys that start with
 * prefix, except the key except; *stored: when it was stored. Claims and counts nothing; false
 * when there is none. The caller copies it with mg_result_cache_copy. */
bool mg_result_cache_pin_newest(struct mg_cache_view *v, int pid, const char *prefix,
                                const char *except, int64_t oldest, int64_t now,
                                struct mg_cache_pin *pin, int64_t *stored);
/*
 * Waits (until deadline, CLOCK_MONOTONIC) for the build of key to end, then looks again (not
 * counted): HIT (pinned, as mg_result_cache_look), CLAIMED (the build was abandoned or its
 * builder died: the caller builds now), or BUSY (the deadline passed). The waiter sleeps on
 * wake_seq, which every build's end (stored, abandoned, reclaimed) bumps and wakes; cancel
 * (NULL: none) is asked every few milliseconds, and without it the wait wakes only on a
 * build's end or every few seconds, to ask whether the builder still lives.
 */
enum mg_cache_outcome mg_result_cache_wait_pin(struct mg_cache_view *v, int pid, unsigned slot,
                                               const char *key, int64_t deadline,
                                               mg_fifo_cancel_fn cancel, void *cancel_arg,
                                               struct mg_cache_pin *pin, uint64_t *build_id);

/* Stores the body of a claimed build in a run of pages chosen as the header says (evicting
 * the entries in its way), and wakes its followers. A body longer than
 * mg_result_cache_max_body, or one for which no run is free of pins and copies, is not
 * stored: the claim ends as an abandoned one does (too_large counts the first). */
void mg_result_cache_store(struct mg_cache_view *v, int pid, uint64_t build_id, const char *body,
                           size_t len, int64_t now);

/* The same, counted in none of the reports' counters (the relay table, node_relay.c, has its
 * own); true when stored. */
bool mg_result_cache_store_uncounted(struct mg_cache_view *v, int pid, uint64_t build_id,
                                     const void *body, size_t len, int64_t now);

/* Gives a claim up (error, 404, refusal): nothing is stored; followers wake and retry. */
void mg_result_cache_abandon(struct mg_cache_view *v, int pid, uint64_t build_id);

/* Makes key's stored body expired (the next look claims it): a body known to be out of date. */
void mg_result_cache_expire(struct mg_cache_view *v, int pid, const char *key);

/* Master, after reaping pid: frees the builds it claimed; returns how many. */
unsigned mg_result_cache_reclaim(struct mg_cache_view *v, int pid);

/*
 * Every counter of the cache, once: X(field, JSON key, what it counts). /metrics
 * (meshgate_reach_cache_FIELD_total), /api/perf, /server-status and meshgate-shm show them
 * from this list, so a counter added here appears everywhere.
 */
#define MG_CACHE_COUNTER_LIST(X)                                                                   \
    X(hits, "hits", "reach requests answered from the cache")                                      \
    X(misses, "misses", "reach requests that found no stored report")                              \
    X(coalesced, "coalesced", "reach requests that waited for an identical build")                 \
    X(stale, "stale", "reports answered with their previous answer while the next is built")       \
    X(stored, "stored", "reach reports stored")                                                    \
    X(evicted, "evicted", "stored reach reports dropped to make room")                             \
    X(too_large, "tooLarge", "reach reports served but too large to store")                        \
    X(takeovers, "takeovers", "builds taken over from a builder that died")                        \
    X(reclaimed, "reclaimed", "builds of dead workers freed by the master")                        \
    X(relay_builds, "relayBuilds",                                                                 \
      "passes over the observations that built the relay table (node_relay.h)")                    \
    X(relay_copies, "relayCopies",                                                                 \
      "relay tables a worker took from the group's copy in the cache")                             \
    X(relay_probe_builds, "relayProbeBuilds",                                                      \
      "reads of the paths telling whether the node list needs the relay table (node_relay.c)")     \
    X(relay_probe_copies, "relayProbeCopies",                                                      \
      "relay probes a worker took from the group's copy in the cache")                             \
    X(hash_size_builds, "hashSizeBuilds",                                                          \
      "passes over the week's ADVERTs that built the hash-size table (node_hash_sizes.h)")         \
    X(hash_size_copies, "hashSizeCopies",                                                          \
      "hash-size tables a worker took from the group's copy in the cache")                         \
    X(region_builds, "regionBuilds",                                                               \
      "passes over the ADVERTs' observers that built the region map (region_map.h)")               \
    X(region_copies, "regionCopies",                                                               \
      "region maps a worker took from the group's copy in the cache")                              \
    X(neighbor_builds, "neighborBuilds",                                                           \
      "passes over the observations that built the neighbour graph (neighbor_graph.h)")            \
    X(neighbor_copies, "neighborCopies",                                                           \
      "neighbour graphs a worker took from the group's copy in the cache")                         \
    X(usefulness_builds, "usefulnessBuilds",                                                       \
      "reads of neighbor_edges that scored the nodes' usefulness (node_usefulness.h)")             \
    X(usefulness_copies, "usefulnessCopies",                                                       \
      "usefulness scores a worker took from the group's copy in the cache")                        \
    X(multibyte_builds, "multibyteBuilds",                                                         \
      "passes over the ADVERTs and paths that inferred multi-byte capability (node_multibyte.h)")  \
    X(multibyte_copies, "multibyteCopies",                                                         \
      "multi-byte capability tables a worker took from the group's copy in the cache")             \
    X(static_gzips, "staticGzips", "static files compressed (once per version while cached)")      \
    X(static_gzip_hits, "staticGzipHits", "static files answered with a stored compressed body")   \
    X(state_loaded, "stateLoaded",                                                                 \
      "group tables taken from MESHGATE_STATE_DIR at a start, served until their pass ends")       \
    X(state_rejected_bad, "stateRejectedBad",                                                      \
      "state files rejected: magic, format, version, size or checksum (state_file.h)")             \
    X(state_rejected_unsafe, "stateRejectedUnsafe",                                                \
      "state files refused: not a regular file of ours, or writable by group or others")           \
    X(state_rejected_other_db, "stateRejectedOtherDb",                                             \
      "state files rejected: another database's, or one with fewer rows (replaced)")               \
    X(state_written, "stateWritten", "group tables written to MESHGATE_STATE_DIR after a pass")    \
    X(state_write_failures, "stateWriteFailures", "group tables that could not be written there")

/* The cache's state at one moment (mg_result_cache_read). */
struct mg_cache_snapshot {
    uint32_t entries;    /* capacity */
    uint32_t pages;      /* the pool */
    uint64_t pages_used; /* pages that entries own now */
    int64_t ttl_ns;
    uint32_t ready;    /* READY and not expired at the time read */
    uint32_t building; /* builds under way */
#define MG_CACHE_SNAPSHOT_COUNTER(field, json, what) uint64_t field;
    MG_CACHE_COUNTER_LIST(MG_CACHE_SNAPSHOT_COUNTER)
#undef MG_CACHE_SNAPSHOT_COUNTER
};

/*
 * The one way to read the cache's numbers: its entries counted under its lock (locked, pid:
 * the reader), a walk of the entry table as short as a lookup's; or, for a private copy of
 * the segment (the dump tool, which never locks), as the copy holds them (locked false).
 */
void mg_result_cache_read(const struct mg_cache_view *v, int pid, bool locked, int64_t now,
                          struct mg_cache_snapshot *out);

#endif
