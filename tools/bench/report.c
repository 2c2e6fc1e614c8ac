/* SPDX-License-Identifier: ISC */
/*
 * bench/report.c: exact percentiles, the report of a run as text or JSON, and the check of
 * --max-unexpected-pct.
 *
 * The JSON report (mg_bench_render_json):
 *   {"tool":"meshgate-bench","label":S,"command":S,"target":S,"started_at":ISO-8601,
 *    "duration_s":N,"warmup_s":N,"timeout_ms":N,"threads":N,"max_requests":N,
 *    "max_outstanding":N,"interrupted":B,"run_s":N,
 *    "streams":[{"name":S,"mode":"closed"|"open"|"once","spec":"closed:16","path":S,
 *                "connections":N,"pause_ms":N | "rate_per_s":N | "count":N,
 *                "headers":[S...],"sent":N,"responses":N,
 *                "status":{"200":N,"429":N,"503":N,"other":N},"statuses":{"404":N,...},
 *                "errors":{"total":N,"connect":N,"timeout":N,"closed":N,"protocol":N,
 *                          "aborted":N},"first_error":S|null,"dropped":N,"retried":N,
 *                "overlong":N,
 *                "max_requests_reached":B,"max_send_lag_ms":N,"elapsed_s":N,"rps":N,
 *                "latency_ms":{"samples":N,"min":N,"p50":N,"p95":N,"p99":N,"max":N,
 *                              "mean":N},"latency_200_ms":{...same...},
 *                "per_second":{"200":[N...],"not_200":[N...]}}]}
 *   Latencies are null when there are no samples. "per_second" only with --per-second: one
 *   number a second of the stream's elapsed window (mg_bench_stream_report).
 */
#include "internal.h"

#include "clock.h"
#include "json.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int64_t mg_bench_percentile(const int64_t *sorted, size_t n, unsigned permille)
{
    if (n == 0 || permille == 0)
        return -1;
    if (permille > 1000)
        permille = 1000;
    uint64_t rank = ((uint64_t)permille * n + 999) / 1000; /* ceil(permille * n / 1000) */
    if (rank < 1)
        rank = 1;
    return sorted[rank - 1];
}

void mg_bench_summarize(const int64_t *sorted, size_t n, struct mg_bench_latency *l)
{
    l->samples = n;
    l->min_ns = n ? sorted[0] : -1;
    l->p50_ns = mg_bench_percentile(sorted, n, 500);
    l->p95_ns = mg_bench_percentile(sorted, n, 950);
    l->p99_ns = mg_bench_percentile(sorted, n, 990);
    l->max_ns = mg_bench_percentile(sorted, n, 1000);
    long double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += sorted[i];
    l->mean_ns = n ? (double)(sum / n) : -1;
}

const char *mg_bench_mode_name(enum mg_bench_mode m)
{
    return m == MG_BENCH_CLOSED ? "closed" : m == MG_BENCH_OPEN ? "open" : "once";
}

static const char *const error_names[MG_BENCH_ERR_KINDS] = {"connect", "timeout", "closed",
                                                            "protocol", "aborted"};

static void format_ms(char *out, size_t cap, int64_t ns)
{
    if (ns < 0)
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.3f", (double)ns / 1e6);
}

static void format_started(char *out, size_t cap, int64_t realtime_ns)
{
    time_t secs = (time_t)(realtime_ns / MG_NS_PER_SEC);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The report's head: label, command line, settings, and each stream as asked for. Returns
 * the width of the stream column. */
static int render_settings(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                           struct mg_buf *out)
{
    char started[32];
    format_started(started, sizeof started, rep->started_realtime_ns);
    mg_buf_printf(out, "meshgate-bench%s%s%s\n", cfg->label[0] ? ": " : "", cfg->label,
                  rep->interrupted ? "  (INTERRUPTED: partial results)" : "");
    mg_buf_printf(out, "command: %s\n", cfg->command_line ? cfg->command_line : "(not given)");
    mg_buf_printf(out,
                  "target %s, started %s, warm-up %g s, window %g s, timeout %u ms, %u thread%s, "
                  "max %llu requests a stream\n",
                  cfg->target.text, started, cfg->warmup_s, cfg->duration_s, cfg->timeout_ms,
                  cfg->threads, cfg->threads == 1 ? "" : "s",
                  (unsigned long long)cfg->max_requests);

    int name_w = 6;
    for (unsigned s = 0; s < cfg->nstreams; s++)
        if ((int)strlen(cfg->streams[s].name) > name_w)
            name_w = (int)strlen(cfg->streams[s].name);
    mg_buf_puts(out, "streams:\n");
    for (unsigned s = 0; s < cfg->nstreams; s++) {
        const struct mg_bench_stream *st = &cfg->streams[s];
        char mode[48];
        mg_bench_stream_mode_text(st, mode, sizeof mode);
        mg_buf_printf(out, "  %-*s  %-12s GET %s", name_w, st->name, mode, st->path);
        if (st->key_slots)
            mg_buf_printf(out, "  ({key}: %zu keys from %s, %s)", cfg->nkeys, cfg->keys_path,
                          st->mode == MG_BENCH_ONCE ? "each once" : "round-robin");
        if (st->mode == MG_BENCH_OPEN)
            mg_buf_printf(out, "  (at most %u outstanding)", cfg->max_outstanding);
        mg_buf_putc(out, '\n');
        for (unsigned h = 0; h < st->nheaders; h++)
            mg_buf_printf(out, "  %-*s  %-12s + %s\n", name_w, "", "", st->headers[h]);
    }
    mg_buf_putc(out, '\n');
    return name_w;
}

/* One row a stream: sent, by status, errors, percentiles, rps. */
static void render_table(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                         struct mg_buf *out, int name_w)
{
    mg_buf_printf(out, "%-*s %9s %9s %8s %8s %7s %7s %9s %9s %9s %9s %10s\n", name_w, "stream",
                  "sent", "200", "429", "503", "other", "err", "p50_ms", "p95_ms", "p99_ms",
                  "max_ms", "rps");
    for (unsigned s = 0; s < rep->nstreams; s++) {
        const struct mg_bench_stream_report *sr = &rep->streams[s];
        char p50[24], p95[24], p99[24], max[24];
        format_ms(p50, sizeof p50, sr->latency.p50_ns);
        format_ms(p95, sizeof p95, sr->latency.p95_ns);
        format_ms(p99, sizeof p99, sr->latency.p99_ns);
        format_ms(max, sizeof max, sr->latency.max_ns);
        mg_buf_printf(out, "%-*s %9llu %9llu %8llu %8llu %7llu %7llu %9s %9s %9s %9s %10.1f\n",
                      name_w, cfg->streams[s].name, (unsigned long long)sr->sent,
                      (unsigned long long)sr->status_200, (unsigned long long)sr->status_429,
                      (unsigned long long)sr->status_503, (unsigned long long)sr->status_other,
                      (unsigned long long)sr->errors_total, p50, p95, p99, max, sr->rps);
    }
}

/* What the table does not show about a stream: its errors and other statuses, dropped,
 * retried and overlong requests, --max-requests, send lag, and 200-only percentiles. */
static void stream_notes(const struct mg_bench_config *cfg, const struct mg_bench_stream *st,
                         const struct mg_bench_stream_report *sr, struct mg_buf *notes)
{
    if (sr->errors_total) {
        mg_buf_printf(notes, "  %s: err =", st->name);
        bool first = true;
        for (int k = 0; k < MG_BENCH_ERR_KINDS; k++)
            if (sr->errors[k]) {
                mg_buf_printf(notes, "%s %llu %s", first ? "" : ",",
                              (unsigned long long)sr->errors[k], error_names[k]);
                first = false;
            }
        mg_buf_printf(notes, "; the first: %s\n", sr->first_error);
    }
    if (sr->status_other) {
        mg_buf_printf(notes, "  %s: other =", st->name);
        bool first = true;
        for (int code = 100; code < 600; code++)
            if (code != 200 && code != 429 && code != 503 && sr->status_counts[code]) {
                mg_buf_printf(notes, "%s %llu x %d", first ? "" : ",",
                              (unsigned long long)sr->status_counts[code], code);
                first = false;
            }
        mg_buf_putc(notes, '\n');
    }
    if (sr->dropped)
        mg_buf_printf(notes,
                      "  %s: %llu dropped: due while %u requests were out (--max-outstanding), "
                      "not sent, not in sent or latencies\n",
                      st->name, (unsigned long long)sr->dropped, cfg->max_outstanding);
    if (sr->retried)
        mg_buf_printf(notes,
                      "  %s: %llu sent again on a new connection: the server closed a "
                      "kept-alive one before answering\n",
                      st->name, (unsigned long long)sr->retried);
    if (sr->overlong)
        mg_buf_printf(notes,
                      "  %s: %llu responses were followed by bytes past their "
                      "Content-Length (counted by status; the connection was closed)\n",
                      st->name, (unsigned long long)sr->overlong);
    if (sr->max_requests_reached)
        mg_buf_printf(notes, "  %s: stopped at --max-requests %llu before the window ended\n",
                      st->name, (unsigned long long)cfg->max_requests);
    if (sr->max_send_lag_ns >= MG_NS_PER_MS && st->mode != MG_BENCH_CLOSED)
        mg_buf_printf(notes, "  %s: sent up to %.1f ms after schedule (counted in its latency)\n",
                      st->name, (double)sr->max_send_lag_ns / 1e6);
    if (sr->status_429 + sr->status_503 && sr->latency_200.samples)
        mg_buf_printf(notes, "  %s: 200 only: p50 %.3f, p95 %.3f, p99 %.3f, max %.3f ms\n",
                      st->name, (double)sr->latency_200.p50_ns / 1e6,
                      (double)sr->latency_200.p95_ns / 1e6, (double)sr->latency_200.p99_ns / 1e6,
                      (double)sr->latency_200.max_ns / 1e6);
}

/* --per-second: a row a second of the window, two columns a stream (200s, and every other
 * outcome), by the second each completed in. */
static void render_per_second(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                              struct mg_buf *out)
{
    unsigned rows = 0;
    for (unsigned s = 0; s < rep->nstreams; s++)
        if (rep->streams[s].nseconds > rows)
            rows = rep->streams[s].nseconds;
    mg_buf_puts(out, "\nper second (outcomes completed in each second of the window):\n");
    mg_buf_printf(out, "%6s", "second");
    for (unsigned s = 0; s < rep->nstreams; s++)
        mg_buf_printf(out, " %16.16s %9s", cfg->streams[s].name, "not_200");
    mg_buf_putc(out, '\n');
    for (unsigned sec = 0; sec < rows; sec++) {
        mg_buf_printf(out, "%6u", sec);
        for (unsigned s = 0; s < rep->nstreams; s++)
            mg_buf_printf(out, " %16llu %9llu",
                          (unsigned long long)rep->streams[s].per_second_200[sec],
                          (unsigned long long)rep->streams[s].per_second_not_200[sec]);
        mg_buf_putc(out, '\n');
    }
}

void mg_bench_render_text(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                          struct mg_buf *out)
{
    int name_w = render_settings(cfg, rep, out);
    render_table(cfg, rep, out, name_w);
    if (cfg->per_second)
        render_per_second(cfg, rep, out);
    struct mg_buf notes;
    mg_buf_init(&notes);
    for (unsigned s = 0; s < rep->nstreams; s++)
        stream_notes(cfg, &cfg->streams[s], &rep->streams[s], &notes);
    if (notes.len) {
        mg_buf_puts(out, "\nnotes:\n");
        mg_buf_append(out, notes.data, notes.len);
    }
    mg_buf_free(&notes);
    mg_buf_puts(out, "\nsent = 200 + 429 + 503 + other + err. Percentiles: nearest rank over every "
                     "response\n(any status) to a request scheduled in the window; latency counts "
                     "from the\nscheduled start. rps: responses / window (once: / burst to last "
                     "answer).\n");
}

static void json_latency(struct mg_json *j, const char *key, const struct mg_bench_latency *l)
{
    mg_json_key(j, key);
    if (!l->samples) {
        mg_json_null(j);
        return;
    }
    mg_json_object_begin(j);
    mg_json_kv_uint(j, "samples", l->samples);
    mg_json_key(j, "min");
    mg_json_double_rounded(j, (double)l->min_ns / 1e6, 3);
    mg_json_key(j, "p50");
    mg_json_double_rounded(j, (double)l->p50_ns / 1e6, 3);
    mg_json_key(j, "p95");
    mg_json_double_rounded(j, (double)l->p95_ns / 1e6, 3);
    mg_json_key(j, "p99");
    mg_json_double_rounded(j, (double)l->p99_ns / 1e6, 3);
    mg_json_key(j, "max");
    mg_json_double_rounded(j, (double)l->max_ns / 1e6, 3);
    mg_json_key(j, "mean");
    mg_json_double_rounded(j, l->mean_ns / 1e6, 3);
    mg_json_object_end(j);
}

void mg_bench_render_json(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                          struct mg_buf *out)
{
    struct mg_json j;
    mg_json_init(&j, out);
    char started[32];
    format_started(started, sizeof started, rep->started_realtime_ns);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "tool", "meshgate-bench");
    mg_json_kv_string(&j, "label", cfg->label);
    mg_json_kv_string(&j, "command", cfg->command_line);
    mg_json_kv_string(&j, "target", cfg->target.text);
    mg_json_kv_string(&j, "started_at", started);
    mg_json_kv_double(&j, "duration_s", cfg->duration_s);
    mg_json_kv_double(&j, "warmup_s", cfg->warmup_s);
    mg_json_kv_uint(&j, "timeout_ms", cfg->timeout_ms);
    mg_json_kv_uint(&j, "threads", cfg->threads);
    mg_json_kv_uint(&j, "max_requests", cfg->max_requests);
    mg_json_kv_uint(&j, "max_outstanding", cfg->max_outstanding);
    mg_json_kv_bool(&j, "interrupted", rep->interrupted);
    mg_json_key(&j, "run_s");
    mg_json_double_rounded(&j, (double)rep->run_ns / 1e9, 3);
    mg_json_key(&j, "streams");
    mg_json_array_begin(&j);
    for (unsigned s = 0; s < rep->nstreams; s++) {
        const struct mg_bench_stream *st = &cfg->streams[s];
        const struct mg_bench_stream_report *sr = &rep->streams[s];
        char mode[48];
        mg_bench_stream_mode_text(st, mode, sizeof mode);
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "name", st->name);
        mg_json_kv_string(&j, "mode", mg_bench_mode_name(st->mode));
        mg_json_kv_string(&j, "spec", mode);
        mg_json_kv_string(&j, "path", st->path);
        if (st->mode == MG_BENCH_CLOSED) {
            mg_json_kv_uint(&j, "connections", st->connections);
            mg_json_kv_uint(&j, "pause_ms", st->pause_ms);
        } else if (st->mode == MG_BENCH_OPEN) {
            mg_json_kv_double(&j, "rate_per_s", st->rate_per_s);
        } else {
            mg_json_kv_uint(&j, "count", st->count);
        }
        mg_json_key(&j, "headers");
        mg_json_array_begin(&j);
        for (unsigned h = 0; h < st->nheaders; h++)
            mg_json_string(&j, st->headers[h]);
        mg_json_array_end(&j);
        mg_json_kv_uint(&j, "sent", sr->sent);
        mg_json_kv_uint(&j, "responses", sr->responses);
        mg_json_key(&j, "status");
        mg_json_object_begin(&j);
        mg_json_kv_uint(&j, "200", sr->status_200);
        mg_json_kv_uint(&j, "429", sr->status_429);
        mg_json_kv_uint(&j, "503", sr->status_503);
        mg_json_kv_uint(&j, "other", sr->status_other);
        mg_json_object_end(&j);
        mg_json_key(&j, "statuses");
        mg_json_object_begin(&j);
        for (int code = 100; code < 600; code++)
            if (sr->status_counts[code]) {
                char key[16];
                snprintf(key, sizeof key, "%d", code);
                mg_json_kv_uint(&j, key, sr->status_counts[code]);
            }
        mg_json_object_end(&j);
        mg_json_key(&j, "errors");
        mg_json_object_begin(&j);
        mg_json_kv_uint(&j, "total", sr->errors_total);
        for (int k = 0; k < MG_BENCH_ERR_KINDS; k++)
            mg_json_kv_uint(&j, error_names[k], sr->errors[k]);
        mg_json_object_end(&j);
        mg_json_kv_string(&j, "first_error", sr->first_error[0] ? sr->first_error : NULL);
        mg_json_kv_uint(&j, "dropped", sr->dropped);
        mg_json_kv_uint(&j, "retried", sr->retried);
        mg_json_kv_uint(&j, "overlong", sr->overlong);
        mg_json_kv_bool(&j, "max_requests_reached", sr->max_requests_reached);
        mg_json_key(&j, "max_send_lag_ms");
        mg_json_double_rounded(&j, (double)sr->max_send_lag_ns / 1e6, 3);
        mg_json_key(&j, "elapsed_s");
        mg_json_double_rounded(&j, (double)sr->elapsed_ns / 1e9, 3);
        mg_json_key(&j, "rps");
        mg_json_double_rounded(&j, sr->rps, 1);
        json_latency(&j, "latency_ms", &sr->latency);
        json_latency(&j, "latency_200_ms", &sr->latency_200);
        if (cfg->per_second) {
            mg_json_key(&j, "per_second");
            mg_json_object_begin(&j);
            mg_json_key(&j, "200");
            mg_json_array_begin(&j);
            for (unsigned sec = 0; sec < sr->nseconds; sec++)
                mg_json_uint(&j, sr->per_second_200[sec]);
            mg_json_array_end(&j);
            mg_json_key(&j, "not_200");
            mg_json_array_begin(&j);
            for (unsigned sec = 0; sec < sr->nseconds; sec++)
                mg_json_uint(&j, sr->per_second_not_200[sec]);
            mg_json_array_end(&j);
            mg_json_object_end(&j);
        }
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_object_end(&j);
}

uint64_t mg_bench_unexpected(const struct mg_bench_stream *s,
                             const struct mg_bench_stream_report *r)
{
    uint64_t n = s->expect_errors ? 0 : r->errors_total;
    for (int code = 100; code < 600; code++)
        if (!s->expect_status[code])
            n += r->status_counts[code];
    return n;
}

bool mg_bench_check_unexpected(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                               char *err, size_t errlen)
{
    if (cfg->max_unexpected_pct < 0)
        return true;
    for (unsigned i = 0; i < cfg->nstreams && i < rep->nstreams; i++) {
        const struct mg_bench_stream *s = &cfg->streams[i];
        const struct mg_bench_stream_report *r = &rep->streams[i];
        uint64_t bad = mg_bench_unexpected(s, r);
        if (r->sent == 0 || (double)bad * 100.0 <= cfg->max_unexpected_pct * (double)r->sent)
            continue;
        char got[256];
        size_t len = 0;
        got[0] = '\0';
        for (int code = 100; code < 600 && len < sizeof got - 32; code++)
            if (!s->expect_status[code] && r->status_counts[code])
                len += (size_t)snprintf(got + len, sizeof got - len, "%s%d x %llu", len ? ", " : "",
                                        code, (unsigned long long)r->status_counts[code]);
        if (!s->expect_errors && r->errors_total && len < sizeof got - 32)
            snprintf(got + len, sizeof got - len, "%serrors x %llu (%s)", len ? ", " : "",
                     (unsigned long long)r->errors_total, r->first_error);
        mg_bench_set_err(
            err, errlen,
            "stream %s: %llu of %llu requests (%.2f %%) ended in what it does not expect "
            "(--expect %s:%s): %s; more than --max-unexpected-pct %g",
            s->name, (unsigned long long)bad, (unsigned long long)r->sent,
            100.0 * (double)bad / (double)r->sent, s->name, s->expect_text, got,
            cfg->max_unexpected_pct);
        return false;
    }
    return true;
}
