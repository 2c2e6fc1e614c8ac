/* SPDX-License-Identifier: ISC */
/*
 * meshgate-fixture: writes a CoreScope database of any size for tests and benchmarks, or a
 * freshened copy of an existing one (timestamps shifted so the newest are now).
 *
 * Exit status: 0 written, 64 (EX_USAGE) bad arguments, 1 the database could not be written.
 */
#include "fixture.h"

#include <sqlite3.h>

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 64

static const char usage_text[] =
    "usage: meshgate-fixture --out PATH [options]\n"
    "       meshgate-fixture --freshen SRC --out PATH [--now UNIX] [--force]\n"
    "\n"
    "Writes a CoreScope database (SQLite, WAL mode) with realistic MeshCore traffic around\n"
    "the SF Bay Area. The same seed, sizes, days, schema and --now give the same rows.\n"
    "\n"
    "  --out PATH            the database file to write (required)\n"
    "  --seed N              random seed, 0..2^64-1 (default 1)\n"
    "  --observations N      rows of observations (default 100000)\n"
    "  --transmissions N     rows of transmissions (default observations / --obs-per-tx)\n"
    "  --obs-per-tx N        observations per transmission on average, 1..1000 (default 4;\n"
    "                        not with --transmissions)\n"
    "  --nodes N             rows of nodes, 10..20000 (default observations / 250, 60..2000)\n"
    "  --observers N         rows of observers, 1..2000 (default nodes / 12, 4..150)\n"
    "  --days N              traffic spans the last N days, 1..365 (default 7)\n"
    "  --schema migrated|base\n"
    "                        migrated (the default): the schema CoreScope's migration leaves,\n"
    "                        as in every live database; base: the shape before it (no\n"
    "                        inactive_nodes, _migrations or the columns the migration adds)\n"
    "  --now UNIX            the newest timestamp, in Unix seconds (default: the current time)\n"
    "  --corescope-hashes    write each transmission's hash as CoreScope's content hash of its\n"
    "                        raw_hex, which CoreScope's server keeps (without it, the server\n"
    "                        rewrites every hash when it loads the file: minutes at 2M\n"
    "                        observations). A payload whose hash an earlier transmission has\n"
    "                        is drawn again. Default: a 64-bit mix of the seed and the id\n"
    "  --force               replace PATH if it exists\n"
    "  --freshen SRC         write a copy of SRC to PATH with its timestamps shifted so that\n"
    "                        the newest are --now (SRC is never changed)\n"
    "  --help                show this text\n";

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("meshgate-fixture: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(see meshgate-fixture --help)\n", stderr);
    va_end(ap);
    exit(EXIT_USAGE);
}

/* A whole decimal number in [min, max], or a usage error naming the option. */
static long long parse_integer(const char *option, const char *value, long long min, long long max)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    bool digits = value[0] != '\0' && (value[0] == '-' || (value[0] >= '0' && value[0] <= '9'));
    if (!digits || errno != 0 || end == value || *end != '\0' || v < min || v > max)
        usage_error("%s '%s': expected a whole number from %lld to %lld", option, value, min, max);
    return v;
}

static uint64_t parse_seed(const char *value)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (value[0] < '0' || value[0] > '9' || errno != 0 || *end != '\0')
        usage_error("--seed '%s': expected a whole number from 0 to 18446744073709551615", value);
    return (uint64_t)v;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* On a terminal only (stderr), one line redrawn at most 5 times a second: a 2-million-row
 * file takes half a minute, and output that is redirected stays exactly the summary. */
struct progress {
    struct timespec started;
    double last_s;
    bool shown;
};

static void show_progress(void *arg, const char *stage, long done, long total)
{
    struct progress *p = arg;
    double now = seconds_since(&p->started);
    bool indexes = strcmp(stage, "indexes") == 0;
    if (p->shown && !indexes && now - p->last_s < 0.2)
        return;
    p->last_s = now;
    p->shown = true;
    if (indexes)
        fprintf(stderr,
                "\r\033[Kmeshgate-fixture: %ld observations written, building indexes "
                "(%.0f s)",
                total, now);
    else
        fprintf(stderr, "\r\033[Kmeshgate-fixture: %ld of %ld observations (%.0f %%, %.0f s)", done,
                total, total > 0 ? 100.0 * (double)done / (double)total : 100.0, now);
    fflush(stderr);
}

static double file_mb(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / (1024.0 * 1024.0) : 0.0;
}

static void format_utc(int64_t unix_secs, char *out, size_t n)
{
    time_t t = (time_t)unix_secs;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(out, n, "%" PRId64, unix_secs);
}

static long long count_rows(const char *path, const char *table)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long long n = -1;
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

enum option_id {
    OPT_OUT = 1,
    OPT_SEED,
    OPT_NODES,
    OPT_OBSERVERS,
    OPT_TRANSMISSIONS,
    OPT_OBSERVATIONS,
    OPT_OBS_PER_TX,
    OPT_DAYS,
    OPT_SCHEMA,
    OPT_NOW,
    OPT_FORCE,
    OPT_FRESHEN,
    OPT_CORESCOPE_HASHES,
    OPT_HELP,
};

static const struct option long_options[] = {
    {"out", required_argument, NULL, OPT_OUT},
    {"seed", required_argument, NULL, OPT_SEED},
    {"nodes", required_argument, NULL, OPT_NODES},
    {"observers", required_argument, NULL, OPT_OBSERVERS},
    {"transmissions", required_argument, NULL, OPT_TRANSMISSIONS},
    {"observations", required_argument, NULL, OPT_OBSERVATIONS},
    {"obs-per-tx", required_argument, NULL, OPT_OBS_PER_TX},
    {"days", required_argument, NULL, OPT_DAYS},
    {"schema", required_argument, NULL, OPT_SCHEMA},
    {"now", required_argument, NULL, OPT_NOW},
    {"force", no_argument, NULL, OPT_FORCE},
    {"freshen", required_argument, NULL, OPT_FRESHEN},
    {"corescope-hashes", no_argument, NULL, OPT_CORESCOPE_HASHES},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* What the command line asks for. */
struct args {
    struct mg_fixture_options opt;
    const char *out, *freshen_src;
    const char *generation_option; /* the last option that only a generation takes */
};

/* An option that shapes a generation (not --freshen); returns its name, NULL for another. */
static const char *apply_generation_option(struct mg_fixture_options *opt, int id,
                                           const char *value)
{
    switch (id) {
    case OPT_SEED:
        opt->seed = parse_seed(value);
        return "--seed";
    case OPT_NODES:
        opt->nodes =
            (long)parse_integer("--nodes", value, MG_FIXTURE_MIN_NODES, MG_FIXTURE_MAX_NODES);
        return "--nodes";
    case OPT_OBSERVERS:
        opt->observers = (long)parse_integer("--observers", value, 1, MG_FIXTURE_MAX_OBSERVERS);
        return "--observers";
    case OPT_TRANSMISSIONS:
        opt->transmissions =
            (long)parse_integer("--transmissions", value, 1, MG_FIXTURE_MAX_OBSERVATIONS);
        return "--transmissions";
    case OPT_OBSERVATIONS:
        opt->observations =
            (long)parse_integer("--observations", value, 1, MG_FIXTURE_MAX_OBSERVATIONS);
        return "--observations";
    case OPT_OBS_PER_TX:
        opt->obs_per_tx = (long)parse_integer("--obs-per-tx", value, 1, MG_FIXTURE_MAX_OBS_PER_TX);
        return "--obs-per-tx";
    case OPT_DAYS:
        opt->days = (int)parse_integer("--days", value, 1, MG_FIXTURE_MAX_DAYS);
        return "--days";
    case OPT_CORESCOPE_HASHES:
        opt->corescope_hashes = true;
        return "--corescope-hashes";
    case OPT_SCHEMA:
        /* "full" was the name of the migrated shape before it matched CoreScope's. */
        if (strcmp(value, "migrated") == 0 || strcmp(value, "full") == 0)
            opt->schema = MG_FIXTURE_MIGRATED;
        else if (strcmp(value, "base") == 0)
            opt->schema = MG_FIXTURE_BASE;
        else
            usage_error("--schema '%s': expected migrated or base", value);
        return "--schema";
    default:
        return NULL;
    }
}

/* Fills a from the command line; a usage error exits 64. False after --help was printed. */
static bool parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof *a);
    mg_fixture_options_default(&a->opt);
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
        const char *generation = apply_generation_option(&a->opt, c, optarg);
        if (generation != NULL) {
            a->generation_option = generation;
            continue;
        }
        switch (c) {
        case OPT_OUT:
            if (optarg[0] == '\0')
                usage_error("--out '': expected the path of the database file to write");
            a->out = optarg;
            break;
        case OPT_NOW:
            a->opt.now_unix = (int64_t)parse_integer("--now", optarg, 1, INT64_C(253402300799));
            break;
        case OPT_FORCE:
            a->opt.overwrite = true;
            break;
        case OPT_FRESHEN:
            if (optarg[0] == '\0')
                usage_error("--freshen '': expected the path of an existing CoreScope database");
            a->freshen_src = optarg;
            break;
        case OPT_HELP:
            fputs(usage_text, stdout);
            return false;
        default:
            if (optopt != 0 && optopt < OPT_HELP + 1)
                usage_error("%s needs a value", argv[optind - 1]);
            usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        usage_error("unexpected argument '%s': every value belongs to an option", argv[optind]);
    if (a->out == NULL)
        usage_error("--out is required: the path of the database file to write");
    return true;
}

/* --freshen: a copy of the source with its times shifted; never the source itself. */
static int run_freshen(const struct args *a, const struct timespec *t0)
{
    const char *out = a->out;
    if (a->generation_option != NULL)
        usage_error("%s does not apply to --freshen, which copies an existing database",
                    a->generation_option);
    struct stat src_st, out_st;
    if (stat(a->freshen_src, &src_st) == 0 && stat(out, &out_st) == 0 &&
        src_st.st_dev == out_st.st_dev && src_st.st_ino == out_st.st_ino)
        usage_error("--out '%s' is the --freshen source; freshen writes a copy and never "
                    "changes its source",
                    out);
    if (a->opt.overwrite) {
        struct stat st;
        if (lstat(out, &st) == 0 && !S_ISREG(st.st_mode))
            usage_error("--out '%s': exists and is not a regular file", out);
        static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
        for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
            char name[4096];
            if (snprintf(name, sizeof name, "%s%s", out, suffixes[i]) < (int)sizeof name)
                unlink(name);
        }
    }
    char err[512];
    int64_t now = a->opt.now_unix > 0 ? a->opt.now_unix : (int64_t)time(NULL);
    if (mg_fixture_freshen(a->freshen_src, out, now, err, sizeof err) != 0) {
        fprintf(stderr, "meshgate-fixture: %s\n", err);
        return 1;
    }
    char when[40];
    format_utc(now, when, sizeof when);
    printf("meshgate-fixture: freshened %s into %s (newest times now %s): %.1f MB in %.2f s\n",
           a->freshen_src, out, when, file_mb(out), seconds_since(t0));
    return 0;
}

/* A generation, with a progress line on a terminal and a summary of what was written. */
static int run_generate(const struct args *a, const struct timespec *t0)
{
    char err[512];
    struct mg_fixture_options resolved;
    if (mg_fixture_resolve(&a->opt, &resolved, err, sizeof err) != 0)
        usage_error("--%s", err);
    struct progress bar = {.started = *t0};
    if (isatty(STDERR_FILENO)) {
        resolved.progress = show_progress;
        resolved.progress_arg = &bar;
    }
    int generated = mg_fixture_generate(a->out, &resolved, err, sizeof err);
    if (bar.shown)
        fputs("\r\033[K", stderr); /* the progress line goes; the summary follows */
    if (generated != 0) {
        fprintf(stderr, "meshgate-fixture: %s\n", err);
        return 1;
    }
    double took = seconds_since(t0);
    char when[40];
    format_utc(resolved.now_unix, when, sizeof when);
    printf("meshgate-fixture: wrote %s (%s schema, seed %" PRIu64 "): %ld nodes, %ld observers, "
           "%ld transmissions, %ld observations, %lld neighbor edges over %d days to %s; "
           "%.1f MB in %.2f s\n",
           a->out, resolved.schema == MG_FIXTURE_BASE ? "base" : "migrated", resolved.seed,
           resolved.nodes, resolved.observers, resolved.transmissions, resolved.observations,
           count_rows(a->out, "neighbor_edges"), resolved.days, when, file_mb(a->out), took);
    return 0;
}

int main(int argc, char **argv)
{
    struct args a;
    if (!parse_args(argc, argv, &a))
        return 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    return a.freshen_src != NULL ? run_freshen(&a, &t0) : run_generate(&a, &t0);
}
