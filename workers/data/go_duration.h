/* SPDX-License-Identifier: ISC */
/*
 * go_duration: a duration as CoreScope's handlers read one, so that a window a page sends is
 * refused or accepted exactly as there:
 *   mg_go_duration_parse   Go's time.ParseDuration: an optional sign, then one or more
 *                          "<decimal><unit>" ("1h30m", "1.5h", ".5s"; units ns, us, µs, μs,
 *                          ms, s, m, h), or "0"; anything else, or more than 2^63 - 1 ns
 *                          (2^63 when negative), is refused.
 *   mg_go_window_parse     CoreScope's window of /api/observers/metrics/summary: "<N>d" with
 *                          N a whole number above 0 (Go's strconv.Atoi: an optional sign,
 *                          digits) is N days, multiplied in 64 bits as Go does (a huge N wraps);
 *                          anything else is read by mg_go_duration_parse.
 */
#ifndef MESHGATE_GO_DURATION_H
#define MESHGATE_GO_DURATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

bool mg_go_duration_parse(const char *s, size_t len, int64_t *ns);
bool mg_go_window_parse(const char *s, size_t len, int64_t *ns);

#endif
