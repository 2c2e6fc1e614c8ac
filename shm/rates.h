/* SPDX-License-Identifier: ISC */
/*
 * rates: request and refusal rates of the whole group over the last minute. The master
 * samples the totals into a ring in the segment header once a second; any reader (the
 * status page, the dump tool) divides the difference between two samples by their distance.
 */
#ifndef MESHGATE_RATES_H
#define MESHGATE_RATES_H

#include "segment.h"

#include <stdbool.h>
#include <stdint.h>

/* Requests refused by a gate so far (diagnostic and cold-scan; every 429 and 503 of them). */
uint64_t mg_rates_refusals(const struct mg_segment *seg);

/* Master: records the totals for the monotonic second now_s (once per second is enough). */
void mg_rates_sample(struct mg_segment *seg, int64_t now_s);

/* Rates per second over the last window_s seconds (1..63); false while there is no sample
 * that old yet. */
bool mg_rates_per_second(const struct mg_segment *seg, int64_t now_s, int window_s,
                         double *requests, double *refusals);

#endif
