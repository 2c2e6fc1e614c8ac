/* SPDX-License-Identifier: ISC */
/*
 * test_hooks: what MESHGATE_TEST_HOOKS=park|block (read by the worker at start; not part of
 * the configuration) lets a request ask for, so the tests can make heavy work last and freeze
 * a worker inside a shared lock without locking the database. Dispatch calls these only when
 * the variable is set (mg_env.test_hooks): with it unset, the headers mean nothing and no
 * hook runs on the production path.
 *
 *   X-Test-Hold-Ms: N        a heavy request is held N ms (at most 30000) after admission,
 *                            with whatever admission gave it: on the helper thread that runs
 *                            it (a reach build, an anonymous heavy request), else parked
 *                            (park) or blocking its worker as a long scan would (block);
 *   MESHGATE_TEST_RELAY_PASS_MS=N (the worker's environment): each pass of the relay table
 *                            (node_relay.h) lasts N ms more (at most 30000);
 *   X-Test-Stop-In-Lock: P   the worker stops (SIGSTOP) right after it next takes part P's
 *                            lock while serving the request (anon, cold, diag, cache,
 *                            clients: shm/reclaim.h), inside the critical section;
 *   X-Test-Db-Break: N       every read of the file through the connection the request runs
 *                            on fails with SQLITE_IOERR_READ, and so on the next N - 1
 *                            connections opened in its place (mg_db_test_break): the fault
 *                            mg_db_heal heals (N = 1) or does not (N = 2).
 *
 * And every response the worker writes itself carries X-Test-Prepared: turns=N heads=H
 * preparations=P (worker.c): the request's turns, how often its head was parsed and how often
 * dispatch prepared it (1 and 1 however long it was parked).
 */
#ifndef MESHGATE_TEST_HOOKS_H
#define MESHGATE_TEST_HOOKS_H

#include "handler.h"

/* Arms X-Test-Stop-In-Lock for the request's first turn. */
void mg_test_hooks_stop_in_lock(struct mg_env *env, struct mg_request *req);

/* X-Test-Hold-Ms for a heavy request of route; anonymous_admitted: it holds the anonymous
 * line's permit (or the line is off), so it will run on the anonymous helper. Sets
 * req->test_hold_ms for work held on a helper. True when the handler may run now; false when
 * res is parked (held on the loop). */
bool mg_test_hooks_hold(struct mg_env *env, struct mg_request *req, unsigned route,
                        bool anonymous_admitted, struct mg_response *res);

/* X-Test-Db-Break's N (0: none). */
int mg_test_hooks_db_break(const struct mg_request *req);

/* On a helper thread: sleeps ms (0: not at all). */
void mg_test_hooks_sleep(int ms);

/* The milliseconds the environment variable name asks for (0 to 30000; 0 when unset), for a
 * hook that slows work down (MESHGATE_TEST_RELAY_PASS_MS: the relay table's pass). */
int mg_test_hooks_ms(const char *name);

#endif
