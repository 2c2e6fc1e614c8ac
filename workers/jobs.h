/* SPDX-License-Identifier: ISC */
/*
 * jobs: a worker's helper thread for heavy work (a cold reach report). A worker has two:
 * one for signed-in clients, and one at a lower CPU priority for anonymous heavy requests
 * (MESHGATE_ANON_NICE), so a flood of those yields the CPU to everything else. The event loop hands
 * it one job at a time and goes on serving its other connections; the thread has its own
 * read-only database connection and tells the loop through an eventfd when a job is done.
 * So a worker building a report still answers cheap requests on its other connections, and
 * the cold-scan gate, not the number of workers, is what bounds heavy work.
 *
 * The connection is opened by the first mg_jobs_submit, not at start: a helper that never has
 * a job (most anonymous helpers) costs no connection, no page cache and no schema. After each
 * job the thread gives its memory back (mem.h).
 */
#ifndef MESHGATE_JOBS_H
#define MESHGATE_JOBS_H

#include "config.h"
#include "db.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct mg_job;
typedef void (*mg_job_fn)(struct mg_job *job, struct mg_db *db);

struct mg_job {
    mg_job_fn run;
    _Atomic int done; /* set by the thread when run has returned */
};

struct mg_jobs;

/* Starts the thread (it has its own connection to cfg's database, opened when first needed
 * with like's schema, mg_db_open_like; cfg and like must outlive it) at the scheduling
 * priority nice (0: as the worker; higher: yields the CPU to the worker's loop and to other
 * work). NULL with err set on failure. *event_fd becomes readable each time a job is done. */
struct mg_jobs *mg_jobs_start(const struct mg_config *cfg, const struct mg_db *like, int nice,
                              int *event_fd, char *err, size_t errlen);

/* Hands job to the thread; false when it is busy with another, or its connection could not be
 * opened (logged; try again later). */
bool mg_jobs_submit(struct mg_jobs *jobs, struct mg_job *job);

/* True while a job is pending or running (the worker then leaves new connections to others). */
bool mg_jobs_busy(struct mg_jobs *jobs);

/* Drains the eventfd (call when it is readable). */
void mg_jobs_ack(struct mg_jobs *jobs);

/* Waits for the job in hand, stops the thread, closes its connection. */
void mg_jobs_stop(struct mg_jobs *jobs);

#endif
