/* SPDX-License-Identifier: ISC */
/*
 * ep_packets: GET /api/packets (the handler, mg_handle_packets, and its heavy check are declared
 * in router.h). The route's own part: its parameters read into the page scan's filter; the
 * page itself is the data room's (packet_scan.h describes its statements).
 *
 * This header exposes the parsed parameters so that tests can pin the query plans.
 */
#ifndef MESHGATE_EP_PACKETS_H
#define MESHGATE_EP_PACKETS_H

#include "handler.h"
#include "packet_scan.h"

#include <stdbool.h>

#define MG_PACKETS_LIMIT_DEFAULT 50
#define MG_PACKETS_LIMIT_MAX 10000
/* A page of no filter, neither expanded nor grouped, at most this long and this far down, is
 * light (mg_packets_is_heavy) while the summaries cover it: each row is a summary read and
 * its best observation by primary key (on the e2e fixture, 50 rows are 67 KB); the total is the one
 * its process last counted for the same snapshot (packet_scan.c, shared_total). Found otherwise at
 * run time (packet_scan.h, MG_PACKETS_LIGHT_LAG and MG_PACKETS_LIGHT_BYTES), it is admitted again,
 * heavy (MG_READMIT_HEAVY). */
#define MG_PACKETS_LIGHT_LIMIT 50
#define MG_PACKETS_LIGHT_OFFSET 1000

/*
 * Reads the parameters into f (strings point into req). Returns true, or false after
 * filling res with a 400 that names the parameter and what it accepts.
 */
bool mg_packets_parse(const struct mg_request *req, struct mg_response *res,
                      struct mg_packets_filter *f);

#endif
