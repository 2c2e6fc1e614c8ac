/* SPDX-License-Identifier: ISC */
/*
 * mem: a worker's memory budgets (docs/architecture.md, "Memory"). A worker keeps what a
 * request needs while it runs, and gives back, after it, what a large one left behind:
 *   - a buffer is freed once its response is out (mg_buf_shrink) when it is larger than
 *     MG_MEM_BUF_KEEP_BYTES (the worker's one response body; a body that large is moved to its
 *     connection and freed once sent) or MG_MEM_CONN_BUF_KEEP_BYTES (a connection's input and
 *     output, one of each per open connection);
 *   - malloc hands out blocks above MG_MEM_MALLOC_MMAP_BYTES as their own mappings, so
 *     freeing one returns it to the kernel at once (glibc would otherwise raise that threshold
 *     after the first such free and serve the next large buffer from a heap it never shrinks);
 *   - every thread of a worker allocates from one malloc arena (MG_MEM_MALLOC_ARENAS): glibc
 *     would give each helper and each start pass's thread an arena of its own, and an arena
 *     keeps its top, at least 132 KiB, and the pages its freed blocks share with live ones:
 *     4.7 MB of the 2M shape's group of 8 workers after the start passes and a load, with no
 *     slowdown of the lists readable at load 12-24 (docs/benchmarks.md);
 *   - each SQLite page cache is held at MG_DB_CACHE_KIB (no process-wide soft heap limit: it
 *     bounds nothing these sizes and the releases below do not);
 *   - a helper thread opens its connection when its first job comes (jobs.c) and gives back
 *     its page cache, its mapped pages and the arena's free pages after every job, and a
 *     group table's start pass the arena's free pages when its thread ends (group_table.c,
 *     counted: memory_releases_start_pass);
 *   - the loop looks at the process's resident memory at most every MG_MEM_WATCH_NS: past
 *     MG_MEM_MAP_KEEP_KIB of mapped file pages, or MG_MEM_ANON_KEEP_KIB of anonymous memory,
 *     above what it had once started, it gives back the same between two requests (counted:
 *     memory_releases_budget); what a release leaves is in use, and the budgets count from it
 *     until memory falls back (no release every tick for memory a request or table holds).
 */
#ifndef MESHGATE_MEM_H
#define MESHGATE_MEM_H

#include "db.h"

#include <stdint.h>

#define MG_MEM_BUF_KEEP_BYTES (256 * 1024)
#define MG_MEM_CONN_BUF_KEEP_BYTES (16 * 1024)
#define MG_MEM_MALLOC_MMAP_BYTES (4 * 1024 * 1024)
#define MG_MEM_MALLOC_ARENAS 1
#define MG_MEM_MAP_KEEP_KIB 4096
#define MG_MEM_ANON_KEEP_KIB 4096
#define MG_MEM_WATCH_NS (100LL * 1000 * 1000)

/* The process's resident memory, KiB, from /proc/self/status (RssAnon, RssFile). */
struct mg_mem_rss {
    long anon_kib;
    long file_kib;
};

struct mg_mem_watch {
    int status_fd; /* /proc/self/status, read again with pread; -1: not available */
    struct mg_mem_rss base;
    /* What a release could not give back (in use), never below base: the budgets count from
     * here, so memory held by live requests or tables is not released again every tick. */
    struct mg_mem_rss floor;
    int64_t next_ns;
};

/* Worker, right after fork, before it starts a thread: malloc's threshold and arenas. */
void mg_mem_worker_init(void);

/* Reads the process's resident memory; false when /proc cannot tell. */
bool mg_mem_rss_read(int status_fd, struct mg_mem_rss *out);

/* Opens /proc/self/status and takes the base (call once the worker is ready to serve). */
void mg_mem_watch_start(struct mg_mem_watch *w);
/* Between requests, on the loop: gives back db's caches and map and malloc's free pages when
 * the process is past its budgets above the floor (the base, raised to what the last release
 * left, lowered again as memory is freed); at most every MG_MEM_WATCH_NS. True when it gave
 * back. */
bool mg_mem_watch_tick(struct mg_mem_watch *w, struct mg_db *db, int64_t now_ns);
void mg_mem_watch_stop(struct mg_mem_watch *w);

/* Gives back db's page cache and mapped pages (db may be NULL) and every malloc arena's free
 * pages (malloc_trim.h). */
void mg_mem_release(struct mg_db *db);

#endif
