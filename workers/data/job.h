/* SPDX-License-Identifier: ISC */
/*
 * job: work a worker hands to its helper threads, and the three calls of the helper pools that
 * the rooms below core/ make (a table's build, the row counts' refresh, the summaries' chunks).
 * The pools themselves are core's (jobs.h, which includes this, declares the rest and jobs.c
 * implements all of it): declared here, in data/, the interface lets data/ hand work over
 * without including core/.
 */
#ifndef MESHGATE_JOB_H
#define MESHGATE_JOB_H

#include <stdatomic.h>
#include <stdbool.h>

struct mg_db;
struct mg_job;
typedef void (*mg_job_fn)(struct mg_job *job, struct mg_db *db);

struct mg_job {
    mg_job_fn run;
    _Atomic int done;  /* set by the thread when run has returned */
    const void *owner; /* the request it is for (its park); NULL: the worker's own work */
    /* It runs under a gate's permit: a thread is started for it when none is idle. Work
     * without one (the row counts' refresh, anonymous work with the line off, builds with no
     * cap) waits for an idle thread, as it did before the pools. */
    bool under_permit;
    /* No gate bounds it (a signed-in request run whole: its client's turn does, dispatch.c):
     * a thread is started for it as for work under a permit, and it does not make the pool
     * busy (mg_jobs_busy counts what the gates bound). */
    bool no_gate;
};

struct mg_jobs;

/* Hands job to a thread, starting one when none is idle and the job is under a permit; false
 * when none can take it (try again later). Taking the job ends its owner's reservation. When
 * the database file was replaced since the worker opened it (not a replica copy), a thread
 * cannot open the file the worker serves: the job then runs at once on like (the loop's
 * connection) and is done on return, until the reload replaces the worker. */
bool mg_jobs_submit(struct mg_jobs *jobs, struct mg_job *job);

/* Hands job over (mg_jobs_submit), or, where there is no helper (jobs NULL: in-process tests),
 * runs it here on db and marks it done. False when no thread can take it now. */
bool mg_jobs_hand_over(struct mg_jobs *jobs, struct mg_job *job, struct mg_db *db);

/* True while a job is pending or running, or a thread is reserved (the worker then leaves
 * new connections to others); jobs with no_gate are not counted. */
bool mg_jobs_busy(struct mg_jobs *jobs);

#endif
