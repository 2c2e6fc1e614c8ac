/* SPDX-License-Identifier: ISC */
/*
 * meshgate-shm: shows a running meshgate's shared segment (counters, routes, slow requests,
 * shared values, the scoreboard) without touching the server: it copies the segment and
 * renders the copy (see shmdump.h). It never writes to the segment, takes no lock and
 * never waits for the server.
 *
 * Exit codes:
 *   0   the report was written (with --watch: interrupted, or --count reports written)
 *   1   no such segment (name it with --name, or MESHGATE_SHM_NAME / MESHGATE_LISTEN, read
 *       from the environment, then from MESHGATE_ENV_FILE or /etc/meshgate/meshgate.env)
 *   2   the segment exists but is not understood: not a meshgate segment, another layout
 *       version, or sizes that differ from this build's
 *   3   another system error (permission denied, out of memory, output not writable)
 *   64  bad command line, a bad MESHGATE_SHM_NAME / MESHGATE_LISTEN, or an environment file
 *       that cannot be read or parsed
 */
#include "clock.h"
#include "shmdump.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 64
/* Where the unit (etc/meshgate.service) has the server's environment file. */
#define MESHGATE_SHM_ENV_FILE "/etc/meshgate/meshgate.env"
#define WATCH_MIN_SECONDS 0.1
#define WATCH_MAX_SECONDS 3600.0
#define COUNT_MAX 1000000000L

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: meshgate-shm [--name /NAME] [--json] [--watch SECONDS [--count N]]\n"
            "\n"
            "Shows the live state of a running meshgate from its shared-memory segment:\n"
            "header, effective configuration, counters, routes, slow requests, shared values\n"
            "and the scoreboard of workers. The segment is copied and never written; no lock\n"
            "is taken and the server is never waited for.\n"
            "\n"
            "  -n, --name /NAME     the segment to read. Without it: MESHGATE_SHM_NAME when set\n"
            "                       and not empty, else the name meshgate derives from\n"
            "                       MESHGATE_LISTEN (default 127.0.0.1:8080); each read from\n"
            "                       the environment, else from the server's environment file:\n"
            "                       MESHGATE_ENV_FILE, or when it is not set %s\n"
            "                       if it exists (set and empty: no file)\n"
            "  -j, --json           one JSON object instead of text (shape: tools/shmdump.c)\n"
            "  -w, --watch SECONDS  redraw the report every SECONDS (%g to %g, decimals\n"
            "                       allowed, e.g. 0.5) until interrupted or the segment is\n"
            "                       gone; with --json, one object per line\n"
            "  -c, --count N        with --watch: stop after N reports\n"
            "  -h, --help           this text\n"
            "\n"
            "Scoreboard letters: . empty, S starting, _ idle, R reading, H handling, W writing,\n"
            "K keepalive, G draining (gracefully finishing), D dead (reaped, to be respawned).\n"
            "\n"
            "Exit codes: 0 ok; 1 no such segment; 2 the segment is not understood (not a\n"
            "meshgate segment, another layout version, sizes differ); 3 another system error\n"
            "(permission denied...); 64 bad usage or an environment file that cannot be read.\n",
            MESHGATE_SHM_ENV_FILE, WATCH_MIN_SECONDS, WATCH_MAX_SECONDS);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "meshgate-shm: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see meshgate-shm --help)\n");
    va_end(ap);
    return EXIT_USAGE;
}

static int parse_seconds(const char *text, double *seconds)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v < WATCH_MIN_SECONDS ||
        v > WATCH_MAX_SECONDS)
        return -1;
    *seconds = v;
    return 0;
}

static int parse_count(const char *text, long *count)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < 1 || v > COUNT_MAX)
        return -1;
    *count = v;
    return 0;
}

static int write_out(struct mg_buf *b)
{
    if (b->failed) {
        fprintf(stderr, "meshgate-shm: out of memory while writing the report\n");
        return MG_SHMDUMP_SYSTEM_ERROR;
    }
    if (fwrite(b->data, 1, b->len, stdout) != b->len || fflush(stdout) != 0) {
        fprintf(stderr, "meshgate-shm: cannot write the report: %s\n", strerror(errno));
        return MG_SHMDUMP_SYSTEM_ERROR;
    }
    return 0;
}

/* Sleeps until deadline on CLOCK_MONOTONIC; returns early when asked to stop. */
static void sleep_until(int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = deadline_ns / MG_NS_PER_SEC,
                          .tv_nsec = deadline_ns % MG_NS_PER_SEC};
    while (!stop_requested && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"name", required_argument, NULL, 'n'},  {"json", no_argument, NULL, 'j'},
        {"watch", required_argument, NULL, 'w'}, {"count", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *name = NULL;
    bool json = false, watch = false;
    double seconds = 0;
    long count = 0;
    const char *count_text = NULL;
    char seconds_range[64];
    snprintf(seconds_range, sizeof seconds_range, "a number of seconds from %g to %g (e.g. 0.5)",
             WATCH_MIN_SECONDS, WATCH_MAX_SECONDS);

    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":n:jw:c:h", options, NULL)) != -1) {
        switch (opt) {
        case 'n':
            name = optarg;
            break;
        case 'j':
            json = true;
            break;
        case 'w':
            if (parse_seconds(optarg, &seconds) < 0)
                return usage_error("--watch %s: must be %s", optarg, seconds_range);
            watch = true;
            break;
        case 'c':
            if (parse_count(optarg, &count) < 0)
                return usage_error("--count %s: must be a whole number of reports from 1 to %ld",
                                   optarg, COUNT_MAX);
            count_text = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            return usage_error("%s needs a value%s", argv[optind - 1],
                               optopt == 'w' ? ": seconds between reports"
                               : optopt == 'c'
                                   ? ": the number of reports"
                                   : ": the segment's name, e.g. /meshgate-127.0.0.1-8080");
        default: {
            char shown[8];
            if (optopt)
                snprintf(shown, sizeof shown, "-%c", optopt);
            return usage_error("unknown option %s%s", optopt ? shown : argv[optind - 1],
                               ": accepted are --name, --json, --watch, --count and --help");
        }
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument %s%s", argv[optind],
                           ": name the segment with --name /NAME");
    if (count && !watch)
        return usage_error("--count %s: only together with --watch SECONDS", count_text);

    struct mg_shmdump_names names;
    char err[8192];
    if (mg_shmdump_resolve_names(name, NULL, NULL, MESHGATE_SHM_ENV_FILE, &names, err, sizeof err) <
        0) {
        fprintf(stderr, "meshgate-shm: %s\n", err);
        return EXIT_USAGE;
    }

    if (watch) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop; /* no SA_RESTART: the sleep must end */
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    bool tty = isatty(STDOUT_FILENO);
    int64_t interval_ns = (int64_t)llround(seconds * (double)MG_NS_PER_SEC);
    int64_t next_ns = mg_monotonic_ns();
    struct mg_buf out;
    mg_buf_init(&out);
    int rc = 0;
    for (long reports = 0; !stop_requested; reports++) {
        struct mg_shmdump dump;
        enum mg_shmdump_status st = reports == 0
                                        ? mg_shmdump_take_first(&dump, &names, err, sizeof err)
                                        : mg_shmdump_take(&dump, names.name[0], err, sizeof err);
        if (st != MG_SHMDUMP_OK) {
            if (reports > 0 && st == MG_SHMDUMP_MISSING)
                fprintf(stderr, "meshgate-shm: segment %s is gone\n", names.name[0]);
            else
                fprintf(stderr, "meshgate-shm: %s\n", err);
            rc = (int)st;
            break;
        }
        if (reports == 0) /* from now on, the segment found */
            snprintf(names.name[0], sizeof names.name[0], "%s", dump.name);
        mg_buf_reset(&out);
        if (json) {
            mg_shmdump_render_json(&dump, &out);
            mg_buf_putc(&out, '\n');
        } else {
            if (watch && tty)
                mg_buf_puts(&out, "\033[H\033[2J");
            else if (reports > 0)
                mg_buf_puts(&out, "\n------------------------------------------------------------"
                                  "--------------------\n\n");
            mg_shmdump_render_text(&dump, &out);
        }
        mg_shmdump_release(&dump);
        rc = write_out(&out);
        if (rc != 0 || !watch || (count && reports + 1 >= count))
            break;
        next_ns += interval_ns;
        int64_t now = mg_monotonic_ns();
        if (next_ns < now)
            next_ns = now; /* fell behind (a suspended terminal): do not burst */
        sleep_until(next_ns);
    }
    mg_buf_free(&out);
    return rc;
}
