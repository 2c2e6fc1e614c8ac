/* SPDX-License-Identifier: ISC */
/*
 * upstream_ticket: what admission (upstream_route.c) took for a request that goes to the
 * upstream, kept in the request's park (the handler's own state) over its parked turns and
 * handed to the engine (upstream.c), which gives it all back when the exchange ends.
 */
#ifndef MESHGATE_UPSTREAM_TICKET_H
#define MESHGATE_UPSTREAM_TICKET_H

#include "gate_fifo.h"
#include "handler.h"

#include <stdbool.h>
#include <stdint.h>

struct mg_upstream_ticket {
    int step;                  /* enum in upstream_route.c */
    struct mg_gate_pass pass;  /* at the upstream's gate (admission.c), while waiting */
    char who[MG_FIFO_KEY_MAX]; /* "METHOD path", as the gate's records show it */
    uint64_t gate_token;       /* the upstream gate's permit, when gate_held */
    bool anon_claim;           /* one of the permits anonymous requests may hold */
    bool tunnel;               /* a WebSocket tunnel is counted for it */
    bool gate_held;
    uint32_t share_hold_plus_one; /* the tunnel is counted in this hold's client share; 0: not */
};
_Static_assert(sizeof(struct mg_upstream_ticket) <= MG_PARK_BYTES, "the ticket fits the park");

static inline struct mg_upstream_ticket *mg_upstream_ticket_of(struct mg_park *park)
{
    return (struct mg_upstream_ticket *)park->state;
}

/* Gives back the tunnel's place in its client's share, if it took one (upstream_route.c). */
void mg_upstream_tunnel_share_give_back(const struct mg_env *env, struct mg_upstream_ticket *t);

#endif
