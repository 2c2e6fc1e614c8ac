/* SPDX-License-Identifier: ISC */
/*
 * live_ring: the live feed's events, written once for the whole group and read by every
 * worker (docs/architecture.md, "The live feed"). Two sections:
 *
 *   live       the ring's header: the next sequence number (head), the watcher's lease,
 *              the high-water ids of the rows already published, the WebSocket clients
 *              open now (in the group and per worker slot) against their cap;
 *   liveslots  MG_LIVE_SLOTS fixed-size records, each one event (a whole WebSocket text
 *              message, JSON) or nothing.
 *
 * Invariants:
 *   1. One writer. Only the process whose pid is in writer_pid publishes; it took the lease
 *      by compare-and-swap from 0 and gives it back when it stops; the master takes a dead
 *      holder's lease back when it reaps it (mg_live_ring_reclaim), so two writers never
 *      overlap (a holder that stalls keeps the lease until the master kills and reaps it).
 *   2. Sequence numbers start at 1 and grow by one per event; event s lives in slot
 *      s % MG_LIVE_SLOTS until event s + MG_LIVE_SLOTS replaces it. head is the sequence of
 *      the next event: events [max(1, head - MG_LIVE_SLOTS), head) are readable.
 *   3. A slot is written as a sequence lock: its seq is set to 0, then its bytes, then its
 *      seq to s (release), then head to s + 1 (release). A reader copies the bytes between
 *      two reads of seq that both say s; anything else means the event was replaced, and a
 *      reader that lost an event has fallen a whole ring behind (its client is dropped).
 *      Readers never write the ring and never wait: no lock.
 *   4. clients_open <= clients_cap at every moment (compare-and-swap), and clients_open is
 *      the sum of clients_by_slot; the master takes a reaped slot's clients off the total.
 *
 * Who writes: the lease holder (slots, head, high-water ids), workers (their own slot's
 * client count and the total), the master (init, reload's cap, reclaim). Everyone reads.
 */
#ifndef MESHGATE_LIVE_RING_H
#define MESHGATE_LIVE_RING_H

#include "config_values.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_LIVE_SLOTS 512u
#define MG_LIVE_SLOT_BYTES 8192u
#define MG_LIVE_EVENT_MAX (MG_LIVE_SLOT_BYTES - 16u)

struct mg_live_slot {
    _Atomic uint64_t seq; /* the event it holds once whole; 0 while written or never */
    _Atomic uint32_t len;
    uint32_t reserved;
    char data[MG_LIVE_EVENT_MAX];
};

struct mg_live_ring {
    uint32_t slots;      /* MG_LIVE_SLOTS */
    uint32_t slot_bytes; /* MG_LIVE_SLOT_BYTES */
    _Atomic uint64_t head;
    _Atomic int32_t writer_pid; /* the watcher's lease; 0: nobody watches */
    _Atomic uint32_t writer_slot;
    _Atomic int64_t hw_obs;       /* the highest observation id published (or skipped) */
    _Atomic int64_t hw_tx;        /* the highest transmission id seen */
    _Atomic uint32_t hw_set;      /* 1 once the first watcher read the ids to start from */
    _Atomic uint32_t clients_cap; /* MESHGATE_LIVE_CLIENTS; 0: no live feed of meshgate's */
    _Atomic uint32_t clients_open;
    _Atomic uint32_t clients_peak;
    _Atomic uint32_t clients_by_slot[MG_WORKERS_MAX];
};

/* The group's cap on live clients: MESHGATE_LIVE_CLIENTS, but never more than three quarters of
 * the group's connections (MESHGATE_WORKERS x MESHGATE_MAX_CONNS_PER_WORKER). A live client
 * holds a connection of its worker for as long as it stays: without the quarter, live clients
 * could fill every worker, and the pages' own requests would wait in the listen queue with no
 * worker to take them. The rest stays for requests: a worker full of live clients stops
 * accepting, and another takes them. */
uint32_t mg_live_clients_cap(const struct mg_config *cfg);

/* slots must be zero-filled (a new segment is). */
void mg_live_ring_init(struct mg_live_ring *r, struct mg_live_slot *slots, uint32_t cap);
/* Master, on reload: the clients' cap. */
void mg_live_ring_configure(struct mg_live_ring *r, uint32_t cap);

/* The watcher's lease: true when pid holds it now (taken from nobody, or held already). */
bool mg_live_lease_take(struct mg_live_ring *r, int pid, unsigned slot);
void mg_live_lease_release(struct mg_live_ring *r, int pid);

/* Lease holder: publishes one event (len <= MG_LIVE_EVENT_MAX); returns its sequence, or 0
 * (nothing written) when it is too long. */
uint64_t mg_live_publish(struct mg_live_ring *r, struct mg_live_slot *slots, const char *data,
                         size_t len);

enum mg_live_read_result {
    MG_LIVE_NONE = 0, /* seq is not written yet */
    MG_LIVE_OK,       /* out holds it, *len bytes */
    MG_LIVE_LOST,     /* replaced: the reader fell a whole ring behind */
};
/* Copies event seq into out (at least MG_LIVE_EVENT_MAX bytes). Never waits. */
enum mg_live_read_result mg_live_read(const struct mg_live_ring *r,
                                      const struct mg_live_slot *slots, uint64_t seq, char *out,
                                      size_t *len);
uint64_t mg_live_head(const struct mg_live_ring *r);

/* A WebSocket client of slot, counted against the cap; false (nothing counted) past it. */
bool mg_live_client_open(struct mg_live_ring *r, unsigned slot);
void mg_live_client_close(struct mg_live_ring *r, unsigned slot);

/* Master, after reaping pid (which ran in slot): its lease and its slot's clients. */
unsigned mg_live_ring_reclaim(struct mg_live_ring *r, unsigned slot, int pid);

/* The ring at one moment (each word atomic; two of them may be a moment apart). */
struct mg_live_snapshot {
    uint64_t events; /* written since the start: head - 1 */
    uint32_t fill;   /* readable events now: min(events, slots) */
    uint32_t slots;
    uint32_t clients_open;
    uint32_t clients_cap;
    uint32_t clients_peak;
    int32_t writer_pid;
    int64_t hw_obs;
};
void mg_live_ring_read(const struct mg_live_ring *r, struct mg_live_snapshot *out);

#endif
