/* SPDX-License-Identifier: ISC */
/*
 * cold_report: a report that is expensive to build (a scan of observations) and worth
 * sharing, served the way every such report is: built at most `cap` at a time for the whole
 * process group (the cold-scan gate, MESHGATE_REACH_COLD_*), shared by every worker through
 * the result cache (MESHGATE_REACH_CACHE_*), and built once for identical concurrent requests
 * (coalescing). The reach report (ep_reach.c) and the observer analytics (ep_observers.c) are
 * the two. A report names its build; everything else (the gate, the cache, parking, the
 * refusals) is here, in one state machine over the turns of the worker's loop; a parked
 * request continues at its step (mg_park_at), its handler's key and arguments kept:
 *
 *   NEEDS     a report whose build reads a group table (the neighbour graph, the hash
 *             sizes), when the request would build: the table taken, or made on the helper
 *             while the request parks; a failure to read it is answered (500, or 503 busy).
 *   START     the cache: a warm answer is copied out and served; it never takes a permit
 *             (invariant 5). Another request builds the key: its previous answer, when one
 *             is kept (below), is copied out and served at once, marked stale; else FOLLOW.
 *             Absent: the key is claimed (identical requests now follow us): GATE.
 *   FOLLOW    holds a place in the gate's line (so waiters stay bounded) until the build
 *             ends: then the stored body (HIT), or, when the build was given up or its
 *             builder died, the key is claimed here: GATE. Past the wait bound: 429.
 *   GATE      the cold gate, through admission.c: a permit (only when a helper can start
 *             the build), or a place in line (parked, asked each turn, admitted in arrival
 *             order), or 429 when the line is full or the wait runs out; a client that went
 *             away leaves the line.
 *   ADMITTED  hands the build to a helper thread, or runs it inline where there is no
 *             thread (in-process tests).
 *   BUILDING  when the build is done: the permit goes back first, on every path; a body is
 *             stored and served; a 404, a 400 or an error stores nothing.
 * Stale while revalidating: a report kept for an interval names it at the end of its key,
 * "|@SECONDS:INDEX" (INDEX = time(NULL) / SECONDS), so a new interval's first request builds
 * anew. While that build runs (for the group: the key is claimed, as coalescing does),
 * every other request for the same parameters (a key with the same text before INDEX) is
 * answered with the newest stored answer of an earlier interval, as light as a hit, with
 * Age: and X-Meshgate-Cache: stale (the cache's stale counter), provided it was stored less
 * than MG_COLD_STALE_INTERVALS intervals and MG_COLD_STALE_MAX_S ago and has not expired
 * (MESHGATE_REACH_CACHE_TTL_MS): an older one is not served, and the request follows the build as
 * before. A request with no answer kept at all follows (or builds) as before. Whenever it has to
 * wait it parks the request and returns, so waiting holds no worker. Every refusal is 429 with
 * Retry-After: 2 and Cache-Control: no-store, before any scan. A worker that dies anywhere is
 * cleaned up by the master: its permit, its place in line and its claim are reclaimed after
 * waitpid, and a follower takes the build over.
 */
#ifndef MESHGATE_COLD_REPORT_H
#define MESHGATE_COLD_REPORT_H

#include "handler.h"
#include "job.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_COLD_ARGS_BYTES 160
/* How old a previous answer may be and still be served while the next one is built (see
 * above): at most this many of its intervals, and never more than MG_COLD_STALE_MAX_S (5
 * minutes: CoreScope's default analytics recompute interval, docs/architecture.md). */
#define MG_COLD_STALE_INTERVALS 5
#define MG_COLD_STALE_MAX_S 300

enum mg_cold_result { MG_COLD_OK = 0, MG_COLD_BAD_REQUEST, MG_COLD_NOT_FOUND, MG_COLD_ERROR };

struct mg_cold_report;

/* One build, run on the worker's helper thread under a permit. */
struct mg_cold_build {
    struct mg_job job; /* first: the thread hands this pointer back */
    const struct mg_cold_report *report;
    unsigned char args[MG_COLD_ARGS_BYTES]; /* the report's parameters, as the handler gave them */
    int64_t now_unix;
    int hold_ms; /* tests only: X-Test-Hold-Ms (see test_hooks.h) */
    /* Filled by the build: */
    struct mg_buf body; /* the whole JSON body, "\n" included */
    enum mg_cold_result result;
    bool busy; /* the database was busy past its timeout */
    char err[256];
};

/* A group table a report's build reads: taken, or made on the helper, before the request
 * would build (NEEDS below). */
enum mg_cold_needs {
    MG_COLD_NEEDS_NOTHING = 0,
    MG_COLD_NEEDS_GRAPH,      /* the neighbour graph (neighbor_graph.h) */
    MG_COLD_NEEDS_HASH_SIZES, /* the week's hash sizes (node_hash_sizes.h) */
};

struct mg_cold_report {
    const char *name;      /* "reach report": in refusals and the log */
    const char *not_found; /* the error of a 404 */
    const char *bad_request;
    void (*build)(struct mg_cold_build *b, struct mg_db *db);
    enum mg_cold_needs needs;
};

/*
 * Serves report for the request, whose cache key is key (at most MG_CACHE_KEY_MAX - 1 bytes;
 * a longer one is built without the cache) and whose parameters are args (copied into the
 * build); returns the handler's turn (handler.h: MG_PARK while it waits, MG_READMIT_HEAVY when
 * a request admitted light would build). Woken, the request continues at its step, without
 * its handler (key and args are kept: mg_park_keep).
 */
enum mg_turn mg_cold_report_serve(struct mg_env *env, const struct mg_request *req,
                                  struct mg_response *res, const struct mg_cold_report *report,
                                  const char *key, const void *args, size_t args_len);

/* Sets a build's result from an SQLite code: MG_COLD_OK, else MG_COLD_ERROR (busy for a busy
 * or locked database) with err "reading WHAT failed: ...". */
void mg_cold_result(struct mg_cold_build *b, int rc, const char *what);

/* Whether serving key now would build it: not warm in the cache, nor being built by another
 * request (this one would follow that build, parked, or answer its previous answer). */
bool mg_cold_report_is_heavy(struct mg_env *env, const char *key);

#endif
