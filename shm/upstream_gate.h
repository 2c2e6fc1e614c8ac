/* SPDX-License-Identifier: ISC */
/*
 * upstream_gate: the segment's section for the upstream (MESHGATE_UPSTREAM), shared by the
 * whole process group:
 *
 *   gate      a FIFO gate (shm/gate_fifo.h): at most MESHGATE_UPSTREAM_CONCURRENCY requests
 *             are at the upstream at once, the others wait in line (parked) up to
 *             MESHGATE_UPSTREAM_QUEUE of them for MESHGATE_UPSTREAM_WAIT_MS; a permit is held
 *             from the request's admission until its response has been relayed;
 *   breaker   the circuit breaker (shm/breaker.h);
 *   tunnels   WebSocket tunnels open now: in the whole group (checked against the cap by
 *             compare-and-swap, so it never exceeds it) and per worker slot, so that the
 *             master, after reaping a worker, takes the dead slot's tunnels off the total;
 *   anonymous the gate's permits anonymous requests hold, counted the same way against
 *             anon_max (the cap less MESHGATE_UPSTREAM_SIGNED_IN_RESERVE, at least 1). An
 *             anonymous request claims one before each try at the gate and gives it back
 *             when the try does not admit it; one that cannot claim waits in line passed over,
 *             as work whose helper is busy (shm/gate_fifo.h), so signed-in requests behind it
 *             go first and an anonymous flood never holds the reserve. Every anonymous
 *             holder holds a claim, so anon_held <= anon_max at every moment.
 *
 * Who writes: workers (their own slot's count, the total, the gate under its lock, the
 * breaker); the master on reap. Everyone reads. The byte and request counters are ordinary
 * group counters (shm/stats.h, upstream_*); latency is the "(upstream)" route's histogram.
 */
#ifndef MESHGATE_UPSTREAM_GATE_H
#define MESHGATE_UPSTREAM_GATE_H

#include "breaker.h"
#include "config_values.h"
#include "gate_fifo.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct mg_upstream_shm {
    struct mg_fifo_gate gate;
    struct mg_breaker breaker;
    _Atomic uint32_t tunnel_cap; /* MESHGATE_UPSTREAM_WEBSOCKETS; 0: no tunnels */
    _Atomic uint32_t tunnels_open;
    _Atomic uint32_t tunnels_peak;
    _Atomic uint32_t tunnels_by_slot[MG_WORKERS_MAX];
    _Atomic uint32_t anon_max; /* UINT32_MAX: no reserve (no cap, or a reserve of 0) */
    _Atomic uint32_t anon_held;
    _Atomic uint32_t anon_peak;
    _Atomic uint32_t anon_by_slot[MG_WORKERS_MAX];
    _Atomic uint64_t anon_held_back; /* tries of anonymous requests passed over for it */
};

void mg_upstream_shm_init(struct mg_upstream_shm *u, const struct mg_config *cfg);
/* Master, on reload: the gate's limits, the breaker's, the tunnel cap. */
void mg_upstream_shm_configure(struct mg_upstream_shm *u, int pid, const struct mg_config *cfg);

/*
 * The breaker's counters, once: X(field, JSON key, what it counts). /metrics
 * (meshgate_upstream_breaker_FIELD_total), /api/perf, /server-status and meshgate-shm show
 * them from this list, so a counter added here appears everywhere.
 */
#define MG_BREAKER_COUNTER_LIST(X)                                                                 \
    X(opened, "breakerOpened", "times the upstream's breaker opened")                              \
    X(fast_fails, "breakerFastFails",                                                              \
      "requests answered 502 at once because the breaker was open")                                \
    X(probes, "breakerProbes", "health requests of meshgate's own that probed the open breaker")   \
    X(opened_by_one_address, "breakerOpenedByOneAddress",                                          \
      "times every failure that opened the breaker was one client address's")

/* The breaker, the tunnels and the anonymous share at one moment (mg_upstream_shm_read); the gate
 * is read with mg_fifo_gate_read. */
struct mg_upstream_snapshot {
    uint32_t breaker_state; /* enum mg_breaker_state */
    uint32_t breaker_failures;
    int64_t breaker_open_remaining_ns; /* while open, at the time read; else 0 */
    uint32_t tunnels_open;
    uint32_t tunnel_cap;
    uint32_t tunnels_peak;
    uint32_t anon_max; /* UINT32_MAX: no reserve */
    uint32_t anon_held;
    uint32_t anon_peak;
    uint64_t anon_held_back;
#define MG_BREAKER_SNAPSHOT_COUNTER(field, json, what) uint64_t field;
    MG_BREAKER_COUNTER_LIST(MG_BREAKER_SNAPSHOT_COUNTER)
#undef MG_BREAKER_SNAPSHOT_COUNTER
};

/* The one way to read the breaker and the tunnels. They have no lock (each word is atomic,
 * and the breaker changes state by compare-and-swap), so nothing here locks: each value is
 * whole, and two of them may be a moment apart. */
void mg_upstream_shm_read(const struct mg_upstream_shm *u, int64_t now_ns,
                          struct mg_upstream_snapshot *out);

/* Counts a tunnel for slot; false (nothing counted) when the cap is reached. */
bool mg_upstream_tunnel_open(struct mg_upstream_shm *u, unsigned slot);
void mg_upstream_tunnel_close(struct mg_upstream_shm *u, unsigned slot);

/* Claims one of the permits anonymous requests may hold, for slot; false (nothing counted,
 * anon_held_back counted) when they hold anon_max. */
bool mg_upstream_anon_claim(struct mg_upstream_shm *u, unsigned slot);
void mg_upstream_anon_unclaim(struct mg_upstream_shm *u, unsigned slot);

/* Master, after reaping the worker of slot (pid): its permits, places, probe and tunnels. */
unsigned mg_upstream_shm_reclaim(struct mg_upstream_shm *u, unsigned slot, int pid, int64_t now_ns);

#endif
