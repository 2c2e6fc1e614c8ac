/* SPDX-License-Identifier: ISC */
/*
 * wiring: hands core what it runs (site.h): the route table of workers/api/ and the proxy of
 * workers/upstream/. Called once at start, before a request is dispatched (mg_master_run, so
 * every worker has it; a test that dispatches in process calls it too).
 */
#ifndef MESHGATE_WIRING_H
#define MESHGATE_WIRING_H

void mg_site_wire(void);

#endif
