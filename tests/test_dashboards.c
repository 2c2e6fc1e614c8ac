/* SPDX-License-Identifier: ISC */
/*
 * The operator's files in etc/grafana and etc/prometheus: the dashboard is strict JSON with a
 * query in every panel, every meshgate_* name the dashboard, the alert rules, their unit tests
 * and the scrape example mention is a series that a real /metrics answer has, and promtool
 * accepts the rules, runs their unit tests and checks the scrape example (skipped with a
 * message when promtool is not installed; PROMTOOL=path names one elsewhere). Without promtool,
 * every alert of the rules still has to have a unit test that fires it and one that does not.
 */
#include "harness.h"
#include "jsoncheck.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(dashboards, .timeout = 60);

#define DASHBOARD MESHGATE_SOURCE_DIR "/etc/grafana/meshgate.json"
#define RULES MESHGATE_SOURCE_DIR "/etc/prometheus/meshgate-rules.yml"
#define RULES_TEST MESHGATE_SOURCE_DIR "/etc/prometheus/meshgate-rules.test.yml"
#define SCRAPE MESHGATE_SOURCE_DIR "/etc/prometheus/scrape.yml"

Test(dashboards, dashboard_is_strict_json_with_a_query_in_every_panel)
{
    char *text = mg_test_read_file(DASHBOARD);
    cr_assert(text, "cannot read %s", DASHBOARD);
    const char *start = json_ws(text);
    const char *end = json_skip_value(start, 0);
    cr_assert(end, "%s is not strict JSON", DASHBOARD);
    cr_assert_eq(*json_ws(end), '\0', "%s: text after the JSON value", DASHBOARD);
    cr_expect(json_str_at_eq(start, "uid", "meshgate"));
    cr_expect(json_str_at_eq(start, "title", "meshgate"));

    long panels = 0, queries = 0;
    for (const char *p = json_first(json_at(start, "panels")); p; p = json_next(p)) {
        panels++;
        char *type = json_str_at(p, "type");
        char *title = json_str_at(p, "title");
        cr_assert(type && title, "panel %ld has no type or title", panels);
        if (strcmp(type, "row") != 0) {
            long n = json_length(json_at(p, "targets"));
            cr_expect_gt(n, 0, "panel \"%s\" has no query", title);
            for (const char *t = json_first(json_at(p, "targets")); t; t = json_next(t)) {
                char *expr = json_str_at(t, "expr");
                cr_expect(expr && (strstr(expr, "meshgate_") || strstr(expr, "up{")),
                          "panel \"%s\": a target without a meshgate expression", title);
                queries += expr != NULL;
                free(expr);
            }
        }
        free(type);
        free(title);
    }
    cr_expect_geq(panels, 10, "%ld panels", panels);
    cr_expect_geq(queries, 20, "%ld queries", queries);
    free(text);
}

/* ---- every name exists in /metrics ---- */

struct names {
    char (*v)[128];
    size_t n;
};

static bool names_has(const struct names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return true;
    return false;
}

static void names_add(struct names *s, const char *name, size_t len)
{
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%.*s", (int)(len < sizeof tmp - 1 ? len : sizeof tmp - 1), name);
    if (names_has(s, tmp))
        return;
    s->v = realloc(s->v, (s->n + 1) * sizeof *s->v);
    memcpy(s->v[s->n++], tmp, sizeof tmp);
}

static bool metric_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == ':';
}

/* Every word that starts with meshgate_ (a metric name in PromQL, a series in a test). */
static void names_in_text(const char *text, struct names *out)
{
    for (const char *p = text; (p = strstr(p, "meshgate_")) != NULL;) {
        bool word_start = p == text || !metric_char(p[-1]);
        const char *e = p;
        while (metric_char(*e))
            e++;
        if (word_start)
            names_add(out, p, (size_t)(e - p));
        p = e;
    }
}

/* The sample names of an exposition: each line that is not a comment, up to '{' or ' '. */
static void names_in_exposition(const char *body, struct names *out)
{
    for (const char *line = body; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        if (len && line[0] != '#')
            names_add(out, line, strcspn(line, "{ "));
        line += len + (eol != NULL);
    }
}

Test(dashboards, every_metric_the_dashboard_and_rules_name_exists_in_a_real_metrics_answer)
{
    /* A replica (docs/scale-out.md): /metrics then has the replica's families too. */
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL,
                                   (const char *[]){"MESHGATE_REPLICA_MAX_LAG_MS=600000", NULL}));
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/metrics", NULL, &r));
    cr_assert_eq(r.status, 200);
    struct names exposed = {0};
    names_in_exposition(r.body, &exposed);
    mg_test_response_free(&r);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
    cr_assert_gt(exposed.n, 50, "only %zu series names in /metrics", exposed.n);
    cr_assert(names_has(&exposed, "meshgate_database_up"));

    const char *files[] = {DASHBOARD, RULES, RULES_TEST, SCRAPE};
    size_t checked = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char *text = mg_test_read_file(files[f]);
        cr_assert(text, "cannot read %s", files[f]);
        struct names named = {0};
        names_in_text(text, &named);
        for (size_t i = 0; i < named.n; i++)
            cr_expect(names_has(&exposed, named.v[i]), "%s names %s, which /metrics does not have",
                      strrchr(files[f], '/') + 1, named.v[i]);
        checked += named.n;
        free(named.v);
        free(text);
    }
    cr_expect_gt(checked, 40, "only %zu names checked", checked);
    free(exposed.v);
}

/* The names check itself: a made-up name is caught, a prefix of a real one is not taken. */
Test(dashboards, names_are_whole_words)
{
    struct names named = {0};
    names_in_text("rate(meshgate_requests_total[5m]) / x_meshgate_no + meshgate_nope", &named);
    cr_assert_eq(named.n, 2);
    cr_expect_str_eq(named.v[0], "meshgate_requests_total");
    cr_expect_str_eq(named.v[1], "meshgate_nope");
    free(named.v);
}

/* The parts of meshgate an operator watches, each on the dashboard: the pass-through (breaker,
 * 502/504, gate refusals, tunnels), replicas (lag), workers (stalls, forced locks) and the
 * shared tables; and alerts for an open breaker and a lagging replica. */
Test(dashboards, the_dashboard_and_the_alerts_cover_the_pass_through_replicas_and_workers)
{
    static const char *const watched[] = {
        "meshgate_upstream_breaker_open",
        "meshgate_upstream_502_total",
        "meshgate_upstream_504_total",
        "meshgate_upstream_gate_refused_full_total",
        "meshgate_upstream_gate_refused_timeout_total",
        "meshgate_upstream_tunnels_open",
        "meshgate_upstream_tunnels_refused_total",
        "meshgate_replica_lag_seconds",
        "meshgate_worker_stalls_total",
        "meshgate_locks_forced_total",
        "meshgate_reach_cache_relay_builds_total",
        "meshgate_reach_cache_relay_copies_total",
    };
    char *text = mg_test_read_file(DASHBOARD);
    cr_assert(text);
    struct names named = {0};
    names_in_text(text, &named);
    for (size_t i = 0; i < sizeof watched / sizeof watched[0]; i++)
        cr_expect(names_has(&named, watched[i]), "no dashboard panel shows %s", watched[i]);
    free(named.v);
    free(text);

    char *rules = mg_test_read_file(RULES);
    cr_assert(rules);
    cr_expect(strstr(rules, "expr: meshgate_upstream_breaker_open{"), "no alert on the breaker");
    cr_expect(strstr(rules, "meshgate_replica_lag_seconds{"), "no alert on replica lag");
    free(rules);
}

/* ---- alert unit tests ---- */

/* The name after "key: " on a line (trimmed), or NULL. */
static bool value_after(const char *line, size_t len, const char *key, char *out, size_t cap)
{
    size_t k = strlen(key);
    size_t i = strspn(line, " -");
    if (i + k > len || strncmp(line + i, key, k) != 0)
        return false;
    i += k;
    i += strspn(line + i, " ");
    size_t n = 0;
    while (i + n < len && (isalnum((unsigned char)line[i + n]) || line[i + n] == '_'))
        n++;
    snprintf(out, cap, "%.*s", (int)n, line + i);
    return n > 0;
}

struct alert_cases {
    struct names names; /* the rules' alerts, in order */
    bool fires[64], quiet[64];
};

static void read_alerts(struct alert_cases *a, const char *rules, const char *tests)
{
    memset(a, 0, sizeof *a);
    char name[128];
    for (const char *line = rules; *line;) {
        size_t len = strcspn(line, "\n");
        if (value_after(line, len, "alert:", name, sizeof name))
            names_add(&a->names, name, strlen(name));
        line += len + (line[len] != '\0');
    }
    cr_assert_leq(a->names.n, 64);
    /* "alertname: X" and, on the next line, "exp_alerts: []" (quiet) or "exp_alerts:" and a
     * list (fires). */
    for (const char *line = tests; *line;) {
        size_t len = strcspn(line, "\n");
        const char *next = line + len + (line[len] != '\0');
        if (value_after(line, len, "alertname:", name, sizeof name)) {
            size_t i = 0;
            while (i < a->names.n && strcmp(a->names.v[i], name) != 0)
                i++;
            cr_expect_lt(i, a->names.n, "the unit tests name %s, which no rule defines", name);
            const char *exp = next + strspn(next, " ");
            cr_expect(strncmp(exp, "exp_alerts:", 11) == 0, "alertname %s: no exp_alerts after it",
                      name);
            const char *value = exp + 11 + strspn(exp + 11, " ");
            if (i < a->names.n && strncmp(exp, "exp_alerts:", 11) == 0) {
                if (strncmp(value, "[]", 2) == 0)
                    a->quiet[i] = true;
                else
                    a->fires[i] = true;
            }
        }
        line = next;
    }
}

Test(dashboards, every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not)
{
    char *rules = mg_test_read_file(RULES);
    char *tests = mg_test_read_file(RULES_TEST);
    cr_assert(rules && tests);
    struct alert_cases a;
    read_alerts(&a, rules, tests);
    cr_expect_geq(a.names.n, 12, "only %zu alerts in %s", a.names.n, RULES);
    for (size_t i = 0; i < a.names.n; i++) {
        cr_expect(a.fires[i], "%s: no unit test shows it firing (exp_alerts listing it)",
                  a.names.v[i]);
        cr_expect(a.quiet[i], "%s: no unit test shows it quiet (exp_alerts: [])", a.names.v[i]);
    }
    free(a.names.v);
    free(rules);
    free(tests);
}

/* The check itself: an alert with only a firing case, or none, is caught. */
Test(dashboards, an_alert_without_a_quiet_case_is_caught)
{
    struct alert_cases a;
    read_alerts(&a, "  - alert: A\n    expr: x\n  - alert: B\n    expr: y\n  - alert: C\n",
                "    alert_rule_test:\n      - eval_time: 1m\n        alertname: A\n"
                "        exp_alerts:\n          - exp_labels: {}\n"
                "      - eval_time: 2m\n        alertname: A\n        exp_alerts: [] # quiet\n"
                "      - eval_time: 1m\n        alertname: B\n        exp_alerts:\n"
                "          - exp_labels: {}\n");
    cr_assert_eq(a.names.n, 3);
    cr_expect(a.fires[0] && a.quiet[0]);
    cr_expect(a.fires[1] && !a.quiet[1]);
    cr_expect(!a.fires[2] && !a.quiet[2]);
    free(a.names.v);
}

/* ---- promtool ---- */

static bool find_promtool(char *path, size_t cap)
{
    const char *env = getenv("PROMTOOL");
    if (env && *env) {
        snprintf(path, cap, "%s", env);
        return access(path, X_OK) == 0;
    }
    const char *dirs[] = {"/usr/bin", "/usr/local/bin", "/bin"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(path, cap, "%s/promtool", dirs[i]);
        if (access(path, X_OK) == 0)
            return true;
    }
    return false;
}

Test(dashboards, promtool_accepts_the_rules_their_unit_tests_and_the_scrape_example)
{
    char promtool[512];
    if (!find_promtool(promtool, sizeof promtool))
        cr_skip_test("promtool is not installed (Debian: apt-get install prometheus, or "
                     "PROMTOOL=path): the rules were not checked");
    char cmd[2048], out[16384];
    const char *checks[] = {"check rules meshgate-rules.yml", "test rules meshgate-rules.test.yml",
                            "check config scrape.yml"};
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        snprintf(cmd, sizeof cmd, "cd '%s/etc/prometheus' && timeout 20 '%s' %s 2>&1",
                 MESHGATE_SOURCE_DIR, promtool, checks[i]);
        int rc = mg_test_shell(cmd, out, sizeof out);
        cr_expect_eq(rc, 0, "promtool %s (exit %d):\n%s", checks[i], rc, out);
    }
}
