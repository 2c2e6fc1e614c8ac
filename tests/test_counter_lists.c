/* SPDX-License-Identifier: ISC */
/*
 * Each gate's counters are listed once (MG_FIFO_COUNTER_LIST, MG_DIAG_COUNTER_LIST,
 * MG_CACHE_COUNTER_LIST, MG_CLIENT_COUNTER_LIST) and read with one read function (issue 12, item
 * 4): every counter of every list appears in /metrics, /api/perf, /server-status and both forms of
 * meshgate-shm. A reader that wrote its own copy of a list, and so misses a counter added to it,
 * fails here. So does one that misses a shared table or one of its numbers (MG_TABLE_LIST,
 * MG_TABLE_STAT_LIST).
 */
#include "harness.h"

#include "client_limit.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "gates.h"
#include "result_cache.h"
#include "table_stats.h"
#include "upstream_gate.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(counter_lists, .timeout = 120);

/* One counter of a list: its field (meshgate-shm, /metrics) and its JSON key. */
struct counter {
    const char *field;
    const char *json;
};

#define AS_COUNTER(field, json, what) {#field, json},
static const struct counter fifo_counters[] = {MG_FIFO_COUNTER_LIST(AS_COUNTER)};
static const struct counter diag_counters[] = {MG_DIAG_COUNTER_LIST(AS_COUNTER)};
static const struct counter cache_counters[] = {MG_CACHE_COUNTER_LIST(AS_COUNTER)};
static const struct counter client_counters[] = {MG_CLIENT_COUNTER_LIST(AS_COUNTER)};
static const struct counter breaker_counters[] = {MG_BREAKER_COUNTER_LIST(AS_COUNTER)};
static const struct counter conn_counters[] = {MG_CONN_COUNTER_LIST(AS_COUNTER)};
#undef AS_COUNTER
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The part of text from the first `from` to the next `to` after it (to the end without one),
 * malloc'ed; fails the test when `from` is absent. */
static char *section(const char *text, const char *from, const char *to)
{
    const char *start = text ? strstr(text, from) : NULL;
    cr_assert_not_null(start, "no %s in:\n%s", from, text ? text : "(nothing)");
    const char *end = strstr(start + strlen(from), to);
    size_t len = end ? (size_t)(end - start) : strlen(start);
    char *out = malloc(len + 1);
    cr_assert_not_null(out);
    memcpy(out, start, len);
    out[len] = '\0';
    return out;
}

static char *get_body(int port, const char *target)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(port, target, NULL, &r), "GET %s", target);
    cr_assert_eq(r.status, 200, "GET %s: %d %s", target, r.status, r.body);
    return r.body; /* the caller frees it */
}

static char *tool(const struct mg_test_server *s, const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/meshgate-shm' --name '%s' %s 2>&1", MESHGATE_BUILD_DIR,
             s->shm_name, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "%s", cmd);
    size_t cap = 1 << 20, n = 0;
    char *out = malloc(cap);
    cr_assert_not_null(out);
    for (size_t got; n < cap - 1 && (got = fread(out + n, 1, cap - 1 - n, p)) > 0;)
        n += got;
    out[n] = '\0';
    cr_assert_eq(pclose(p), 0, "%s: %s", cmd, out);
    return out;
}

/* Every counter's name, as name_of makes it, is in text. */
static void expect_all(const char *where, const char *text, const struct counter *c, size_t n,
                       const char *format, bool json_key, const char *acquired_as)
{
    for (size_t i = 0; i < n; i++) {
        const char *name = json_key ? c[i].json : c[i].field;
        if (acquired_as && strcmp(c[i].field, "acquired") == 0)
            name = acquired_as;
        char want[128];
        snprintf(want, sizeof want, format, name);
        if (!json_key && format[0] == '%' && format[1] == 's' && format[2] == ' ') {
            /* meshgate-shm's text: the field with its '_' as spaces. */
            for (char *u = strchr(want, '_'); u; u = strchr(u, '_'))
                *u = ' ';
        }
        cr_expect(strstr(text, want), "%s lacks %s (counter %s):\n%s", where, want, c[i].field,
                  text);
    }
}

#define LIST(a) a, COUNT(a)

/* Where a list's counters must appear: in the part of an output from `from` to `to`, each as
 * format makes it of its JSON key (json_key) or its field; acquired_as renames "acquired". */
struct place {
    int output; /* enum below */
    const char *from, *to;
    const struct counter *list;
    size_t n;
    const char *format;
    bool json_key;
    const char *acquired_as;
};

enum { METRICS, PERF, STATUS, SHM_TEXT, SHM_JSON, OUTPUTS };

static const struct place places[] = {
    {METRICS, "", "\x01", LIST(fifo_counters), "\nmeshgate_reach_cold_%s_total ", false,
     "acquired"},
    {METRICS, "", "\x01", LIST(fifo_counters), "\nmeshgate_anon_line_%s_total ", false, "admitted"},
    {METRICS, "", "\x01", LIST(diag_counters), "\nmeshgate_perf_mem_%s_total ", false, NULL},
    {METRICS, "", "\x01", LIST(cache_counters), "\nmeshgate_reach_cache_%s_total ", false, NULL},
    {METRICS, "", "\x01", LIST(client_counters), "\nmeshgate_anon_rate_%s_total ", false, NULL},
    {PERF, "\"anonLine\":{", "\"perfMem\":", LIST(fifo_counters), "\"%s\":", true, "admitted"},
    {PERF, "\"perfMem\":{", "\"reachCold\":", LIST(diag_counters), "\"%s\":", true, NULL},
    {PERF, "\"reachCold\":{", "\"holders\":", LIST(fifo_counters), "\"%s\":", true, "acquired"},
    {PERF, "\"rateLimit\":{", "}", LIST(client_counters), "\"%s\":", true, NULL},
    {PERF, "\"results\":{", "}", LIST(cache_counters), "\"%s\":", true, NULL},
    {STATUS, "<tr><td>cold reach builds</td><td>acquired", "</tr>", LIST(fifo_counters), "%s ",
     true, NULL},
    {STATUS, "<tr><td>anonymous heavy requests</td><td>acquired", "</tr>", LIST(fifo_counters),
     "%s ", true, NULL},
    {STATUS, "<tr><td>reach result cache</td>", "</tr>", LIST(cache_counters), "%s ", true, NULL},
    {STATUS, "<tr><td>per-client rate</td>", "</tr>", LIST(client_counters), "%s ", true, NULL},
    {STATUS, "<tr><td>memory breakdown</td>", "</tr>", LIST(diag_counters), "%s ", true, NULL},
    {SHM_TEXT, "  perf_mem (", "  reach_cold (", LIST(diag_counters), "%s ", false, NULL},
    {SHM_TEXT, "  reach_cold (", "    cache:", LIST(fifo_counters), "%s ", false, NULL},
    {SHM_TEXT, "    cache:", "\n", LIST(cache_counters), "%s ", false, NULL},
    {SHM_TEXT, "  anon_line (", "  anon_rate", LIST(fifo_counters), "%s ", false, "admitted"},
    {SHM_TEXT, "  anon_rate (", "\n", LIST(client_counters), "%s ", false, NULL},
    {SHM_JSON, "\"perf_mem\":{", "\"reach_cold\":", LIST(diag_counters), "\"%s\":", false, NULL},
    {SHM_JSON, "\"reach_cold\":{", "\"cache\":", LIST(fifo_counters), "\"%s\":", false, "acquired"},
    {SHM_JSON, "\"cache\":{", "}", LIST(cache_counters), "\"%s\":", false, NULL},
    {SHM_JSON, "\"anon_line\":{", "\"anon_rate\"", LIST(fifo_counters), "\"%s\":", false,
     "admitted"},
    {SHM_JSON, "\"anon_rate\":{", "}", LIST(client_counters), "\"%s\":", false, NULL},
    {METRICS, "", "\x01", LIST(conn_counters), "\nmeshgate_conn_cap_%s_total ", false, NULL},
    {PERF, "\"connCap\":{", "}", LIST(conn_counters), "\"%s\":", true, NULL},
    {STATUS, "<tr><td>connections per client</td>", "</tr>", LIST(conn_counters), "%s ", true,
     NULL},
    {SHM_TEXT, "  conn_cap (", "\n", LIST(conn_counters), "%s ", false, NULL},
    {SHM_JSON, "\"conn_cap\":{", "}", LIST(conn_counters), "\"%s\":", false, NULL},
};

/* With the upstream on: its gate's and its breaker's counters (the upstream need not run). */
static const struct place upstream_places[] = {
    {METRICS, "", "\x01", LIST(fifo_counters), "\nmeshgate_upstream_gate_%s_total ", false,
     "admitted"},
    {METRICS, "", "\x01", LIST(breaker_counters), "\nmeshgate_upstream_breaker_%s_total ", false,
     NULL},
    {PERF, "\"upstream\":{", "\"holders\":", LIST(fifo_counters), "\"%s\":", true, "admitted"},
    {PERF, "\"upstream\":{", "\"holders\":", LIST(breaker_counters), "\"%s\":", true, NULL},
    {STATUS, "<tr><td>upstream</td><td>acquired", "</tr>", LIST(fifo_counters), "%s ", true, NULL},
    {STATUS, "<tr><td>upstream breaker</td>", "</tr>", LIST(breaker_counters), "%s ", true, NULL},
    {SHM_TEXT, "  upstream 127.0.0.1:", "websockets", LIST(fifo_counters), "%s ", false,
     "admitted"},
    {SHM_TEXT, "    breaker ", "websockets", LIST(breaker_counters), "%s ", false, NULL},
    {SHM_JSON, "\"upstream\":{", "\"websockets\"", LIST(fifo_counters), "\"%s\":", false,
     "admitted"},
    {SHM_JSON, "\"upstream\":{", "\"websockets\"", LIST(breaker_counters), "\"breaker_%s\":", false,
     NULL},
};

/* Starts a server with env, reads every output once and checks each place in them. */
static void check_places(const char *const *env, const struct place *list, size_t n)
{
    static const char *names[OUTPUTS] = {"/metrics", "/api/perf", "/server-status", "meshgate-shm",
                                         "meshgate-shm --json"};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    char *out[OUTPUTS] = {get_body(s.port, "/metrics"), get_body(s.port, "/api/perf"),
                          get_body(s.port, "/server-status"), tool(&s, ""), tool(&s, "--json")};
    for (size_t i = 0; i < n; i++) {
        const struct place *p = &list[i];
        char *part = section(out[p->output], p->from, p->to);
        expect_all(names[p->output], part, p->list, p->n, p->format, p->json_key, p->acquired_as);
        free(part);
    }
    for (int i = 0; i < OUTPUTS; i++)
        free(out[i]);
    cr_expect_eq(mg_test_server_stop(&s, 20000), 0);
}

Test(counter_lists, every_listed_counter_appears_in_every_reader)
{
    check_places(NULL, places, COUNT(places));
}

Test(counter_lists, every_upstream_counter_appears_in_every_reader)
{
    char upstream[64];
    snprintf(upstream, sizeof upstream, "MESHGATE_UPSTREAM=127.0.0.1:%d", mg_test_free_port());
    const char *env[] = {upstream, NULL};
    check_places(env, upstream_places, COUNT(upstream_places));
}

/* Every row of the gate table (shm/gates.h) has a place in every reader, above: the place's
 * format (/metrics) or where it starts (the others). A row added to the table without its
 * readers, or without its places here, fails. */
static const char *const row_places[MG_GATE_ROWS][OUTPUTS] = {
    [MG_GATE_ROW_conn_cap] = {"\nmeshgate_conn_cap_%s_total ", "\"connCap\":{",
                              "<tr><td>connections per client</td>", "  conn_cap (",
                              "\"conn_cap\":{"},
    [MG_GATE_ROW_rate_limit] = {"\nmeshgate_anon_rate_%s_total ", "\"rateLimit\":{",
                                "<tr><td>per-client rate</td>", "  anon_rate (", "\"anon_rate\":{"},
    [MG_GATE_ROW_anon_line] = {"\nmeshgate_anon_line_%s_total ", "\"anonLine\":{",
                               "<tr><td>anonymous heavy requests</td><td>acquired", "  anon_line (",
                               "\"anon_line\":{"},
    [MG_GATE_ROW_cold] = {"\nmeshgate_reach_cold_%s_total ", "\"reachCold\":{",
                          "<tr><td>cold reach builds</td><td>acquired", "  reach_cold (",
                          "\"reach_cold\":{"},
    [MG_GATE_ROW_diag] = {"\nmeshgate_perf_mem_%s_total ", "\"perfMem\":{",
                          "<tr><td>memory breakdown</td>", "  perf_mem (", "\"perf_mem\":{"},
    [MG_GATE_ROW_upstream] = {"\nmeshgate_upstream_gate_%s_total ", "\"upstream\":{",
                              "<tr><td>upstream</td><td>acquired",
                              "  upstream 127.0.0.1:", "\"upstream\":{"},
    [MG_GATE_ROW_breaker] = {"\nmeshgate_upstream_breaker_%s_total ", "\"upstream\":{",
                             "<tr><td>upstream breaker</td>", "    breaker ", "\"upstream\":{"},
};

static bool has_place(const struct place *list, size_t n, int output, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (list[i].output == output &&
            strcmp(output == METRICS ? list[i].format : list[i].from, key) == 0)
            return true;
    return false;
}

Test(counter_lists, every_gate_of_the_table_has_a_place_in_every_reader)
{
    static const char *names[OUTPUTS] = {"/metrics", "/api/perf", "/server-status", "meshgate-shm",
                                         "meshgate-shm --json"};
    for (unsigned r = 0; r < MG_GATE_ROWS; r++)
        for (int o = 0; o < OUTPUTS; o++) {
            const char *key = row_places[r][o];
            cr_expect(key && (has_place(places, COUNT(places), o, key) ||
                              has_place(upstream_places, COUNT(upstream_places), o, key)),
                      "gate %s has no place in %s", mg_gates[r].name, names[o]);
        }
}

/* ---- every shared table's numbers (table_stats.h), in every output ------------------------- */

struct table_stat {
    const char *field, *json;
};
#define AS_TABLE_STAT(field, json, type, what) {#field, json},
static const struct table_stat table_stats[] = {MG_TABLE_STAT_LIST(AS_TABLE_STAT)};
#undef AS_TABLE_STAT

/* Each number of each table in the object that follows "name": in text (a JSON output). */
static void expect_table_objects(const char *where, const char *text, bool json_key)
{
    for (int t = 0; t < MG_TABLE_COUNT; t++) {
        char from[64];
        snprintf(from, sizeof from, "\"%s\":{", mg_table_names[t]);
        char *part = section(text, from, "}");
        for (size_t i = 0; i < COUNT(table_stats); i++) {
            char want[96];
            snprintf(want, sizeof want,
                     "\"%s\":", json_key ? table_stats[i].json : table_stats[i].field);
            cr_expect(strstr(part, want), "%s: table %s lacks %s: %s", where, mg_table_names[t],
                      want, part);
        }
        free(part);
    }
}

Test(counter_lists, every_shared_table_reports_every_number_in_every_reader)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    char *metrics = get_body(s.port, "/metrics"), *perf = get_body(s.port, "/api/perf"),
         *status = get_body(s.port, "/server-status"), *text = tool(&s, ""),
         *json = tool(&s, "--json");
    char *perf_tables = section(perf, "\"tables\":{", "\"workers\":");
    expect_table_objects("/api/perf", perf_tables, true);
    char *json_tables = section(json, "\"tables\":{", "\"workers\":");
    expect_table_objects("meshgate-shm --json", json_tables, false);
    char *status_tables = section(status, "<table id=\"tables\">", "</table>");
    char *text_tables = section(text, "\nshared tables\n", "\n\n");
    for (size_t i = 0; i < COUNT(table_stats); i++) {
        char want[128];
        snprintf(want, sizeof want, "<th>%s</th>", table_stats[i].json);
        cr_expect(strstr(status_tables, want), "/server-status lacks %s: %s", want, status_tables);
    }
    for (int t = 0; t < MG_TABLE_COUNT; t++) {
        const char *name = mg_table_names[t];
        char want[160];
        snprintf(want, sizeof want, "<tr><td>%s</td>", name);
        cr_expect(strstr(status_tables, want), "/server-status lacks %s", want);
        snprintf(want, sizeof want, "\n  %s:", name);
        char *line = section(text_tables, want, "\n  ");
        for (size_t i = 0; i < COUNT(table_stats); i++) {
            snprintf(want, sizeof want, "meshgate_table_%s{table=\"%s\"} ", table_stats[i].field,
                     name);
            cr_expect(strstr(metrics, want), "/metrics lacks %s", want);
            snprintf(want, sizeof want, " %s ", table_stats[i].field);
            cr_expect(strstr(line, want), "meshgate-shm lacks %s of %s: %s", want, name, line);
        }
        free(line);
    }
    free(perf_tables);
    free(json_tables);
    free(status_tables);
    free(text_tables);
    free(metrics);
    free(perf);
    free(status);
    free(text);
    free(json);
    cr_expect_eq(mg_test_server_stop(&s, 20000), 0);
}
