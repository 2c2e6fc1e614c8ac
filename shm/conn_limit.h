/* SPDX-License-Identifier: ISC */
/*
 * conn_limit: at most MESHGATE_MAX_CONNS_PER_CLIENT open connections per client address in
 * the whole process group, counted in the shared segment so a client gets one allowance
 * however the kernel spreads its connections over the workers. Without it, one address that
 * opens workers x MESHGATE_MAX_CONNS_PER_WORKER silent connections fills every worker, and
 * everyone else waits in the listen queue until the header timeout cuts them.
 *
 * The client is the peer address at accept, as a 16-byte key from mg_client_key (an IPv4
 * address, an IPv6 /64): X-Forwarded-For is not known then (nothing has been read), and the
 * point is to refuse before reading anything. So the caller leaves out peers it cannot judge
 * by address: trusted proxies (every client behind them shares their address) and peers
 * without an IP address (a local socket); those connections are not counted.
 *
 * The table is set-associative like the rate table (shm/client_limit.h): `sets` sets of
 * MG_CONN_WAYS entries (key, open connections), each under its own lock, the set chosen by a
 * hash keyed with a random seed so a client cannot aim its keys at one set. It is sized at
 * twice the connections the group can hold, so a full set is unlikely; a connection whose set
 * is full of other live clients is let in uncounted (`untracked`), never refused: the table
 * must not be a way to lock others out.
 *
 * Owner records: each slot has one hold record per connection it can hold
 * (MESHGATE_MAX_CONNS_PER_WORKER); a counted connection owns one, naming its key and set.
 * A worker changes an entry and its hold record together under the set's lock, so under a
 * set's lock every entry's count equals the number of live hold records with its key. That
 * is what makes a kill -9 recoverable: after reaping the worker, the master gives back each
 * of its holds (one decrement each), and for a set whose lock the dead worker held (it died
 * between the two writes), recounts the set from the other slots' hold records instead.
 *
 * Invariants:
 *   - under a set's lock, entry.count == the hold records (of live workers) naming its key
 *     and set, and entry.tunnels == those of them marked tunnel; count 0 marks a free entry;
 *   - a key is in at most one entry, and only in its set;
 *   - a refusal writes nothing but the `refused` counter;
 *   - counters only grow (8).
 *
 * Who writes what: mg_conn_limit_init (the master, before any worker runs) writes the header
 * and zeroes the sets and holds; afterwards the header's parameters and seed are only read.
 * A worker writes entries under their set's lock and only its own slot's hold records (also
 * under the lock of the set they name). The master writes both after it has reaped the worker
 * that owned them (mg_conn_limit_reclaim). The dump tool reads without locks.
 */
#ifndef MESHGATE_CONN_LIMIT_H
#define MESHGATE_CONN_LIMIT_H

#include "lock.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define MG_CONN_WAYS 8
#define MG_CONN_KEY_BYTES 16

struct mg_conn_entry {
    uint8_t key[MG_CONN_KEY_BYTES];
    uint32_t count;   /* open connections of this client; 0: the entry is free */
    uint32_t tunnels; /* of them, WebSocket tunnels (mg_conn_limit_tunnel_open) */
};

struct mg_conn_set {
    _Alignas(64) struct mg_lock lock;
    uint8_t reserved[64 - sizeof(struct mg_lock)];
    struct mg_conn_entry entry[MG_CONN_WAYS];
};

/* One counted connection of a worker: which client, in which set. */
struct mg_conn_hold {
    uint8_t key[MG_CONN_KEY_BYTES];
    uint32_t set_plus_one; /* 0: free */
    uint32_t tunnel;       /* 1: the connection is a WebSocket tunnel, counted in tunnels */
};

struct mg_conn_table {
    uint32_t sets;        /* >= 1 */
    _Atomic uint32_t cap; /* connections per client; 0: no cap; the master changes it on reload */
    uint32_t slots;       /* workers */
    uint32_t holds_per_slot; /* connections one worker holds at most */
    uint64_t seed[2];        /* hash key, random at init */
    /* counters: only grow */
    _Atomic uint64_t counted;   /* connections counted against their client */
    _Atomic uint64_t refused;   /* connections closed at once: the client was at its cap */
    _Atomic uint64_t untracked; /* let in uncounted: their set was full */
    _Atomic uint64_t reclaimed; /* holds of dead workers given back by the master */
};

/*
 * Every counter of the table, once: X(field, JSON key, what it counts); each reader shows them
 * from this list (the conn_cap row of shm/gates.h).
 */
#define MG_CONN_COUNTER_LIST(X)                                                                    \
    X(counted, "counted", "connections counted against their client")                              \
    X(refused, "refused", "connections closed at once: the client held its cap")                   \
    X(untracked, "untracked", "connections let in uncounted: their set was full")                  \
    X(reclaimed, "reclaimed", "connection holds of dead workers given back")

/* The table, its sets and the hold records, as the segment holds them (three sections). */
struct mg_conn_view {
    struct mg_conn_table *table;
    struct mg_conn_set *sets;   /* table->sets of them */
    struct mg_conn_hold *holds; /* table->slots * table->holds_per_slot of them */
};

enum mg_conn_verdict {
    MG_CONN_COUNTED = 0, /* counted: give it back with mg_conn_limit_close */
    MG_CONN_OVER_CAP,    /* the client is at its cap: close the connection; nothing written */
    MG_CONN_UNTRACKED,   /* not counted (no cap, or the set is full): nothing to give back */
};

/* Sets for a group that holds `connections` at once: twice as many entries, at least 1 set. */
uint32_t mg_conn_limit_sets_for(uint64_t connections);

/*
 * Hold records a worker has (0 without a cap): one for each connection it keeps
 * (MESHGATE_MAX_CONNS_PER_WORKER) and one for each shed connection it may hold unread
 * (MESHGATE_SHED_TARPIT, which keeps counting against its address), the tarpit's share cut so
 * that `slots` workers' records stay within MG_CONNS_TRACKED_MAX (shm/config_values.h).
 */
uint32_t mg_conn_limit_holds_for(uint32_t slots, uint32_t conns_per_worker, uint32_t tarpit,
                                 bool capped);

/* Master, on reload: a new cap for connections opened from now on (never 0 when it was not:
 * turning the cap on or off needs a restart, since the table is sized by it). Clients over a
 * lowered cap keep what they have open. */
void mg_conn_limit_set_cap(struct mg_conn_view *v, uint32_t cap);

/* Zeroes sets and holds and the counters, draws a new seed. cap 0: no cap. */
void mg_conn_limit_init(struct mg_conn_view *v, uint32_t sets, uint32_t slots,
                        uint32_t holds_per_slot, uint32_t cap);

/*
 * A new connection of client key on slot, to be recorded in that slot's hold record `hold`
 * (0 .. holds_per_slot - 1, free: the caller keeps which are). Returns the verdict.
 */
enum mg_conn_verdict mg_conn_limit_open(struct mg_conn_view *v, int pid, uint32_t slot,
                                        uint32_t hold, const uint8_t key[MG_CONN_KEY_BYTES]);

/* The connection counted in slot's hold record `hold` is closed: its count goes back. */
void mg_conn_limit_close(struct mg_conn_view *v, int pid, uint32_t slot, uint32_t hold);

/*
 * Master, after reaping pid, which ran in slot: frees any set lock it held, gives back every
 * connection it had counted (recounting a set it died inside), and clears its hold records.
 * Returns how many connections it gave back.
 */
unsigned mg_conn_limit_reclaim(struct mg_conn_view *v, int pid, uint32_t slot);

/*
 * The counted connection in slot's hold record `hold` becomes a WebSocket tunnel: false
 * (nothing written) when its client already holds `share` tunnels. A tunnel is given back
 * with mg_conn_limit_tunnel_close, or with its connection (mg_conn_limit_close, the reclaim).
 */
bool mg_conn_limit_tunnel_open(struct mg_conn_view *v, int pid, uint32_t slot, uint32_t hold,
                               uint32_t share);
void mg_conn_limit_tunnel_close(struct mg_conn_view *v, int pid, uint32_t slot, uint32_t hold);

/* Open counted connections of key, read without a lock (tests, the dump tool). */
uint32_t mg_conn_limit_count(const struct mg_conn_view *v, const uint8_t key[MG_CONN_KEY_BYTES]);

/* Clients with at least one counted connection, read without locks. */
uint32_t mg_conn_limit_clients(const struct mg_conn_view *v);

#endif
