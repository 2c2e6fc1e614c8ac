/* SPDX-License-Identifier: ISC */
#include "mem.h"

#include "malloc_trim.h"

#include <fcntl.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void mg_mem_worker_init(void)
{
    /* Setting the threshold also turns off glibc's dynamic raising of it and of the trim
     * threshold (mallopt(3)). */
    mallopt(M_MMAP_THRESHOLD, MG_MEM_MALLOC_MMAP_BYTES);
    /* Before any thread: every thread then allocates from the loop's arena (mem.h). */
    mallopt(M_ARENA_MAX, MG_MEM_MALLOC_ARENAS);
}

static long field_kib(const char *text, const char *name)
{
    const char *p = strstr(text, name);
    return p ? strtol(p + strlen(name), NULL, 10) : -1;
}

bool mg_mem_rss_read(int status_fd, struct mg_mem_rss *out)
{
    char text[4096];
    ssize_t n = status_fd >= 0 ? pread(status_fd, text, sizeof text - 1, 0) : -1;
    if (n <= 0)
        return false;
    text[n] = '\0';
    out->anon_kib = field_kib(text, "\nRssAnon:");
    out->file_kib = field_kib(text, "\nRssFile:");
    return out->anon_kib >= 0 && out->file_kib >= 0;
}

void mg_mem_watch_start(struct mg_mem_watch *w)
{
    memset(w, 0, sizeof *w);
    w->status_fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (!mg_mem_rss_read(w->status_fd, &w->base)) {
        if (w->status_fd >= 0)
            close(w->status_fd);
        w->status_fd = -1;
    }
    w->floor = w->base;
}

static long clamp_kib(long v, long lo, long hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void mg_mem_release(struct mg_db *db)
{
    if (db)
        mg_db_release(db);
    mg_malloc_give_back();
}

bool mg_mem_watch_tick(struct mg_mem_watch *w, struct mg_db *db, int64_t now_ns)
{
    if (w->status_fd < 0 || now_ns < w->next_ns)
        return false;
    w->next_ns = now_ns + MG_MEM_WATCH_NS;
    struct mg_mem_rss now;
    if (!mg_mem_rss_read(w->status_fd, &now))
        return false;
    /* Memory freed since the last release lowers the floor (never below the base). */
    w->floor.file_kib = clamp_kib(now.file_kib, w->base.file_kib, w->floor.file_kib);
    w->floor.anon_kib = clamp_kib(now.anon_kib, w->base.anon_kib, w->floor.anon_kib);
    if (now.file_kib - w->floor.file_kib <= MG_MEM_MAP_KEEP_KIB &&
        now.anon_kib - w->floor.anon_kib <= MG_MEM_ANON_KEEP_KIB)
        return false;
    mg_mem_release(db);
    /* What is left is in use: the next release waits until the process grows past it. */
    struct mg_mem_rss after;
    if (mg_mem_rss_read(w->status_fd, &after)) {
        w->floor.file_kib = after.file_kib > w->base.file_kib ? after.file_kib : w->base.file_kib;
        w->floor.anon_kib = after.anon_kib > w->base.anon_kib ? after.anon_kib : w->base.anon_kib;
    }
    return true;
}

void mg_mem_watch_stop(struct mg_mem_watch *w)
{
    if (w->status_fd >= 0)
        close(w->status_fd);
    w->status_fd = -1;
}
