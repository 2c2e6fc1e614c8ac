/*
 * GET /api/nodes/{pubkey}/reach?days=N: the reach report, built at most `cap` at a time for
 * the whole process group (the cold-scan gate), shared by every worker through the result
 * cache, and built once for identical concurrent requests (coalescing).
 *
 * The order of a request, and why:
 *   1. parameters (400) — nothing shared is touched for a bad request;
 *   2. the cache: a warm answer is copied out and served; it never takes a permit (5);
 *   3. the key is being built by another request: wait for that build, holding a place in
 *      the gate's line so waiting can never hold more workers than the line allows; if that
 *      builder dies, take the build over;
 *   4. the key is absent: claim it (others now wait for us), check that the node exists
 *      (404 without a permit: an unknown key is not cold work), then take a permit, waiting
 *      in line in arrival order for at most MESHGATE_REACH_COLD_WAIT_MS;
 *   5. refused (line full, wait ran out, client gone): 429 with Retry-After: 2 and
 *      Cache-Control: no-store, before any scan, and the claim is given up (nothing cached);
 *   6. build, give the permit back on every path, store the body (success only) and wake
 *      the waiters.
 * A worker that dies anywhere in 3–6 is cleaned up by the master: its permit, its place in
 * line and its claim are reclaimed after waitpid, and a waiter takes the build over.
 */
#include "clock.h"
#include "gate_fifo.h"
#include "log.h"
#include "params.h"
#include "reach.h"
#include "result_cache.h"
#include "router.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define REACH_RETRY_AFTER_S 2

static void refuse(struct mg_response *res, const char *why)
{
    mg_response_refuse(res, 429, REACH_RETRY_AFTER_S, why);
}

static bool known_key(struct mg_db *db, const char *pubkey)
{
    static const char sql[] =
        "SELECT EXISTS (SELECT 1 FROM nodes WHERE public_key IN (?1, upper(?1)))"
        " OR EXISTS (SELECT 1 FROM observers WHERE id IN (upper(?1), ?1))";
    sqlite3_stmt *st = mg_db_prepare(db, sql);
    if (!st)
        return true; /* let the build say what is wrong */
    sqlite3_bind_text(st, 1, pubkey, -1, SQLITE_STATIC);
    bool known = sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int(st, 0) != 0;
    sqlite3_finalize(st);
    return known;
}

static void serve_body(struct mg_response *res)
{
    mg_response_json(res, 200);
}

/* Builds the claimed key under a permit; fills res. */
static void build(struct mg_env *env, const struct mg_request *req, struct mg_response *res,
                  const char *pubkey, int days, const char *key, uint64_t build_id)
{
    struct mg_segment *seg = env->seg;
    struct mg_cache_view *cache = &seg->cache;
    bool cached = seg->config->reach_cache_ttl_ms > 0;
    if (!known_key(env->db, pubkey)) {
        if (cached)
            mg_result_cache_abandon(cache, env->pid, build_id);
        mg_response_error(res, 404, "Not found");
        return;
    }
    uint64_t token = 0;
    enum mg_fifo_result admitted = mg_fifo_gate_acquire(
        seg->cold, env->pid, env->slot, key, req->client_gone, req->client_gone_arg, &token, NULL);
    if (admitted != MG_FIFO_ADMITTED) {
        if (cached)
            mg_result_cache_abandon(cache, env->pid, build_id);
        if (admitted == MG_FIFO_CANCELLED) {
            mg_response_refuse(res, 429, REACH_RETRY_AFTER_S, "the client went away");
            res->close = true;
        } else {
            refuse(res, admitted == MG_FIFO_REFUSED_FULL
                            ? "too many reach reports are being built; retry after Retry-After"
                            : "reach reports are being built at capacity; retry after "
                              "Retry-After");
        }
        return;
    }
    char err[256];
    struct mg_reach_stats stats;
    mg_buf_reset(&res->body);
    enum mg_reach_result r = mg_reach_build(env->db, pubkey, days, (int64_t)time(NULL),
                                            &res->body, &stats, err, sizeof err);
    /* The permit goes back on every path, before anything else. */
    mg_fifo_gate_release(seg->cold, env->pid, token);
    if (r == MG_REACH_OK && !res->body.failed) {
        if (cached)
            mg_result_cache_store(cache, env->pid, build_id, res->body.data, res->body.len,
                                  mg_monotonic_ns());
        serve_body(res);
        return;
    }
    if (cached)
        mg_result_cache_abandon(cache, env->pid, build_id);
    if (r == MG_REACH_NOT_FOUND) {
        mg_response_error(res, 404, "Not found");
    } else if (r == MG_REACH_BAD_PUBKEY) {
        mg_response_error(res, 400, "invalid pubkey: expected 64 hex chars");
    } else {
        mg_log(MG_LOG_ERROR, "reach %s: %s", key, err);
        mg_response_error(res, 500, "the reach report could not be built");
    }
}

void mg_handle_reach(struct mg_env *env, const struct mg_request *req, struct mg_response *res)
{
    char pubkey[65];
    if (!mg_reach_parse_pubkey(req->path_param, pubkey)) {
        mg_response_error(res, 400, "invalid pubkey: expected 64 hex chars");
        return;
    }
    int64_t days;
    if (!mg_param_int(req, res, "days", 7, 1, 30, &days))
        return;
    char key[MG_CACHE_KEY_MAX];
    snprintf(key, sizeof key, "%s|%d", pubkey, (int)days);

    struct mg_segment *seg = env->seg;
    struct mg_cache_view *cache = &seg->cache;
    if (seg->config->reach_cache_ttl_ms <= 0) {
        build(env, req, res, pubkey, (int)days, key, 0);
        return;
    }
    uint64_t build_id = 0;
    enum mg_cache_outcome found = mg_result_cache_lookup(cache, env->pid, env->slot, key,
                                                         mg_monotonic_ns(), &res->body,
                                                         &build_id);
    if (found == MG_CACHE_BUSY) {
        /* Another request builds this key: wait for it with a place in line. */
        int place = mg_fifo_gate_follow(seg->cold, env->pid, env->slot, key);
        if (place < 0) {
            refuse(res, "too many reach reports are being built; retry after Retry-After");
            return;
        }
        int64_t deadline = mg_monotonic_ns() + seg->cold->wait_ns;
        found = mg_result_cache_wait(cache, env->pid, env->slot, key, deadline, req->client_gone,
                                     req->client_gone_arg, &res->body, &build_id);
        mg_fifo_gate_unfollow(seg->cold, env->pid, place);
        if (found == MG_CACHE_BUSY) {
            mg_buf_reset(&res->body);
            refuse(res, "the reach report is still being built; retry after Retry-After");
            return;
        }
    }
    if (found == MG_CACHE_HIT) {
        serve_body(res);
        return;
    }
    build(env, req, res, pubkey, (int)days, key, build_id);
}
