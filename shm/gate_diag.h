/* SPDX-License-Identifier: ISC */
/*
 * gate_diag: the diagnostic gate. /api/perf?mem=1 walks every stored row; this gate lets one
 * walk run at a time in the whole process group, and none for a cooldown after the last one
 * COMPLETED (not after it started: a slow walk must not let the next one in sooner).
 *
 * Invariants:
 *   - at most one holder, group-wide (holder.pid != 0 while a walk runs);
 *   - admission is decided under the gate's lock in one step, before any database call,
 *     and a refusal costs nothing but that step (invariant 4);
 *   - a refusal says how long to wait: the whole seconds, rounded up, until a walk could be
 *     admitted; while a walk runs, the full cooldown (its end is not known);
 *   - giving back is single-use: each admission gets a token and only that token releases
 *     it, so a late or repeated release can never free a later walk's permit;
 *   - a holder that dies is reclaimed by the master after waitpid, and the cooldown starts
 *     then, as if the walk had completed.
 * Time is a parameter of every call (CLOCK_MONOTONIC ns), so tests need no sleeping.
 */
#ifndef MESHGATE_GATE_DIAG_H
#define MESHGATE_GATE_DIAG_H

#include "lock.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct mg_diag_gate {
    struct mg_lock lock;
    uint32_t enabled; /* 0: every walk is admitted (MESHGATE_PERF_MEM_GATE=0, for A/B) */
    uint32_t reserved;
    int64_t cooldown_ns;
    /* the holder, under lock */
    int32_t holder_pid; /* 0: no walk running */
    uint32_t holder_slot;
    uint64_t holder_token;
    int64_t holder_since_monotonic_ns;
    uint64_t next_token;
    int64_t cooldown_until_monotonic_ns;
    int64_t last_walk_ns; /* duration of the last completed walk */
    int64_t last_completed_realtime_ns;
    _Atomic uint32_t running; /* walks running now (more than 1 only with the gate off) */
    _Atomic uint32_t peak;
    /* counters: only grow */
    _Atomic uint64_t admitted;
    _Atomic uint64_t refused_busy;
    _Atomic uint64_t refused_cooling;
    _Atomic uint64_t reclaimed;
};

/*
 * Every counter of the diagnostic gate, once: X(field, JSON key, what it counts). /metrics
 * (meshgate_perf_mem_FIELD_total), /api/perf, /server-status and meshgate-shm show them from
 * this list, so a counter added here appears everywhere.
 */
#define MG_DIAG_COUNTER_LIST(X)                                                                    \
    X(admitted, "admitted", "memory breakdowns admitted")                                          \
    X(refused_busy, "refusedBusy", "memory breakdowns refused because one was running")            \
    X(refused_cooling, "refusedCooling", "memory breakdowns refused during the cooldown")          \
    X(reclaimed, "reclaimed", "diagnostic permits of dead workers given back")

/* The gate's state at one moment (mg_diag_gate_read). */
struct mg_diag_snapshot {
    bool enabled;
    int64_t cooldown_ns;
    int32_t holder_pid; /* 0: no walk running */
    uint32_t holder_slot;
    int64_t holder_since_monotonic_ns;
    int64_t cooldown_remaining_ns; /* at the time read: 0 while a walk runs or when open */
    int64_t last_walk_ns;
    uint32_t running;
    uint32_t peak;
#define MG_DIAG_SNAPSHOT_COUNTER(field, json, what) uint64_t field;
    MG_DIAG_COUNTER_LIST(MG_DIAG_SNAPSHOT_COUNTER)
#undef MG_DIAG_SNAPSHOT_COUNTER
};

/*
 * The one way to read the gate: copied under its lock (locked, pid: the reader), so the
 * holder, its start and the cooldown agree with each other; or, for a private copy of the
 * segment (the dump tool, which never locks), as the copy holds them (locked false). now_ns
 * is when the remaining cooldown is measured from.
 */
void mg_diag_gate_read(const struct mg_diag_gate *g, int pid, bool locked, int64_t now_ns,
                       struct mg_diag_snapshot *out);

enum mg_diag_result { MG_DIAG_ADMITTED = 0, MG_DIAG_BUSY, MG_DIAG_COOLING };

void mg_diag_gate_init(struct mg_diag_gate *g, int64_t cooldown_ns, bool enabled);

/* Master, on reload: a new cooldown and switch, under the gate's lock. A cooldown already
 * running keeps its end; a walk running is not affected. */
void mg_diag_gate_configure(struct mg_diag_gate *g, int pid, int64_t cooldown_ns, bool enabled);

/*
 * Asks for the walk. On MG_DIAG_ADMITTED *token identifies the permit; otherwise
 * *retry_after_s is the whole seconds (>= 1) to wait.
 */
enum mg_diag_result mg_diag_gate_try(struct mg_diag_gate *g, int pid, unsigned slot, int64_t now_ns,
                                     uint64_t *token, int *retry_after_s);

/* True when a try at now_ns would be admitted (the gate is off, or free and not cooling);
 * read under the lock, changes nothing. The answer may be stale by the time it is used. */
bool mg_diag_gate_open(struct mg_diag_gate *g, int pid, int64_t now_ns);

/* Gives the permit back when the walk ends; the cooldown starts at now_ns. Returns false
 * (and changes nothing) when token is not the current holder's. */
bool mg_diag_gate_release(struct mg_diag_gate *g, int pid, uint64_t token, int64_t now_ns,
                          int64_t walk_ns);

/* Master, after reaping pid: frees its permit (and the gate's lock) if it held them. */
bool mg_diag_gate_reclaim(struct mg_diag_gate *g, int pid, int64_t now_ns);

/* Whole seconds, rounded up and at least 1, for a wait of remaining_ns. */
int mg_retry_after_seconds(int64_t remaining_ns);

#endif
