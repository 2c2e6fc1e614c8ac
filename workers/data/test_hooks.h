/* SPDX-License-Identifier: ISC */
/*
 * test_hooks: what the tests ask of a server, in the test build only. The sources compiled
 * with MESHGATE_HOOKS=1 (GNUmakefile: build/meshgate-hooks and the tests' library) have the
 * hooks; the production build (build/meshgate, what `make install` installs) has none: every
 * hook below is a macro that compiles to nothing, MESHGATE_TEST_* is an unknown variable like
 * any other (exit 78) and X-Test-* headers mean nothing. Only .c files include this header and
 * no other header tests MESHGATE_HOOKS, so the two builds share every struct and only the
 * files that include it are compiled twice (GNUmakefile checks this).
 *
 * In the test build, MESHGATE_TEST_HOOKS=park|block (read by the worker at start) turns the
 * hooks on (mg_env.test_hooks), so the tests can make heavy work last and freeze a worker
 * inside a shared lock without locking the database; without it they do nothing:
 *
 *   X-Test-Hold-Ms: N        a heavy request is held N ms (at most 30000) after admission,
 *                            with whatever admission gave it: on the helper thread that runs
 *                            it (a reach build, a heavy request run whole on a helper), else
 *                            parked (park) or blocking its worker as a long scan would (block);
 *   MESHGATE_TEST_RELAY_PASS_MS=N (the worker's environment): each pass of the relay table
 *                            (node_relay.h) lasts N ms more (at most 30000);
 *   MESHGATE_TEST_GROUP_PASS_MS=N (the worker's environment): each pass of every group table
 *                            (group_table.h: the relay table and probe, hash sizes, region
 *                            map, neighbour graph) lasts N ms more (at most 30000);
 *   MESHGATE_TEST_GROUP_PASS_ONLY=a,b (the worker's environment): only the group tables so
 *                            named (their cache key's first part: usefulness, multibyte, ...)
 *                            take MESHGATE_TEST_GROUP_PASS_MS more;
 *   MESHGATE_TEST_SUMMARIES_TX_MS=N (the worker's environment): each transmission the
 *                            summaries' pass summarizes takes N ms more (at most 1000), so a
 *                            small database's pass lasts;
 *   X-Test-Stop-In-Lock: P   the worker stops (SIGSTOP) right after it next takes part P's
 *                            lock while serving the request (anon, cold, diag, cache,
 *                            clients: shm/reclaim.h), inside the critical section
 *                            (mg_lock_test_stop_inside, shm/lock.h);
 *   X-Test-Db-Break: N       every read of the file through the connection the request runs
 *                            on fails with SQLITE_IOERR_READ, and so on the next N - 1
 *                            connections opened in its place: the fault mg_db_heal heals
 *                            (N = 1) or does not (N = 2).
 *
 * And every response the worker writes itself carries X-Test-Prepared: turns=N heads=H
 * preparations=P dispatches=D admissions=A parses=Q tops=T: the request's turns, how often
 * its head was parsed, how often dispatch prepared it, how often it entered dispatch from the
 * top, how often admission ran its route's gates, how often its route's parameters were
 * parsed and how often its handler was entered at its top (1, 1, 1, 1, 1 and, for a handler
 * that names its step when it parks, 1, however long it was parked at its handler; A counts
 * its turns in the line too), and X-Test-Loop: turns=N steps=S recvs=R parent_checks=P
 * poll_ctls=C sends=W max_turn_write=M gzips=G out_bytes=O, its worker's loop so far: the turns,
 * the connections visited by the turns' own passes (serving, deadlines, the slot's state), the recv
 * calls that read request heads and bodies, the checks of the master's pid, the epoll_ctl calls
 * for connections, the send and sendfile calls of answers, the most bytes of an answer one
 * connection got in one turn, the answers the loop compressed itself and the bytes it serialized
 * into connections' out buffers (a large body is moved there, not copied).
 */
#ifndef MESHGATE_TEST_HOOKS_H
#define MESHGATE_TEST_HOOKS_H

#include <stdbool.h>
#include <stddef.h>

struct mg_db;
struct mg_env;
struct mg_park;
struct mg_request;
struct mg_response;

/* What a worker's loop has done so far (X-Test-Loop). */
struct mg_test_loop_counts {
    unsigned long long turns, steps, recvs, parent_checks, poll_ctls, sends, max_turn_write, gzips,
        out_bytes;
};

#if MESHGATE_HOOKS

/* Whether name[0..n) is one of the variables above (the configuration check knows them). */
bool mg_test_hooks_var(const char *name, size_t n);

/* At the worker's start: MESHGATE_TEST_HOOKS into env->test_hooks. */
void mg_test_hooks_init(struct mg_env *env);

/* Arms X-Test-Stop-In-Lock on the turn the request first meets its gates (after any wait for
 * its route's table); disarmed when dispatch is done with the turn (mg_test_hooks_turn_done). */
void mg_test_hooks_stop_in_lock(struct mg_env *env, struct mg_request *req);
void mg_test_hooks_turn_done(struct mg_env *env);

/* X-Test-Hold-Ms for a heavy request of route; on_helpers: its work runs on a helper (an
 * anonymous request admitted by the line, or one signed in), not on the loop. Sets
 * req->test_hold_ms for work held on a helper. True when the handler may run now (always,
 * with the hooks off); false when the request is parked (held on the loop: park.wait). */
bool mg_test_hooks_hold(struct mg_env *env, struct mg_request *req, unsigned route,
                        bool on_helpers);

/* X-Test-Db-Break's N (0: none, or the hooks are off). */
int mg_test_hooks_db_break(const struct mg_env *env, const struct mg_request *req);

/* On the thread that runs the request's work: sleeps hold_ms, then breaks db for db_break
 * connections (X-Test-Db-Break's N; 0: none). */
void mg_test_hooks_before_work(struct mg_db *db, int hold_ms, int db_break);

/* After db's connection was opened again in place (db.c): broken again while X-Test-Db-Break
 * asks for more broken connections on this thread. */
void mg_test_hooks_db_reopened(struct mg_db *db);

/* In a pass of the relay table: MESHGATE_TEST_RELAY_PASS_MS more (env NULL: none). */
void mg_test_hooks_relay_pass(const struct mg_env *env);

/* In a pass of the group table name: MESHGATE_TEST_GROUP_PASS_MS more (env NULL: none), when
 * MESHGATE_TEST_GROUP_PASS_ONLY is unset or names it. */
void mg_test_hooks_group_pass(const struct mg_env *env, const char *name);

/* In the summaries' pass, after each transmission: MESHGATE_TEST_SUMMARIES_TX_MS more (env
 * NULL: none). */
void mg_test_hooks_summaries_tx(const struct mg_env *env);

/* The X-Test-Prepared header on a response the worker writes itself. */
void mg_test_hooks_prepared(const struct mg_env *env, const struct mg_park *park,
                            struct mg_response *res);

/* The X-Test-Loop header on a response the worker writes itself. */
void mg_test_hooks_loop(const struct mg_env *env, struct mg_response *res,
                        const struct mg_test_loop_counts *counts);

#else /* the production build: no hook */

#define mg_test_hooks_var(name, n) false
#define mg_test_hooks_init(env) ((void)0)
#define mg_test_hooks_stop_in_lock(env, req) ((void)0)
#define mg_test_hooks_turn_done(env) ((void)0)
#define mg_test_hooks_hold(env, req, route, on_helpers) true
#define mg_test_hooks_db_break(env, req) 0
#define mg_test_hooks_before_work(db, hold_ms, db_break) ((void)0)
#define mg_test_hooks_db_reopened(db) ((void)0)
#define mg_test_hooks_relay_pass(env) ((void)0)
#define mg_test_hooks_group_pass(env, name) ((void)(env), (void)(name))
#define mg_test_hooks_summaries_tx(env) ((void)(env))
#define mg_test_hooks_prepared(env, park, res) ((void)0)
#define mg_test_hooks_loop(env, res, counts) ((void)(counts))

#endif

#endif
