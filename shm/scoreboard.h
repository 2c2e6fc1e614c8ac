/* SPDX-License-Identifier: ISC */
/*
 * scoreboard: one slot per worker, as Apache keeps it. A slot is written by its worker while
 * it runs (state, current request, counts, heartbeat) and by the master when it spawns the
 * worker and when it reaps it (marks it dead and reclaims what it held). Readers never lock:
 * the method and path are guarded by a sequence number (odd while written), and whoever
 * copies them re-terminates the strings.
 *
 * Slot states: EMPTY (never used), STARTING (forked, opening the database), IDLE (waiting,
 * no connection), READING (a request head is arriving), HANDLING (running a handler),
 * WRITING (a response is waiting for the client), KEEPALIVE (only idle kept-alive
 * connections), DRAINING (stopping: no new connections), DEAD (reaped; the master will
 * respawn it).
 */
#ifndef MESHGATE_SCOREBOARD_H
#define MESHGATE_SCOREBOARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct mg_segment; /* segment_layout.h: the segment lays these records out, so no include */

enum mg_slot_state {
    MG_SLOT_EMPTY = 0,
    MG_SLOT_STARTING,
    MG_SLOT_IDLE,
    MG_SLOT_READING,
    MG_SLOT_HANDLING,
    MG_SLOT_WRITING,
    MG_SLOT_KEEPALIVE,
    MG_SLOT_DRAINING,
    MG_SLOT_DEAD,
    MG_SLOT_STATE_COUNT
};

#define MG_SLOT_METHOD_MAX 8
#define MG_SLOT_PATH_MAX 120
#define MG_SLOT_CLIENT_MAX 48

struct mg_slot {
    _Atomic uint32_t seq; /* odd while method/path are being written */
    _Atomic uint32_t state;
    _Atomic int32_t pid;
    _Atomic uint32_t spawns;       /* incarnations of this slot so far */
    _Atomic uint32_t connections;  /* open connections */
    _Atomic int32_t last_exit;     /* wait status of the previous incarnation, -1: none */
    _Atomic uint64_t requests;     /* served by this incarnation */
    _Atomic uint64_t requests_all; /* served by every incarnation of the slot */
    _Atomic int64_t started_realtime_ns;
    _Atomic int64_t started_monotonic_ns;
    _Atomic int64_t heartbeat_monotonic_ns;
    _Atomic int64_t request_started_monotonic_ns; /* 0 when not handling */
    /* A lock this worker has waited on past MG_LOCK_CHECK_MS, for the master to judge its
     * holder (lock.h): written by the waiting worker, read by the master, which checks that
     * the lock at that offset still holds that pid before it acts. */
    _Atomic int32_t lock_wait_holder; /* 0: none */
    /* SQLite connections this worker has open: its loop's, and one per helper thread that has
     * had a job (a helper opens its connection when first needed; see jobs.h). */
    _Atomic uint32_t db_connections;
    /* Jobs this worker's helper threads have in hand, signed-in work in the low 16 bits and
     * anonymous work in the high 16 (MG_SLOT_HELPERS_*): added by the loop when it hands a
     * job over, taken off by the thread when the job has run. */
    _Atomic uint32_t helpers_busy;
    /* Database faults of this incarnation (db.h, mg_db_heal), and 1 once one came again after
     * its connection was opened again: the worker is degraded until it is replaced. */
    _Atomic uint32_t db_faults;
    _Atomic uint32_t db_degraded;
    _Atomic uint64_t lock_wait_offset;  /* of the struct mg_lock in the segment */
    _Atomic int64_t lock_wait_since_ns; /* monotonic: when the waiter saw that holder */
    char method[MG_SLOT_METHOD_MAX];
    char path[MG_SLOT_PATH_MAX];
    char client[MG_SLOT_CLIENT_MAX]; /* the peer of the current or last request */
};

/* Where each pool's count is in helpers_busy. */
enum { MG_SLOT_HELPERS_SIGNED_IN_SHIFT = 0, MG_SLOT_HELPERS_ANON_SHIFT = 16 };
#define MG_SLOT_HELPERS_SIGNED_IN(word) ((word)&0xffffu)
#define MG_SLOT_HELPERS_ANON(word) ((word) >> 16)

const char *mg_slot_state_name(uint32_t state);
/* The one-character form of a state, for the dump tool's scoreboard line (Apache style). */
char mg_slot_state_char(uint32_t state);

struct mg_slot *mg_slot_get(struct mg_segment *seg, unsigned index);

/* Master, before fork: the slot belongs to a new incarnation. */
void mg_slot_prepare(struct mg_slot *slot);
/* Master, after fork: records the child's pid. */
void mg_slot_set_pid(struct mg_slot *slot, int pid);
/* Master, after waitpid: marks the slot dead and remembers how it ended. */
void mg_slot_mark_dead(struct mg_slot *slot, int wait_status);

/* Worker: its own slot. */
void mg_slot_set_state(struct mg_slot *slot, enum mg_slot_state state);
void mg_slot_heartbeat(struct mg_slot *slot, int64_t now_monotonic_ns);
void mg_slot_begin_request(struct mg_slot *slot, const char *method, const char *path,
                           int64_t now_monotonic_ns);
/* Worker: the client of the request it begins next (under the same sequence number rule). */
void mg_slot_set_client(struct mg_slot *slot, const char *client);
void mg_slot_end_request(struct mg_slot *slot);
void mg_slot_set_connections(struct mg_slot *slot, unsigned n);

/*
 * Worker: its own slot, for code that has no handle on it (database progress handlers, lock
 * waits on helper threads): mg_scoreboard_beat refreshes that slot's heartbeat, at most
 * every millisecond; it does nothing in a process that has not set one (the master, tools).
 */
void mg_scoreboard_set_self(struct mg_slot *slot);
void mg_scoreboard_beat(void);
/* Worker: adds delta to its own slot's count of open database connections (db.c). */
void mg_scoreboard_db_connections_add(int delta);
/* Worker: a database fault, which its connection's reopening may have healed (db.c). */
void mg_scoreboard_db_fault(bool healed);

/* Worker: reports a lock held too long by holder (offset: the lock's in the segment). */
void mg_slot_report_lock_wait(struct mg_slot *slot, int holder, uint64_t offset,
                              int64_t since_monotonic_ns);
/* Worker: takes the report back once it got the lock at offset. */
void mg_slot_clear_lock_wait(struct mg_slot *slot, uint64_t offset);

/* A copy of a slot with its strings re-terminated; never blocks. */
void mg_slot_snapshot(const struct mg_slot *slot, struct mg_slot *out);

/* Slots whose worker is alive (any state but EMPTY and DEAD, with a pid). */
unsigned mg_scoreboard_alive(const struct mg_segment *seg);

#endif
