/* SPDX-License-Identifier: ISC */
/*
 * GET /metrics: the Prometheus text format 0.0.4, checked by a strict parser of its own
 * (promtool is not assumed), and figures that move with the whole group's traffic.
 */
#include "harness.h"
#include "inproc.h"

#include "build_info.h"
#include "router.h"
#include "scoreboard.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(metrics, .timeout = 60);

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* ---- a strict parser of the exposition format ---- */

#define NAME_MAX_LEN 128
#define LABELS_MAX_LEN 256

struct family {
    char name[NAME_MAX_LEN];
    char type[16];
    bool has_help;
};

struct sample {
    char name[NAME_MAX_LEN];
    char labels[LABELS_MAX_LEN]; /* as written between the braces, "" when none */
    char group[LABELS_MAX_LEN];  /* the labels without le (histogram series) */
    char le[32];                 /* the le label's value, "" when none */
    double value;
    unsigned family;
};

struct expo {
    struct family *families;
    unsigned nfamilies;
    struct sample *samples;
    unsigned nsamples;
    char err[256];
};

static void expo_free(struct expo *e)
{
    free(e->families);
    free(e->samples);
    memset(e, 0, sizeof *e);
}

static bool fail(struct expo *e, unsigned line, const char *why)
{
    snprintf(e->err, sizeof e->err, "line %u: %s", line, why);
    return false;
}

static bool name_start(char c)
{
    return isalpha((unsigned char)c) || c == '_' || c == ':';
}

static bool name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == ':';
}

/* A metric name at *p (label names: no ':'); copies it into out. */
static bool read_name(const char **p, char *out, size_t cap, bool label)
{
    const char *s = *p;
    if (!name_start(*s) || (label && *s == ':'))
        return false;
    size_t n = 0;
    while (name_char(s[n]) && !(label && s[n] == ':'))
        n++;
    if (n >= cap)
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    *p = s + n;
    return true;
}

static bool read_value(const char *s, double *out)
{
    if (strcmp(s, "+Inf") == 0 || strcmp(s, "-Inf") == 0 || strcmp(s, "NaN") == 0) {
        *out = strcmp(s, "NaN") == 0 ? NAN : (s[0] == '+' ? INFINITY : -INFINITY);
        return true;
    }
    if (!*s || isspace((unsigned char)*s))
        return false;
    char *end;
    *out = strtod(s, &end);
    return *end == '\0' && isfinite(*out);
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

static int find_family(const struct expo *e, const char *name)
{
    for (unsigned i = 0; i < e->nfamilies; i++)
        if (strcmp(e->families[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* The family a sample belongs to: its own name, or a histogram's _bucket/_sum/_count. */
static int family_of(const struct expo *e, const char *name, bool *bucket)
{
    *bucket = false;
    int f = find_family(e, name);
    if (f >= 0)
        return strcmp(e->families[f].type, "histogram") == 0 ? -1 : f;
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    for (unsigned i = 0; i < 3; i++) {
        if (!has_suffix(name, suffixes[i]))
            continue;
        char base[NAME_MAX_LEN];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - strlen(suffixes[i])), name);
        f = find_family(e, base);
        if (f >= 0 && strcmp(e->families[f].type, "histogram") == 0) {
            *bucket = i == 0;
            return f;
        }
    }
    return -1;
}

/* {a="x",b="y"}: well-formed labels, no name twice; fills s->labels, s->group and s->le. */
static bool read_labels(const char **p, struct sample *s)
{
    const char *start = *p + 1, *q = start;
    char seen[8][NAME_MAX_LEN];
    unsigned nseen = 0;
    size_t glen = 0;
    s->group[0] = '\0';
    while (*q != '}') {
        const char *pair = q;
        char label[NAME_MAX_LEN];
        if (!read_name(&q, label, sizeof label, true) || nseen == 8)
            return false;
        for (unsigned i = 0; i < nseen; i++)
            if (strcmp(seen[i], label) == 0)
                return false;
        strcpy(seen[nseen++], label);
        if (*q++ != '=' || *q++ != '"')
            return false;
        char value[LABELS_MAX_LEN];
        size_t n = 0;
        while (*q != '"') {
            char c = *q++;
            if (c == '\0' || c == '\n')
                return false;
            if (c == '\\') {
                c = *q++;
                if (c == 'n')
                    c = '\n';
                else if (c != '\\' && c != '"')
                    return false;
            }
            if (n + 1 >= sizeof value)
                return false;
            value[n++] = c;
        }
        value[n] = '\0';
        q++;
        if (strcmp(label, "le") == 0) {
            if (n >= sizeof s->le)
                return false;
            memcpy(s->le, value, n + 1);
        } else {
            size_t len = (size_t)(q - pair);
            if (glen + len + 2 >= sizeof s->group)
                return false;
            if (glen)
                s->group[glen++] = ',';
            memcpy(s->group + glen, pair, len);
            glen += len;
            s->group[glen] = '\0';
        }
        if (*q == ',')
            q++;
        else if (*q != '}')
            return false;
    }
    size_t len = (size_t)(q - start);
    if (len >= sizeof s->labels)
        return false;
    memcpy(s->labels, start, len);
    s->labels[len] = '\0';
    *p = q + 1;
    return true;
}

/* Every histogram series: buckets with le ascending, counts non-decreasing, a last +Inf
 * bucket equal to _count, and a _sum. */
static bool check_histograms(struct expo *e)
{
    for (unsigned i = 0; i < e->nsamples; i++) {
        const struct sample *first = &e->samples[i];
        if (!has_suffix(first->name, "_bucket"))
            continue;
        bool seen_before = false;
        for (unsigned j = 0; j < i; j++)
            seen_before |= e->samples[j].family == first->family &&
                           strcmp(e->samples[j].group, first->group) == 0 &&
                           strcmp(e->samples[j].name, first->name) == 0;
        if (seen_before)
            continue;
        double last_le = -INFINITY, last_count = 0, inf_count = -1, count = -1;
        bool has_sum = false;
        for (unsigned j = i; j < e->nsamples; j++) {
            const struct sample *s = &e->samples[j];
            if (s->family != first->family || strcmp(s->group, first->group) != 0)
                continue;
            if (strcmp(s->name, first->name) == 0) {
                double le;
                if (!read_value(s->le, &le) || isnan(le))
                    return fail(e, 0, "a bucket without a numeric le");
                if (le <= last_le || inf_count >= 0)
                    return fail(e, 0, "bucket le not ascending");
                if (s->value < last_count)
                    return fail(e, 0, "bucket counts not cumulative");
                last_le = le;
                last_count = s->value;
                if (isinf(le))
                    inf_count = s->value;
            } else if (has_suffix(s->name, "_count")) {
                count = s->value;
            } else {
                has_sum = true;
            }
        }
        if (inf_count < 0)
            return fail(e, 0, "a histogram without le=\"+Inf\"");
        if (inf_count != count)
            return fail(e, 0, "le=\"+Inf\" differs from _count");
        if (!has_sum)
            return fail(e, 0, "a histogram without _sum");
    }
    return true;
}

static bool expo_parse(struct expo *e, const char *text)
{
    memset(e, 0, sizeof *e);
    size_t lines = 1;
    for (const char *c = text; *c; c++)
        lines += *c == '\n';
    e->families = calloc(lines, sizeof *e->families);
    e->samples = calloc(lines, sizeof *e->samples);
    cr_assert(e->families && e->samples);
    size_t len = strlen(text);
    if (len == 0 || text[len - 1] != '\n')
        return fail(e, 0, "the text does not end in a newline");
    int open_family = -1; /* the family whose samples may follow */
    unsigned lineno = 0;
    for (const char *p = text; *p; p = strchr(p, '\n') + 1) {
        lineno++;
        char line[1024];
        size_t n = strcspn(p, "\n");
        if (n >= sizeof line)
            return fail(e, lineno, "line too long");
        memcpy(line, p, n);
        line[n] = '\0';
        if (n == 0)
            return fail(e, lineno, "empty line");
        if (line[0] == '#') {
            const char *q = line + 1;
            bool help = strncmp(q, " HELP ", 6) == 0, type = strncmp(q, " TYPE ", 6) == 0;
            if (!help && !type)
                continue; /* a plain comment */
            q += 6;
            char name[NAME_MAX_LEN];
            if (!read_name(&q, name, sizeof name, false) || *q++ != ' ')
                return fail(e, lineno, "bad HELP/TYPE line");
            int f = find_family(e, name);
            if (f >= 0 && (type ? e->families[f].type[0] != '\0' : e->families[f].has_help))
                return fail(e, lineno, "family declared twice");
            if (f < 0) {
                f = (int)e->nfamilies++;
                snprintf(e->families[f].name, NAME_MAX_LEN, "%s", name);
            } else if (f != open_family) {
                return fail(e, lineno, "HELP and TYPE of a family apart");
            }
            if (type) {
                static const char *const types[] = {"counter", "gauge", "histogram", "summary",
                                                    "untyped"};
                bool known = false;
                for (unsigned i = 0; i < 5; i++)
                    known |= strcmp(q, types[i]) == 0;
                if (!known)
                    return fail(e, lineno, "unknown TYPE");
                snprintf(e->families[f].type, sizeof e->families[f].type, "%s", q);
            } else {
                for (const char *h = q; *h; h++)
                    if (*h == '\\' && h[1] != '\\' && h[1] != 'n')
                        return fail(e, lineno, "bad escape in HELP");
                    else if (*h == '\\')
                        h++;
                e->families[f].has_help = true;
            }
            open_family = f;
            continue;
        }
        struct sample *s = &e->samples[e->nsamples];
        const char *q = line;
        if (!read_name(&q, s->name, sizeof s->name, false))
            return fail(e, lineno, "bad metric name");
        if (*q == '{' && !read_labels(&q, s))
            return fail(e, lineno, "bad labels");
        if (*q++ != ' ')
            return fail(e, lineno, "no space before the value");
        if (!read_value(q, &s->value))
            return fail(e, lineno, "bad value");
        bool bucket;
        int f = family_of(e, s->name, &bucket);
        if (f < 0 || e->families[f].type[0] == '\0')
            return fail(e, lineno, "a sample without a # TYPE before it");
        if (f != open_family)
            return fail(e, lineno, "a family's samples are not together");
        if (bucket != (s->le[0] != '\0'))
            return fail(e, lineno, "le on a non-bucket or a bucket without le");
        s->family = (unsigned)f;
        e->nsamples++;
    }
    return check_histograms(e);
}

static const struct sample *expo_find(const struct expo *e, const char *name, const char *labels)
{
    for (unsigned i = 0; i < e->nsamples; i++)
        if (strcmp(e->samples[i].name, name) == 0 && strcmp(e->samples[i].labels, labels) == 0)
            return &e->samples[i];
    return NULL;
}

static double expo_value(const struct expo *e, const char *name, const char *labels)
{
    const struct sample *s = expo_find(e, name, labels);
    cr_assert(s, "no sample %s{%s}", name, labels);
    return s->value;
}

/* ---- the parser fails on what the format forbids ---- */

static void expect_rejected(const char *text, const char *why)
{
    struct expo e;
    cr_expect_not(expo_parse(&e, text), "accepted (%s):\n%s", why, text);
    expo_free(&e);
}

Test(metrics, parser_rejects_malformed_expositions)
{
    struct expo e;
    const char *good = "# HELP a_total x\n# TYPE a_total counter\na_total 1\n"
                       "# TYPE h histogram\nh_bucket{r=\"x\",le=\"1\"} 1\n"
                       "h_bucket{r=\"x\",le=\"+Inf\"} 2\nh_sum{r=\"x\"} 0.5\nh_count{r=\"x\"} 2\n";
    cr_assert(expo_parse(&e, good), "%s", e.err);
    expo_free(&e);

    expect_rejected("a 1\n", "no TYPE");
    expect_rejected("# TYPE a gauge\n# TYPE a gauge\na 1\n", "declared twice");
    expect_rejected("# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n", "family split");
    expect_rejected("# TYPE 1a gauge\n1a 1\n", "bad name");
    expect_rejected("# TYPE a gauge\na{x=\"1\\t\"} 1\n", "bad escape");
    expect_rejected("# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n", "label twice");
    expect_rejected("# TYPE a gauge\na{x=1} 1\n", "unquoted label");
    expect_rejected("# TYPE a gauge\na one\n", "bad value");
    expect_rejected("# TYPE a gauge\na 1", "no final newline");
    expect_rejected("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                    "h_sum 0\nh_count 1\n",
                    "not cumulative");
    expect_rejected("# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
                    "h_bucket{le=\"+Inf\"} 1\nh_sum 0\nh_count 1\n",
                    "le descending");
    expect_rejected("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 0\nh_count 3\n",
                    "+Inf differs from count");
    expect_rejected("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 0\nh_count 2\n", "no +Inf");
}

/* ---- in-process: the exposition of a known segment ---- */

struct fixture {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
};

static void open_fixture(struct fixture *f)
{
    mg_test_tmpdir(f->dir, sizeof f->dir);
    snprintf(f->db, sizeof f->db, "%s/metrics.db", f->dir);
    cr_assert_eq(mg_test_make_db(f->db, false, NULL), 0);
    cr_assert(mg_test_ctx_open(&f->t, f->db));
}

static void close_fixture(struct fixture *f)
{
    mg_test_ctx_close(&f->t);
    mg_test_rmdir(f->dir);
}

static void get_metrics(struct fixture *f, struct expo *e)
{
    cr_assert_eq(mg_test_ctx_get(&f->t, "/metrics"), 200);
    cr_assert_str_eq(f->t.res.content_type, CONTENT_TYPE);
    cr_assert(expo_parse(e, f->t.res.body.data), "%s\n%s", e->err, f->t.res.body.data);
}

static unsigned route_id(const char *template)
{
    const char *names[MG_ROUTES_MAX];
    unsigned n = mg_route_names(names, MG_ROUTES_MAX);
    for (unsigned i = 0; i < n; i++)
        if (strcmp(names[i], template) == 0)
            return i;
    cr_assert_fail("no route %s", template);
    return 0;
}

Test(metrics, exposition_is_well_formed_and_lists_every_counter_route_and_state)
{
    struct fixture f;
    open_fixture(&f);
    struct expo e;
    get_metrics(&f, &e);
    cr_expect(f.t.res.no_store);

    for (int i = 0; i < MG_CTR_COUNT; i++) {
        char name[96], help[256];
        snprintf(name, sizeof name, "meshgate_%s_total", mg_counter_names[i]);
        int fam = find_family(&e, name);
        cr_expect(fam >= 0 && strcmp(e.families[fam].type, "counter") == 0, "%s", name);
        snprintf(help, sizeof help, "# HELP %s %s\n", name, mg_counter_help[i]);
        cr_expect(strstr(f.t.res.body.data, help), "no %s", help);
    }
    const char *routes[MG_ROUTES_MAX];
    unsigned nroutes = mg_route_names(routes, MG_ROUTES_MAX);
    for (unsigned i = 0; i < nroutes; i++) {
        char labels[LABELS_MAX_LEN];
        if (strcmp(routes[i], "(tunnel)") == 0) {
            /* Tunnels are not requests: a family of their own (issue 27, item 4). */
            cr_expect_null(strstr(f.t.res.body.data, "route=\"(tunnel)\""));
            cr_expect(expo_find(&e, "meshgate_upstream_tunnel_duration_seconds_count", ""));
            continue;
        }
        snprintf(labels, sizeof labels, "route=\"%s\"", routes[i]);
        cr_expect(expo_find(&e, "meshgate_request_duration_seconds_count", labels), "%s", labels);
        cr_expect(expo_find(&e, "meshgate_request_errors_total", labels), "%s", labels);
        cr_expect(expo_find(&e, "meshgate_request_duration_max_seconds", labels), "%s", labels);
    }
    double slots = 0;
    for (uint32_t s = 0; s < MG_SLOT_STATE_COUNT; s++) {
        char labels[64];
        snprintf(labels, sizeof labels, "state=\"%s\"", mg_slot_state_name(s));
        slots += expo_value(&e, "meshgate_worker_slots", labels);
    }
    cr_expect_eq(slots, f.t.seg.slot_count);
    /* The one slot is the worker answering this very request. */
    cr_expect_eq(expo_value(&e, "meshgate_worker_slots", "state=\"handling\""), 1);
    cr_expect_eq(expo_value(&e, "meshgate_workers_alive", ""), 1);

    double states = 0;
    for (uint32_t s = MG_SERVER_STARTING; s <= MG_SERVER_STOPPED; s++) {
        char labels[64];
        snprintf(labels, sizeof labels, "state=\"%s\"", mg_server_state_name(s));
        states += expo_value(&e, "meshgate_server_state", labels);
    }
    cr_expect_eq(states, 1, "exactly one server state is 1");

    static const char *const gauges[] = {
        "meshgate_workers",
        "meshgate_connections_open",
        "meshgate_uptime_seconds",
        "meshgate_generation",
        "meshgate_perf_mem_running",
        "meshgate_perf_mem_peak",
        "meshgate_perf_mem_cooldown_remaining_seconds",
        "meshgate_reach_cold_cap",
        "meshgate_reach_cold_in_flight",
        "meshgate_reach_cold_waiting",
        "meshgate_reach_cold_queue_max",
        "meshgate_reach_cold_peak",
        "meshgate_reach_cache_entries_ready",
    };
    for (unsigned i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
        int fam = find_family(&e, gauges[i]);
        cr_expect(fam >= 0 && strcmp(e.families[fam].type, "gauge") == 0, "%s", gauges[i]);
    }
    static const char *const counters[] = {
        "meshgate_perf_mem_admitted_total",        "meshgate_perf_mem_refused_busy_total",
        "meshgate_perf_mem_refused_cooling_total", "meshgate_perf_mem_reclaimed_total",
        "meshgate_reach_cold_acquired_total",      "meshgate_reach_cold_waited_total",
        "meshgate_reach_cold_refused_full_total",  "meshgate_reach_cold_refused_timeout_total",
        "meshgate_reach_cold_cancelled_total",     "meshgate_reach_cold_reclaimed_total",
        "meshgate_reach_cache_hits_total",         "meshgate_reach_cache_misses_total",
        "meshgate_reach_cache_coalesced_total",    "meshgate_reach_cache_stored_total",
        "meshgate_reach_cache_evicted_total",      "meshgate_reach_cache_too_large_total",
        "meshgate_reach_cache_takeovers_total",    "meshgate_reach_cache_reclaimed_total",
        "meshgate_reach_cache_relay_builds_total", "meshgate_reach_cache_relay_copies_total",
        "meshgate_request_errors_total",
    };
    for (unsigned i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        int fam = find_family(&e, counters[i]);
        cr_expect(fam >= 0 && strcmp(e.families[fam].type, "counter") == 0, "%s", counters[i]);
    }
    expo_free(&e);
    close_fixture(&f);
}

Test(metrics, histogram_sums_segment_buckets_into_le_boundaries)
{
    struct fixture f;
    open_fixture(&f);
    unsigned healthz = route_id("/api/healthz");
    /* 490 us lies in the segment bucket 480..511, which straddles le=0.0005: it is counted
     * under le=0.001. 40 days is past the last bounded bucket: +Inf only. */
    mg_route_record(&f.t.seg, healthz, 200, 100);
    mg_route_record(&f.t.seg, healthz, 200, 479);
    mg_route_record(&f.t.seg, healthz, 200, 490);
    mg_route_record(&f.t.seg, healthz, 503, 3000000);
    mg_route_record(&f.t.seg, healthz, 200, 40LL * 86400 * 1000000);
    struct expo e;
    get_metrics(&f, &e);
    const char *h = "meshgate_request_duration_seconds_bucket";
#define BUCKET(le) "route=\"/api/healthz\",le=\"" le "\""
    cr_expect_eq(expo_value(&e, h, BUCKET("0.0005")), 2);
    cr_expect_eq(expo_value(&e, h, BUCKET("0.001")), 3);
    cr_expect_eq(expo_value(&e, h, BUCKET("2.5")), 3);
    cr_expect_eq(expo_value(&e, h, BUCKET("5")), 4);
    cr_expect_eq(expo_value(&e, h, BUCKET("10")), 4);
    cr_expect_eq(expo_value(&e, h, BUCKET("+Inf")), 5);
#undef BUCKET
    const char *route = "route=\"/api/healthz\"";
    cr_expect_eq(expo_value(&e, "meshgate_request_duration_seconds_count", route), 5);
    double sum = expo_value(&e, "meshgate_request_duration_seconds_sum", route);
    cr_expect(fabs(sum - (100 + 479 + 490 + 3000000 + 40.0 * 86400 * 1000000) / 1e6) < 1e-3,
              "sum %f", sum);
    cr_expect_eq(expo_value(&e, "meshgate_request_errors_total", route), 1);
    cr_expect_eq(expo_value(&e, "meshgate_request_duration_max_seconds", route), 40.0 * 86400);
    expo_free(&e);
    close_fixture(&f);
}

Test(metrics, label_values_are_escaped)
{
    struct fixture f;
    open_fixture(&f);
    /* The test owns this segment: give a route a name with every character to escape. */
    struct mg_route_stats *r = &f.t.seg.routes[route_id("(static)")];
    snprintf(r->name, sizeof r->name, "a\"b\\c\nd");
    struct expo e;
    get_metrics(&f, &e);
    cr_expect(
        strstr(f.t.res.body.data, "meshgate_request_errors_total{route=\"a\\\"b\\\\c\\nd\"} 0\n"),
        "%s", f.t.res.body.data);
    cr_expect(
        expo_find(&e, "meshgate_request_duration_seconds_count", "route=\"a\\\"b\\\\c\\nd\""));
    expo_free(&e);
    close_fixture(&f);
}

Test(metrics, build_info_names_the_version_and_the_commit)
{
    struct fixture f;
    open_fixture(&f);
    struct expo e;
    get_metrics(&f, &e);
    char labels[LABELS_MAX_LEN];
    snprintf(labels, sizeof labels, "version=\"%s\",commit=\"%s\"", f.t.seg.header->version,
             mg_build_commit());
    cr_expect_eq(expo_value(&e, "meshgate_build_info", labels), 1, "%s", f.t.res.body.data);
    expo_free(&e);
    close_fixture(&f);
}

Test(metrics, database_up_is_1_with_row_counts_when_the_database_answers)
{
    struct fixture f;
    open_fixture(&f);
    struct expo e;
    get_metrics(&f, &e);
    cr_expect_eq(expo_value(&e, "meshgate_database_up", ""), 1);
    int fam = find_family(&e, "meshgate_database_up");
    cr_expect(fam >= 0 && strcmp(e.families[fam].type, "gauge") == 0);
    cr_expect(expo_find(&e, "meshgate_database_rows", "table=\"transmissions\""));
    cr_expect(expo_find(&e, "meshgate_database_rows", "table=\"observations\""));
    expo_free(&e);
    close_fixture(&f);
}

/* The alert "database unreachable" reads this gauge: a database held by a writer past the
 * busy timeout is 0, and no made-up row counts are shown meanwhile. */
Test(metrics, database_up_is_0_while_the_database_does_not_answer)
{
    struct fixture f;
    open_fixture(&f);
    sqlite3 *writer;
    cr_assert_eq(mg_test_sqlite_open(f.db, &writer), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(writer, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    struct expo e;
    get_metrics(&f, &e);
    cr_expect_eq(expo_value(&e, "meshgate_database_up", ""), 0);
    cr_expect_null(expo_find(&e, "meshgate_database_rows", "table=\"transmissions\""));
    expo_free(&e);
    sqlite3_exec(writer, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(writer);
    close_fixture(&f);
}

/* ---- end to end: the real binary and its worker processes ---- */

static void scrape(const struct mg_test_server *s, struct expo *e)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(s->port, "/metrics", NULL, &r));
    cr_assert_eq(r.status, 200);
    char type[128];
    cr_assert(mg_test_header(&r, "Content-Type", type, sizeof type));
    cr_expect_str_eq(type, CONTENT_TYPE);
    cr_assert(expo_parse(e, r.body), "%s\n%s", e->err, r.body);
    mg_test_response_free(&r);
}

static void get_status(const struct mg_test_server *s, const char *target, int status)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(s->port, target, NULL, &r), "GET %s", target);
    cr_assert_eq(r.status, status, "GET %s", target);
    mg_test_response_free(&r);
}

Test(metrics, counters_move_with_traffic_across_workers)
{
    const char *env[] = {"MESHGATE_WORKERS=3", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct expo before, after;
    /* Workers register in their slots just after the master reports running. */
    int64_t deadline = mg_test_now_ms() + 5000;
    for (;;) {
        scrape(&s, &before);
        if (expo_value(&before, "meshgate_workers_alive", "") == 3 || mg_test_now_ms() > deadline)
            break;
        expo_free(&before);
        mg_test_sleep_ms(50);
    }
    cr_expect_eq(expo_value(&before, "meshgate_workers", ""), 3);
    cr_expect_eq(expo_value(&before, "meshgate_workers_alive", ""), 3);
    cr_expect_eq(expo_value(&before, "meshgate_server_state", "state=\"running\""), 1);

    enum { N = 25 };
    for (int i = 0; i < N; i++)
        get_status(&s, "/api/healthz", 200);
    scrape(&s, &after);

    const char *healthz = "route=\"/api/healthz\"";
    double grew = expo_value(&after, "meshgate_requests_total", "") -
                  expo_value(&before, "meshgate_requests_total", "");
    cr_expect_geq(grew, N, "requests_total grew by %f", grew);
    cr_expect_eq(expo_value(&after, "meshgate_request_duration_seconds_count", healthz) -
                     expo_value(&before, "meshgate_request_duration_seconds_count", healthz),
                 N);
    cr_expect_geq(expo_value(&after, "meshgate_responses_2xx_total", "") -
                      expo_value(&before, "meshgate_responses_2xx_total", ""),
                  N);
    cr_expect_gt(expo_value(&after, "meshgate_connections_accepted_total", ""),
                 expo_value(&before, "meshgate_connections_accepted_total", ""));
    expo_free(&before);
    expo_free(&after);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(metrics, a_404_moves_responses_4xx)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    struct expo before, after;
    scrape(&s, &before);
    get_status(&s, "/api/no-such-endpoint", 404);
    scrape(&s, &after);
    cr_expect_eq(expo_value(&after, "meshgate_responses_4xx_total", "") -
                     expo_value(&before, "meshgate_responses_4xx_total", ""),
                 1);
    const char *not_found = "route=\"(not found)\"";
    cr_expect_eq(expo_value(&after, "meshgate_request_duration_seconds_count", not_found) -
                     expo_value(&before, "meshgate_request_duration_seconds_count", not_found),
                 1);
    expo_free(&before);
    expo_free(&after);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}
