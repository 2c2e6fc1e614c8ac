/* SPDX-License-Identifier: ISC */
/*
 * upstream_ticket: what admission (upstream_route.c) took for a request that goes to the
 * upstream, kept in the request's park (the handler's own state) over its parked turns and
 * handed to the engine (upstream.c), which gives it all back when the exchange ends.
 */
#ifndef MESHGATE_UPSTREAM_TICKET_H
#define MESHGATE_UPSTREAM_TICKET_H

#include "handler.h"

#include <stdbool.h>
#include <stdint.h>

struct mg_upstream_ticket {
    int step;            /* enum in upstream_route.c */
    int place;           /* in the gate's line, while waiting */
    uint64_t ticket;     /* of that place */
    int64_t deadline_ns; /* end of the wait */
    uint64_t gate_token; /* the upstream gate's permit, when gate_held */
    uint64_t anon_token; /* the anonymous line's permit; 0: none */
    bool probe;          /* this request probes the breaker */
    bool tunnel;         /* a WebSocket tunnel is counted for it */
    bool gate_held;
};
_Static_assert(sizeof(struct mg_upstream_ticket) <= MG_PARK_BYTES, "the ticket fits the park");

static inline struct mg_upstream_ticket *mg_upstream_ticket_of(struct mg_park *park)
{
    return (struct mg_upstream_ticket *)park->state;
}

#endif
