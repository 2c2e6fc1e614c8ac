/* SPDX-License-Identifier: ISC */
/*
 * breaker: a circuit breaker for the upstream, shared by the whole process group.
 *
 *   closed     requests go to the upstream; each failure (refused or failed connection, no
 *              answer within the deadline, a connection that broke before the response head)
 *              adds one to `failures`, each answer sets it back to 0;
 *   open       after `threshold` failures in a row: every request fails fast (502 with
 *              Retry-After) until open_until_ns, and the upstream is not asked;
 *   half-open  the first request after open_until_ns is the probe: it alone goes to the
 *              upstream (the others still fail fast); its answer closes the breaker, its
 *              failure opens it again for another open_ns.
 *
 * Why in the segment: every worker sees the same upstream, so one worker's failures spare
 * the others the wait, and a group of 16 workers sends one probe, not 16.
 *
 * No lock: every field is an atomic, and the only ownership (the probe) is a pid written by
 * compare-and-swap. A worker killed while it probes leaves probe_pid naming it; the master's
 * reclaim gives the probe back (the breaker opens again with open_until_ns = now, so the next
 * request probes). Races between two workers' verdicts can at worst open the breaker one
 * failure early or late; they never lose the probe. Time is a parameter of every call.
 */
#ifndef MESHGATE_BREAKER_H
#define MESHGATE_BREAKER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum mg_breaker_state { MG_BREAKER_CLOSED = 0, MG_BREAKER_OPEN, MG_BREAKER_HALF_OPEN };

struct mg_breaker {
    _Atomic uint32_t threshold; /* failures in a row that open it; 0: never opens */
    _Atomic uint32_t state;     /* enum mg_breaker_state */
    _Atomic int64_t open_ns;    /* how long it stays open */
    _Atomic uint32_t failures;  /* in a row, while closed */
    _Atomic int32_t probe_pid;  /* the worker whose request probes, while half-open */
    _Atomic int64_t open_until_ns;
    /* counters: only grow */
    _Atomic uint64_t opened;     /* times it opened */
    _Atomic uint64_t fast_fails; /* requests refused while open */
    _Atomic uint64_t probes;     /* requests let through to probe */
};

enum mg_breaker_verdict { MG_BREAKER_PASS = 0, MG_BREAKER_PROBE, MG_BREAKER_REFUSE };

void mg_breaker_init(struct mg_breaker *b, uint32_t threshold, int64_t open_ns);
/* Master, on reload. */
void mg_breaker_configure(struct mg_breaker *b, uint32_t threshold, int64_t open_ns);

/* May a request go to the upstream now? REFUSE sets *retry_ns (how long until a probe). */
enum mg_breaker_verdict mg_breaker_allow(struct mg_breaker *b, int pid, int64_t now_ns,
                                         int64_t *retry_ns);
/* The upstream answered (probe: the request was let through as the probe). */
void mg_breaker_success(struct mg_breaker *b, int pid, bool probe);
/* The upstream failed the request. */
void mg_breaker_failure(struct mg_breaker *b, int pid, bool probe, int64_t now_ns);
/* A probe that ended without a verdict (its client went away): the next request probes. */
void mg_breaker_abandon(struct mg_breaker *b, int pid, int64_t now_ns);
/* Master, after reaping pid: gives its probe back; true when it held one. */
bool mg_breaker_reclaim(struct mg_breaker *b, int pid, int64_t now_ns);

const char *mg_breaker_state_name(uint32_t state);

#endif
