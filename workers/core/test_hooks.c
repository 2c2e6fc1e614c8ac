/* SPDX-License-Identifier: ISC */
#include "test_hooks.h"

/* The whole file: the production build has no hook (test_hooks.h). */
#if MESHGATE_HOOKS

#include "clock.h"
#include "db.h"
#include "handler.h"
#include "lock.h"
#include "reclaim.h"
#include "scoreboard.h"
#include "site.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const hook_vars[] = {
    "MESHGATE_TEST_HOOKS", "MESHGATE_TEST_RELAY_PASS_MS", "MESHGATE_TEST_SUMMARIES_TX_MS",
    "MESHGATE_TEST_GROUP_PASS_MS", "MESHGATE_TEST_GROUP_PASS_ONLY"};

bool mg_test_hooks_var(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof hook_vars / sizeof *hook_vars; i++)
        if (strlen(hook_vars[i]) == n && strncmp(hook_vars[i], name, n) == 0)
            return true;
    return false;
}

void mg_test_hooks_init(struct mg_env *env)
{
    const char *hooks = getenv("MESHGATE_TEST_HOOKS");
    env->test_hooks = !hooks                        ? MG_TEST_HOOKS_OFF
                      : strcmp(hooks, "park") == 0  ? MG_TEST_HOOKS_PARK
                      : strcmp(hooks, "block") == 0 ? MG_TEST_HOOKS_BLOCK
                                                    : MG_TEST_HOOKS_OFF;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&ts, &ts) < 0)
        ;
}

bool mg_test_hooks_hold(struct mg_env *env, struct mg_request *req, unsigned route, bool on_helpers)
{
    if (env->test_hooks == MG_TEST_HOOKS_OFF)
        return true;
    struct mg_admission *a = &req->park->admission;
    const struct mg_str *h = mg_http_header_get(req->http, "X-Test-Hold-Ms");
    int ms = 0;
    for (size_t i = 0; h && i < h->len && i < 6 && h->ptr[i] >= '0' && h->ptr[i] <= '9'; i++)
        ms = ms * 10 + (h->ptr[i] - '0');
    ms = ms > 30000 ? 30000 : ms;
    req->test_hold_ms = a->hold_ms = ms;
    /* Held on a helper instead: a reach report inside its build, a heavy request run whole
     * on a helper (anonymous or signed in) inside its job. */
    const struct mg_route *row = mg_site_row(route);
    if (!row)
        return true; /* the upstream: the test upstream is slow on its own */
    bool on_helper = row->holds_in_build || (on_helpers && !row->own_jobs);
    if (ms == 0 || on_helper)
        return true;
    int64_t now = mg_monotonic_ns();
    if (a->hold_until_ns == 0)
        a->hold_until_ns = now + (int64_t)ms * MG_NS_PER_MS;
    if (env->test_hooks == MG_TEST_HOOKS_BLOCK) {
        while (now < a->hold_until_ns) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            now = mg_monotonic_ns();
            mg_scoreboard_beat(); /* as a long scan does, from SQLite's progress handler */
        }
        return true;
    }
    if (now < a->hold_until_ns) {
        mg_park_until(req, a->hold_until_ns);
        return false;
    }
    return true;
}

void mg_test_hooks_stop_in_lock(struct mg_env *env, struct mg_request *req)
{
    if (env->test_hooks == MG_TEST_HOOKS_OFF)
        return;
    const struct mg_str *h = mg_http_header_get(req->http, "X-Test-Stop-In-Lock");
    char part[16];
    const void *lo, *hi;
    if (h && h->len < sizeof part) {
        memcpy(part, h->ptr, h->len);
        part[h->len] = '\0';
        if (mg_segment_lock_range(env->seg, part, &lo, &hi))
            mg_lock_test_stop_inside(lo, hi);
    }
}

void mg_test_hooks_turn_done(struct mg_env *env)
{
    if (env->test_hooks != MG_TEST_HOOKS_OFF)
        mg_lock_test_stop_inside(NULL, NULL); /* disarmed: it was for this request only */
}

int mg_test_hooks_db_break(const struct mg_env *env, const struct mg_request *req)
{
    if (env->test_hooks == MG_TEST_HOOKS_OFF)
        return 0;
    const struct mg_str *h = mg_http_header_get(req->http, "X-Test-Db-Break");
    return h && h->len == 1 && h->ptr[0] >= '1' && h->ptr[0] <= '9' ? h->ptr[0] - '0' : 0;
}

/* X-Test-Db-Break: reads of the file fail; pages come from neither the map nor the cache. */
static sqlite3_io_methods broken_methods;
static _Thread_local int break_next; /* connections still to break on this thread */

static int broken_read(sqlite3_file *f, void *buf, int amount, sqlite3_int64 offset)
{
    (void)f, (void)buf, (void)amount, (void)offset;
    return SQLITE_IOERR_READ;
}

static int broken_fetch(sqlite3_file *f, sqlite3_int64 offset, int amount, void **p)
{
    (void)f, (void)offset, (void)amount;
    *p = NULL;
    return SQLITE_OK;
}

/* Every read of db's file fails until the connection is closed, and so on the next
 * again - 1 connections this thread opens in its place. */
static void break_db(struct mg_db *db, int again)
{
    static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    sqlite3_file *f = NULL;
    if (!db->conn ||
        sqlite3_file_control(db->conn, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK || !f ||
        !f->pMethods)
        return;
    pthread_mutex_lock(&mutex);
    if (f->pMethods != &broken_methods) {
        if (!broken_methods.xRead) {
            broken_methods = *f->pMethods;
            broken_methods.xRead = broken_read;
            if (broken_methods.iVersion >= 3)
                broken_methods.xFetch = broken_fetch;
        }
        f->pMethods = &broken_methods;
    }
    pthread_mutex_unlock(&mutex);
    sqlite3_db_release_memory(db->conn);
    break_next = again > 1 ? again - 1 : 0;
}

void mg_test_hooks_before_work(struct mg_db *db, int hold_ms, int db_break)
{
    sleep_ms(hold_ms);
    if (db_break > 0)
        break_db(db, db_break);
}

void mg_test_hooks_db_reopened(struct mg_db *db)
{
    if (break_next > 0) {
        break_next--;
        break_db(db, break_next + 1);
    }
}

/* Sleeps the milliseconds the variable name says (at most max), when the hooks are on. */
static void sleep_for_var(const struct mg_env *env, const char *name, long max)
{
    if (!env || env->test_hooks == MG_TEST_HOOKS_OFF)
        return;
    const char *v = getenv(name);
    long ms = v ? strtol(v, NULL, 10) : 0;
    sleep_ms(ms < 0 ? 0 : ms > max ? (int)max : (int)ms);
}

void mg_test_hooks_relay_pass(const struct mg_env *env)
{
    sleep_for_var(env, "MESHGATE_TEST_RELAY_PASS_MS", 30000);
}

void mg_test_hooks_group_pass(const struct mg_env *env, const char *name)
{
    const char *only = getenv("MESHGATE_TEST_GROUP_PASS_ONLY");
    if (only) { /* a comma-separated list of names */
        size_t n = strlen(name);
        const char *at = only;
        while ((at = strstr(at, name)) &&
               !((at == only || at[-1] == ',') && (at[n] == ',' || at[n] == '\0')))
            at += n;
        if (!at)
            return;
    }
    sleep_for_var(env, "MESHGATE_TEST_GROUP_PASS_MS", 30000);
}

void mg_test_hooks_summaries_tx(const struct mg_env *env)
{
    sleep_for_var(env, "MESHGATE_TEST_SUMMARIES_TX_MS", 1000);
}

void mg_test_hooks_prepared(const struct mg_env *env, const struct mg_park *park,
                            struct mg_response *res)
{
    if (env->test_hooks != MG_TEST_HOOKS_OFF)
        mg_response_header(res,
                           "X-Test-Prepared: turns=%u heads=%u preparations=%u dispatches=%u "
                           "admissions=%u parses=%u tops=%u",
                           park->turns, park->head_parses, park->preparations, park->dispatches,
                           park->admissions, park->param_parses, park->handler_tops);
}

void mg_test_hooks_loop(const struct mg_env *env, struct mg_response *res,
                        const struct mg_test_loop_counts *c)
{
    if (env->test_hooks != MG_TEST_HOOKS_OFF)
        mg_response_header(res,
                           "X-Test-Loop: turns=%llu steps=%llu recvs=%llu parent_checks=%llu "
                           "poll_ctls=%llu sends=%llu max_turn_write=%llu gzips=%llu "
                           "out_bytes=%llu",
                           c->turns, c->steps, c->recvs, c->parent_checks, c->poll_ctls, c->sends,
                           c->max_turn_write, c->gzips, c->out_bytes);
}

#endif
