/* SPDX-License-Identifier: ISC */
/*
 * bench/worker.c: one sending thread: its share of every stream (closed connections, ticks of
 * an open schedule, once requests), its timeouts, and the loop that runs them.
 */
#include "engine.h"

#include "clock.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* The schedule of an open stream: this thread sends ticks index, index + T, index + 2T... */
static int64_t tick_time(const struct run *r, const struct plan *p, uint64_t tick)
{
    return r->start_ns + (int64_t)llround((double)tick * p->period_ns);
}

static void pump_open(struct worker *w, struct shard *sh, int64_t now)
{
    struct run *r = w->run;
    struct plan *p = sh->plan;
    while (!sh->schedule_over) {
        if (w->stopping || atomic_load(&p->stopped_ns)) {
            sh->schedule_over = true;
            break;
        }
        int64_t at = tick_time(r, p, sh->next_tick);
        if (at >= r->window_end_ns) {
            sh->schedule_over = true;
            break;
        }
        if (at > now)
            break;
        sh->next_tick += r->cfg->threads;
        bool counted = at >= r->measure_ns;
        if (atomic_fetch_add(&p->outstanding, 1) >= r->cfg->max_outstanding) {
            atomic_fetch_sub(&p->outstanding, 1);
            if (counted)
                sh->t.dropped++;
            continue;
        }
        struct conn *c = sh->pool;
        if (c)
            mg_bench_list_remove(&sh->pool, c);
        else if ((c = sh->free_list))
            mg_bench_list_remove(&sh->free_list, c);
        else if (!(c = mg_bench_conn_new(w, sh))) {
            atomic_fetch_sub(&p->outstanding, 1);
            return;
        }
        if (!mg_bench_conn_issue(w, c, at, now)) {
            atomic_fetch_sub(&p->outstanding, 1);
            if (c->fd >= 0) {
                c->state = CONN_POOLED;
                mg_bench_list_push(&sh->pool, c);
            } else {
                c->state = CONN_IDLE;
                mg_bench_list_push(&sh->free_list, c);
            }
            sh->schedule_over = true;
            break;
        }
    }
}

static void fire_once(struct worker *w, struct shard *sh, int64_t now)
{
    sh->fired = true;
    for (unsigned i = 0; i < sh->nown; i++) {
        struct conn *c = sh->own[i];
        if (w->stopping || !mg_bench_conn_issue(w, c, w->run->measure_ns, now)) {
            c->state = CONN_DONE;
            sh->done++;
        }
    }
}

static void expire(struct worker *w, int64_t now)
{
    while (w->heap_len && w->heap[0]->deadline_ns <= now) {
        struct conn *c = w->heap[0];
        mg_bench_heap_remove(w, c);
        if (c->state == CONN_WAITING) {
            int64_t scheduled = c->deadline_ns;
            c->state = CONN_IDLE;
            if (w->stopping || !mg_bench_conn_issue(w, c, scheduled, now)) {
                mg_bench_conn_close(c);
                c->state = CONN_DONE;
                c->shard->done++;
            }
        } else if (c->state == CONN_CONNECTING || c->state == CONN_SENDING ||
                   c->state == CONN_RECEIVING) {
            mg_bench_conn_close(c);
            mg_bench_conn_finish(w, c, 0, MG_BENCH_ERR_TIMEOUT, 0, now);
        }
    }
}

/* Every request still out becomes an aborted error; nothing more is sent. */
static void abort_all(struct worker *w, int64_t now)
{
    w->stopping = true;
    for (uint32_t i = 0; i < w->ntable; i++) {
        struct conn *c = w->table[i];
        if (c->state == CONN_CONNECTING || c->state == CONN_SENDING || c->state == CONN_RECEIVING) {
            mg_bench_conn_close(c);
            mg_bench_conn_finish(w, c, 0, MG_BENCH_ERR_ABORTED, 0, now);
        }
    }
    /* What was waiting to send (a pause, a burst not fired yet) sends nothing now. */
    for (uint32_t i = 0; i < w->ntable; i++) {
        struct conn *c = w->table[i];
        if (c->shard->mode != MG_BENCH_OPEN && c->state != CONN_DONE) {
            mg_bench_heap_remove(w, c);
            mg_bench_conn_close(c);
            c->state = CONN_DONE;
            c->shard->done++;
        }
    }
    for (unsigned s = 0; s < w->run->cfg->nstreams; s++) {
        struct shard *sh = &w->shards[s];
        sh->schedule_over = true;
        sh->fired = true;
    }
}

static bool worker_finished(const struct worker *w)
{
    for (unsigned s = 0; s < w->run->cfg->nstreams; s++) {
        const struct shard *sh = &w->shards[s];
        if (sh->inflight)
            return false;
        if (sh->mode == MG_BENCH_OPEN ? !sh->schedule_over : sh->done < sh->nown)
            return false;
    }
    return true;
}

static int64_t next_wake(struct worker *w, int64_t now)
{
    const struct run *r = w->run;
    int64_t wake = now + STOP_POLL_NS;
    if (w->heap_len && w->heap[0]->deadline_ns < wake)
        wake = w->heap[0]->deadline_ns;
    for (unsigned s = 0; s < r->cfg->nstreams; s++) {
        const struct shard *sh = &w->shards[s];
        if (sh->mode == MG_BENCH_OPEN && !sh->schedule_over) {
            int64_t at = tick_time(r, sh->plan, sh->next_tick);
            if (at < wake)
                wake = at;
        } else if (sh->mode == MG_BENCH_ONCE && !sh->fired && r->measure_ns < wake) {
            wake = r->measure_ns;
        }
    }
    return wake;
}

void *mg_bench_worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->run;
    const struct mg_bench_config *cfg = r->cfg;
    struct epoll_event events[EVENTS_PER_WAIT];
    for (;;) {
        int64_t now = mg_monotonic_ns();
        if (!w->stopping && ((cfg->stop && atomic_load(cfg->stop)) || atomic_load(&r->failed))) {
            int_fast64_t zero = 0;
            if (!atomic_load(&r->failed))
                atomic_compare_exchange_strong(&r->interrupted_ns, &zero, now);
            abort_all(w, now);
        }
        for (unsigned s = 0; s < cfg->nstreams; s++) {
            struct shard *sh = &w->shards[s];
            if (sh->mode == MG_BENCH_OPEN)
                pump_open(w, sh, now);
            else if (sh->mode == MG_BENCH_ONCE && !sh->fired && now >= r->measure_ns)
                fire_once(w, sh, now);
        }
        expire(w, now);
        if (worker_finished(w))
            break;
        int64_t wait_ns = next_wake(w, now) - mg_monotonic_ns();
        if (wait_ns < 0)
            wait_ns = 0;
        struct timespec ts = {.tv_sec = wait_ns / MG_NS_PER_SEC,
                              .tv_nsec = wait_ns % MG_NS_PER_SEC};
        int n = epoll_pwait2(w->epfd, events, EVENTS_PER_WAIT, &ts, NULL);
        if (n < 0 && errno != EINTR) {
            char what[128];
            snprintf(what, sizeof what, "epoll_pwait2: %s", strerror(errno));
            mg_bench_worker_fail(w, what);
            continue;
        }
        for (int i = 0; i < n; i++) {
            uint32_t id = (uint32_t)(events[i].data.u64 >> 32);
            uint32_t gen = (uint32_t)events[i].data.u64;
            if (id >= w->ntable)
                continue;
            struct conn *c = w->table[id];
            if (c->gen != gen || c->fd < 0)
                continue; /* an event of a socket closed since */
            mg_bench_conn_on_event(w, c, events[i].events);
        }
    }
    for (uint32_t i = 0; i < w->ntable; i++)
        mg_bench_conn_close(w->table[i]);
    return NULL;
}

int mg_bench_worker_init(struct worker *w, struct run *r, unsigned index, char *err, size_t errlen)
{
    const struct mg_bench_config *cfg = r->cfg;
    unsigned threads = cfg->threads;
    w->run = r;
    w->index = index;
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0) {
        mg_bench_set_err(err, errlen, "epoll_create1: %s", strerror(errno));
        return -1;
    }
    for (unsigned s = 0; s < cfg->nstreams; s++) {
        struct shard *sh = &w->shards[s];
        sh->plan = &r->plans[s];
        sh->mode = cfg->streams[s].mode;
        sh->next_tick = index;
        if (sh->mode == MG_BENCH_OPEN)
            continue;
        unsigned total =
            sh->mode == MG_BENCH_CLOSED ? cfg->streams[s].connections : cfg->streams[s].count;
        unsigned mine = total / threads + (index < total % threads ? 1 : 0);
        sh->own = calloc(mine ? mine : 1, sizeof *sh->own);
        if (!sh->own) {
            mg_bench_set_err(err, errlen, "out of memory");
            return -1;
        }
        for (unsigned k = 0; k < mine; k++) {
            struct conn *c = mg_bench_conn_new(w, sh);
            if (!c) {
                mg_bench_set_err(err, errlen, "out of memory for connections");
                return -1;
            }
            c->once_index = index + k * threads;
            sh->own[sh->nown++] = c;
            if (sh->mode == MG_BENCH_CLOSED) {
                /* Every closed connection starts with the run. */
                c->state = CONN_WAITING;
                if (!mg_bench_heap_set(w, c, r->start_ns)) {
                    mg_bench_set_err(err, errlen, "out of memory");
                    return -1;
                }
            }
        }
    }
    return 0;
}

void mg_bench_worker_free(struct worker *w)
{
    if (w->epfd > 0)
        close(w->epfd);
    for (uint32_t i = 0; i < w->ntable; i++) {
        mg_bench_conn_close(w->table[i]);
        free(w->table[i]->req_buf);
        free(w->table[i]->head_buf);
        free(w->table[i]);
    }
    free(w->table);
    free(w->heap);
    for (unsigned s = 0; s < MG_BENCH_MAX_STREAMS; s++) {
        free(w->shards[s].own);
        free(w->shards[s].t.ok.v);
        free(w->shards[s].t.other.v);
    }
}
