/* SPDX-License-Identifier: ISC */
/*
 * GET /api/perf/sqlite, /api/perf/io and /api/perf/write-sources: the Perf page's disk cards,
 * in CoreScope's shapes, with meshgate's own figures where CoreScope gives its server's. All
 * light: the file's header, a stat, and /proc of the group's processes; no table is read.
 *
 * sqlite         walSizeMB, walSize (the -wal beside the database, 0 without one),
 *                pageCount, pageSize, cacheSize (PRAGMA cache_size of the worker's
 *                connection: negative is KiB), cacheHitRate: CoreScope gives its analytics
 *                caches' hits / (hits + misses); meshgate the same of the group's answer
 *                caches (the shared result cache and the group values, stale hits served
 *                counted as hits: /api/perf's "cache"), a fraction from 0 to 1.
 * io             per second since this worker's previous answer (0 on its first), as CoreScope
 *                computes its own process's from /proc/self/io: read_bytes, write_bytes,
 *                cancelled_write_bytes, syscr, syscw, here summed over the group (the master
 *                and every live worker, each process counted only when it was there at both
 *                samples). "processes": how many were read (meshgate's own key). CoreScope's
 *                "ingestor" block (from its ingestor's statistics file) is left out, as
 *                CoreScope leaves it out without that file: meshgate reads only the database.
 * write-sources  CoreScope reads its ingestor's statistics file; meshgate writes nothing and
 *                reads only the database, so it answers what CoreScope answers without that
 *                file: no sources, no sample time.
 */
#include "clock.h"
#include "json.h"
#include "proc_io.h"
#include "router.h"
#include "scoreboard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BYTES_PER_MB 1048576.0

/* ---- sqlite ---- */

enum mg_turn mg_handle_perf_sqlite(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res)
{
    (void)req;
    int64_t page_count = mg_db_scalar(env->db, "PRAGMA page_count");
    int64_t page_size = mg_db_scalar(env->db, "PRAGMA page_size");
    int64_t cache_size = mg_db_scalar(env->db, "PRAGMA cache_size");
    if (page_count < 0 || page_size < 0) {
        mg_response_db_failure_on(res, "the database's header", sqlite3_errcode(env->db->conn),
                                  env->db->conn);
        return MG_DONE;
    }
    char wal_path[MG_PATH_MAX + 8];
    snprintf(wal_path, sizeof wal_path, "%s-wal", env->cfg->db_path);
    struct stat st;
    int64_t wal = stat(wal_path, &st) == 0 ? (int64_t)st.st_size : 0;
    struct mg_perf_cache c;
    mg_perf_cache_figures(env->seg, &c);
    uint64_t served = c.hits + c.stale;

    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j); /* CoreScope's field order */
    mg_json_kv_double(&j, "walSizeMB", (double)wal / BYTES_PER_MB);
    mg_json_kv_int(&j, "walSize", wal);
    mg_json_kv_int(&j, "pageCount", page_count);
    mg_json_kv_int(&j, "pageSize", page_size);
    mg_json_kv_int(&j, "cacheSize", cache_size);
    mg_json_kv_double(&j, "cacheHitRate",
                      served + c.misses ? (double)served / (double)(served + c.misses) : 0.0);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    return MG_DONE;
}

/* ---- io ---- */

/* The group's processes as last sampled by this worker. */
static struct {
    pthread_mutex_t lock;
    int64_t at_ns; /* CLOCK_MONOTONIC; 0: none yet */
    struct mg_proc_io_sample *procs;
    size_t n;
} previous = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Reads the master and every live worker into out (cap entries); how many were read. */
static size_t sample_group(const struct mg_segment *seg, struct mg_proc_io_sample *out, size_t cap)
{
    size_t n = 0;
    int pid = atomic_load(&seg->header->master_pid);
    if (pid > 0 && n < cap && mg_proc_io_read(pid, &out[n]))
        n++;
    for (uint32_t i = 0; i < seg->slot_count && n < cap; i++) {
        pid = atomic_load(&seg->slots[i].pid);
        uint32_t state = atomic_load(&seg->slots[i].state);
        if (pid > 0 && state != MG_SLOT_DEAD && state != MG_SLOT_EMPTY &&
            mg_proc_io_read(pid, &out[n]))
            n++;
    }
    return n;
}

enum mg_turn mg_handle_perf_io(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res)
{
    (void)req;
    size_t cap = (size_t)env->seg->slot_count + 1;
    struct mg_proc_io_sample *now = calloc(cap, sizeof *now);
    if (!now) {
        mg_response_error(res, 503, "out of memory");
        return MG_DONE;
    }
    size_t n = sample_group(env->seg, now, cap);
    int64_t at = mg_monotonic_ns();

    struct mg_proc_io delta = {0};
    pthread_mutex_lock(&previous.lock);
    bool have = previous.at_ns != 0;
    double seconds = have ? (double)(at - previous.at_ns) / 1e9 : 0.0;
    if (have)
        mg_proc_io_delta(previous.procs, previous.n, now, n, &delta);
    free(previous.procs);
    previous.procs = now;
    previous.n = n;
    previous.at_ns = at;
    pthread_mutex_unlock(&previous.lock);
    if (seconds < 0.001)
        seconds = 0.001; /* as CoreScope bounds it */

    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j); /* CoreScope's field order, then meshgate's */
    mg_json_kv_double(&j, "readBytesPerSec", have ? (double)delta.read_bytes / seconds : 0.0);
    mg_json_kv_double(&j, "writeBytesPerSec", have ? (double)delta.write_bytes / seconds : 0.0);
    mg_json_kv_double(&j, "cancelledWriteBytesPerSec",
                      have ? (double)delta.cancelled_write_bytes / seconds : 0.0);
    mg_json_kv_double(&j, "syscallsRead", have ? (double)delta.syscr / seconds : 0.0);
    mg_json_kv_double(&j, "syscallsWrite", have ? (double)delta.syscw / seconds : 0.0);
    mg_json_kv_uint(&j, "processes", n);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    return MG_DONE;
}

/* ---- write-sources ---- */

enum mg_turn mg_handle_perf_write_sources(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res)
{
    (void)env;
    (void)req;
    mg_response_json(res, 200);
    mg_buf_puts(&res->body, "{\"sampleAt\":\"\",\"sources\":{}}\n");
    return MG_DONE;
}
