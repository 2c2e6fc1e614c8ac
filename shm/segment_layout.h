/* SPDX-License-Identifier: ISC */
/*
 * segment_layout: the one POSIX shared-memory segment of a meshgate instance as every process
 * sees it: its header, its sections, and a process's view of it (struct mg_segment). Apart
 * from segment.h (creating, mapping and checking it), which needs the records of the parts it
 * lays out (scoreboard.h, stats.h, ...), so that those parts can take the view whole without a
 * circle: the layout names their records only by forward declarations.
 *
 * Layout (version MG_SHM_LAYOUT_VERSION), all fixed-size records, no pointers, so any
 * process that maps it (the master, every worker, the dump tool) reads the same bytes at
 * the same offsets whatever address it is mapped at:
 *
 *   header     magic "MESHGATE", layout version, the sizes of the header and of each record,
 *              a table of sections (name, offset, record size, record count), creation time,
 *              master pid and its start time, generation, server state
 *   config     the effective struct mg_config                     (written once by the master)
 *   counters   group-wide counters                                (every process adds)
 *   routes     per-route request counts and latency histograms    (every worker adds)
 *   slow       the last slow requests, a ring                     (every worker writes)
 *   values     values computed once per interval for the group    (the worker holding the
 *              (database row counts, the /api/stats body)          value's refresh lease)
 *   diag       the diagnostic gate of /api/perf?mem=1: holder,    (workers under its lock;
 *              cooldown, counters (shm/gate_diag.h)                the master on reap)
 *   cold       the cold-scan gate of reach reports: permits with    (workers under its lock;
 *              their holders, the line (shm/gate_fifo.h)           the master on reap)
 *   cache      the shared result cache (shm/result_cache.h),       (workers under its lock;
 *   cacheentries  its entries (key, state, builder, expiry, the    the master on reap)
 *                 run of pages that holds the body)
 *   cachepages    and the pool of pages all entries' bodies share
 *   slots      the scoreboard: one slot per worker                (its worker; the master on spawn
 *                                                                  and reap)
 *   anon       the line of anonymous heavy requests: permits      (workers under its lock;
 *              with their holders, the line (shm/gate_fifo.h)      the master on reap)
 *   clients    the per-client rate table of anonymous requests:   (workers under each set's
 *   clientsets its header and counters, and its sets of entries    lock; the master on reap)
 *              (shm/client_limit.h)
 *   conns      open connections per client address: its header,  (workers under each set's
 *   connsets   counters, its sets of entries, and one hold record  lock; the master on reap)
 *   connholds  per connection a worker can hold (shm/conn_limit.h)
 *   upstream   the upstream's FIFO gate, breaker and WebSocket     (workers; the master on
 *              tunnel counts (shm/upstream_gate.h)                  reap)
 *   live       the live feed's ring: its header (lease, high-water (the watcher; workers their
 *   liveslots  ids, clients) and its events (shm/live_ring.h)      clients; the master on reap)
 *
 * A gate added later gets a section of its own at the end; the section table lets the
 * dump tool find and check each one, and the layout version changes whenever a record does.
 * Who may write each part is said above; readers that do not hold a lock (the dump tool)
 * copy and re-terminate every string.
 */
#ifndef MESHGATE_SEGMENT_LAYOUT_H
#define MESHGATE_SEGMENT_LAYOUT_H

#include "client_limit.h"
#include "config_values.h"
#include "conn_limit.h"
#include "process.h"
#include "result_cache.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define MG_SHM_MAGIC "MESHGATE"
#define MG_SHM_LAYOUT_VERSION 22u
#define MG_SHM_SECTIONS_MAX 24
#define MG_VERSION_MAX 32
#define MG_RATE_SECONDS 64

enum mg_server_state {
    MG_SERVER_STARTING = 0,
    MG_SERVER_RUNNING,
    MG_SERVER_RELOADING,
    MG_SERVER_DRAINING,
    MG_SERVER_STOPPED,
};

struct mg_shm_section {
    char name[16];
    uint64_t offset;
    uint64_t record_size;
    uint64_t record_count;
};

struct mg_shm_header {
    char magic[8];
    uint32_t layout_version;
    uint32_t header_size;
    uint64_t total_size;
    uint32_t section_count;
    uint32_t reserved0;
    struct mg_shm_section sections[MG_SHM_SECTIONS_MAX];
    int64_t created_realtime_ns;
    int64_t created_monotonic_ns;
    _Atomic int32_t master_pid;
    uint32_t reserved1;
    _Atomic uint64_t master_start_ticks; /* /proc/PID/stat starttime, against pid reuse */
    _Atomic uint32_t generation;         /* +1 on each SIGHUP */
    _Atomic uint32_t server_state;       /* enum mg_server_state */
    _Atomic int64_t state_changed_realtime_ns;
    char version[MG_VERSION_MAX];
    /* Once a second the master samples the group's totals here (shm/rates.h), so readers
     * can tell request and refusal rates over the last minute. */
    struct mg_rate_sample {
        _Atomic int64_t second; /* CLOCK_MONOTONIC second of the sample, 0: none */
        _Atomic uint64_t requests;
        _Atomic uint64_t refusals;
    } rate[MG_RATE_SECONDS];
    /* MESHGATE_REPLICA_MAX_LAG_MS > 0 (docs/scale-out.md): the master writes the
     * modification time of the replica copy the oldest serving workers opened (what the
     * follower stamps as "current as of"); readers show now minus it as the replica's lag.
     * 0: not a replica. */
    _Atomic int64_t replica_copy_realtime_ns;
};

struct mg_counters;
struct mg_route_stats;
struct mg_slow_ring;
struct mg_slot;
struct mg_shared_value;
struct mg_diag_gate;
struct mg_fifo_gate;
struct mg_upstream_shm;
struct mg_live_ring;
struct mg_live_slot;

/* The values the group computes at most once per interval (see shared_value.h). */
enum mg_value_id { MG_VALUE_DB_COUNTS = 0, MG_VALUE_STATS, MG_VALUE_COUNT };

/* A process's view of a mapped segment. */
struct mg_segment {
    void *base;
    size_t size;
    bool read_only;
    bool replaced_stale; /* create found a segment left by a dead instance and replaced it */
    bool removed_empty;  /* create found an empty file of ours under the name and removed it */
    /* Another user had created the name: the segment is under an unguessable stand-in (name
     * says which), and squat_note says so for the log. */
    bool squatted;
    char squat_note[768];
    bool fd_open; /* create keeps the descriptor (fd), for mg_segment_check_size */
    int fd;
    char name[MG_SHM_NAME_MAX];
    struct mg_shm_header *header;
    struct mg_config *config;
    struct mg_counters *counters;
    struct mg_route_stats *routes;
    uint32_t route_count;
    struct mg_slow_ring *slow;
    struct mg_shared_value *values; /* MG_VALUE_COUNT of them */
    struct mg_diag_gate *diag;
    struct mg_fifo_gate *cold;  /* the cold-scan gate of reach reports */
    struct mg_cache_view cache; /* the shared result cache and its in-flight table */
    struct mg_slot *slots;
    uint32_t slot_count;
    struct mg_fifo_gate *anon;        /* the line of anonymous heavy requests */
    struct mg_client_view clients;    /* the per-client rate table */
    struct mg_conn_view conns;        /* open connections per client address */
    struct mg_upstream_shm *upstream; /* the upstream's gate, breaker and tunnels */
    struct mg_live_ring *live;        /* the live feed's ring (shm/live_ring.h) */
    struct mg_live_slot *live_slots;
    /* What validation found, kept in this process's memory: the header up to its first
     * mutable field and the tables' sizes. The segment is never trusted over these. */
    unsigned char header_fixed[offsetof(struct mg_shm_header, created_realtime_ns)];
    uint32_t cache_entries, cache_pages, client_sets, conn_sets, conn_slots, conn_holds_per_slot;
};

#endif
