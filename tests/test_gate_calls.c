/* SPDX-License-Identifier: ISC */
/*
 * A gate's admission is read in one file: no file of workers/ but admission.c calls a
 * function that changes a gate (takes, joins, polls, cancels, releases, follows, counts or
 * gives back a permit, a place, a rate token, a connection, a tunnel or a breaker's verdict).
 * The functions are every function the gates' headers in shm/ declare (gates.h's sources),
 * less the ones that only read (read, records, state names, Retry-After, sizes) and the
 * master's (init, configure, reclaim). A call added elsewhere fails here, naming it.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(gate_calls, .timeout = 60);

static const char *const gate_headers[] = {"gate_fifo.h",  "gate_diag.h", "client_limit.h",
                                           "conn_limit.h", "breaker.h",   "upstream_gate.h"};

/* Functions of those headers that change nothing a request holds. */
static const char *const readers[] = {
    "_read",   "_records",   "_state_name", "_retry_after",   "_sets_for",
    "_init",   "_configure", "_reclaim",    "_set_cap",       "_set_rate",
    "_set_of", "_tracked",   "_clients",    "_retry_after_s", "_retry_after_seconds"};

#define NAMES_MAX 128
static char names[NAMES_MAX][64];
static unsigned name_count;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    cr_assert_not_null(s);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static bool is_reader(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++) {
        size_t m = strlen(readers[i]);
        if (n > m && strcmp(name + n - m, readers[i]) == 0)
            return true;
    }
    return false;
}

/* Every function a header declares: "mg_name(" at the start of a declaration's name. */
static void collect(const char *header)
{
    char path[512];
    snprintf(path, sizeof path, "%s/shm/%s", MESHGATE_SOURCE_DIR, header);
    char *s = slurp(path);
    for (char *p = s; (p = strstr(p, "mg_")) != NULL; p++) {
        if (p > s && (isalnum((unsigned char)p[-1]) || p[-1] == '_'))
            continue;
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
        /* a declaration: the name follows a type at the start of a line */
        const char *line = p;
        while (line > s && line[-1] != '\n')
            line--;
        if (p[n] != '(' || line == p || line[0] == ' ' || line[0] == '#' || line[0] == '/' ||
            n >= sizeof names[0])
            continue;
        char name[64];
        memcpy(name, p, n);
        name[n] = '\0';
        bool known = false;
        for (unsigned i = 0; i < name_count && !known; i++)
            known = strcmp(names[i], name) == 0;
        if (!known && !is_reader(name) && name_count < NAMES_MAX)
            snprintf(names[name_count++], sizeof names[0], "%s", name);
    }
    free(s);
}

static char found[4096];

static int check_file(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)ftw;
    size_t len = strlen(path);
    if (type != FTW_F || len < 2 || strcmp(path + len - 2, ".c") != 0)
        return 0;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (strcmp(base, "admission.c") == 0)
        return 0;
    char *s = slurp(path);
    for (unsigned i = 0; i < name_count; i++) {
        size_t n = strlen(names[i]);
        for (const char *p = s; (p = strstr(p, names[i])) != NULL; p += n) {
            if ((p > s && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) || p[n] != '(')
                continue;
            size_t used = strlen(found);
            snprintf(found + used, sizeof found - used, "%s calls %s\n", base, names[i]);
        }
    }
    free(s);
    return 0;
}

Test(gate_calls, no_gate_is_entered_outside_admission)
{
    for (size_t i = 0; i < sizeof gate_headers / sizeof gate_headers[0]; i++)
        collect(gate_headers[i]);
    /* The list is the headers' own: it holds the ones this check is about. */
    const char *const must[] = {
        "mg_fifo_gate_join_ready", "mg_fifo_gate_release",   "mg_fifo_gate_try_background",
        "mg_diag_gate_try",        "mg_client_limit_take",   "mg_conn_limit_open",
        "mg_breaker_allow",        "mg_upstream_tunnel_open"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        bool in = false;
        for (unsigned k = 0; k < name_count && !in; k++)
            in = strcmp(names[k], must[i]) == 0;
        cr_assert(in, "%s was not found in the gates' headers", must[i]);
    }
    found[0] = '\0';
    cr_assert_eq(nftw(MESHGATE_SOURCE_DIR "/workers", check_file, 16, FTW_PHYS), 0);
    cr_expect_str_empty(found, "gate functions called outside workers/admission.c:\n%s", found);
}
