/* SPDX-License-Identifier: ISC */
/*
 * reclaim: what the master gives back for a worker it has reaped (invariant 2). Every part
 * of the segment is a row of shm/gates.h with its reclaim, and mg_segment_reclaim walks those
 * rows, so a crash, even kill -9, leaks nothing: the master calls it right after waitpid,
 * before it respawns the slot.
 *
 * The same rows name every lock of the segment, so the master can name a lock in its logs, check
 * a worker's report of a lock held too long, and sweep the locks for words that name no
 * process of the group (lock.h).
 */
#ifndef MESHGATE_RECLAIM_H
#define MESHGATE_RECLAIM_H

#include "lock.h"
#include "segment.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Gives back everything pid (which ran in slot) held; returns how many things it freed. */
unsigned mg_segment_reclaim(struct mg_segment *seg, unsigned slot, int pid);

/* Calls fn for every lock of the segment with a name for people ("anonymous line",
 * "rate table set 12"). */
typedef void (*mg_segment_lock_fn)(void *arg, struct mg_lock *l, const char *name);
void mg_segment_for_each_lock(struct mg_segment *seg, mg_segment_lock_fn fn, void *arg);

/* The lock that starts at offset bytes into the segment, and its name; NULL when no lock
 * starts there (a report is checked, never trusted). */
struct mg_lock *mg_segment_lock_at(struct mg_segment *seg, uint64_t offset, char *name, size_t cap);

/* The addresses [*lo, *hi) of the lock(s) of one part, by its first section's name ("anon",
 * "cold", "diag", "cache", "upstream", "clients" or "conns": every set of the table). False
 * for another name, or a part without a lock. */
bool mg_segment_lock_range(struct mg_segment *seg, const char *part, const void **lo,
                           const void **hi);

#endif
