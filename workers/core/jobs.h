/* SPDX-License-Identifier: ISC */
/*
 * jobs: a worker's helper threads for heavy work (a cold reach report, a diagnostic walk,
 * anonymous scans). A worker has two pools: one for signed-in work, and one at a lower CPU
 * priority for anonymous heavy requests (MESHGATE_ANON_NICE), so a flood of those yields the
 * CPU to everything else. The event loop hands jobs over and goes on serving its other
 * connections; each thread has its own read-only database connection and tells the loop
 * through the pool's eventfd when a job is done.
 *
 * A pool starts a thread with its first job and another when a job is handed over and none is
 * idle, up to the permits the worker may hold for that kind of work, so a worker has as many
 * helpers as the permits it holds at once (docs/architecture.md, "A permit only for work
 * that can run"). A gate without a cap (0: unlimited, for A/B measurements) gives its pool
 * one thread, as before the pools.
 * Threads stay until the worker exits; most workers never need a second one.
 *
 * A pool that never has a job (most anonymous pools) costs no thread, no connection, no page
 * cache and no schema.
 * After each job the thread gives its memory back (mem.h).
 */
#ifndef MESHGATE_JOBS_H
#define MESHGATE_JOBS_H

#include "config_values.h"
#include "db.h"
#include "job.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Threads a pool may have: the largest cap a gate may have, and two for work without one. */
#define MG_JOBS_THREADS_MAX 66

/* Sets up a pool whose threads each have their own connection to cfg's database, opened when
 * the thread starts with like's schema (mg_db_open_like; cfg and like must outlive the pool),
 * and run at the scheduling priority nice (0: as the worker; higher: yields the CPU to the worker's
 * loop and to other work); it grows to at most max_threads (1 to MG_JOBS_THREADS_MAX): the permits
 * a worker may hold for its kind of work. NULL with err set on failure. *event_fd becomes readable
 * each time a job is done. busy_word (may be NULL; the worker's scoreboard slot) counts, at
 * busy_shift, the jobs handed over and not yet run, so the helpers' state is visible from the
 * segment. */
struct mg_jobs *mg_jobs_start(const struct mg_config *cfg, struct mg_db *like, int nice,
                              unsigned max_threads, int *event_fd, _Atomic uint32_t *busy_word,
                              unsigned busy_shift, char *err, size_t errlen);

/*
 * A permit of a gate is taken only for work that can run at once (docs/architecture.md,
 * "A permit only for work that can run"). A request that takes one for work on this pool
 * before it has its job ready (the anonymous line, whose request may then wait for a cold
 * permit) reserves a thread with it, until that job is handed over or the reservation is
 * given back; the thread count never falls below the jobs in hand plus the reservations.
 *   available: a job of owner would be taken now (owner holds a reservation, or a thread is
 *              idle or can be started);
 *   reserve:   available, and now reserved for owner (true), or false;
 *   unreserve: gives owner's reservation back (nothing when it holds none).
 */
bool mg_jobs_available(struct mg_jobs *jobs, const void *owner);
bool mg_jobs_reserve(struct mg_jobs *jobs, const void *owner);
void mg_jobs_unreserve(struct mg_jobs *jobs, const void *owner);

/* Makes the pool's eventfd readable as a job's end does, so the loop asks its parked requests
 * again (one waits for what the loop has just given back); nothing for NULL. */
void mg_jobs_wake(struct mg_jobs *jobs);

/* Threads started so far. */
unsigned mg_jobs_threads(struct mg_jobs *jobs);

/* Drains the eventfd (call when it is readable). */
void mg_jobs_ack(struct mg_jobs *jobs);

/* Waits for the jobs in hand, stops the threads, closes their connections. */
void mg_jobs_stop(struct mg_jobs *jobs);

#endif
