/* SPDX-License-Identifier: ISC */
/*
 * pacing: refusals paced per client address, in one worker. An address whose requests keep
 * being refused (the rate limit's 429, a share's or a full gate's 503: what
 * mg_response_refuse answers) gets each further refusal later and later, as HAProxy's tarpit
 * holds a denied request and nginx's limit_req delays the excess: the refusal is written only
 * after a delay that doubles with the address's streak of refusals, up to
 * MESHGATE_REFUSAL_PACE_MAX_MS, and meanwhile its connection is not read (the worker parks it
 * on a deadline, never a sleep). A closed-loop flooder then sends a request per delay per
 * connection instead of as fast as the loop answers, so its refusals stop taking the worker's
 * turns from everyone else's requests. What one address holds while paced is bounded: its
 * connections (MESHGATE_MAX_CONNS_PER_CLIENT), each holding one refusal (a few hundred bytes)
 * for at most MESHGATE_REFUSAL_PACE_MAX_MS; a connection refused PACE_CLOSE_AFTER times in a
 * row is closed after that refusal.
 *
 * The streak: refusals of the address not yet paid back by answers that were not refusals
 * (each halves it), forgotten PACE_FORGET_NS after its last refusal. The first PACE_FREE
 * refusals of a streak are written at once, so a client that meets a refusal now and then
 * (a wait that ran out under load) is never paced. The table is the worker's own, a fixed
 * number of addresses, one per bucket: a new address in a taken bucket replaces one whose
 * streak is over, else the lower streak.
 *
 * Trusted proxies and peers without an address (a local socket) are never paced: every
 * client behind them shares their address and their connections.
 */
#ifndef MESHGATE_PACING_H
#define MESHGATE_PACING_H

#include <stdbool.h>
#include <stdint.h>

#define MG_PACE_BUCKETS 1024
/* Refusals of a streak written at once before pacing starts. */
#define MG_PACE_FREE 4
/* The first paced refusal's delay; each further one doubles it, up to the configured most. */
#define MG_PACE_BASE_NS (4 * 1000 * 1000LL)
/* A streak is forgotten this long after its last refusal. */
#define MG_PACE_FORGET_NS (10 * 1000 * 1000 * 1000LL)
/* A connection refused this many times in a row is closed after the last of them. */
#define MG_PACE_CLOSE_AFTER 32

struct mg_pace_entry {
    uint8_t key[16]; /* the client's key (mg_client_key); all zero: free */
    uint32_t streak;
    int64_t last_ns; /* the streak's last refusal */
};

struct mg_pacing {
    struct mg_pace_entry bucket[MG_PACE_BUCKETS];
};

/*
 * One answer to the client of key (an address key, mg_client_key): refused or not. Returns
 * how long the refusal is held before it is written (0: at once), at most max_ns; an answer
 * that is not a refusal returns 0 and pays back half the streak.
 */
int64_t mg_pacing_answer(struct mg_pacing *p, const uint8_t key[16], bool refused, int64_t max_ns,
                         int64_t now);

#endif
