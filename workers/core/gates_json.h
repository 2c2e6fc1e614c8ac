/* SPDX-License-Identifier: ISC */
/*
 * gates_json: each gate's state as JSON, the same in /api/perf (in full) and /api/healthz
 * (saturation only), read from the segment without taking any gate's lock.
 */
#ifndef MESHGATE_GATES_JSON_H
#define MESHGATE_GATES_JSON_H

#include "json.h"
#include "segment.h"

#include <stdbool.h>

/* Writes the value of "gates": an object with one key per gate. Client addresses (the
 * anonymous line's records, "client path") and the upstream's address appear only with
 * show_clients (an admin reads); otherwise they read "hidden". */
void mg_gates_json(struct mg_json *j, const struct mg_segment *seg, bool full, bool show_clients);

#endif
