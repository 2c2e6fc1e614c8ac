/* SPDX-License-Identifier: ISC */
/*
 * The docs say what the code does (issue 27, item 10): the README's endpoint table lists every
 * route of the route table in one unbroken table, and every default that README.md,
 * etc/meshgate.env and meshgate(8) state is the config table's. `make run`'s hints say how to
 * serve CoreScope's front end, and its demo database has CoreScope's default name.
 */
#include "config.h"
#include "harness.h"
#include "router.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

TestSuite(docs, .timeout = 60);

#define README MESHGATE_SOURCE_DIR "/README.md"
#define ENV_FILE MESHGATE_SOURCE_DIR "/etc/meshgate.env"
#define MESHGATE_8 MESHGATE_SOURCE_DIR "/etc/meshgate.8"

/* ---- the endpoint table ---------------------------------------------------------------- */

/* A path with each parameter segment (":name" or "{name}") written as ":". */
static void normalize(const char *path, size_t len, char *out, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; i < len && j + 2 < cap;) {
        bool segment_start = i == 0 || path[i - 1] == '/';
        if (segment_start && (path[i] == ':' || path[i] == '{')) {
            out[j++] = ':';
            while (i < len && path[i] != '/')
                i++;
        } else {
            out[j++] = path[i++];
        }
    }
    out[j] = '\0';
}

#define ROWS_MAX 128
struct endpoint_rows {
    char path[ROWS_MAX][160];
    int count;
    int tables; /* separate tables holding `GET` rows under ## Endpoints */
};

static void add_row(struct endpoint_rows *rows, const char *path, size_t len)
{
    cr_assert_lt(rows->count, ROWS_MAX);
    normalize(path, len, rows->path[rows->count], sizeof rows->path[0]);
    rows->count++;
}

/* Every "| `GET /path...` |" row of the section "## Endpoints", a "{a,b}" segment expanded to
 * one row each, query strings dropped; and how many tables they form. */
static void endpoint_rows(const char *readme, struct endpoint_rows *rows)
{
    memset(rows, 0, sizeof *rows);
    const char *section = strstr(readme, "\n## Endpoints\n");
    cr_assert_not_null(section, "README.md has no ## Endpoints");
    const char *end = strstr(section + 1, "\n## ");
    bool counted = false; /* the current table holds a GET row already */
    for (const char *line = section + 1; line && (!end || line < end);) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        bool row = len > 0 && line[0] == '|';
        if (!row)
            counted = false;
        /* A route of another method is named with it, as its template is (router.h). */
        bool other = row && (strncmp(line, "| `POST ", 8) == 0 || strncmp(line, "| `PUT ", 7) == 0);
        if (row && (other || strncmp(line, "| `GET ", 7) == 0)) {
            if (!counted)
                rows->tables++;
            counted = true;
            const char *p = other ? line + 3 : line + 7;
            size_t n = strcspn(p, "`?");
            const char *brace = memchr(p, '{', n);
            const char *close = brace ? memchr(brace, '}', (size_t)(p + n - brace)) : NULL;
            if (brace && close && memchr(brace, ',', (size_t)(close - brace))) {
                /* "/api/config/{client,cache,...}": one route per alternative. */
                for (const char *a = brace + 1; a < close;) {
                    size_t alen = strcspn(a, ",}");
                    char path[160];
                    snprintf(path, sizeof path, "%.*s%.*s%.*s", (int)(brace - p), p, (int)alen, a,
                             (int)(p + n - close - 1), close + 1);
                    add_row(rows, path, strlen(path));
                    a += alen + 1;
                }
            } else {
                add_row(rows, p, n);
            }
        }
        line = eol ? eol + 1 : NULL;
    }
}

static bool rows_have(const struct endpoint_rows *rows, const char *path)
{
    for (int i = 0; i < rows->count; i++)
        if (strcmp(rows->path[i], path) == 0)
            return true;
    return false;
}

Test(docs, every_served_route_is_in_the_readmes_one_endpoint_table)
{
    char *readme = mg_test_read_file(README);
    cr_assert(readme);
    struct endpoint_rows rows;
    endpoint_rows(readme, &rows);
    cr_expect_eq(rows.tables, 1,
                 "the endpoint table of README.md is broken into %d tables (text between rows?)",
                 rows.tables);
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        char want[160];
        normalize(mg_routes[i].template, strlen(mg_routes[i].template), want, sizeof want);
        cr_expect(rows_have(&rows, want), "README.md's endpoint table has no row for %s%s",
                  mg_routes[i].template[0] == '/' ? "GET " : "", mg_routes[i].template);
    }
    /* And no row names a route that is not served. */
    for (int r = 0; r < rows.count; r++) {
        bool served = false;
        for (unsigned i = 0; i < mg_route_table_len && !served; i++) {
            char have[160];
            normalize(mg_routes[i].template, strlen(mg_routes[i].template), have, sizeof have);
            served = strcmp(have, rows.path[r]) == 0;
        }
        cr_expect(served, "README.md's endpoint table lists GET %s, which no route serves",
                  rows.path[r]);
    }
    free(readme);
}

/* The check itself: a missing row, and a table broken by a paragraph, are caught. */
Test(docs, the_endpoint_check_catches_a_missing_row_and_a_broken_table)
{
    struct endpoint_rows rows;
    endpoint_rows(
        "x\n## Endpoints\n\n| endpoint | what |\n|---|---|\n"
        "| `GET /api/nodes/{pubkey}` | a |\n| `GET /api/config/{client,map}` | b |\n"
        "\nA paragraph.\n| `GET /api/stats?x=1` | c |\n\n## Next\n| `GET /api/perf` | d |\n",
        &rows);
    cr_expect_eq(rows.tables, 2);
    cr_assert_eq(rows.count, 4);
    cr_expect(rows_have(&rows, "/api/nodes/:"));
    cr_expect(rows_have(&rows, "/api/config/client"));
    cr_expect(rows_have(&rows, "/api/config/map"));
    cr_expect(rows_have(&rows, "/api/stats"));
    cr_expect(!rows_have(&rows, "/api/perf"), "a row outside the section counted");
}

/* ---- documented defaults ---------------------------------------------------------------- */

/* The first word of text (up to a blank or the end), without the punctuation that ends a
 * sentence or clause, and with "empty" (any case) and "(empty)" as "". */
static void first_word(const char *text, char *out, size_t cap)
{
    while (*text == ' ' || *text == '`')
        text++;
    size_t n = strcspn(text, " \t\n`");
    while (n && strchr(".,;:)", text[n - 1]))
        n--;
    snprintf(out, cap, "%.*s", (int)n, text);
    if (strcasecmp(out, "empty") == 0 || strcmp(out, "(empty") == 0 || strcmp(out, "(derived") == 0)
        out[0] = '\0';
}

/* Words of prose: the text with every run of blanks one space. */
static void squeeze(const char *text, size_t len, char *out, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; i < len && j + 1 < cap; i++) {
        char c = text[i] == '\n' || text[i] == '\t' ? ' ' : text[i];
        if (c == ' ' && (j == 0 || out[j - 1] == ' '))
            continue;
        out[j++] = c;
    }
    out[j] = '\0';
}

/*
 * The default a sentence states: "X (default)" or "X (the default)" gives X; else the word
 * after the first "default" (any case; "default:" too). False when it states none.
 */
static bool stated_default(const char *prose, char *out, size_t cap)
{
    for (const char *p = prose; (p = strcasestr(p, "default")) != NULL; p += 7) {
        bool word = (p == prose || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) &&
                    !(isalnum((unsigned char)p[7]) || p[7] == '_');
        if (!word)
            continue;
        /* "X (default)" or "X (the default)": the word before the parenthesis. */
        const char *open = p - 1 > prose && p[-1] == '('                       ? p - 1
                           : p - 5 >= prose && strncmp(p - 5, "(the ", 5) == 0 ? p - 5
                                                                               : NULL;
        if (open) {
            const char *e = open - 1;
            while (e > prose && *e == ' ')
                e--;
            const char *b = e;
            while (b > prose && b[-1] != ' ')
                b--;
            char word_before[128];
            snprintf(word_before, sizeof word_before, "%.*s", (int)(e - b + 1), b);
            first_word(word_before, out, cap);
            return true;
        }
        const char *after = p + 7;
        if (*after == ':')
            after++;
        first_word(after, out, cap);
        return true;
    }
    return false;
}

/* One documented default against the config table's. */
static void expect_default(const char *where, const struct mg_config_var *v, const char *documented)
{
    char code[128];
    first_word(v->default_value, code, sizeof code);
    cr_expect_str_eq(documented, code, "%s gives %s the default \"%s\"; the code: \"%s\"", where,
                     v->name, documented, code);
}

/* README.md's configuration table: "| `NAME` | default | range | what |". */
static int check_readme(const char *readme)
{
    int checked = 0;
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        if (!v->default_value)
            continue;
        char start[128];
        snprintf(start, sizeof start, "\n| `%s` | ", v->name);
        const char *row = strstr(readme, start);
        cr_expect_not_null(row, "README.md's configuration table has no row for %s", v->name);
        if (!row)
            continue;
        char documented[128];
        first_word(row + strlen(start), documented, sizeof documented);
        expect_default("README.md", v, documented);
        checked++;
    }
    return checked;
}

/* etc/meshgate.env: the comment paragraph above "NAME=" or "#NAME=" states the default, or the
 * commented-out assignment shows it. */
static int check_env_file(const char *env)
{
    int checked = 0;
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        if (!v->default_value)
            continue;
        char key[128];
        snprintf(key, sizeof key, "%s=", v->name);
        const char *line = NULL;
        for (const char *p = strstr(env, key); p; p = strstr(p + 1, key))
            if ((p > env && p[-1] == '\n') || (p > env + 1 && p[-1] == '#' && p[-2] == '\n')) {
                line = p[-1] == '#' ? p - 1 : p;
                break;
            }
        cr_expect_not_null(line, "etc/meshgate.env has no line %s...", key);
        if (!line)
            continue;
        /* The comment lines right above it. */
        const char *top = line;
        while (top > env) {
            const char *prev = top - 1;
            while (prev > env && prev[-1] != '\n')
                prev--;
            if (prev[0] != '#' || strncmp(prev, "#MESHGATE_", 10) == 0 || prev + 1 >= top - 1)
                break;
            top = prev;
        }
        char text[8192], prose[8192];
        size_t n = 0;
        for (const char *p = top; p < line && n + 1 < sizeof text; p++)
            if (!(*p == '#' && (p == top || p[-1] == '\n')))
                text[n++] = *p;
        squeeze(text, n, prose, sizeof prose);
        char documented[128];
        if (!stated_default(prose, documented, sizeof documented)) {
            if (line[0] != '#')
                continue; /* a value to set, not a default */
            first_word(line + 1 + strlen(key), documented, sizeof documented);
        }
        expect_default("etc/meshgate.env", v, documented);
        checked++;
    }
    return checked;
}

/* meshgate(8): the ".It Ev NAME" paragraph, macros dropped, states the default. */
static int check_man_page(const char *page)
{
    int checked = 0;
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        if (!v->default_value)
            continue;
        char start[128];
        snprintf(start, sizeof start, "\n.It Ev %s\n", v->name);
        const char *item = strstr(page, start);
        cr_expect_not_null(item, "meshgate(8) has no .It Ev %s", v->name);
        if (!item)
            continue;
        item += strlen(start);
        const char *end = item;
        while (*end && strncmp(end, ".It ", 4) != 0 && strncmp(end, ".El", 3) != 0) {
            const char *eol = strchr(end, '\n');
            end = eol ? eol + 1 : end + strlen(end);
        }
        char text[8192], prose[8192];
        size_t n = 0;
        for (const char *line = item; line < end;) {
            const char *eol = strchr(line, '\n');
            size_t len = (size_t)((eol ? eol : end) - line);
            const char *p = line;
            if (*p == '.') { /* a macro line: its arguments are the words */
                p += strcspn(p, " \n");
                len -= (size_t)(p - line);
            }
            if (n + len + 2 < sizeof text) {
                memcpy(text + n, p, len);
                n += len;
                text[n++] = ' ';
            }
            line = eol ? eol + 1 : end;
        }
        squeeze(text, n, prose, sizeof prose);
        char documented[128];
        if (!stated_default(prose, documented, sizeof documented))
            continue;
        expect_default("meshgate(8)", v, documented);
        checked++;
    }
    return checked;
}

Test(docs, every_documented_default_is_the_codes)
{
    char *readme = mg_test_read_file(README);
    char *env = mg_test_read_file(ENV_FILE);
    char *page = mg_test_read_file(MESHGATE_8);
    cr_assert(readme && env && page);
    int vars = 0;
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++)
        vars += v->default_value != NULL;
    cr_expect_eq(check_readme(readme), vars);
    cr_expect_eq(check_env_file(env), vars);
    int in_man = check_man_page(page);
    cr_expect_geq(in_man, vars * 3 / 4, "only %d of %d defaults found in meshgate(8)", in_man,
                  vars);
    free(readme);
    free(env);
    free(page);
}

/* The header of etc/meshgate.env names every variable a reload cannot change (but
 * MESHGATE_ENV_FILE, which is not set in the file). */
Test(docs, the_environment_file_lists_every_restart_only_variable)
{
    char *env = mg_test_read_file(ENV_FILE);
    cr_assert(env);
    const char *from = strstr(env, "These need a restart");
    const char *to = from ? strstr(from, "Everything else below") : NULL;
    cr_assert(from && to, "etc/meshgate.env has no list of restart-only variables");
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        if (v->reload == MG_RELOAD_LIVE || strcmp(v->name, "MESHGATE_ENV_FILE") == 0)
            continue;
        size_t n = strlen(v->name);
        bool listed = false;
        for (const char *p = from; !listed && (p = strstr(p, v->name)) != NULL && p < to; p += n)
            listed = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        cr_expect(listed, "etc/meshgate.env does not list %s among the restart-only variables",
                  v->name);
    }
    free(env);
}

/* The check itself: each way a default is written is read, and a wrong one is told apart. */
Test(docs, stated_defaults_are_read_as_written)
{
    static const char *const cases[][2] = {
        {"1 to 1024, default 16.", "16"},
        {"0 to 64 or auto, default auto : half the workers", "auto"},
        {"Empty (the default): no agent port.", ""},
        {"auto (default): half the workers", "auto"},
        {"Default empty: off.", ""},
        {"Default 127.0.0.1:8080 . Ignored when", "127.0.0.1:8080"},
        {"0 to 86400000, default 300000 (5 minutes).", "300000"},
        {"the MESHGATE_DEFAULT_X variable, default 3", "3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[128];
        cr_assert(stated_default(cases[i][0], out, sizeof out), "%s", cases[i][0]);
        cr_expect_str_eq(out, cases[i][1], "\"%s\"", cases[i][0]);
    }
    char out[128];
    cr_expect(!stated_default("no statement here", out, sizeof out));
}

/* ---- make run ------------------------------------------------------------------------------ */

Test(docs, make_run_names_its_database_as_corescope_does_and_says_how_to_serve_the_front_end)
{
    char cmd[1024], out[1 << 16];
    snprintf(cmd, sizeof cmd,
             "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n -s --no-print-directory -C '%s' run "
             "BUILD=/nonexistent-meshgate-build "
             "MESHGATE_LISTEN=127.0.0.1:1 2>&1 | grep -E 'MESHGATE_DB=|PUBLIC_DIR|own page'",
             MESHGATE_SOURCE_DIR);
    mg_test_shell(cmd, out, sizeof out);
    cr_expect(strstr(out, "MESHGATE_DB=/nonexistent-meshgate-build/meshcore.db"), "%s", out);
    cr_expect(strstr(out, "MESHGATE_PUBLIC_DIR=/path/to/CoreScope/public make run"), "%s", out);
    cr_expect(strstr(out, "meshgate's own page"), "%s", out);
}

/* make's install step (issue 27, item 2): no recommended packages (chromium's would bring
 * avahi-daemon), a lock timeout instead of failing while another apt runs, and the services
 * it installed just now stopped and disabled again. */
Test(docs, make_installs_packages_without_recommends_waiting_for_the_apt_lock)
{
    char cmd[1024], out[1 << 16];
    snprintf(
        cmd, sizeof cmd,
        "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n -s --no-print-directory -C '%s' deps 2>&1",
        MESHGATE_SOURCE_DIR);
    mg_test_shell(cmd, out, sizeof out);
    cr_expect(strstr(out, "apt-get -o DPkg::Lock::Timeout=300 update"), "%s", out);
    cr_expect(strstr(out, "install -y -qq --no-install-recommends"), "%s", out);
    cr_expect(strstr(out, "systemctl disable --now"), "%s", out);
    cr_expect(strstr(out, "haproxy avahi-daemon"), "%s", out);
}
