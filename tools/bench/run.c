/* SPDX-License-Identifier: ISC */
/*
 * bench/run.c: a run from start to finish: the checks and the probe before anything is sent,
 * the workers, and their tallies merged into the report.
 */
#include "engine.h"

#include "clock.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROBE_TIMEOUT_MS 2000

static int probe(const struct mg_bench_target *t, char *err, size_t errlen)
{
    int fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        mg_bench_set_err(err, errlen, "cannot make a socket: %s", strerror(errno));
        return -1;
    }
    int soerr = 0;
    if (connect(fd, (const struct sockaddr *)&t->addr, t->addr_len) < 0) {
        soerr = errno;
        if (soerr == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n;
            while ((n = poll(&p, 1, PROBE_TIMEOUT_MS)) < 0 && errno == EINTR)
                ;
            socklen_t len = sizeof soerr;
            if (n == 0)
                soerr = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
                soerr = errno;
        }
    }
    close(fd);
    if (soerr) {
        mg_bench_set_err(err, errlen,
                         "cannot connect to %s: %s; is meshgate listening there? (start it, or fix "
                         "--target)",
                         t->text, strerror(soerr));
        return -1;
    }
    return 0;
}

static int plans_init(struct run *r, char *err, size_t errlen)
{
    const struct mg_bench_config *cfg = r->cfg;
    for (unsigned i = 0; i < cfg->nstreams; i++) {
        struct plan *p = &r->plans[i];
        p->spec = &cfg->streams[i];
        atomic_init(&p->next_key, 0);
        atomic_init(&p->counted, 0);
        atomic_init(&p->outstanding, 0);
        atomic_init(&p->stopped_ns, 0);
        if (p->spec->mode == MG_BENCH_OPEN)
            p->period_ns = (double)MG_NS_PER_SEC / p->spec->rate_per_s;
        if (p->spec->key_slots) {
            p->request_cap = mg_bench_longest_request(cfg, p->spec) + 1;
            continue;
        }
        size_t len = mg_bench_format_request(cfg, p->spec, NULL, NULL, 0);
        p->fixed_request = malloc(len + 1);
        if (!p->fixed_request) {
            mg_bench_set_err(err, errlen, "out of memory");
            return -1;
        }
        p->fixed_len = mg_bench_format_request(cfg, p->spec, NULL, p->fixed_request, len + 1);
    }
    return 0;
}

static int compare_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Gathers one kind of sample of stream s from every worker, sorted. */
static int64_t *gather(struct worker *workers, unsigned nworkers, unsigned s, bool ok, size_t *n)
{
    size_t total = 0;
    for (unsigned i = 0; i < nworkers; i++)
        total += ok ? workers[i].shards[s].t.ok.n : workers[i].shards[s].t.other.n;
    int64_t *v = malloc((total ? total : 1) * sizeof *v);
    if (!v)
        return NULL;
    size_t at = 0;
    for (unsigned i = 0; i < nworkers; i++) {
        const struct samples *src = ok ? &workers[i].shards[s].t.ok : &workers[i].shards[s].t.other;
        if (src->n)
            memcpy(v + at, src->v, src->n * sizeof *v);
        at += src->n;
    }
    qsort(v, total, sizeof *v, compare_int64);
    *n = total;
    return v;
}

static int merge_stream(struct run *r, struct worker *workers, unsigned nworkers, unsigned s,
                        struct mg_bench_stream_report *out)
{
    const struct mg_bench_stream *spec = &r->cfg->streams[s];
    int64_t last_outcome = 0;
    for (unsigned i = 0; i < nworkers; i++) {
        const struct tally *t = &workers[i].shards[s].t;
        out->sent += t->sent;
        out->responses += t->responses;
        out->dropped += t->dropped;
        out->retried += t->retried;
        out->overlong += t->overlong;
        for (int code = 0; code < 600; code++)
            out->status_counts[code] += t->status_counts[code];
        for (int k = 0; k < MG_BENCH_ERR_KINDS; k++)
            out->errors[k] += t->errors[k];
        if (t->max_send_lag_ns > out->max_send_lag_ns)
            out->max_send_lag_ns = t->max_send_lag_ns;
        if (t->last_outcome_ns > last_outcome)
            last_outcome = t->last_outcome_ns;
        for (unsigned sec = 0; sec < MG_BENCH_SECONDS_MAX; sec++) {
            out->per_second_200[sec] += t->per_second_200[sec];
            out->per_second_not_200[sec] += t->per_second_not_200[sec];
        }
        if (!out->first_error[0] && t->first_error[0])
            snprintf(out->first_error, sizeof out->first_error, "%s", t->first_error);
    }
    out->status_200 = out->status_counts[200];
    out->status_429 = out->status_counts[429];
    out->status_503 = out->status_counts[503];
    out->status_other = out->responses - out->status_200 - out->status_429 - out->status_503;
    for (int k = 0; k < MG_BENCH_ERR_KINDS; k++)
        out->errors_total += out->errors[k];
    int64_t stopped = atomic_load(&r->plans[s].stopped_ns);
    out->max_requests_reached = stopped != 0;

    if (spec->mode == MG_BENCH_ONCE) {
        out->elapsed_ns = last_outcome > r->measure_ns ? last_outcome - r->measure_ns : 0;
    } else {
        int64_t end = r->window_end_ns;
        int64_t interrupted = atomic_load(&r->interrupted_ns);
        if (stopped && stopped < end)
            end = stopped;
        if (interrupted && interrupted < end)
            end = interrupted;
        out->elapsed_ns = end > r->measure_ns ? end - r->measure_ns : 0;
    }
    out->nseconds = (unsigned)((out->elapsed_ns + MG_NS_PER_SEC - 1) / MG_NS_PER_SEC);
    if (out->nseconds > MG_BENCH_SECONDS_MAX)
        out->nseconds = MG_BENCH_SECONDS_MAX;
    out->rps = out->elapsed_ns > 0 ? (double)out->responses * 1e9 / (double)out->elapsed_ns : 0;

    size_t n_ok = 0, n_other = 0;
    int64_t *ok = gather(workers, nworkers, s, true, &n_ok);
    int64_t *other = gather(workers, nworkers, s, false, &n_other);
    int64_t *all = malloc((n_ok + n_other ? n_ok + n_other : 1) * sizeof *all);
    if (!ok || !other || !all) {
        free(ok);
        free(other);
        free(all);
        return -1;
    }
    /* Both are sorted: merge them into every response's latency, sorted. */
    size_t i = 0, j = 0, k = 0;
    while (i < n_ok || j < n_other)
        all[k++] = (j >= n_other || (i < n_ok && ok[i] <= other[j])) ? ok[i++] : other[j++];
    mg_bench_summarize(ok, n_ok, &out->latency_200);
    mg_bench_summarize(all, k, &out->latency);
    out->latencies_ns = all;
    out->nlatencies = k;
    free(ok);
    free(other);
    return 0;
}

/* What must hold before anything is sent: a loopback target, a configuration within its
 * bounds, and enough open files for every socket the run may hold. */
static enum mg_bench_status check_runnable(const struct mg_bench_config *cfg, char *err,
                                           size_t errlen)
{
    if (!mg_bench_target_is_loopback(&cfg->target)) {
        mg_bench_set_err(err, errlen,
                         "--target %s: not 127.0.0.1 or ::1; meshgate-bench loads only this "
                         "machine and sends nothing elsewhere",
                         cfg->target.text[0] ? cfg->target.text : "(unset)");
        return MG_BENCH_REFUSED;
    }
    if (cfg->nstreams == 0 || cfg->nstreams > MG_BENCH_MAX_STREAMS || cfg->threads == 0 ||
        cfg->threads > MG_BENCH_THREADS_MAX || !(cfg->duration_s >= MG_BENCH_DURATION_MIN_S) ||
        cfg->duration_s > MG_BENCH_DURATION_MAX_S || !(cfg->warmup_s >= 0) ||
        cfg->warmup_s > MG_BENCH_WARMUP_MAX_S || cfg->timeout_ms == 0 ||
        cfg->timeout_ms > MG_BENCH_TIMEOUT_MAX_MS || cfg->max_requests == 0 ||
        cfg->max_requests > MG_BENCH_MAX_REQUESTS_MAX || cfg->max_outstanding == 0) {
        mg_bench_set_err(err, errlen,
                         "the configuration is out of bounds (streams, threads, duration, "
                         "warm-up, timeout or limits): see meshgate-bench --help");
        return MG_BENCH_REFUSED;
    }
    struct rlimit rl;
    uint64_t needed = mg_bench_descriptors_needed(cfg);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        needed > rl.rlim_cur) {
        mg_bench_set_err(
            err, errlen,
            "this run may hold %llu open files, the limit (ulimit -n) is %llu: lower the "
            "connections, once:N or --max-outstanding, or raise the limit",
            (unsigned long long)needed, (unsigned long long)rl.rlim_cur);
        return MG_BENCH_REFUSED;
    }
    return MG_BENCH_OK;
}

enum mg_bench_status mg_bench_run(const struct mg_bench_config *cfg, struct mg_bench_report *rep,
                                  char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    mg_bench_accept_chunked = cfg->accept_chunked;
    enum mg_bench_status runnable = check_runnable(cfg, err, errlen);
    if (runnable != MG_BENCH_OK)
        return runnable;
    if (probe(&cfg->target, err, errlen) < 0)
        return MG_BENCH_CANNOT_CONNECT;

    enum mg_bench_status status = MG_BENCH_OK;
    struct run *r = calloc(1, sizeof *r);
    struct worker *workers = calloc(cfg->threads, sizeof *workers);
    if (!r || !workers) {
        free(r);
        free(workers);
        mg_bench_set_err(err, errlen, "out of memory");
        return MG_BENCH_SYSTEM_ERROR;
    }
    r->cfg = cfg;
    atomic_init(&r->interrupted_ns, 0);
    atomic_init(&r->failed, false);
    r->timeout_ns = (int64_t)cfg->timeout_ms * MG_NS_PER_MS;
    rep->started_realtime_ns = mg_realtime_ns();
    r->start_ns = mg_monotonic_ns();
    r->measure_ns = r->start_ns + (int64_t)llround(cfg->warmup_s * (double)MG_NS_PER_SEC);
    r->window_end_ns = r->measure_ns + (int64_t)llround(cfg->duration_s * (double)MG_NS_PER_SEC);

    unsigned created = 0;
    if (plans_init(r, err, errlen) < 0) {
        status = MG_BENCH_SYSTEM_ERROR;
        goto out;
    }
    for (unsigned i = 0; i < cfg->threads; i++)
        if (mg_bench_worker_init(&workers[i], r, i, err, errlen) < 0) {
            status = MG_BENCH_SYSTEM_ERROR;
            goto out;
        }
    for (; created < cfg->threads; created++) {
        int rc =
            pthread_create(&workers[created].thread, NULL, mg_bench_worker_main, &workers[created]);
        if (rc != 0) {
            mg_bench_set_err(err, errlen, "cannot start a thread: %s", strerror(rc));
            atomic_store(&r->failed, true);
            status = MG_BENCH_SYSTEM_ERROR;
            break;
        }
    }
    for (unsigned i = 0; i < created; i++)
        pthread_join(workers[i].thread, NULL);
    rep->run_ns = mg_monotonic_ns() - r->start_ns;
    if (status == MG_BENCH_OK && atomic_load(&r->failed)) {
        for (unsigned i = 0; i < cfg->threads; i++)
            if (workers[i].err[0]) {
                mg_bench_set_err(err, errlen, "the run failed: %s", workers[i].err);
                break;
            }
        status = MG_BENCH_SYSTEM_ERROR;
    }
    if (status == MG_BENCH_OK) {
        rep->nstreams = cfg->nstreams;
        rep->interrupted = atomic_load(&r->interrupted_ns) != 0;
        for (unsigned s = 0; s < cfg->nstreams; s++)
            if (merge_stream(r, workers, cfg->threads, s, &rep->streams[s]) < 0) {
                mg_bench_set_err(err, errlen, "out of memory while sorting latencies");
                status = MG_BENCH_SYSTEM_ERROR;
                break;
            }
    }
out:
    for (unsigned i = 0; i < cfg->threads; i++)
        mg_bench_worker_free(&workers[i]);
    for (unsigned s = 0; s < MG_BENCH_MAX_STREAMS; s++)
        free(r->plans[s].fixed_request);
    free(workers);
    free(r);
    return status;
}

void mg_bench_report_free(struct mg_bench_report *rep)
{
    for (unsigned s = 0; s < MG_BENCH_MAX_STREAMS; s++) {
        free(rep->streams[s].latencies_ns);
        rep->streams[s].latencies_ns = NULL;
        rep->streams[s].nlatencies = 0;
    }
}
