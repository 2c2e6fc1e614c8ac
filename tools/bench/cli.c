/* SPDX-License-Identifier: ISC */
/*
 * bench/cli.c: the command line as a whole: the options table, --help, the checks only the
 * whole line can make, and the line quoted back for the report.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool shell_safe(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr("_-./:=@%+,", *s)))
            return false;
    return true;
}

/* The arguments as one line a shell reads back the same: quoted where they need it. */
static char *quote_command(int argc, char *const *argv)
{
    struct mg_buf b;
    mg_buf_init(&b);
    for (int i = 0; i < argc; i++) {
        if (i)
            mg_buf_putc(&b, ' ');
        if (shell_safe(argv[i])) {
            mg_buf_puts(&b, argv[i]);
            continue;
        }
        mg_buf_putc(&b, '\'');
        for (const char *p = argv[i]; *p; p++) {
            if (*p == '\'')
                mg_buf_puts(&b, "'\\''");
            else
                mg_buf_putc(&b, *p);
        }
        mg_buf_putc(&b, '\'');
    }
    mg_buf_cstr(&b);
    if (b.failed) {
        mg_buf_free(&b);
        return NULL;
    }
    return b.data ? b.data : strdup("");
}

/* --- configuration --------------------------------------------------------------------------- */

void mg_bench_config_init(struct mg_bench_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->duration_s = MG_BENCH_DEFAULT_DURATION_S;
    cfg->timeout_ms = MG_BENCH_DEFAULT_TIMEOUT_MS;
    cfg->threads = MG_BENCH_DEFAULT_THREADS;
    cfg->max_requests = MG_BENCH_DEFAULT_MAX_REQUESTS;
    cfg->max_outstanding = MG_BENCH_DEFAULT_MAX_OUTSTANDING;
    cfg->max_unexpected_pct = -1;
    mg_bench_parse_target(MG_BENCH_DEFAULT_TARGET, &cfg->target, NULL, 0);
}

void mg_bench_config_free(struct mg_bench_config *cfg)
{
    for (size_t i = 0; i < cfg->nkeys; i++)
        free(cfg->keys[i]);
    free(cfg->keys);
    free(cfg->keys_path);
    free(cfg->command_line);
    cfg->keys = NULL;
    cfg->nkeys = 0;
    cfg->keys_path = NULL;
    cfg->command_line = NULL;
}

void mg_bench_usage(struct mg_buf *out)
{
    mg_buf_printf(
        out,
        "usage: meshgate-bench --stream SPEC [--stream SPEC]... [--target ADDR:PORT]\n"
        "                      [--header STREAM:'Name: value']... [--keys FILE]\n"
        "                      [--duration SECONDS] [--warmup SECONDS] [--timeout-ms MS]\n"
        "                      [--threads N] [--max-requests N] [--max-outstanding N]\n"
        "                      [--label TEXT] [--json] [--per-second]\n"
        "\n"
        "Sends streams of HTTP GET requests at one meshgate on this machine and reports, per\n"
        "stream: requests sent, responses by status, errors, exact latency percentiles and\n"
        "responses a second. It connects only to 127.0.0.1 or ::1, and every run ends by itself.\n"
        "\n"
        "Streams (NAME: letters, digits, '_', '-', '.'; PATH: starts with '/', may hold {key}):\n"
        "  NAME:PATH:closed:CONNS[:PAUSE_MS]\n"
        "        CONNS kept-alive connections (1 to %u), each sending its next request when the\n"
        "        answer is in, after PAUSE_MS milliseconds (0 to %u, default 0), like wrk\n"
        "  NAME:PATH:open:RATE\n"
        "        RATE requests a second (up to %.0f, decimals allowed) on a fixed schedule,\n"
        "        whatever the answers; idle kept-alive connections are reused, new ones opened\n"
        "        when none is free; latency counts from the scheduled time\n"
        "  NAME:PATH:once:N\n"
        "        N requests (1 to %u) at the start of the window, each on its own connection;\n"
        "        with {key}, each takes the next key, so N distinct keys (a cold-key burst)\n"
        "  e.g. --stream 'cold:/api/nodes/{key}/reach?days=7:once:48' --keys keys.txt\n"
        "\n"
        "Options:\n"
        "  --target ADDR:PORT    127.0.0.1:PORT or [::1]:PORT (default %s); anything else\n"
        "                        is refused, and names are never looked up\n"
        "  --stream SPEC         a stream as above (up to %d)\n"
        "  --header STREAM:LINE  an extra request header for one stream, e.g.\n"
        "                        --header 'user:Authorization: Bearer x' (up to %d a stream;\n"
        "                        Host, Connection, Content-Length, Transfer-Encoding are the\n"
        "                        tool's). The report quotes the command line as given: use test\n"
        "                        credentials only\n"
        "  --keys FILE           what {key} becomes: one key a line, empty lines and # comments\n"
        "                        skipped; closed and open streams take them round-robin, a once\n"
        "                        stream each once (once:N needs N keys)\n"
        "  --duration SECONDS    the measured window (%g to %g, decimals allowed; default %g)\n"
        "  --warmup SECONDS      load before the window, sent but not counted (0 to %g, default "
        "0)\n"
        "  --timeout-ms MS       a request not wholly answered this long after its scheduled\n"
        "                        start is an error (1 to %u, default %u)\n"
        "  --threads N           sending threads sharing out every stream (1 to %u, default %u)\n"
        "  --max-requests N      a stream stops after N counted requests (1 to %llu, default\n"
        "                        %llu); each latency kept takes 8 bytes\n"
        "  --max-outstanding N   open streams: at most N requests in flight; a request due past\n"
        "                        it is not sent and counted as dropped (1 to %u, default %u, or\n"
        "                        less when the open-file limit allows fewer)\n"
        "  --label TEXT          printed at the top of the report, to tell A/B runs apart\n"
        "  --expect STREAM:LIST  what the stream's scenario asks for: statuses (429), classes\n"
        "                        (2xx) and err (timeouts, resets), comma-separated; default 2xx\n"
        "  --max-unexpected-pct PCT\n"
        "                        exit 2 when more than PCT %% of a stream's requests end in what\n"
        "                        its --expect does not list (0 to 100; default: not checked)\n"
        "  --json                one JSON object instead of the table\n"
        "  --chunked             read bodies sent in chunks (Transfer-Encoding: chunked), as\n"
        "                        other servers send them (CoreScope's); meshgate never does\n"
        "  --per-second          also report, per stream, the 200s and the other outcomes\n"
        "                        (statuses and errors) that completed in each whole second of\n"
        "                        the window (answers after the window are in no second)\n"
        "  -h, --help            this text\n"
        "\n"
        "The report: the command line, the settings, then one row per stream:\n"
        "  stream sent 200 429 503 other err p50_ms p95_ms p99_ms max_ms rps\n"
        "where sent = 200 + 429 + 503 + other + err; err is a failed connect, a timeout, a\n"
        "connection closed mid-request, a bad response, or a request still out when the run was\n"
        "interrupted (the notes below the table break it down). Percentiles are exact, by\n"
        "nearest rank over every response (any status) to a request scheduled inside the window;\n"
        "errors are not latencies; with 429 or 503 answers the notes also give 200-only\n"
        "percentiles. rps is responses divided by the window (a once stream: by the time from\n"
        "its burst to its last answer). A closed connection waits %d ms after an error (not a\n"
        "timeout) before its next request. A request on a kept-alive connection that the server\n"
        "closed before answering is sent once more on a new one (noted as retried; GET is safe\n"
        "to repeat); its latency still counts from the first try.\n"
        "\n"
        "A run ends by itself within warm-up + duration + timeout: after the window nothing more\n"
        "is sent, and requests still out are waited for until their timeout. Ctrl-C ends it\n"
        "early: requests still out count as aborted, and the report is printed.\n"
        "\n"
        "Exit codes: 0 done; 1 cannot connect to the target at the start; 2 more unexpected\n"
        "answers than --max-unexpected-pct allows (the report is printed); 64 bad usage (also a\n"
        "non-loopback target, or a run needing more open files than ulimit -n allows); 71 a\n"
        "system error; 130 interrupted (the report is printed).\n",
        MG_BENCH_CONNS_MAX, MG_BENCH_PAUSE_MAX_MS, MG_BENCH_RATE_MAX, MG_BENCH_ONCE_MAX,
        MG_BENCH_DEFAULT_TARGET, MG_BENCH_MAX_STREAMS, MG_BENCH_MAX_HEADERS,
        MG_BENCH_DURATION_MIN_S, MG_BENCH_DURATION_MAX_S, MG_BENCH_DEFAULT_DURATION_S,
        MG_BENCH_WARMUP_MAX_S, MG_BENCH_TIMEOUT_MAX_MS, MG_BENCH_DEFAULT_TIMEOUT_MS,
        MG_BENCH_THREADS_MAX, MG_BENCH_DEFAULT_THREADS,
        (unsigned long long)MG_BENCH_MAX_REQUESTS_MAX,
        (unsigned long long)MG_BENCH_DEFAULT_MAX_REQUESTS, MG_BENCH_OUTSTANDING_MAX,
        MG_BENCH_DEFAULT_MAX_OUTSTANDING, MG_BENCH_ERROR_BACKOFF_MS);
}

enum option_id {
    OPT_TARGET,
    OPT_STREAM,
    OPT_HEADER,
    OPT_KEYS,
    OPT_DURATION,
    OPT_WARMUP,
    OPT_TIMEOUT,
    OPT_THREADS,
    OPT_MAX_REQUESTS,
    OPT_MAX_OUTSTANDING,
    OPT_LABEL,
    OPT_JSON,
    OPT_EXPECT,
    OPT_MAX_UNEXPECTED,
    OPT_CHUNKED,
    OPT_PER_SECOND,
};

static const struct option_def {
    const char *name;
    enum option_id id;
    bool takes_value;
    bool repeatable;
    const char *value_hint; /* for "needs a value" */
} options[] = {
    {"--target", OPT_TARGET, true, false, "127.0.0.1:PORT or [::1]:PORT"},
    {"--stream", OPT_STREAM, true, true, STREAM_FORMS},
    {"--header", OPT_HEADER, true, true, "STREAM:'Name: value'"},
    {"--keys", OPT_KEYS, true, false, "a file of keys, one a line"},
    {"--duration", OPT_DURATION, true, false, "seconds"},
    {"--warmup", OPT_WARMUP, true, false, "seconds"},
    {"--timeout-ms", OPT_TIMEOUT, true, false, "milliseconds"},
    {"--threads", OPT_THREADS, true, false, "a number of threads"},
    {"--max-requests", OPT_MAX_REQUESTS, true, false, "a number of requests"},
    {"--max-outstanding", OPT_MAX_OUTSTANDING, true, false, "a number of requests"},
    {"--label", OPT_LABEL, true, false, "a text"},
    {"--json", OPT_JSON, false, false, NULL},
    {"--chunked", OPT_CHUNKED, false, false, NULL},
    {"--per-second", OPT_PER_SECOND, false, false, NULL},
    {"--expect", OPT_EXPECT, true, true, "STREAM:LIST, e.g. cold:200,429"},
    {"--max-unexpected-pct", OPT_MAX_UNEXPECTED, true, false, "a percentage from 0 to 100"},
};

#define OPTIONS_ACCEPTED                                                                           \
    "accepted are --target, --stream, --header, --keys, --duration, --warmup, --timeout-ms, "      \
    "--threads, --max-requests, --max-outstanding, --label, --json, --chunked, --per-second, "     \
    "--expect, --max-unexpected-pct and --help"

/* --stream: one more stream, whose name no other has. */
static int add_stream(struct mg_bench_config *cfg, const char *value, char *err, size_t errlen)
{
    if (cfg->nstreams >= MG_BENCH_MAX_STREAMS) {
        mg_bench_set_err(err, errlen, "--stream %s: at most %d streams", value,
                         MG_BENCH_MAX_STREAMS);
        return -1;
    }
    if (mg_bench_parse_stream(value, &cfg->streams[cfg->nstreams], err, errlen) < 0)
        return -1;
    for (unsigned i = 0; i < cfg->nstreams; i++)
        if (strcmp(cfg->streams[i].name, cfg->streams[cfg->nstreams].name) == 0) {
            mg_bench_set_err(err, errlen, "--stream %s: another stream is already called %s", value,
                             cfg->streams[i].name);
            return -1;
        }
    cfg->nstreams++;
    return 0;
}

/* --label: printable, up to MG_BENCH_LABEL_MAX characters. */
static int set_label(struct mg_bench_config *cfg, const char *value, char *err, size_t errlen)
{
    bool ok = strlen(value) <= MG_BENCH_LABEL_MAX;
    for (const char *p = value; ok && *p; p++)
        ok = (unsigned char)*p >= 0x20 && *p != 0x7f;
    if (!ok) {
        mg_bench_set_err(err, errlen,
                         "--label %.60s: must be up to %d characters, no control "
                         "characters",
                         value, MG_BENCH_LABEL_MAX);
        return -1;
    }
    snprintf(cfg->label, sizeof cfg->label, "%s", value);
    return 0;
}

/* The options that set a number: the window, timeouts, threads and limits. */
static int apply_limit(struct mg_bench_config *cfg, enum option_id id, const char *value, char *err,
                       size_t errlen)
{
    uint64_t v;
    switch (id) {
    case OPT_DURATION:
        if (!mg_bench_parse_decimal(value, MG_BENCH_DURATION_MIN_S, false, MG_BENCH_DURATION_MAX_S,
                                    &cfg->duration_s)) {
            mg_bench_set_err(
                err, errlen,
                "--duration %s: must be seconds from %g to %g (decimals allowed, e.g. 2.5)", value,
                MG_BENCH_DURATION_MIN_S, MG_BENCH_DURATION_MAX_S);
            return -1;
        }
        return 0;
    case OPT_WARMUP:
        if (!mg_bench_parse_decimal(value, 0, false, MG_BENCH_WARMUP_MAX_S, &cfg->warmup_s)) {
            mg_bench_set_err(
                err, errlen,
                "--warmup %s: must be seconds from 0 to %g (decimals allowed, e.g. 0.5)", value,
                MG_BENCH_WARMUP_MAX_S);
            return -1;
        }
        return 0;
    case OPT_TIMEOUT:
        if (!mg_bench_parse_uint(value, 1, MG_BENCH_TIMEOUT_MAX_MS, &v)) {
            mg_bench_set_err(err, errlen,
                             "--timeout-ms %s: must be a whole number of milliseconds from 1 "
                             "to %u",
                             value, MG_BENCH_TIMEOUT_MAX_MS);
            return -1;
        }
        cfg->timeout_ms = (unsigned)v;
        return 0;
    case OPT_THREADS:
        if (!mg_bench_parse_uint(value, 1, MG_BENCH_THREADS_MAX, &v)) {
            mg_bench_set_err(err, errlen, "--threads %s: must be a whole number from 1 to %u",
                             value, MG_BENCH_THREADS_MAX);
            return -1;
        }
        cfg->threads = (unsigned)v;
        return 0;
    case OPT_MAX_REQUESTS:
        if (!mg_bench_parse_uint(value, 1, MG_BENCH_MAX_REQUESTS_MAX, &v)) {
            mg_bench_set_err(err, errlen,
                             "--max-requests %s: must be a whole number from 1 to %llu", value,
                             (unsigned long long)MG_BENCH_MAX_REQUESTS_MAX);
            return -1;
        }
        cfg->max_requests = v;
        return 0;
    case OPT_MAX_OUTSTANDING:
        if (!mg_bench_parse_uint(value, 1, MG_BENCH_OUTSTANDING_MAX, &v)) {
            mg_bench_set_err(err, errlen,
                             "--max-outstanding %s: must be a whole number from 1 to %u", value,
                             MG_BENCH_OUTSTANDING_MAX);
            return -1;
        }
        cfg->max_outstanding = (unsigned)v;
        cfg->max_outstanding_given = true;
        return 0;
    case OPT_MAX_UNEXPECTED:
        if (!mg_bench_parse_decimal(value, 0, false, 100, &cfg->max_unexpected_pct)) {
            mg_bench_set_err(err, errlen,
                             "--max-unexpected-pct %s: must be a percentage from 0 to 100", value);
            return -1;
        }
        return 0;
    default:
        return -1;
    }
}

static int apply_option(struct mg_bench_config *cfg, enum option_id id, const char *value,
                        const char **header_args, unsigned *nheader_args, const char **expect_args,
                        unsigned *nexpect_args, char *err, size_t errlen)
{
    switch (id) {
    case OPT_TARGET:
        return mg_bench_parse_target(value, &cfg->target, err, errlen);
    case OPT_STREAM:
        return add_stream(cfg, value, err, errlen);
    case OPT_HEADER:
        if (*nheader_args >= MG_BENCH_MAX_STREAMS * MG_BENCH_MAX_HEADERS) {
            mg_bench_set_err(err, errlen, "--header %s: too many headers", value);
            return -1;
        }
        header_args[(*nheader_args)++] = value;
        return 0;
    case OPT_KEYS:
        cfg->keys_path = strdup(value);
        if (!cfg->keys_path) {
            mg_bench_set_err(err, errlen, "--keys %s: out of memory", value);
            return -1;
        }
        return mg_bench_load_keys(cfg, value, err, errlen);
    case OPT_LABEL:
        return set_label(cfg, value, err, errlen);
    case OPT_JSON:
        cfg->json = true;
        return 0;
    case OPT_CHUNKED:
        cfg->accept_chunked = true;
        return 0;
    case OPT_PER_SECOND:
        cfg->per_second = true;
        return 0;
    case OPT_EXPECT:
        if (*nexpect_args >= MG_BENCH_MAX_STREAMS) {
            mg_bench_set_err(err, errlen, "--expect %s: at most one a stream", value);
            return -1;
        }
        expect_args[(*nexpect_args)++] = value;
        return 0;
    case OPT_DURATION:
    case OPT_WARMUP:
    case OPT_TIMEOUT:
    case OPT_THREADS:
    case OPT_MAX_REQUESTS:
    case OPT_MAX_OUTSTANDING:
    case OPT_MAX_UNEXPECTED:
        return apply_limit(cfg, id, value, err, errlen);
    }
    return -1;
}

/* What only the whole command line can tell: keys for {key}, headers for named streams. */
static int check_config(struct mg_bench_config *cfg, const char **header_args,
                        unsigned nheader_args, const char **expect_args, unsigned nexpect_args,
                        char *err, size_t errlen)
{
    if (cfg->nstreams == 0) {
        mg_bench_set_err(err, errlen,
                         "no --stream given: name at least one, e.g. --stream "
                         "'health:/api/healthz:closed:4'");
        return -1;
    }
    for (unsigned i = 0; i < nheader_args; i++)
        if (mg_bench_add_header(cfg, header_args[i], err, errlen) < 0)
            return -1;
    for (unsigned i = 0; i < nexpect_args; i++)
        if (mg_bench_add_expect(cfg, expect_args[i], err, errlen) < 0)
            return -1;
    bool any_key = false;
    for (unsigned i = 0; i < cfg->nstreams; i++) {
        const struct mg_bench_stream *s = &cfg->streams[i];
        char mode[48];
        mg_bench_stream_mode_text(s, mode, sizeof mode);
        if (s->key_slots == 0)
            continue;
        any_key = true;
        if (cfg->nkeys == 0) {
            mg_bench_set_err(
                err, errlen,
                "--stream %s:%s:%s: the path holds {key}, so --keys FILE must give the keys",
                s->name, s->path, mode);
            return -1;
        }
        if (s->mode == MG_BENCH_ONCE && s->count > cfg->nkeys) {
            mg_bench_set_err(err, errlen,
                             "--stream %s:%s:%s: needs %u distinct keys, --keys %s has %zu",
                             s->name, s->path, mode, s->count, cfg->keys_path, cfg->nkeys);
            return -1;
        }
    }
    if (cfg->nkeys && !any_key) {
        mg_bench_set_err(err, errlen, "--keys %s: no --stream path holds {key} to put them in",
                         cfg->keys_path);
        return -1;
    }
    for (unsigned i = 0; i < cfg->nstreams; i++) {
        size_t len = mg_bench_longest_request(cfg, &cfg->streams[i]);
        if (len >= MG_BENCH_REQUEST_MAX) {
            mg_bench_set_err(
                err, errlen,
                "--stream %s: its request would be %zu bytes with the longest key and its "
                "headers; the most is %d",
                cfg->streams[i].name, len, MG_BENCH_REQUEST_MAX - 1);
            return -1;
        }
    }
    return 0;
}

enum mg_bench_args mg_bench_parse_args(struct mg_bench_config *cfg, int argc, char *const *argv,
                                       char *err, size_t errlen)
{
    const char *header_args[MG_BENCH_MAX_STREAMS * MG_BENCH_MAX_HEADERS];
    const char *expect_args[MG_BENCH_MAX_STREAMS];
    unsigned nheader_args = 0, nexpect_args = 0, seen = 0;
    free(cfg->command_line);
    cfg->command_line = quote_command(argc, argv);
    if (!cfg->command_line) {
        mg_bench_set_err(err, errlen, "out of memory");
        return MG_BENCH_ARGS_BAD;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
            return MG_BENCH_ARGS_HELP;
        if (strncmp(arg, "--", 2) != 0) {
            mg_bench_set_err(err, errlen,
                             "unexpected argument %s: every setting is an option, e.g. "
                             "--stream 'health:/api/healthz:closed:4'",
                             arg);
            return MG_BENCH_ARGS_BAD;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const struct option_def *opt = NULL;
        for (size_t k = 0; k < sizeof options / sizeof options[0]; k++)
            if (strlen(options[k].name) == name_len && strncmp(options[k].name, arg, name_len) == 0)
                opt = &options[k];
        if (!opt) {
            mg_bench_set_err(err, errlen, "unknown option %.*s: %s", (int)name_len, arg,
                             OPTIONS_ACCEPTED);
            return MG_BENCH_ARGS_BAD;
        }
        const char *value = NULL;
        if (opt->takes_value) {
            if (eq) {
                value = eq + 1;
            } else if (i + 1 < argc) {
                value = argv[++i];
            } else {
                mg_bench_set_err(err, errlen, "%s needs a value: %s", opt->name, opt->value_hint);
                return MG_BENCH_ARGS_BAD;
            }
        } else if (eq) {
            mg_bench_set_err(err, errlen, "%s takes no value (given \"%s\")", opt->name, eq + 1);
            return MG_BENCH_ARGS_BAD;
        }
        if (!opt->repeatable) {
            if (seen & (1u << opt->id)) {
                mg_bench_set_err(err, errlen, "%s %s: %s was already given once", opt->name,
                                 value ? value : "", opt->name);
                return MG_BENCH_ARGS_BAD;
            }
            seen |= 1u << opt->id;
        }
        if (apply_option(cfg, opt->id, value, header_args, &nheader_args, expect_args,
                         &nexpect_args, err, errlen) < 0)
            return MG_BENCH_ARGS_BAD;
    }
    if (check_config(cfg, header_args, nheader_args, expect_args, nexpect_args, err, errlen) < 0)
        return MG_BENCH_ARGS_BAD;
    return MG_BENCH_ARGS_OK;
}

uint64_t mg_bench_descriptors_needed(const struct mg_bench_config *cfg)
{
    uint64_t n = 16 + 2ull * cfg->threads; /* stdio, epoll instances, the probe */
    for (unsigned i = 0; i < cfg->nstreams; i++) {
        const struct mg_bench_stream *s = &cfg->streams[i];
        if (s->mode == MG_BENCH_CLOSED)
            n += s->connections;
        else if (s->mode == MG_BENCH_ONCE)
            n += s->count;
        else /* an open stream holds at most as many connections as it had requests out */
            n += cfg->max_outstanding;
    }
    return n;
}
