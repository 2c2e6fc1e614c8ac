/* SPDX-License-Identifier: ISC */
/*
 * The operator's files in etc/grafana and etc/prometheus: the dashboard is strict JSON with a
 * query in every panel, every meshgate_* name the dashboard, the alert rules, their unit tests
 * and the scrape example mention is a series that a real /metrics answer has, and promtool
 * accepts the rules, runs their unit tests and checks the scrape example (skipped with a
 * message when promtool is not installed; PROMTOOL=path names one elsewhere).
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
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
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
