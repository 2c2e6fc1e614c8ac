/* SPDX-License-Identifier: ISC */
#include "group_table.h"

#include "clock.h"
#include "db.h"
#include "log.h"
#include "malloc_trim.h"
#include "result_body.h"
#include "segment.h"
#include "state_file.h"
#include "stats.h"
#include "test_hooks.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static _Atomic uint64_t *counter(const struct mg_env *env, size_t offset)
{
    return (_Atomic uint64_t *)((char *)env->seg->cache.cache + offset);
}

/* What a build is given: the pass's (the table is relative to its realtime_ns; its env,
 * NULL or without a segment: none, counts the pass in the group's builds counter). */
struct build_arg {
    struct mg_group_table *g;
    struct mg_group_build_arg pass;
    struct mg_buf *body; /* NULL: the table's encoding is only measured (table_stats.h) */
    int64_t built_ns;    /* what body says */
};

static void *counted_build(sqlite3 *conn, void *arg, int *rc)
{
    struct build_arg *a = arg;
    int64_t began = mg_table_pass_begin(a->g->stats);
    /* The pass reads what it reads through read(), not the map: the pages stay out of this
     * worker's PSS while it runs and after (db.h). */
    struct mg_db_pass unmapped;
    mg_db_pass_begin(&unmapped, conn, MG_DB_GROUP_PASS_CACHE_KIB);
    void *t = a->g->build(conn, &a->pass, rc);
    mg_test_hooks_group_pass(a->pass.env, a->g->name);
    mg_db_pass_end(&unmapped);
    if (t && a->pass.env && a->pass.env->seg)
        atomic_fetch_add(counter(a->pass.env, a->g->builds), 1);
    size_t size = 0;
    if (t) { /* its size as the group's copy (each process's own, too large for the cache) */
        struct mg_buf own, *out = a->body ? a->body : &own;
        if (!a->body)
            mg_buf_init(&own);
        a->g->encode(t, a->built_ns, out);
        size = out->len;
        if (!a->body)
            mg_buf_free(&own);
    }
    mg_table_pass_end(a->g->stats, began, t != NULL, size);
    return t;
}

/* This process's own pass (no group copy). */
static int refresh_own(struct mg_group_table *g, struct mg_env *env, sqlite3 *conn, int64_t now_ns,
                       int64_t now_realtime_ns)
{
    struct build_arg arg = {g, {now_realtime_ns, env}, NULL, now_ns};
    return mg_process_table_refresh(g->table, conn, now_ns, counted_build, &arg);
}

static bool group_shared(struct mg_group_table *g, const struct mg_env *env)
{
    return env && env->seg && env->seg->config->reach_cache_ttl_ms > 0 &&
           !atomic_load(&g->too_large);
}

static int64_t period_of(const struct mg_group_table *g, int64_t now_ns)
{
    return now_ns / g->table->interval_ns;
}

/* The key of the group's table of conn's database file built in the interval `period`. */
static void group_key(const struct mg_group_table *g, sqlite3 *conn, int64_t period,
                      char key[MG_CACHE_KEY_MAX])
{
    const char *file = sqlite3_db_filename(conn, "main");
    struct stat st = {0};
    stat(file ? file : "", &st);
    snprintf(key, MG_CACHE_KEY_MAX, "%s|v%u|%llx:%llx|%lld", g->name, g->version,
             (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, (long long)period);
}

/* Installs the table of body unless this process's is as new; false: not a table. */
static bool adopt(struct mg_group_table *g, struct mg_env *env, sqlite3 *conn,
                  const struct mg_buf *body)
{
    int64_t built_ns;
    void *t = g->decode(body->data, body->len, &built_ns);
    if (!t)
        return false;
    if (built_ns <= mg_process_table_built_ns(g->table, conn)) {
        g->table->free_table(t);
        return true;
    }
    mg_process_table_install(g->table, conn, t, built_ns);
    atomic_fetch_add(counter(env, g->copies), 1);
    mg_debug("%s: took the group's table (%zu bytes)", g->what, body->len);
    return true;
}

/* Takes the group's table under key when one is stored; claims nothing. */
static bool take_copy(struct mg_group_table *g, struct mg_env *env, sqlite3 *conn, const char *key,
                      int64_t now)
{
    struct mg_cache_view *v = &env->seg->cache;
    if (!mg_result_cache_warm(v, env->pid, key, now))
        return false;
    struct mg_buf body;
    mg_buf_init(&body);
    uint64_t build_id = 0;
    enum mg_cache_outcome o =
        mg_result_cache_relook(v, env->pid, env->slot, key, now, &body, &build_id);
    if (o == MG_CACHE_CLAIMED) /* evicted meanwhile */
        mg_result_cache_abandon(v, env->pid, build_id);
    bool took = o == MG_CACHE_HIT && !body.failed && adopt(g, env, conn, &body);
    mg_buf_free(&body);
    return took;
}

/* The state directory (state_file.h), when one is set and the group shares its tables. */
static const char *state_dir(struct mg_group_table *g, const struct mg_env *env)
{
    return group_shared(g, env) && env->cfg && env->cfg->state_dir[0] ? env->cfg->state_dir : NULL;
}

/* After the group's pass: its body kept in the state directory, under the database's key as
 * read before the pass (the table covers at least those rows). */
static void keep_state(struct mg_group_table *g, struct mg_env *env, const char *dir,
                       const struct mg_state_key *k, int64_t realtime_ns, const struct mg_buf *body)
{
    char why[PATH_MAX + 160];
    if (mg_state_write(dir, g->name, g->version, k, realtime_ns, body->data, body->len, why,
                       sizeof why) == 0) {
        atomic_fetch_add(&env->seg->cache.cache->state_written, 1);
        mg_debug("%s: kept in %s (%zu bytes)", g->what, dir, body->len);
        return;
    }
    atomic_fetch_add(&env->seg->cache.cache->state_write_failures, 1);
    if (!atomic_exchange(&g->state_warned, true))
        mg_warn("%s: not kept across restarts (MESHGATE_STATE_DIR): %s", g->what, why);
}

/* The pass for the group, with key claimed (build_id); the table is stored for the others and
 * installed here. Not under the cold-scan gate: the claim already makes it one pass at a time
 * in the group, and a permit held through a start-up pass (that a writer's lock may stall)
 * would be taken from the reports the gate is for. Nor counted among the reports' cache
 * counters: the table's own builds and copies count it. */
static int build_for_group(struct mg_group_table *g, struct mg_env *env, sqlite3 *conn,
                           uint64_t build_id, int64_t now_realtime_ns)
{
    struct mg_cache_view *v = &env->seg->cache;
    int64_t built_ns = mg_monotonic_ns();
    int rc = SQLITE_OK;
    struct mg_buf body;
    mg_buf_init(&body);
    struct build_arg arg = {g, {now_realtime_ns, env}, &body, built_ns};
    const char *dir = state_dir(g, env);
    struct mg_state_key state_key;
    bool keyed = dir && mg_state_key_read(conn, &state_key) == SQLITE_OK;
    void *t = counted_build(conn, &arg, &rc);
    if (!t) {
        mg_buf_free(&body);
        mg_result_cache_abandon(v, env->pid, build_id);
        return rc;
    }
    size_t most = mg_result_cache_max_body(v->cache);
    if (body.failed) {
        mg_result_cache_abandon(v, env->pid, build_id);
    } else {
        if (body.len > most && !atomic_exchange(&g->too_large, true))
            mg_warn("%s: the table's %zu bytes are more than the result cache stores (%zu, a"
                    " quarter of MESHGATE_REACH_CACHE_BYTES): each worker builds its own",
                    g->what, body.len, most);
        bool stored = mg_result_cache_store_uncounted(v, env->pid, build_id, body.data, body.len,
                                                      mg_monotonic_ns());
        if (stored && keyed) /* what the cache cannot hold is not kept either */
            keep_state(g, env, dir, &state_key, now_realtime_ns, &body);
    }
    mg_debug("%s: built the group's table (%zu bytes)", g->what, body.len);
    mg_buf_free(&body);
    mg_process_table_install(g->table, conn, t, built_ns);
    return SQLITE_OK;
}

/* How long a request with no table waits for another worker's build. */
#define GROUP_WAIT_NS (120 * 1000000000LL)

/* Under g->lock: this process's table is stale or missing. */
static int obtain_locked(struct mg_group_table *g, struct mg_env *env, sqlite3 *conn,
                         int64_t now_ns, int64_t now_realtime_ns, bool wait)
{
    char key[MG_CACHE_KEY_MAX], prev[MG_CACHE_KEY_MAX];
    int64_t period = period_of(g, now_ns);
    group_key(g, conn, period, key);
    group_key(g, conn, period - 1, prev);
    /* The last interval's build: fresh still if younger than the interval; a first copy in
     * any case (served while the helper refreshes it: mg_group_table_keep). */
    bool had = mg_process_table_exists(g->table, conn);
    if (take_copy(g, env, conn, prev, now_ns) &&
        (!had || mg_process_table_fresh(g->table, conn, now_ns)))
        return SQLITE_OK;
    struct mg_cache_view *v = &env->seg->cache;
    struct mg_buf body;
    mg_buf_init(&body);
    uint64_t build_id = 0;
    enum mg_cache_outcome o = /* not counted among the reports' hits and misses */
        mg_result_cache_relook(v, env->pid, env->slot, key, now_ns, &body, &build_id);
    if (o == MG_CACHE_BUSY && wait)
        o = mg_result_cache_wait(v, env->pid, env->slot, key, mg_monotonic_ns() + GROUP_WAIT_NS,
                                 NULL, NULL, &body, &build_id);
    int rc = SQLITE_OK;
    if (o == MG_CACHE_HIT && !(!body.failed && adopt(g, env, conn, &body))) {
        rc = refresh_own(g, env, conn, now_ns, now_realtime_ns); /* not a table: its own */
    } else if (o == MG_CACHE_CLAIMED) {
        rc = build_for_group(g, env, conn, build_id, now_realtime_ns);
    } else if (o == MG_CACHE_BUSY && !mg_process_table_exists(g->table, conn)) {
        rc = SQLITE_BUSY; /* another worker builds it still */
    }
    mg_buf_free(&body);
    return rc;
}

/* Makes this process's table fresh: the group's copy when it has one, else the pass, once for
 * the group; without the group's cache, this process's own pass. wait: a build under way in
 * another worker is waited for; else, the table kept as it is. An SQLite code. */
static int obtain(struct mg_group_table *g, struct mg_env *env, sqlite3 *conn, int64_t now_ns,
                  int64_t now_realtime_ns, bool wait)
{
    if (mg_process_table_fresh(g->table, conn, now_ns))
        return SQLITE_OK;
    if (!group_shared(g, env))
        return refresh_own(g, env, conn, now_ns, now_realtime_ns);
    pthread_mutex_lock(&g->lock);
    int rc = SQLITE_OK;
    if (!mg_process_table_fresh(g->table, conn, now_ns))
        rc = obtain_locked(g, env, conn, now_ns, now_realtime_ns, wait);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

static void run_rebuild(struct mg_job *job, struct mg_db *db)
{
    struct mg_group_rebuild *r = (struct mg_group_rebuild *)job;
    int rc = obtain(r->g, r->env, db->conn, r->now_ns, r->now_realtime_ns, false);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY) /* busy: another worker builds it */
        mg_warn("%s: rebuilding failed: %s", r->g->what, sqlite3_errstr(rc));
}

struct start_arg {
    struct mg_group_table *g;
    struct mg_env *env;
};

/* Under g->lock: the group's copy of this interval or the last one, when stored. */
static void take_either_copy(struct mg_group_table *g, struct mg_env *env, sqlite3 *conn,
                             int64_t now_ns)
{
    char key[MG_CACHE_KEY_MAX];
    int64_t period = period_of(g, now_ns);
    for (int64_t p = period; p >= period - 1 && !mg_process_table_exists(g->table, conn); p--) {
        group_key(g, conn, p, key);
        take_copy(g, env, conn, key, now_ns);
    }
}

/* A worker's start with no group copy: the group's build (or nothing, when another worker
 * runs it), on a thread of its own with its own connection, so the worker serves meanwhile. */
static void *start_build(void *arg)
{
    struct start_arg a = *(struct start_arg *)arg;
    free(arg);
    struct mg_db db;
    char err[256];
    if (mg_db_open_like(&db, a.env->db, a.env->cfg->db_path, a.env->cfg->db_busy_timeout_ms, err,
                        sizeof err) != 0) {
        mg_warn("%s: not built at start: %s", a.g->what, err);
        return NULL;
    }
    if (a.g->lazy) { /* the copy only */
        pthread_mutex_lock(&a.g->lock);
        take_either_copy(a.g, a.env, db.conn, mg_monotonic_ns());
        pthread_mutex_unlock(&a.g->lock);
    } else {
        int rc = obtain(a.g, a.env, db.conn, mg_monotonic_ns(), mg_realtime_ns(), false);
        if (rc != SQLITE_OK && rc != SQLITE_BUSY) /* busy: another worker builds it */
            mg_warn("%s: not built at start: %s", a.g->what, sqlite3_errstr(rc));
    }
    mg_db_close(&db);
    /* The pass's (or the decode's) working memory is free now, in pages the worker's arena
     * would otherwise keep (mem.h). */
    mg_malloc_give_back();
    if (a.env->seg)
        mg_counter_add(a.env->seg, MG_CTR_MEMORY_RELEASES_START_PASS, 1);
    return NULL;
}

bool mg_group_table_available(struct mg_group_table *g, struct mg_env *env)
{
    sqlite3 *conn = env->db->conn;
    if (mg_process_table_exists(g->table, conn))
        return true;
    if (!group_shared(g, env))
        return false;
    char key[MG_CACHE_KEY_MAX];
    int64_t now = mg_monotonic_ns(), period = period_of(g, now);
    for (int64_t p = period; p >= period - 1; p--) {
        group_key(g, conn, p, key);
        if (mg_result_cache_warm(&env->seg->cache, env->pid, key, now))
            return true;
    }
    return false;
}

bool mg_group_table_take(struct mg_group_table *g, struct mg_env *env)
{
    sqlite3 *conn = env->db->conn;
    if (!mg_process_table_exists(g->table, conn) && group_shared(g, env) &&
        pthread_mutex_trylock(&g->lock) == 0) {
        take_either_copy(g, env, conn, mg_monotonic_ns());
        pthread_mutex_unlock(&g->lock);
    }
    return mg_process_table_exists(g->table, conn);
}

/* ---- a start with a state file: the last run's table as the group's stale copy ------------ */

/* How long a worker's start waits for another that reads the state file (a read and a decode). */
#define STATE_WAIT_NS (30 * MG_NS_PER_SEC)

/* The state file's outcome counted and said (once per group: one worker reads it). */
static void state_outcome(struct mg_group_table *g, struct mg_env *env, enum mg_state_outcome o,
                          const char *why, size_t len, int64_t built_realtime_ns)
{
    struct mg_result_cache *c = env->seg->cache.cache;
    switch (o) {
    case MG_STATE_NONE:
        return;
    case MG_STATE_LOADED:
        atomic_fetch_add(&c->state_loaded, 1);
        mg_info("%s: took the table kept in %s (%zu bytes, built %lld s ago): served while its"
                " pass runs again",
                g->what, env->cfg->state_dir, len,
                (long long)((mg_realtime_ns() - built_realtime_ns) / MG_NS_PER_SEC));
        return;
    case MG_STATE_BAD:
        atomic_fetch_add(&c->state_rejected_bad, 1);
        break;
    case MG_STATE_UNSAFE:
        atomic_fetch_add(&c->state_rejected_unsafe, 1);
        break;
    case MG_STATE_OTHER_DB:
        atomic_fetch_add(&c->state_rejected_other_db, 1);
        break;
    case MG_STATE_ERROR:
        mg_warn("%s: the state file cannot be read: %s", g->what, why);
        return;
    }
    mg_info("%s: the state file is rejected and ignored (the pass builds the table): %s", g->what,
            why);
}

/* Under the state's claim: the state file's table, when it is this database's, stored in the
 * cache under prev, the last interval's key: a stale copy (older than the interval), taken as
 * the group's by every worker and refreshed by the first request that reads it, as the last
 * interval's copy is (mg_group_table_keep). Its body is re-encoded with such a build time. */
static void load_state(struct mg_group_table *g, struct mg_env *env, sqlite3 *conn, const char *dir,
                       const char *prev, int64_t now)
{
    struct mg_state_key db;
    char why[PATH_MAX + 160] = "";
    int rc = mg_state_key_read(conn, &db);
    if (rc != SQLITE_OK) { /* a table whose key cannot be checked is not used */
        mg_debug("%s: no state file read: the database has no key (%s)", g->what,
                 rc == SQLITE_NOTFOUND ? "no rows" : sqlite3_errstr(rc));
        return;
    }
    struct mg_cache_view *v = &env->seg->cache;
    struct mg_buf body, stale;
    mg_buf_init(&body);
    mg_buf_init(&stale);
    int64_t built_realtime = 0, ignored;
    enum mg_state_outcome o =
        mg_state_read(dir, g->name, g->version, &db, mg_result_cache_max_body(v->cache), &body,
                      &built_realtime, why, sizeof why);
    void *t = o == MG_STATE_LOADED ? g->decode(body.data, body.len, &ignored) : NULL;
    if (o == MG_STATE_LOADED && !t) {
        o = MG_STATE_BAD;
        snprintf(why, sizeof why, "%s/%s.v%u: its body is not a table", dir, g->name, g->version);
    }
    if (t) {
        g->encode(t, now - g->table->interval_ns - 1, &stale);
        g->table->free_table(t);
        uint64_t id = 0;
        struct mg_buf none;
        mg_buf_init(&none);
        enum mg_cache_outcome c =
            stale.failed ? MG_CACHE_BUSY
                         : mg_result_cache_relook(v, env->pid, env->slot, prev, now, &none, &id);
        mg_buf_free(&none);
        if (c != MG_CACHE_CLAIMED) /* the group has a copy already */
            o = MG_STATE_NONE;
        else if (!mg_result_cache_store_uncounted(v, env->pid, id, stale.data, stale.len,
                                                  mg_monotonic_ns()))
            o = MG_STATE_NONE; /* no room now: the pass builds it */
    }
    state_outcome(g, env, o, why, body.len, built_realtime);
    mg_buf_free(&body);
    mg_buf_free(&stale);
}

/* At a worker's start, with a state directory and no copy in the group's cache: one worker
 * (the claim of "<name>|v<version>|state" makes it one per group) reads the state file while
 * the others starting wait for it, so every worker starts with the table it kept. */
static void seed_from_state(struct mg_group_table *g, struct mg_env *env, sqlite3 *conn)
{
    const char *dir = state_dir(g, env);
    if (!dir)
        return;
    struct mg_cache_view *v = &env->seg->cache;
    char key[MG_CACHE_KEY_MAX], prev[MG_CACHE_KEY_MAX], mark[MG_CACHE_KEY_MAX];
    int64_t now = mg_monotonic_ns(), period = period_of(g, now);
    group_key(g, conn, period, key);
    group_key(g, conn, period - 1, prev);
    if (mg_result_cache_warm(v, env->pid, key, now) || mg_result_cache_warm(v, env->pid, prev, now))
        return;
    snprintf(mark, sizeof mark, "%s|v%u|state", g->name, g->version);
    struct mg_buf out;
    mg_buf_init(&out);
    uint64_t id = 0;
    enum mg_cache_outcome o = mg_result_cache_relook(v, env->pid, env->slot, mark, now, &out, &id);
    if (o == MG_CACHE_BUSY)
        o = mg_result_cache_wait(v, env->pid, env->slot, mark, mg_monotonic_ns() + STATE_WAIT_NS,
                                 NULL, NULL, &out, &id);
    if (o == MG_CACHE_CLAIMED) {
        load_state(g, env, conn, dir, prev, now);
        mg_result_cache_store_uncounted(v, env->pid, id, "1", 1, mg_monotonic_ns());
    }
    mg_buf_free(&out);
}

void mg_group_table_adopt(struct mg_group_table *g, struct mg_env *env)
{
    sqlite3 *conn = env->db->conn;
    seed_from_state(g, env, conn);
    int64_t now = mg_monotonic_ns();
    if (!group_shared(g, env)) {
        if (g->lazy)
            return;
        int rc = refresh_own(g, env, conn, now, mg_realtime_ns());
        if (rc != SQLITE_OK)
            mg_warn("%s: not built at start: %s", g->what, sqlite3_errstr(rc));
        return;
    }
    /* A lazy table's copy (a large one: its decode is no start's delay) is taken on the
     * thread too, and only when there is one. */
    if (g->lazy && !mg_group_table_available(g, env))
        return;
    if (!g->lazy) {
        pthread_mutex_lock(&g->lock);
        take_either_copy(g, env, conn, now);
        pthread_mutex_unlock(&g->lock);
    }
    if (mg_process_table_exists(g->table, conn))
        return;
    /* The thread: a lazy table's copy (start_build takes only that), another's build. */
    struct start_arg *a = malloc(sizeof *a);
    pthread_t t;
    if (a)
        *a = (struct start_arg){g, env};
    if (a && pthread_create(&t, NULL, start_build, a) == 0)
        pthread_detach(t);
    else
        free(a);
}

static void run_fetch(struct mg_job *job, struct mg_db *db)
{
    struct mg_group_rebuild *f = (struct mg_group_rebuild *)job;
    f->rc = obtain(f->g, f->env, db->conn, f->now_ns, f->now_realtime_ns, true);
}

/* Hands job r (run) to env's helper unless it has it already. */
static void submit(struct mg_group_rebuild *r, void (*run)(struct mg_job *, struct mg_db *),
                   struct mg_group_table *g, struct mg_env *env, int64_t now_ns,
                   int64_t now_realtime_ns)
{
    if (r->submitted && !atomic_load(&r->job.done))
        return;
    r->g = g;
    r->env_copy = *env; /* the job runs after the request's env may be gone */
    r->env = &r->env_copy;
    r->now_ns = now_ns;
    r->now_realtime_ns = now_realtime_ns;
    r->rc = SQLITE_OK;
    r->job.run = run;
    atomic_store(&r->job.done, 0);
    r->submitted = mg_jobs_submit(env->jobs, &r->job); /* else: the next request's turn */
}

/* On the loop, no table here: the group's copy when it is stored (a copy and a decode, never
 * a wait for the lock another thread of this process builds under); else the fetch on the
 * helper (the group's build followed, or claimed and run there). SQLITE_OK with *pending when
 * the request must wait for it. */
static int fetch_on_helper(struct mg_group_table *g, struct mg_env *env, sqlite3 *conn,
                           int64_t now_ns, int64_t now_realtime_ns, bool *pending)
{
    if (!g->lazy && group_shared(g, env) && pthread_mutex_trylock(&g->lock) == 0) {
        take_either_copy(g, env, conn, now_ns);
        pthread_mutex_unlock(&g->lock);
    }
    struct mg_group_rebuild *f = &g->fetch;
    /* Twice at most: a fetch run at once (the file replaced: mg_jobs_submit) is done on
     * return, and no helper's eventfd would wake the request for it. */
    for (int round = 0; round < 2; round++) {
        if (mg_process_table_exists(g->table, conn))
            return SQLITE_OK;
        if (f->submitted && atomic_load(&f->job.done)) {
            f->submitted = false;
            if (f->rc != SQLITE_OK)
                return f->rc; /* this request answers the failure; the next one tries again */
        }
        if (round == 0)
            submit(f, run_fetch, g, env, now_ns, now_realtime_ns);
    }
    /* The request parks until the helper's eventfd says the fetch is done (or a thread is
     * free for it, when none could take it now). */
    *pending = true;
    return SQLITE_OK;
}

int mg_group_table_keep(struct mg_group_table *g, struct mg_env *env, int64_t now_ns,
                        int64_t now_realtime_ns, bool *pending)
{
    sqlite3 *conn = env->db->conn;
    if (pending)
        *pending = false;
    if (!env->jobs) /* on a helper already (or in-process tests): waits here */
        return obtain(g, env, conn, now_ns, now_realtime_ns, true);
    if (!mg_process_table_exists(g->table, conn)) {
        int rc = pending ? fetch_on_helper(g, env, conn, now_ns, now_realtime_ns, pending)
                         : obtain(g, env, conn, now_ns, now_realtime_ns, true);
        if (rc != SQLITE_OK || (pending && *pending))
            return rc;
    }
    if (!mg_process_table_fresh(g->table, conn, now_ns))
        submit(&g->rebuild, run_rebuild, g, env, now_ns, now_realtime_ns);
    return SQLITE_OK;
}

int mg_group_table_keep_behind(struct mg_group_table *g, struct mg_env *env, int64_t now_ns,
                               int64_t now_realtime_ns)
{
    sqlite3 *conn = env->db->conn;
    if (!env->jobs && !mg_process_table_exists(g->table, conn) && group_shared(g, env)) {
        /* On a helper (a heavy request) or in process: a pass under way in this process (its
         * lock held) or in another worker (its claim) is not waited for; with none, the
         * group's pass is claimed and run here. */
        if (pthread_mutex_trylock(&g->lock) != 0)
            return SQLITE_OK;
        int rc = obtain_locked(g, env, conn, now_ns, now_realtime_ns, false);
        pthread_mutex_unlock(&g->lock);
        return rc == SQLITE_BUSY ? SQLITE_OK : rc;
    }
    if (!env->jobs || mg_process_table_exists(g->table, conn))
        return mg_group_table_keep(g, env, now_ns, now_realtime_ns, NULL);
    /* The group's copy when stored; nothing when this process's start (or helper) builds the
     * group's table now (its lock is held). */
    if (group_shared(g, env)) {
        if (pthread_mutex_trylock(&g->lock) != 0)
            return SQLITE_OK;
        take_either_copy(g, env, conn, now_ns);
        pthread_mutex_unlock(&g->lock);
        if (mg_process_table_exists(g->table, conn))
            return SQLITE_OK;
    }
    if (g->behind_ns == 0 || now_ns - g->behind_ns >= MG_NS_PER_SEC) {
        g->behind_ns = now_ns;
        submit(&g->rebuild, run_rebuild, g, env, now_ns, now_realtime_ns);
    }
    return SQLITE_OK;
}

void mg_group_table_forget(struct mg_group_table *g, struct mg_env *env)
{
    mg_process_table_forget(g->table);
    if (!group_shared(g, env))
        return;
    char key[MG_CACHE_KEY_MAX];
    int64_t period = period_of(g, mg_monotonic_ns());
    for (int64_t p = period - 1; p <= period; p++) {
        group_key(g, env->db->conn, p, key);
        mg_result_cache_expire(&env->seg->cache, env->pid, key);
    }
}
