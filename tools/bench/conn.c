/* SPDX-License-Identifier: ISC */
/*
 * bench/conn.c: one connection's life: the deadline heap, the table and lists of
 * connections, and a request from its start (issue) to its outcome (finish).
 */
#include "engine.h"

#include "clock.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

void mg_bench_worker_fail(struct worker *w, const char *what)
{
    if (!w->err[0])
        snprintf(w->err, sizeof w->err, "%s", what);
    atomic_store(&w->run->failed, true);
}

static void heap_place(struct worker *w, size_t i, struct conn *c)
{
    w->heap[i] = c;
    c->heap_pos = i;
}

static void heap_up(struct worker *w, size_t i)
{
    struct conn *c = w->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (w->heap[parent]->deadline_ns <= c->deadline_ns)
            break;
        heap_place(w, i, w->heap[parent]);
        i = parent;
    }
    heap_place(w, i, c);
}

static void heap_down(struct worker *w, size_t i)
{
    struct conn *c = w->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= w->heap_len)
            break;
        if (child + 1 < w->heap_len &&
            w->heap[child + 1]->deadline_ns < w->heap[child]->deadline_ns)
            child++;
        if (c->deadline_ns <= w->heap[child]->deadline_ns)
            break;
        heap_place(w, i, w->heap[child]);
        i = child;
    }
    heap_place(w, i, c);
}

void mg_bench_heap_remove(struct worker *w, struct conn *c)
{
    size_t i = c->heap_pos;
    if (i == NOT_IN_HEAP)
        return;
    c->heap_pos = NOT_IN_HEAP;
    struct conn *last = w->heap[--w->heap_len];
    if (last == c)
        return;
    heap_place(w, i, last);
    heap_up(w, i);
    heap_down(w, last->heap_pos);
}

bool mg_bench_heap_set(struct worker *w, struct conn *c, int64_t deadline_ns)
{
    mg_bench_heap_remove(w, c);
    if (w->heap_len == w->heap_cap) {
        size_t want = w->heap_cap ? w->heap_cap * 2 : 64;
        struct conn **grown = realloc(w->heap, want * sizeof *grown);
        if (!grown) {
            mg_bench_worker_fail(w, "out of memory for the deadline heap");
            return false;
        }
        w->heap = grown;
        w->heap_cap = want;
    }
    c->deadline_ns = deadline_ns;
    heap_place(w, w->heap_len++, c);
    heap_up(w, c->heap_pos);
    return true;
}

/* --- connections ----------------------------------------------------------------------------- */

struct conn *mg_bench_conn_new(struct worker *w, struct shard *sh)
{
    if (w->ntable == w->table_cap) {
        uint32_t want = w->table_cap ? w->table_cap * 2 : 64;
        struct conn **grown = realloc(w->table, want * sizeof *grown);
        if (!grown) {
            mg_bench_worker_fail(w, "out of memory for connections");
            return NULL;
        }
        w->table = grown;
        w->table_cap = want;
    }
    struct conn *c = calloc(1, sizeof *c);
    if (c && sh->plan->spec->key_slots) {
        c->req_buf = malloc(sh->plan->request_cap);
        if (!c->req_buf) {
            free(c);
            c = NULL;
        }
    }
    if (!c) {
        mg_bench_worker_fail(w, "out of memory for connections");
        return NULL;
    }
    c->shard = sh;
    c->id = w->ntable;
    c->fd = -1;
    c->heap_pos = NOT_IN_HEAP;
    c->state = CONN_IDLE;
    w->table[w->ntable++] = c;
    return c;
}

void mg_bench_conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->events = 0;
    c->reused = false;
}

static bool conn_watch(struct worker *w, struct conn *c, uint32_t events)
{
    if (c->events == events)
        return true;
    struct epoll_event ev = {.events = events, .data.u64 = ((uint64_t)c->id << 32) | c->gen};
    if (epoll_ctl(w->epfd, c->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        char what[128];
        snprintf(what, sizeof what, "epoll_ctl: %s", strerror(errno));
        mg_bench_worker_fail(w, what);
        return false;
    }
    c->events = events;
    return true;
}

void mg_bench_list_push(struct conn **head, struct conn *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head)
        (*head)->prev = c;
    *head = c;
}

void mg_bench_list_remove(struct conn **head, struct conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static bool samples_push(struct worker *w, struct samples *s, int64_t v)
{
    if (s->n == s->cap) {
        size_t want = s->cap ? s->cap * 2 : 1024;
        int64_t *grown = realloc(s->v, want * sizeof *grown);
        if (!grown) {
            mg_bench_worker_fail(w, "out of memory for latency samples (lower --max-requests)");
            return false;
        }
        s->v = grown;
        s->cap = want;
    }
    s->v[s->n++] = v;
    return true;
}

/* --- requests ------------------------------------------------------------------------------- */

static void start_exchange(struct worker *w, struct conn *c, int64_t now);
static void next_closed(struct worker *w, struct conn *c, int64_t now, int64_t wait_ns);

/*
 * Ends the request on c: a response (status > 0) or an error of kind. Records it when it is
 * counted, then moves the connection on by its stream's mode.
 */
void mg_bench_conn_finish(struct worker *w, struct conn *c, int status,
                          enum mg_bench_error_kind kind, int errnum, int64_t now)
{
    struct shard *sh = c->shard;
    struct tally *t = &sh->t;
    mg_bench_heap_remove(w, c);
    sh->inflight--;
    if (sh->mode == MG_BENCH_OPEN)
        atomic_fetch_sub(&sh->plan->outstanding, 1);
    if (c->counted) {
        int64_t since_open = now - w->run->measure_ns;
        if (since_open >= 0 && since_open / MG_NS_PER_SEC < MG_BENCH_SECONDS_MAX) {
            size_t second = (size_t)(since_open / MG_NS_PER_SEC);
            if (status == 200)
                t->per_second_200[second]++;
            else
                t->per_second_not_200[second]++;
        }
        if (status > 0) {
            int64_t latency = now - c->start_ns;
            t->responses++;
            t->status_counts[status]++;
            samples_push(w, status == 200 ? &t->ok : &t->other, latency);
        } else {
            t->errors[kind]++;
            if (!t->first_error[0]) {
                const struct mg_bench_config *cfg = w->run->cfg;
                switch (kind) {
                case MG_BENCH_ERR_CONNECT:
                    snprintf(t->first_error, sizeof t->first_error, "connect to %s: %s",
                             cfg->target.text, strerror(errnum));
                    break;
                case MG_BENCH_ERR_TIMEOUT:
                    snprintf(t->first_error, sizeof t->first_error,
                             "no whole response within %u ms", cfg->timeout_ms);
                    break;
                case MG_BENCH_ERR_CLOSED:
                    snprintf(t->first_error, sizeof t->first_error,
                             "connection closed before the whole response: %s",
                             errnum ? strerror(errnum) : "end of stream");
                    break;
                case MG_BENCH_ERR_PROTOCOL:
                    snprintf(t->first_error, sizeof t->first_error, "bad response: %s",
                             errnum ? strerror(errnum) : "unexpected bytes");
                    break;
                default:
                    snprintf(t->first_error, sizeof t->first_error,
                             "still outstanding when the run was interrupted");
                    break;
                }
            }
        }
        if (now > t->last_outcome_ns)
            t->last_outcome_ns = now;
    }
    bool keep = status > 0 && !c->close_after && c->fd >= 0;
    if (keep)
        c->reused = true;
    else
        mg_bench_conn_close(c);
    free(c->head_buf);
    c->head_buf = NULL;
    c->head_len = 0;

    switch (sh->mode) {
    case MG_BENCH_CLOSED: {
        /* After an error (but a timeout, which has waited already) a short back-off, so a
         * stopped server is counted and not hammered in a busy loop. */
        int64_t wait_ns = (int64_t)sh->plan->spec->pause_ms * MG_NS_PER_MS;
        if (status <= 0 && kind != MG_BENCH_ERR_TIMEOUT &&
            wait_ns < MG_BENCH_ERROR_BACKOFF_MS * MG_NS_PER_MS)
            wait_ns = MG_BENCH_ERROR_BACKOFF_MS * MG_NS_PER_MS;
        next_closed(w, c, now, wait_ns);
        break;
    }
    case MG_BENCH_OPEN:
        if (keep && !w->stopping) {
            c->state = CONN_POOLED;
            mg_bench_list_push(&sh->pool, c);
        } else {
            mg_bench_conn_close(c);
            c->state = CONN_IDLE;
            mg_bench_list_push(&sh->free_list, c);
        }
        break;
    case MG_BENCH_ONCE:
        mg_bench_conn_close(c);
        c->state = CONN_DONE;
        sh->done++;
        break;
    }
}

/* The request failed on the way: send it again once on a new connection when a kept-alive
 * one was closed by the server before answering (it may close an idle connection at any
 * time, and a GET may be repeated), else it is an error. */
void mg_bench_conn_fail_or_retry(struct worker *w, struct conn *c, enum mg_bench_error_kind kind,
                                 int errnum, int64_t now)
{
    if (kind == MG_BENCH_ERR_CLOSED && c->reused && !c->got_bytes && !c->retried) {
        c->retried = true;
        if (c->counted)
            c->shard->t.retried++;
        mg_bench_conn_close(c);
        start_exchange(w, c, now);
        return;
    }
    mg_bench_conn_finish(w, c, 0, kind, errnum, now);
}

void mg_bench_conn_try_send(struct worker *w, struct conn *c, int64_t now)
{
    while (c->req_sent < c->req_len) {
        ssize_t n = send(c->fd, c->req + c->req_sent, c->req_len - c->req_sent, MSG_NOSIGNAL);
        if (n > 0) {
            c->req_sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            conn_watch(w, c, EPOLLOUT);
            return;
        }
        mg_bench_conn_fail_or_retry(w, c, MG_BENCH_ERR_CLOSED, n < 0 ? errno : 0, now);
        return;
    }
    c->state = CONN_RECEIVING;
    conn_watch(w, c, EPOLLIN | EPOLLRDHUP);
}

/* Sends c's request: on its kept-alive socket, or on a new connection. */
static void start_exchange(struct worker *w, struct conn *c, int64_t now)
{
    c->req_sent = 0;
    c->got_bytes = c->head_done = c->close_after = false;
    c->head_len = 0;
    c->status = 0;
    c->chunk_step = CHUNK_NONE;
    c->chunk_size = 0;
    c->trailer_line = 0;
    if (c->fd < 0) {
        const struct mg_bench_target *target = &w->run->cfg->target;
        int fd = socket(target->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            c->state = CONN_CONNECTING;
            mg_bench_conn_finish(w, c, 0, MG_BENCH_ERR_CONNECT, errno, now);
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->gen++;
        c->events = 0;
        c->reused = false;
        if (connect(fd, (const struct sockaddr *)&target->addr, target->addr_len) < 0) {
            if (errno == EINPROGRESS) {
                c->state = CONN_CONNECTING;
                conn_watch(w, c, EPOLLOUT);
                return;
            }
            c->state = CONN_CONNECTING;
            mg_bench_conn_finish(w, c, 0, MG_BENCH_ERR_CONNECT, errno, now);
            return;
        }
    }
    c->state = CONN_SENDING;
    mg_bench_conn_try_send(w, c, now);
}

/* Starts a request scheduled at start_ns on c. False when the stream may count no more
 * requests (--max-requests): then nothing was sent. */
bool mg_bench_conn_issue(struct worker *w, struct conn *c, int64_t start_ns, int64_t now)
{
    struct shard *sh = c->shard;
    struct plan *p = sh->plan;
    const struct run *r = w->run;
    bool counted = start_ns >= r->measure_ns;
    if (counted) {
        if (atomic_fetch_add(&p->counted, 1) >= r->cfg->max_requests) {
            int_fast64_t zero = 0;
            atomic_compare_exchange_strong(&p->stopped_ns, &zero, now);
            return false;
        }
        sh->t.sent++;
        if (now - start_ns > sh->t.max_send_lag_ns)
            sh->t.max_send_lag_ns = now - start_ns;
    }
    c->counted = counted;
    c->start_ns = start_ns;
    c->retried = false;
    if (p->spec->key_slots) {
        const struct mg_bench_config *cfg = r->cfg;
        size_t k = sh->mode == MG_BENCH_ONCE
                       ? c->once_index
                       : (size_t)(atomic_fetch_add(&p->next_key, 1) % cfg->nkeys);
        c->req_len =
            mg_bench_format_request(cfg, p->spec, cfg->keys[k], c->req_buf, p->request_cap);
        c->req = c->req_buf;
    } else {
        c->req = p->fixed_request;
        c->req_len = p->fixed_len;
    }
    sh->inflight++;
    if (!mg_bench_heap_set(w, c, start_ns + r->timeout_ns)) {
        sh->inflight--;
        return false;
    }
    start_exchange(w, c, now);
    return true;
}

/* A closed connection's next request: now, after wait_ns, or none when the window is over. */
static void next_closed(struct worker *w, struct conn *c, int64_t now, int64_t wait_ns)
{
    struct shard *sh = c->shard;
    int64_t at = now + wait_ns;
    if (w->stopping || at >= w->run->window_end_ns || atomic_load(&sh->plan->stopped_ns)) {
        mg_bench_conn_close(c);
        c->state = CONN_DONE;
        sh->done++;
        return;
    }
    if (wait_ns == 0) {
        if (!mg_bench_conn_issue(w, c, now, now)) {
            mg_bench_conn_close(c);
            c->state = CONN_DONE;
            sh->done++;
        }
        return;
    }
    c->state = CONN_WAITING;
    mg_bench_heap_set(w, c, at);
}
