/* SPDX-License-Identifier: ISC */
/*
 * breaker: a circuit breaker for the upstream, shared by the whole process group.
 *
 *   closed     requests go to the upstream; each failure (refused or failed connection, no
 *              answer within the deadline, a connection that broke before the response head)
 *              adds one to `failures`, each answer sets it back to 0;
 *   open       after `threshold` failures in a row: every request fails fast (502 with
 *              Retry-After) until open_until_ns, and the upstream is not asked;
 *   half-open  after open_until_ns one worker takes the probe (mg_breaker_take_probe) and
 *              asks the upstream a health request of meshgate's own (upstream.c,
 *              MESHGATE_UPSTREAM_HEALTH_PATH); clients still fail fast. Its answer closes the
 *              breaker, its failure opens it again for another open_ns. No client's request
 *              is ever the probe: a client whose requests hang could otherwise take every
 *              probe and keep the breaker open for everyone (issue 23).
 *
 * Attribution: each failure names the client address whose request failed; the breaker
 * keeps the last one and how many failures in a row came from it, and on opening records
 * the address (opened_by) and whether all the failures that opened it were that one
 * address's (counted in opened_by_one_address; upstream.c logs the address).
 *
 * Why in the segment: every worker sees the same upstream, so one worker's failures spare
 * the others the wait, and a group of 16 workers sends one probe, not 16.
 *
 * No lock: every field is an atomic, and the only ownership (the probe) is a pid written by
 * compare-and-swap. A worker killed while it probes leaves probe_pid naming it; the master's
 * reclaim gives the probe back (the breaker opens again with open_until_ns = now, so the next
 * worker to look probes). Races between two workers' verdicts can at worst open the breaker one
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
    _Atomic int32_t probe_pid;  /* the worker whose health probe is out, while half-open */
    _Atomic int64_t open_until_ns;
    /* counters: only grow */
    _Atomic uint64_t opened;     /* times it opened */
    _Atomic uint64_t fast_fails; /* requests refused while open */
    _Atomic uint64_t probes;     /* health probes sent */
    _Atomic uint64_t
        opened_by_one_address; /* times every failure that opened it was one address's */
    /* the client address of the last failure, and failures in a row from it */
    _Atomic uint64_t last_addr[2];
    _Atomic uint32_t last_addr_run;
    _Atomic uint64_t opened_by[2]; /* the last failure's address when it last opened */
};

enum mg_breaker_verdict { MG_BREAKER_PASS = 0, MG_BREAKER_REFUSE };

void mg_breaker_init(struct mg_breaker *b, uint32_t threshold, int64_t open_ns);
/* Master, on reload. */
void mg_breaker_configure(struct mg_breaker *b, uint32_t threshold, int64_t open_ns);

/* May a client's request go to the upstream now? PASS while closed; otherwise (open or
 * half-open) REFUSE, with *retry_ns (how long until the open time ends). A client's request
 * never probes: the probe is meshgate's own health request (mg_breaker_take_probe). */
enum mg_breaker_verdict mg_breaker_allow(struct mg_breaker *b, int pid, int64_t now_ns,
                                         int64_t *retry_ns);
/* When a probe is due: open_until_ns while open, else INT64_MAX. */
int64_t mg_breaker_probe_due(const struct mg_breaker *b);
/* Open and due: pid takes the probe (the breaker becomes half-open); true when it did. */
bool mg_breaker_take_probe(struct mg_breaker *b, int pid, int64_t now_ns);
/* The upstream answered (probe: pid's health probe). */
void mg_breaker_success(struct mg_breaker *b, int pid, bool probe);
/* The upstream failed a request of client address addr (16 bytes; NULL for a probe). True
 * when this failure opened the breaker. */
bool mg_breaker_failure(struct mg_breaker *b, int pid, bool probe, int64_t now_ns,
                        const uint8_t *addr);
/* pid's health probe ended without a verdict (its worker drains): open with open_until_ns =
 * now, so the next worker to look probes at once. */
void mg_breaker_abandon(struct mg_breaker *b, int pid, int64_t now_ns);
/* Master, after reaping pid: gives its probe back; true when it held one. */
bool mg_breaker_reclaim(struct mg_breaker *b, int pid, int64_t now_ns);

const char *mg_breaker_state_name(uint32_t state);

#endif
