/* SPDX-License-Identifier: ISC */
/*
 * Tests for server/config.c. Every test reads its variables from a small fake environment
 * through mg_config_load's lookup function, never from the process environment, so tests
 * cannot disturb each other or the person running them.
 *
 * Loops run over mg_config_vars itself: a variable added to the table is checked for its
 * default, its accepted values, its refusals, its line in the summary and its documentation
 * without anyone editing this file (a new kind of variable makes the samples test fail until
 * it gets samples here).
 */
#include <criterion/criterion.h>

#include "config.h"
#include "harness.h"
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* A fake environment: name/value pairs, later settings replace earlier ones. */
#define FAKE_ENV_MAX 128

struct fake_env {
    const char *name[FAKE_ENV_MAX];
    const char *value[FAKE_ENV_MAX];
    int count;
};

static void env_set(struct fake_env *env, const char *name, const char *value)
{
    for (int i = 0; i < env->count; i++) {
        if (strcmp(env->name[i], name) == 0) {
            env->value[i] = value;
            return;
        }
    }
    cr_assert_lt(env->count, FAKE_ENV_MAX, "fake environment full");
    env->name[env->count] = name;
    env->value[env->count] = value;
    env->count++;
}

static const char *fake_lookup(const char *name, void *arg)
{
    const struct fake_env *env = arg;
    for (int i = 0; i < env->count; i++)
        if (strcmp(env->name[i], name) == 0)
            return env->value[i];
    return NULL;
}

#define TEST_DB "/var/lib/corescope/meshcore.db"

/* Only the one required variable. */
static struct fake_env minimal_env(void)
{
    struct fake_env env = {.count = 0};
    env_set(&env, "MESHGATE_DB", TEST_DB);
    return env;
}

/*
 * The required variable plus the two sizes that limit each other set so that each of them
 * can take any value of its own range: MESHGATE_MAX_URI_BYTES at its minimum and
 * MESHGATE_MAX_HEADER_BYTES at its maximum.
 */
static struct fake_env roomy_env(void)
{
    struct fake_env env = minimal_env();
    env_set(&env, "MESHGATE_MAX_HEADER_BYTES", "1048576");
    env_set(&env, "MESHGATE_MAX_URI_BYTES", "64");
    return env;
}

static struct mg_config cfg;
static char err[4096];

static int load(struct fake_env *env)
{
    err[0] = '\0';
    return mg_config_load(&cfg, fake_lookup, env, err, sizeof err);
}

static int load_one(const char *name, const char *value)
{
    struct fake_env env = roomy_env();
    env_set(&env, name, value);
    return load(&env);
}

/* The summary lines of cfg, as mg_config_describe gives them. */
#define DESCRIBE_MAX 128

struct described {
    char line[DESCRIBE_MAX][MG_PATH_MAX + 64];
    int count;
};

static struct described summary;

static void collect_line(const char *line, void *arg)
{
    struct described *d = arg;
    cr_assert_lt(d->count, DESCRIBE_MAX, "more summary lines than the test can hold");
    snprintf(d->line[d->count], sizeof d->line[d->count], "%s", line);
    d->count++;
}

static void describe(const struct mg_config *c)
{
    summary.count = 0;
    mg_config_describe(c, collect_line, &summary);
}

/* The summary line of one variable, or NULL. */
static const char *summary_line(const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < summary.count; i++)
        if (strncmp(summary.line[i], name, n) == 0 && summary.line[i][n] == '=')
            return summary.line[i];
    return NULL;
}

static int var_count(void)
{
    int n = 0;
    while (mg_config_vars[n].name)
        n++;
    return n;
}

static const struct mg_config_var *find_var(const char *name)
{
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++)
        if (strcmp(v->name, name) == 0)
            return v;
    return NULL;
}

/* Asserts that the last load refused name=value with a message saying what is accepted. */
static void assert_refused(int rc, const char *name, const char *value)
{
    char expected[2048];
    snprintf(expected, sizeof expected, "%s=%s: ", name, value);
    cr_assert_eq(rc, -1, "%s=\"%s\" was accepted", name, value);
    cr_assert(strstr(err, name), "message for %s=\"%s\" does not name it: %s", name, value, err);
    cr_assert(strncmp(err, expected, strlen(expected)) == 0,
              "message for %s=\"%s\" does not start with \"%s\": %s", name, value, expected, err);
    cr_assert(strstr(err + strlen(expected), "must"),
              "message for %s=\"%s\" does not say what is accepted: %s", name, value, err);
}

TestSuite(config);

/* ---- defaults ------------------------------------------------------------------------ */

Test(config, every_unset_variable_takes_its_default_as_written)
{
    struct fake_env env = minimal_env();
    cr_assert_eq(load(&env), 0, "defaults refused: %s", err);
    describe(&cfg);
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        if (!v->default_value)
            continue;
        char expected[MG_PATH_MAX + 64];
        snprintf(expected, sizeof expected, "%s=%s", v->name, v->default_value);
        const char *line = summary_line(v->name);
        cr_assert_not_null(line, "no summary line for %s", v->name);
        cr_assert_str_eq(line, expected, "%s unset did not take its default", v->name);
    }
}

Test(config, integer_defaults_lie_within_their_own_bounds)
{
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        if (v->kind != MG_CFG_INT)
            continue;
        cr_assert_not_null(v->default_value, "%s has no default", v->name);
        long long d = strtoll(v->default_value, NULL, 10);
        cr_assert(v->min <= d && d <= v->max, "%s default %s outside %" PRId64 "..%" PRId64,
                  v->name, v->default_value, v->min, v->max);
        cr_assert_leq(v->max, INT32_MAX, "%s max does not fit its int32_t field", v->name);
        cr_assert_eq(v->size, sizeof(int32_t), "%s is not an int32_t field", v->name);
    }
}

Test(config, defaults_fill_the_struct_fields)
{
    struct fake_env env = minimal_env();
    cr_assert_eq(load(&env), 0, "%s", err);
    cr_assert_str_eq(cfg.listen_host, "127.0.0.1");
    cr_assert_eq(cfg.listen_port, 8080);
    cr_assert_eq(cfg.backlog, 511);
    cr_assert_str_eq(cfg.db_path, TEST_DB);
    cr_assert_eq(cfg.workers, 16);
    cr_assert_str_eq(cfg.shm_name, "");
    cr_assert_eq(cfg.max_header_bytes, 8192);
    cr_assert_eq(cfg.max_uri_bytes, 4096);
    cr_assert_eq(cfg.log_level, MG_LOG_INFO);
    cr_assert_eq(cfg.access_log, false);
}

/* ---- every variable: accepted and refused values, by kind ------------------------------ */

#define SAMPLES_MAX 16

struct samples {
    char valid[SAMPLES_MAX][MG_PATH_MAX + 8]; /* each describes back as itself */
    int valid_count;
    char bad[SAMPLES_MAX][MG_PATH_MAX + 8];
    int bad_count;
};

static void add_valid(struct samples *s, const char *value)
{
    snprintf(s->valid[s->valid_count++], sizeof s->valid[0], "%s", value);
}

static void add_bad(struct samples *s, const char *value)
{
    snprintf(s->bad[s->bad_count++], sizeof s->bad[0], "%s", value);
}

/* Returns false for a kind the test does not know yet. */
static bool samples_for(const struct mg_config_var *v, struct samples *s)
{
    char text[64];
    memset(s, 0, sizeof *s);
    switch (v->kind) {
    case MG_CFG_INT_AUTO:
        add_valid(s, "auto");
        add_bad(s, "automatic");
        /* and every number rule of an int: */
        __attribute__((fallthrough));
    case MG_CFG_INT:
        snprintf(text, sizeof text, "%" PRId64, v->min);
        add_valid(s, text);
        snprintf(text, sizeof text, "%" PRId64, v->max);
        add_valid(s, text);
        snprintf(text, sizeof text, "%" PRId64, v->min + (v->max - v->min) / 3);
        add_valid(s, text);
        add_bad(s, "abc");
        add_bad(s, "12x");
        add_bad(s, "");
        add_bad(s, " 5");
        add_bad(s, "5 ");
        add_bad(s, "1.5");
        add_bad(s, "0x10");
        snprintf(text, sizeof text, "%" PRId64, v->min - 1);
        add_bad(s, text);
        snprintf(text, sizeof text, "%" PRId64, v->max + 1);
        add_bad(s, text);
        add_bad(s, "99999999999999999999");
        add_bad(s, "-99999999999999999999");
        add_bad(s, "4294967296"); /* fits int64 but not the int32_t field */
        if (v->min >= 0)
            add_bad(s, "-1");
        return true;
    case MG_CFG_ACCESS_LOG:
        add_valid(s, "combined");
        add_valid(s, "json");
        add_bad(s, "common");
        add_bad(s, "json ");
        /* and every word of a bool: */
        __attribute__((fallthrough));
    case MG_CFG_BOOL:
        add_valid(s, "1");
        add_valid(s, "0");
        add_bad(s, "");
        add_bad(s, "2");
        add_bad(s, "enabled");
        add_bad(s, " 1");
        add_bad(s, "yes please");
        return true;
    case MG_CFG_STRING:
    case MG_CFG_PATH: {
        add_valid(s, "/srv/mesh data/node-1.db");
        if (v->default_value)
            add_valid(s, "");
        else
            add_bad(s, "");
        char too_long[MG_PATH_MAX + 8];
        memset(too_long, 'p', v->size);
        too_long[0] = '/';
        too_long[v->size] = '\0';
        add_bad(s, too_long);
        return true;
    }
    case MG_CFG_LISTEN:
        add_valid(s, "127.0.0.1:8080");
        add_valid(s, "[::1]:9000");
        add_valid(s, ":8080");
        add_valid(s, "localhost:1");
        add_valid(s, "0.0.0.0:65535");
        add_bad(s, "8080");
        add_bad(s, "host:");
        add_bad(s, "host:0");
        add_bad(s, "host:65536");
        add_bad(s, "[::1]8080");
        add_bad(s, "[]:80");
        add_bad(s, "a b:80");
        add_bad(s, "::1:80");
        add_bad(s, "[::1:80");
        add_bad(s, "host:80x");
        add_bad(s, "");
        return true;
    case MG_CFG_HOSTPORT:
        add_valid(s, "");
        add_valid(s, "127.0.0.1:8081");
        add_valid(s, "[::1]:9000");
        add_valid(s, "localhost:1");
        add_bad(s, ":8080"); /* a host is needed to connect to */
        add_bad(s, "8080");
        add_bad(s, "host:0");
        add_bad(s, "host:65536");
        add_bad(s, "[::1]8080");
        add_bad(s, "a b:80");
        add_bad(s, "::1:80");
        return true;
    case MG_CFG_ROUTES:
        add_valid(s, "");
        add_valid(s, "/api/nodes/:pubkey");
        add_valid(s, "/api/nodes/:pubkey, /api/observers/:id");
        add_bad(s, "/api/nodes/abc");
        add_valid(s, "/api/analytics/rf");
        add_bad(s, "/api/analytics/nothing");
        add_bad(s, "/api/nodes/:pubkey,nothing");
        return true;
    case MG_CFG_ADDRESS:
        add_valid(s, "");
        add_valid(s, "127.0.0.1:8081");
        add_valid(s, "[::1]:9000");
        add_valid(s, ":8081");
        add_bad(s, "8081");
        add_bad(s, "host:0");
        add_bad(s, "[::1]9000");
        add_bad(s, "a b:80");
        return true;
    case MG_CFG_SHM_NAME: {
        add_valid(s, "/ok-name_1.x");
        add_valid(s, "");
        add_bad(s, "noslash");
        add_bad(s, "/a/b");
        add_bad(s, "/");
        add_bad(s, "/sp ace");
        char too_long[251];
        memset(too_long, 'n', 250);
        too_long[0] = '/';
        too_long[250] = '\0';
        add_bad(s, too_long);
        return true;
    }
    case MG_CFG_CIDRS:
        add_valid(s, "");
        add_valid(s, "127.0.0.1");
        add_valid(s, "10.0.0.0/8, ::1, fd00::/8");
        add_bad(s, "10.0.0.1/8");
        add_bad(s, "1.2.3.4/33");
        add_bad(s, "::1/129");
        add_bad(s, "proxy.example.org");
        add_bad(s, "1.2.3");
        return true;
    case MG_CFG_LOG_LEVEL:
        add_valid(s, "error");
        add_valid(s, "debug");
        add_bad(s, "verbose");
        add_bad(s, "");
        add_bad(s, "3");
        add_bad(s, "infos");
        return true;
    }
    return false;
}

Test(config, every_variable_accepts_valid_values_and_reports_them_back)
{
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        struct samples s;
        cr_assert(samples_for(v, &s), "%s has a kind this test has no samples for", v->name);
        for (int i = 0; i < s.valid_count; i++) {
            int rc = load_one(v->name, s.valid[i]);
            cr_assert_eq(rc, 0, "%s=\"%s\" refused: %s", v->name, s.valid[i], err);
            describe(&cfg);
            char expected[MG_PATH_MAX + 64];
            snprintf(expected, sizeof expected, "%s=%s", v->name, s.valid[i]);
            const char *line = summary_line(v->name);
            cr_assert_not_null(line, "no summary line for %s", v->name);
            cr_assert_str_eq(line, expected, "%s=\"%s\" was not kept as given", v->name,
                             s.valid[i]);
        }
    }
}

Test(config, every_variable_refuses_bad_values_naming_variable_value_and_what_is_accepted)
{
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        struct samples s;
        cr_assert(samples_for(v, &s), "%s has a kind this test has no samples for", v->name);
        cr_assert_gt(s.bad_count, 0, "%s has no bad samples", v->name);
        for (int i = 0; i < s.bad_count; i++)
            assert_refused(load_one(v->name, s.bad[i]), v->name, s.bad[i]);
    }
}

Test(config, integer_refusals_state_the_accepted_range)
{
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        if (v->kind != MG_CFG_INT)
            continue;
        char below[32], min[32], max[32];
        snprintf(below, sizeof below, "%" PRId64, v->min - 1);
        snprintf(min, sizeof min, " %" PRId64 " ", v->min);
        snprintf(max, sizeof max, " %" PRId64, v->max);
        assert_refused(load_one(v->name, below), v->name, below);
        const char *accepted = strchr(err + strlen(v->name) + 1, ':');
        cr_assert(strstr(accepted, min) && strstr(accepted, max),
                  "%s refusal does not give the range %" PRId64 "..%" PRId64 ": %s", v->name,
                  v->min, v->max, err);
    }
}

Test(config, integer_bounds_are_inclusive)
{
    cr_assert_eq(load_one("MESHGATE_WORKERS", "1"), 0, "%s", err);
    cr_assert_eq(cfg.workers, 1);
    cr_assert_eq(load_one("MESHGATE_WORKERS", "1024"), 0, "%s", err);
    cr_assert_eq(cfg.workers, MG_WORKERS_MAX);
    assert_refused(load_one("MESHGATE_WORKERS", "0"), "MESHGATE_WORKERS", "0");
    assert_refused(load_one("MESHGATE_WORKERS", "1025"), "MESHGATE_WORKERS", "1025");
}

/* ---- MESHGATE_DB --------------------------------------------------------------------- */

Test(config, db_is_required_and_its_absence_is_named)
{
    struct fake_env env = {.count = 0};
    cr_assert_eq(load(&env), -1, "loaded without MESHGATE_DB");
    cr_assert(strstr(err, "MESHGATE_DB"), "message does not name MESHGATE_DB: %s", err);
    cr_assert(strstr(err, "not set"), "message does not say it is unset: %s", err);
}

Test(config, db_may_not_be_empty)
{
    assert_refused(load_one("MESHGATE_DB", ""), "MESHGATE_DB", "");
}

/* ---- MESHGATE_LISTEN ----------------------------------------------------------------- */

struct listen_case {
    const char *value;
    const char *host;
    unsigned port;
};

Test(config, listen_accepts_host_port_bracketed_ipv6_and_bare_port)
{
    static const struct listen_case cases[] = {
        {"127.0.0.1:8080", "127.0.0.1", 8080},
        {"[::1]:9000", "::1", 9000},
        {":8080", "", 8080},
        {"localhost:1", "localhost", 1},
        {"[fe80::1]:65535", "fe80::1", 65535},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(load_one("MESHGATE_LISTEN", cases[i].value), 0, "\"%s\" refused: %s",
                     cases[i].value, err);
        cr_assert_str_eq(cfg.listen_host, cases[i].host, "host of \"%s\"", cases[i].value);
        cr_assert_eq(cfg.listen_port, cases[i].port, "port of \"%s\"", cases[i].value);
    }
}

Test(config, listen_refuses_missing_or_out_of_range_ports_and_malformed_hosts)
{
    static const char *const bad[] = {"8080",      "host:",  "host:0", "host:65536",
                                      "[::1]8080", "[]:80",  "a b:80", "::1:80",
                                      "[::1:80",   "a/b:80", ":",      "host:-80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_refused(load_one("MESHGATE_LISTEN", bad[i]), "MESHGATE_LISTEN", bad[i]);
}

/* ---- MESHGATE_UPSTREAM --------------------------------------------------------------- */

Test(config, upstream_accepts_host_port_and_an_http_url_as_pasted)
{
    static const char *const cases[][2] = {
        {"127.0.0.1:8080", "127.0.0.1:8080"},         {"http://127.0.0.1:8080", "127.0.0.1:8080"},
        {"http://127.0.0.1:8080/", "127.0.0.1:8080"}, {"HTTP://[::1]:3000", "[::1]:3000"},
        {"http://localhost:3000/", "localhost:3000"}, {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(load_one("MESHGATE_UPSTREAM", cases[i][0]), 0, "\"%s\" refused: %s",
                     cases[i][0], err);
        cr_expect_str_eq(cfg.upstream, cases[i][1], "\"%s\"", cases[i][0]);
    }
}

Test(config, upstream_refuses_https_and_urls_with_a_path_naming_what_is_accepted)
{
    assert_refused(load_one("MESHGATE_UPSTREAM", "https://127.0.0.1:8443"), "MESHGATE_UPSTREAM",
                   "https://127.0.0.1:8443");
    cr_expect(strstr(err, "must be plain HTTP, HOST:PORT or http://HOST:PORT"), "%s", err);
    static const char *const bad[] = {"http://",         "http:///",      "http://127.0.0.1",
                                      "http://h:80/api", "http://h:80//", "ftp://h:21",
                                      "127.0.0.1:8080/", "http://:8080",  "http://h:0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_refused(load_one("MESHGATE_UPSTREAM", bad[i]), "MESHGATE_UPSTREAM", bad[i]);
        cr_expect(strstr(err, "either after http://"), "%s", err);
    }
}

/* ---- MESHGATE_SHM_NAME --------------------------------------------------------------- */

Test(config, shm_name_accepts_a_slash_then_portable_characters)
{
    cr_assert_eq(load_one("MESHGATE_SHM_NAME", "/ok-name_1.x"), 0, "%s", err);
    cr_assert_str_eq(cfg.shm_name, "/ok-name_1.x");
}

Test(config, shm_name_empty_means_derived_from_the_listen_address)
{
    cr_assert_eq(load_one("MESHGATE_SHM_NAME", ""), 0, "%s", err);
    cr_assert_str_eq(cfg.shm_name, "");
}

Test(config, shm_name_refuses_no_slash_inner_slash_bare_slash_and_long_names)
{
    char long_name[251];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[0] = '/';
    long_name[sizeof long_name - 1] = '\0';
    const char *const bad[] = {"noslash", "/a/b", "/", long_name, "/a b", "/tab\there", "//"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_refused(load_one("MESHGATE_SHM_NAME", bad[i]), "MESHGATE_SHM_NAME", bad[i]);
}

Test(config, shm_name_refuses_dot_and_dotdot_alone)
{
    /* "/.." passed validation once: it names /dev/shm's parent, not an object in /dev/shm. */
    const char *const bad[] = {"/.", "/.."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_refused(load_one("MESHGATE_SHM_NAME", bad[i]), "MESHGATE_SHM_NAME", bad[i]);
        cr_assert(strstr(err, "\"..\""), "message does not say dots alone are refused: %s", err);
    }
    /* Dots inside a name stay allowed. */
    cr_assert_eq(load_one("MESHGATE_SHM_NAME", "/..x"), 0, "%s", err);
    cr_assert_eq(load_one("MESHGATE_SHM_NAME", "/a.b"), 0, "%s", err);
}

Test(config, shm_name_dotdot_stops_the_start_with_exit_78_naming_it)
{
    char out[4096];
    const char *env[] = {"MESHGATE_DB=/nonexistent.db", "MESHGATE_SHM_NAME=/..", NULL};
    int status = mg_test_run_expect_exit(env, out, sizeof out, 10000);
    cr_assert(status != -1 && WIFEXITED(status), "the start did not exit: %s", out);
    cr_assert_eq(WEXITSTATUS(status), 78, "%s", out);
    cr_assert(strstr(out, "MESHGATE_SHM_NAME=/..: must be"), "%s", out);
}

Test(config, shm_name_length_limit_is_the_one_the_message_states)
{
    /* The message promises "/" followed by up to 198 characters. */
    char name[MG_SHM_NAME_MAX + 1];
    memset(name, 'a', sizeof name);
    name[0] = '/';
    name[199] = '\0';
    cr_assert_eq(load_one("MESHGATE_SHM_NAME", name), 0, "199-byte name refused: %s", err);
    cr_assert_str_eq(cfg.shm_name, name);
    name[199] = 'a';
    name[200] = '\0';
    assert_refused(load_one("MESHGATE_SHM_NAME", name), "MESHGATE_SHM_NAME", name);
    cr_assert(strstr(err, "198"), "message does not state the limit: %s", err);
}

/* ---- MESHGATE_LOG_LEVEL -------------------------------------------------------------- */

Test(config, log_level_accepts_each_name_in_any_case)
{
    static const struct {
        const char *value;
        int level;
    } cases[] = {
        {"error", MG_LOG_ERROR}, {"warning", MG_LOG_WARN}, {"warn", MG_LOG_WARN},
        {"info", MG_LOG_INFO},   {"debug", MG_LOG_DEBUG},  {"DEBUG", MG_LOG_DEBUG},
        {"Warn", MG_LOG_WARN},   {"ErRoR", MG_LOG_ERROR},  {"INFO", MG_LOG_INFO},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(load_one("MESHGATE_LOG_LEVEL", cases[i].value), 0, "\"%s\" refused: %s",
                     cases[i].value, err);
        cr_assert_eq(cfg.log_level, cases[i].level, "level of \"%s\"", cases[i].value);
    }
}

Test(config, log_level_refuses_unknown_names)
{
    assert_refused(load_one("MESHGATE_LOG_LEVEL", "verbose"), "MESHGATE_LOG_LEVEL", "verbose");
    cr_assert(strstr(err, "debug"), "message does not list the levels: %s", err);
}

Test(config, log_level_names_match_the_levels)
{
    cr_assert_str_eq(mg_log_level_name(MG_LOG_ERROR), "error");
    cr_assert_str_eq(mg_log_level_name(MG_LOG_WARN), "warning");
    cr_assert_str_eq(mg_log_level_name(MG_LOG_INFO), "info");
    cr_assert_str_eq(mg_log_level_name(MG_LOG_DEBUG), "debug");
    cr_assert_str_eq(mg_log_level_name(-1), "?");
    cr_assert_str_eq(mg_log_level_name(MG_LOG_DEBUG + 1), "?");
}

/* ---- MESHGATE_ACCESS_LOG ------------------------------------------------------------- */

Test(config, access_log_accepts_the_usual_boolean_words_in_any_case)
{
    static const struct {
        const char *value;
        bool on;
    } cases[] = {
        {"1", true},      {"yes", true},  {"true", true}, {"on", true},
        {"YES", true},    {"True", true}, {"0", false},   {"no", false},
        {"false", false}, {"off", false}, {"OFF", false}, {"No", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* Start from the opposite value so that a value that is ignored shows. */
        struct fake_env env = roomy_env();
        env_set(&env, "MESHGATE_ACCESS_LOG", cases[i].value);
        cr_assert_eq(load(&env), 0, "\"%s\" refused: %s", cases[i].value, err);
        cr_assert_eq(cfg.access_log, cases[i].on, "value of \"%s\"", cases[i].value);
    }
}

/* ---- limits that depend on each other ------------------------------------------------ */

Test(config, uri_limit_above_header_limit_is_refused_naming_both)
{
    struct fake_env env = minimal_env();
    env_set(&env, "MESHGATE_MAX_HEADER_BYTES", "2048");
    env_set(&env, "MESHGATE_MAX_URI_BYTES", "2049");
    cr_assert_eq(load(&env), -1, "a URI limit above the header limit was accepted");
    cr_assert(strstr(err, "MESHGATE_MAX_URI_BYTES=2049"), "%s", err);
    cr_assert(strstr(err, "MESHGATE_MAX_HEADER_BYTES=2048"), "%s", err);
}

Test(config, uri_limit_equal_to_header_limit_is_accepted)
{
    struct fake_env env = minimal_env();
    env_set(&env, "MESHGATE_MAX_HEADER_BYTES", "2048");
    env_set(&env, "MESHGATE_MAX_URI_BYTES", "2048");
    cr_assert_eq(load(&env), 0, "%s", err);
    cr_assert_eq(cfg.max_uri_bytes, 2048);
}

Test(config, lowering_only_the_header_limit_below_the_default_uri_limit_is_refused)
{
    struct fake_env env = minimal_env();
    env_set(&env, "MESHGATE_MAX_HEADER_BYTES", "1024");
    cr_assert_eq(load(&env), -1, "default URI limit 4096 above a header limit of 1024");
    cr_assert(strstr(err, "MESHGATE_MAX_HEADER_BYTES=1024"), "%s", err);
}

/* ---- unknown variables --------------------------------------------------------------- */

/* The test binary links the test build (workers/test_hooks.h): it knows its hooks' variables
 * and no other MESHGATE_TEST_* (the production binary knows none: tests/test_hooks.c). */
Test(config, unknown_reports_a_typo_and_ignores_known_foreign_and_hook_variables)
{
    char *envp[] = {"PATH=/usr/bin",
                    "MESHGATE_WORKERS=4",
                    "MESHGATE_WORKRES=4",
                    "MESHGATE_TEST_DB=x",
                    "MESHGATE_DB=/x.db",
                    "MESHGATE_DB_EXTRA=1",
                    "NOT_MESHGATE_X=1",
                    "MESHGATE_ACCESS_LOG=on",
                    "MESHGATE_TEST_HOOKS=park",
                    NULL};
    char out[256];
    int n = mg_config_unknown(envp, out, sizeof out);
    cr_assert_eq(n, 3, "counted %d unknown variables: %s", n, out);
    cr_assert(strstr(out, "MESHGATE_WORKRES (closest known name: MESHGATE_WORKERS), "
                          "MESHGATE_TEST_DB (closest known name: "),
              "%s", out);
    cr_assert(strstr(out, "), MESHGATE_DB_EXTRA (closest known name: MESHGATE_DB)"), "%s", out);
}

Test(config, unknown_finds_nothing_in_an_environment_of_known_variables)
{
    char *envp[] = {"MESHGATE_LISTEN=:80", "MESHGATE_TEST_RELAY_PASS_MS=1", "HOME=/root", NULL};
    char out[64] = "garbage";
    cr_assert_eq(mg_config_unknown(envp, out, sizeof out), 0);
    cr_assert_str_eq(out, "");
}

Test(config, unknown_counts_all_but_never_writes_past_a_small_buffer)
{
    char *envp[] = {"MESHGATE_AAAAAAAA=1", "MESHGATE_BBBBBBBB=2", "MESHGATE_CCCCCCCC=3", NULL};
    char out[16 + 8];
    memset(out, '#', sizeof out);
    int n = mg_config_unknown(envp, out, 16);
    cr_assert_eq(n, 3);
    cr_assert_lt(strnlen(out, 16), (size_t)16, "out is not terminated inside its length");
    for (size_t i = 16; i < sizeof out; i++)
        cr_assert_eq(out[i], '#', "wrote past the buffer at %zu", i);
}

/* ---- the summary ---------------------------------------------------------------------- */

Test(config, describe_emits_one_line_per_variable_in_table_order)
{
    struct fake_env env = minimal_env();
    cr_assert_eq(load(&env), 0, "%s", err);
    describe(&cfg);
    cr_assert_eq(summary.count, var_count(), "%d lines for %d variables", summary.count,
                 var_count());
    for (int i = 0; i < summary.count; i++) {
        size_t n = strlen(mg_config_vars[i].name);
        cr_assert(strncmp(summary.line[i], mg_config_vars[i].name, n) == 0 &&
                      summary.line[i][n] == '=',
                  "line %d is \"%s\", expected %s=...", i, summary.line[i], mg_config_vars[i].name);
        cr_assert_null(strchr(summary.line[i], '\n'), "line %d holds a newline", i);
    }
}

Test(config, describe_output_loads_back_to_the_same_configuration)
{
    struct fake_env env = minimal_env();
    env_set(&env, "MESHGATE_LISTEN", "[::1]:9000");
    env_set(&env, "MESHGATE_WORKERS", "3");
    env_set(&env, "MESHGATE_SHM_NAME", "/mg-roundtrip");
    env_set(&env, "MESHGATE_LOG_LEVEL", "WARN");
    env_set(&env, "MESHGATE_ACCESS_LOG", "yes");
    env_set(&env, "MESHGATE_PUBLIC_DIR", "/srv/www");
    cr_assert_eq(load(&env), 0, "%s", err);
    struct mg_config first = cfg;
    describe(&first);

    struct fake_env again = {.count = 0};
    static char copies[DESCRIBE_MAX][MG_PATH_MAX + 64];
    for (int i = 0; i < summary.count; i++) {
        snprintf(copies[i], sizeof copies[i], "%s", summary.line[i]);
        char *eq = strchr(copies[i], '=');
        cr_assert_not_null(eq, "line without '=': %s", copies[i]);
        *eq = '\0';
        env_set(&again, copies[i], eq + 1);
    }
    cr_assert_eq(load(&again), 0, "the summary does not load back: %s", err);
    cr_assert(memcmp(&first, &cfg, sizeof cfg) == 0, "the summary loads back differently");
}

/* Found by fuzz/config.c: with 1,024 workers "auto" resolved the cold queue to 510 and the
 * anonymous line to 512 permits, values the variables refuse (and the gates cannot hold),
 * so the start-up summary did not load back. */
Test(config, auto_values_stay_within_their_variables_ranges_for_any_worker_count)
{
    static const char *const workers[] = {"1", "2", "3", "16", "128", "513", "515", "1024"};
    for (size_t i = 0; i < sizeof workers / sizeof workers[0]; i++) {
        struct fake_env env = minimal_env();
        env_set(&env, "MESHGATE_WORKERS", workers[i]);
        env_set(&env, "MESHGATE_REACH_COLD_MAX", "0");
        cr_assert_eq(load(&env), 0, "%s", err);
        char warning[512];
        mg_config_resolve(&cfg, warning, sizeof warning);
        cr_expect(cfg.reach_cold_queue >= 0 && cfg.reach_cold_queue <= 256,
                  "%s workers: cold queue %d", workers[i], cfg.reach_cold_queue);
        cr_expect(cfg.anon_concurrency >= 1 && cfg.anon_concurrency <= 64,
                  "%s workers: anonymous line %d", workers[i], cfg.anon_concurrency);
        char queue[16], line[16];
        snprintf(queue, sizeof queue, "%d", cfg.reach_cold_queue);
        snprintf(line, sizeof line, "%d", cfg.anon_concurrency);
        cr_expect_eq(load_one("MESHGATE_REACH_COLD_QUEUE", queue), 0, "%s", err);
        cr_expect_eq(load_one("MESHGATE_ANON_CONCURRENCY", line), 0, "%s", err);
    }
}

/* ---- the derived segment name --------------------------------------------------------- */

static void assert_valid_shm_name(const char *name, const char *host)
{
    cr_assert_eq(name[0], '/', "\"%s\" (from host \"%s\") does not start with '/'", name, host);
    cr_assert_gt(strlen(name), 1);
    cr_assert_lt(strlen(name), (size_t)MG_SHM_NAME_MAX);
    for (const char *p = name + 1; *p; p++)
        cr_assert(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", *p),
                  "\"%s\" (from host \"%s\") holds '%c'", name, host, *p);
    cr_assert_eq(load_one("MESHGATE_SHM_NAME", name), 0,
                 "derived name \"%s\" is refused as MESHGATE_SHM_NAME: %s", name, err);
}

Test(config, default_shm_name_of_ipv6_loopback_is_a_valid_name)
{
    char name[MG_SHM_NAME_MAX];
    mg_config_default_shm_name("::1", 80, name, sizeof name);
    assert_valid_shm_name(name, "::1");
    cr_assert(strstr(name, "80"), "the port is not in \"%s\"", name);
}

Test(config, default_shm_name_is_valid_for_any_host)
{
    char long_host[MG_HOST_MAX];
    memset(long_host, 'h', sizeof long_host - 1);
    long_host[sizeof long_host - 1] = '\0';
    const char *const hosts[] = {
        "127.0.0.1", "", "0.0.0.0", "fe80::1%eth0", "a/b:c d*e", "\xc3\xa9t\xc3\xa9", long_host};
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        char name[MG_SHM_NAME_MAX];
        mg_config_default_shm_name(hosts[i], 65535, name, sizeof name);
        assert_valid_shm_name(name, hosts[i]);
    }
}

Test(config, default_shm_names_differ_by_port)
{
    char a[MG_SHM_NAME_MAX], b[MG_SHM_NAME_MAX];
    mg_config_default_shm_name("127.0.0.1", 8080, a, sizeof a);
    mg_config_default_shm_name("127.0.0.1", 8081, b, sizeof b);
    cr_assert_str_neq(a, b);
}

/* ---- documentation -------------------------------------------------------------------- */

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            text = realloc(text, cap);
            cr_assert_not_null(text);
        }
        size_t n = fread(text + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
    }
    fclose(f);
    text[len] = '\0';
    return text;
}

/* True when text mentions name as a whole word (MESHGATE_DB is not found in
 * MESHGATE_DB_BUSY_TIMEOUT_MS). */
static bool mentions(const char *text, const char *name, const char *followed_by)
{
    size_t n = strlen(name);
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
        bool starts = p == text || !(p[-1] == '_' || (p[-1] >= 'A' && p[-1] <= 'Z') ||
                                     (p[-1] >= '0' && p[-1] <= '9'));
        char next = p[n];
        bool ends = !(next == '_' || (next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9'));
        if (starts && ends && (!followed_by || (next && strchr(followed_by, next))))
            return true;
    }
    return false;
}

static char *doc_text;

static void free_doc(void)
{
    free(doc_text);
    doc_text = NULL;
}

Test(config, every_variable_is_set_in_the_environment_file, .fini = free_doc)
{
    doc_text = read_text(MESHGATE_SOURCE_DIR "/etc/meshgate.env");
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++)
        cr_expect(mentions(doc_text, v->name, "="), "etc/meshgate.env has no line %s=...", v->name);
}

Test(config, every_variable_is_documented_in_the_readme, .fini = free_doc)
{
    doc_text = read_text(MESHGATE_SOURCE_DIR "/README.md");
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++)
        cr_expect(mentions(doc_text, v->name, NULL), "README.md does not mention %s", v->name);
}

Test(config, table_names_are_unique_prefixed_and_helpful)
{
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        cr_assert(strncmp(v->name, "MESHGATE_", 9) == 0, "%s lacks the prefix", v->name);
        cr_assert(strncmp(v->name, "MESHGATE_TEST_", 14) != 0,
                  "%s: MESHGATE_TEST_* are the test build's hooks, not settings", v->name);
        cr_assert_eq(find_var(v->name), v, "%s appears twice", v->name);
        cr_assert(v->help && strlen(v->help) > 10, "%s has no help sentence", v->name);
    }
}

Test(config, signed_numbers_and_negative_zero_are_not_whole_numbers)
{
    /* strtoll takes them; a person who writes "+5" or "-0" has made a mistake. */
    const char *bad[] = {"+5", "-0", "-00", "+0", " 5", "5 ", "0x10", "1e3", "-"};
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        if (v->kind != MG_CFG_INT && v->kind != MG_CFG_INT_AUTO)
            continue;
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            assert_refused(load_one(v->name, bad[i]), v->name, bad[i]);
    }
    cr_expect_eq(load_one("MESHGATE_LISTEN", "127.0.0.1:+80"), -1, "a signed port");
    cr_expect_eq(load_one("MESHGATE_WORKERS", "007"), 0, "leading zeros are still a number: %s",
                 err);
    cr_expect_eq(cfg.workers, 7);
}

Test(config, the_public_directory_must_be_a_readable_directory)
{
    struct mg_config c;
    memset(&c, 0, sizeof c);
    char why[512];
    cr_expect_eq(mg_config_check_public_dir(&c, why, sizeof why), 0, "empty: no static files");
    const char *bad[] = {"/nonexistent", "/etc/passwd", "public", "/dev/null"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(c.public_dir, sizeof c.public_dir, "%s", bad[i]);
        cr_expect_eq(mg_config_check_public_dir(&c, why, sizeof why), -1, "%s accepted", bad[i]);
        char expected[128];
        snprintf(expected, sizeof expected, "MESHGATE_PUBLIC_DIR=%s: must ", bad[i]);
        cr_expect(strncmp(why, expected, strlen(expected)) == 0, "%s", why);
    }
    snprintf(c.public_dir, sizeof c.public_dir, "/tmp");
    cr_expect_eq(mg_config_check_public_dir(&c, why, sizeof why), 0, "%s", why);
}

Test(config, the_connection_table_must_fit_when_the_client_cap_is_on)
{
    struct fake_env env = minimal_env();
    env_set(&env, "MESHGATE_WORKERS", "1024");
    env_set(&env, "MESHGATE_MAX_CONNS_PER_WORKER", "65536");
    cr_assert_eq(load(&env), -1);
    cr_expect(strstr(err, "MESHGATE_MAX_CONNS_PER_CLIENT=64: must be 0"), "%s", err);
    env_set(&env, "MESHGATE_MAX_CONNS_PER_CLIENT", "0");
    cr_expect_eq(load(&env), 0, "no cap, no table: %s", err);
}

/* ---- reload: what it applies, and where values come from ---------------------------------- */

Test(config, every_variable_says_whether_a_reload_applies_it)
{
    cr_assert_lt(var_count(), MG_CONFIG_VARS_MAX, "raise MG_CONFIG_VARS_MAX");
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++)
        cr_expect(v->reload == MG_RELOAD_LIVE || v->reload == MG_RELOAD_RESTART,
                  "%s: decide MG_RELOAD_LIVE or MG_RELOAD_RESTART (and document it)", v->name);
}

static char env_dir[128], env_path[256], env_setting[300];

static void write_env_file(const char *text)
{
    FILE *f = fopen(env_path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void make_env_dir(void)
{
    mg_test_tmpdir(env_dir, sizeof env_dir);
    snprintf(env_path, sizeof env_path, "%s/meshgate.env", env_dir);
    snprintf(env_setting, sizeof env_setting, "%s", env_path);
}

static void remove_env_dir(void)
{
    mg_test_rmdir(env_dir);
}

static int load_from(struct fake_env *env, struct mg_config_sources *s)
{
    err[0] = '\0';
    if (mg_config_sources_init(s, fake_lookup, env, err, sizeof err) < 0)
        return -1;
    return mg_config_load_sources(&cfg, s, err, sizeof err);
}

Test(config, the_environment_wins_over_the_file_and_the_file_over_defaults, .init = make_env_dir,
     .fini = remove_env_dir)
{
    write_env_file("MESHGATE_WORKERS=8\nMESHGATE_ANON_RATE=10\nMESHGATE_DB=/from/file.db\n");
    struct fake_env env = {.count = 0};
    env_set(&env, "MESHGATE_ENV_FILE", env_setting);
    env_set(&env, "MESHGATE_WORKERS", "4");
    struct mg_config_sources s;
    cr_assert_eq(load_from(&env, &s), 0, "%s", err);
    cr_expect_eq(cfg.workers, 4, "the environment wins");
    cr_expect_eq(cfg.anon_rate, 10, "the file fills what the environment does not set");
    cr_expect_str_eq(cfg.db_path, "/from/file.db", "a required variable may come from the file");
    cr_expect_eq(cfg.anon_burst, 30, "what neither sets takes its default");
    cr_expect_str_eq(cfg.env_file, env_path);
    mg_config_sources_free(&s);
}

/* What systemd's EnvironmentFile= passes on is the file's, so a reload may change it; a value
 * the environment sets otherwise stays for the life of the process. */
Test(config, a_reread_takes_the_files_new_values_except_where_the_environment_won,
     .init = make_env_dir, .fini = remove_env_dir)
{
    write_env_file("MESHGATE_DB=/db\nMESHGATE_WORKERS=8\nMESHGATE_ANON_BURST=9\n");
    struct fake_env env = {.count = 0};
    env_set(&env, "MESHGATE_ENV_FILE", env_setting);
    env_set(&env, "MESHGATE_DB", "/db");                /* as EnvironmentFile= passes it */
    env_set(&env, "MESHGATE_WORKERS", "8");             /* as EnvironmentFile= passes it */
    env_set(&env, "MESHGATE_ANON_BURST", "7");          /* an override */
    env_set(&env, "MESHGATE_HEADER_TIMEOUT_MS", "500"); /* set only in the environment */
    struct mg_config_sources s;
    cr_assert_eq(load_from(&env, &s), 0, "%s", err);
    cr_expect_eq(cfg.workers, 8);
    cr_expect_eq(cfg.anon_burst, 7);

    write_env_file("MESHGATE_DB=/db\nMESHGATE_WORKERS=6\nMESHGATE_ANON_BURST=11\n"
                   "MESHGATE_HEADER_TIMEOUT_MS=900\n");
    struct mg_config_sources next;
    cr_assert_eq(mg_config_sources_reread(&s, &next, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mg_config_load_sources(&cfg, &next, err, sizeof err), 0, "%s", err);
    cr_expect_eq(cfg.workers, 6, "the file's own value follows the file");
    cr_expect_eq(cfg.anon_burst, 7, "the environment's override stays");
    cr_expect_eq(cfg.header_timeout_ms, 500, "the environment's own variable stays");

    struct described notes = {.count = 0};
    cr_expect_eq(mg_config_sources_notes(&next, collect_line, &notes), 2);
    cr_expect(strstr(notes.line[0], "MESHGATE_ANON_BURST=11 is overridden by the process "
                                    "environment (MESHGATE_ANON_BURST=7)"),
              "%s", notes.line[0]);
    cr_expect(strstr(notes.line[1], "MESHGATE_HEADER_TIMEOUT_MS=900 is overridden"), "%s",
              notes.line[1]);
    mg_config_sources_free(&next);
    mg_config_sources_free(&s);
}

Test(config, a_file_that_cannot_be_read_or_parsed_is_an_error_naming_it, .init = make_env_dir,
     .fini = remove_env_dir)
{
    struct fake_env env = minimal_env();
    env_set(&env, "MESHGATE_ENV_FILE", env_setting);
    struct mg_config_sources s;
    cr_expect_eq(load_from(&env, &s), -1, "a missing file");
    cr_expect(strstr(err, "MESHGATE_ENV_FILE=") && strstr(err, "cannot read it"), "%s", err);
    write_env_file("MESHGATE_WORKERS='4\n");
    cr_expect_eq(load_from(&env, &s), -1, "an unclosed quote");
    cr_expect(strstr(err, "line 1: the single quote"), "%s", err);
    write_env_file("MESHGATE_WORKERS=0\n");
    cr_expect_eq(load_from(&env, &s), -1, "a bad value");
    cr_expect(strstr(err, "MESHGATE_WORKERS=0: must be a whole number from 1"), "%s", err);
    mg_config_sources_free(&s);
}

Test(config, unknown_names_in_the_file_are_refused_with_their_line_and_the_closest_name,
     .init = make_env_dir, .fini = remove_env_dir)
{
    write_env_file("MESHGATE_DB=/db\n\nMESHGATE_WORKRES=4\nOTHER_PROGRAM=1\n");
    struct fake_env env = {.count = 0};
    env_set(&env, "MESHGATE_ENV_FILE", env_setting);
    struct mg_config_sources s;
    cr_expect_eq(load_from(&env, &s), -1);
    cr_expect(strstr(err, "line 3: unknown variable MESHGATE_WORKRES (closest known name: "
                          "MESHGATE_WORKERS)"),
              "%s", err);
    mg_config_sources_free(&s);
    /* Other programs' names are not the server's to judge; the test build's hooks are its own. */
    write_env_file("MESHGATE_DB=/db\nOTHER_PROGRAM=1\nMESHGATE_TEST_HOOKS=park\n");
    cr_expect_eq(load_from(&env, &s), 0, "%s", err);
    mg_config_sources_free(&s);
}

Test(config, the_closest_name_is_the_nearest_by_edit_distance)
{
    cr_expect_str_eq(mg_config_closest("MESHGATE_LISTNE", 15), "MESHGATE_LISTEN");
    cr_expect_str_eq(mg_config_closest("MESHGATE_PUBLIC_DIRS", 20), "MESHGATE_PUBLIC_DIR");
    cr_expect_str_eq(mg_config_closest("MESHGATE_ANON_RATES", 19), "MESHGATE_ANON_RATE");
}

Test(config, the_file_cannot_name_another_file)
{
    /* MESHGATE_ENV_FILE comes from the environment only: a line for it in the file is ignored. */
    char dir[128], path[256], other[300];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/a.env", dir);
    snprintf(other, sizeof other, "MESHGATE_DB=/db\nMESHGATE_ENV_FILE=%s/b.env\n", dir);
    FILE *f = fopen(path, "w");
    fputs(other, f);
    fclose(f);
    struct fake_env env = {.count = 0};
    env_set(&env, "MESHGATE_ENV_FILE", path);
    struct mg_config_sources s;
    cr_assert_eq(load_from(&env, &s), 0, "%s", err);
    cr_expect_str_eq(cfg.env_file, path);
    mg_config_sources_free(&s);
    mg_test_rmdir(dir);
}

struct warnings {
    char line[8][600];
    int count;
};

static void collect_warning(const char *line, void *arg)
{
    struct warnings *w = arg;
    cr_assert_lt(w->count, 8);
    snprintf(w->line[w->count++], sizeof w->line[0], "%s", line);
}

Test(config, a_reload_keeps_restart_settings_with_one_warning_each_and_applies_the_rest)
{
    struct fake_env env = minimal_env();
    cr_assert_eq(load(&env), 0, "%s", err);
    struct mg_config running = cfg;
    env_set(&env, "MESHGATE_REACH_CACHE_ENTRIES", "100");
    env_set(&env, "MESHGATE_LISTEN", "127.0.0.1:9999");
    env_set(&env, "MESHGATE_HEADER_TIMEOUT_MS", "400");
    env_set(&env, "MESHGATE_ANON_RATE", "60");
    cr_assert_eq(load(&env), 0, "%s", err);
    struct warnings w = {.count = 0};
    cr_expect_eq(mg_config_keep_restart_settings(&running, &cfg, 16, collect_warning, &w), 2);
    cr_expect_eq(cfg.reach_cache_entries, 256);
    cr_expect_eq(cfg.listen_port, 8080);
    cr_expect_str_eq(cfg.listen_host, "127.0.0.1");
    cr_expect_eq(cfg.header_timeout_ms, 400, "live: applied");
    cr_expect_eq(cfg.anon_rate, 60, "live: applied");
    cr_assert_eq(w.count, 2);
    cr_expect(strstr(w.line[0], "MESHGATE_LISTEN=127.0.0.1:9999 needs a restart; keeping "
                                "MESHGATE_LISTEN=127.0.0.1:8080"),
              "%s", w.line[0]);
    cr_expect(strstr(w.line[1], "MESHGATE_REACH_CACHE_ENTRIES=100 needs a restart; keeping "
                                "MESHGATE_REACH_CACHE_ENTRIES=256"),
              "%s", w.line[1]);
}

Test(config, workers_change_live_up_to_the_slots_and_the_client_cap_only_while_on)
{
    struct fake_env env = minimal_env();
    env_set(&env, "MESHGATE_WORKERS", "4");
    cr_assert_eq(load(&env), 0, "%s", err);
    struct mg_config running = cfg;
    struct warnings w = {.count = 0};

    env_set(&env, "MESHGATE_WORKERS", "2");
    env_set(&env, "MESHGATE_MAX_CONNS_PER_CLIENT", "10");
    cr_assert_eq(load(&env), 0, "%s", err);
    cr_expect_eq(mg_config_keep_restart_settings(&running, &cfg, 4, collect_warning, &w), 0);
    cr_expect_eq(cfg.workers, 2);
    cr_expect_eq(cfg.max_conns_per_client, 10);

    env_set(&env, "MESHGATE_WORKERS", "5");
    env_set(&env, "MESHGATE_MAX_CONNS_PER_CLIENT", "0");
    cr_assert_eq(load(&env), 0, "%s", err);
    cr_expect_eq(mg_config_keep_restart_settings(&running, &cfg, 4, collect_warning, &w), 2);
    cr_expect_eq(cfg.workers, 4);
    cr_expect_eq(cfg.max_conns_per_client, 64);
    cr_assert_eq(w.count, 2);
    cr_expect(strstr(w.line[0], "MESHGATE_WORKERS=5 needs a restart: more workers than"), "%s",
              w.line[0]);
    cr_expect(strstr(w.line[1], "MESHGATE_MAX_CONNS_PER_CLIENT=0 needs a restart"), "%s",
              w.line[1]);
}

/* The text between the first `from` and the next `to` (or the end), malloc'ed. */
static char *between(const char *text, const char *from, const char *to)
{
    const char *a = strstr(text, from);
    cr_assert_not_null(a, "no \"%s\"", from);
    a += strlen(from);
    const char *b = strstr(a, to);
    size_t n = b ? (size_t)(b - a) : strlen(a);
    char *out = malloc(n + 1);
    memcpy(out, a, n);
    out[n] = '\0';
    return out;
}

Test(config, the_readme_lists_each_variable_as_live_or_restart_as_the_table_says, .fini = free_doc)
{
    doc_text = read_text(MESHGATE_SOURCE_DIR "/README.md");
    char *live = between(doc_text, "**Applied by a reload:**", "**Need a restart:**");
    char *restart = between(doc_text, "**Need a restart:**", "\n#");
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        bool is_live = v->reload == MG_RELOAD_LIVE;
        cr_expect(mentions(is_live ? live : restart, v->name, NULL),
                  "README.md does not list %s under %s", v->name,
                  is_live ? "Applied by a reload" : "Need a restart");
        cr_expect(!mentions(is_live ? restart : live, v->name, NULL),
                  "README.md lists %s under the wrong heading", v->name);
    }
    free(live);
    free(restart);
}

Test(config, the_man_page_names_every_restart_setting_in_its_reload_section, .fini = free_doc)
{
    doc_text = read_text(MESHGATE_SOURCE_DIR "/etc/meshgate.8");
    char *restart = between(doc_text, ".\\\" restart-only:", ".\\\" end restart-only");
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++)
        cr_expect(mentions(restart, v->name, NULL) == (v->reload != MG_RELOAD_LIVE),
                  "meshgate(8) RELOAD: %s is %s", v->name,
                  v->reload == MG_RELOAD_LIVE ? "live but listed as restart-only"
                                              : "restart-only but not listed");
    free(restart);
}

Test(config, the_shipped_environment_file_parses_and_sets_only_known_variables)
{
    struct mg_envfile f;
    char why[600];
    cr_assert_eq(mg_envfile_read(&f, MESHGATE_SOURCE_DIR "/etc/meshgate.env", why, sizeof why), 0,
                 "%s", why);
    cr_expect_gt(f.count, 0);
    for (size_t i = 0; i < f.count; i++)
        cr_expect_not_null(find_var(f.vars[i].name), "etc/meshgate.env sets unknown %s",
                           f.vars[i].name);
    mg_envfile_free(&f);
}
