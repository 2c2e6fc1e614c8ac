/* SPDX-License-Identifier: ISC */
/*
 * bench: the library half of meshgate-bench, the load generator whose numbers go into
 * docs/benchmarks.md. It sends HTTP GET requests in one or more streams at one meshgate and
 * reports, per stream, what was sent, what came back and how long it took.
 *
 * What makes its numbers trustworthy:
 *   - Every request that is sent ends in exactly one outcome: a response (counted by status,
 *     and its latency stored) or an error (connect, timeout, closed, protocol, aborted). So
 *     sent = 200 + 429 + 503 + other + err, always. Open-loop requests refused by the
 *     outstanding cap are "dropped": never sent, reported on their own.
 *   - Every latency is stored (8 bytes each; --max-requests bounds them) and percentiles are
 *     exact, by nearest rank over the sorted samples (mg_bench_percentile).
 *   - Latency counts from the request's *scheduled* start: the tick of the open-loop schedule,
 *     the burst moment of a once stream, the end of a closed stream's pause. A load generator
 *     that falls behind shows up as latency instead of being hidden (coordinated omission);
 *     the largest lag between schedule and actual send is reported too.
 *   - Requests scheduled during the warm-up are sent but never counted; a request is in the
 *     measurement when its scheduled start is inside the window.
 *   - Requests still outstanding when the window closes are waited for, up to their timeout,
 *     so slow answers are not cut from the tail.
 *
 * What keeps it safe: it connects only to 127.0.0.1 or ::1 (targets are literal addresses,
 * names are never resolved, and mg_bench_run checks the address again before any connect),
 * and a run ends by itself within warm-up + duration + timeout, with at most --max-requests
 * requests counted per stream.
 *
 * Nothing here prints or exits: functions return a status with a sentence in err.
 */
#ifndef MESHGATE_BENCH_H
#define MESHGATE_BENCH_H

#include "buf.h"

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define MG_BENCH_MAX_STREAMS 16
#define MG_BENCH_MAX_HEADERS 8    /* per stream */
#define MG_BENCH_NAME_MAX 32      /* stream name */
#define MG_BENCH_PATH_MAX 2048    /* request target, before {key} is replaced */
#define MG_BENCH_HEADER_MAX 512   /* one extra header line */
#define MG_BENCH_KEY_MAX 256      /* one line of --keys */
#define MG_BENCH_KEYS_MAX 1000000 /* lines of --keys */
#define MG_BENCH_LABEL_MAX 200
#define MG_BENCH_REQUEST_MAX 16384 /* a whole request head as sent */
#define MG_BENCH_RESPONSE_HEAD_MAX 16384

/* Limits of the command line (the --help text quotes them). */
#define MG_BENCH_DURATION_MAX_S 600.0
#define MG_BENCH_DURATION_MIN_S 0.1
#define MG_BENCH_WARMUP_MAX_S 600.0
#define MG_BENCH_TIMEOUT_MAX_MS 600000u
#define MG_BENCH_THREADS_MAX 64u
#define MG_BENCH_CONNS_MAX 10000u   /* closed:CONNS */
#define MG_BENCH_ONCE_MAX 10000u    /* once:N */
#define MG_BENCH_RATE_MAX 1000000.0 /* open:RATE, per second */
#define MG_BENCH_PAUSE_MAX_MS 600000u
#define MG_BENCH_MAX_REQUESTS_MAX 20000000ull
#define MG_BENCH_OUTSTANDING_MAX 65536u
#define MG_BENCH_SECONDS_MAX 600 /* whole seconds of the longest window (--per-second) */

/* Defaults. */
#define MG_BENCH_DEFAULT_TARGET "127.0.0.1:8080"
#define MG_BENCH_DEFAULT_DURATION_S 10.0
#define MG_BENCH_DEFAULT_TIMEOUT_MS 30000u
#define MG_BENCH_DEFAULT_THREADS 2u
#define MG_BENCH_DEFAULT_MAX_REQUESTS 5000000ull
#define MG_BENCH_DEFAULT_MAX_OUTSTANDING 4096u

/* After an error other than a timeout (which has waited already), a closed-loop connection
 * waits this long (or its pause, if longer) before its next request, so a stopped server is
 * counted, not hammered in a busy loop. */
#define MG_BENCH_ERROR_BACKOFF_MS 10

enum mg_bench_mode {
    MG_BENCH_CLOSED, /* CONNS keep-alive connections, next request when the answer is in */
    MG_BENCH_OPEN,   /* RATE requests a second on a fixed schedule, whatever the answers */
    MG_BENCH_ONCE,   /* N requests at the same moment, each on its own connection */
};

struct mg_bench_stream {
    char name[MG_BENCH_NAME_MAX + 1];
    char path[MG_BENCH_PATH_MAX + 1]; /* may hold {key} */
    enum mg_bench_mode mode;
    unsigned connections; /* closed */
    unsigned pause_ms;    /* closed: between a response and the next request */
    double rate_per_s;    /* open */
    unsigned count;       /* once */
    unsigned key_slots;   /* how many {key} the path holds */
    char headers[MG_BENCH_MAX_HEADERS][MG_BENCH_HEADER_MAX + 1]; /* "Name: value" */
    unsigned nheaders;
    /* What the scenario asks for (--expect; default: every 2xx): any other status, and an
     * error unless expect_errors, is an answer nobody asked for (mg_bench_unexpected). */
    bool expect_status[600];
    bool expect_errors;
    char expect_text[64]; /* as given, for messages; "2xx" by default */
};

/* A literal loopback address and a port. text is what the user wrote, for the report. */
struct mg_bench_target {
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int port;
    char text[64];
};

struct mg_bench_config {
    struct mg_bench_target target;
    double duration_s;
    double warmup_s;
    unsigned timeout_ms;
    unsigned threads;
    uint64_t max_requests;    /* per stream, counted requests */
    unsigned max_outstanding; /* per open stream */
    bool max_outstanding_given;
    bool json;
    bool accept_chunked; /* --chunked: bodies in chunks are read (meshgate never sends them) */
    bool per_second;     /* --per-second: the reports show the outcomes of each second */
    double max_unexpected_pct; /* --max-unexpected-pct; < 0: not checked */
    char label[MG_BENCH_LABEL_MAX + 1];
    char *command_line; /* malloc'd; the arguments, shell-quoted, as they were given */
    char *keys_path;    /* malloc'd, or NULL */
    char **keys;        /* malloc'd lines of --keys */
    size_t nkeys;
    struct mg_bench_stream streams[MG_BENCH_MAX_STREAMS];
    unsigned nstreams;
    /* Optional: set to nonzero (a signal handler may) to end the run early; in-flight
     * requests then count as aborted errors and the report says it was interrupted. */
    const atomic_int *stop;
};

/* What parsing the command line ends in. */
enum mg_bench_args {
    MG_BENCH_ARGS_OK = 0,
    MG_BENCH_ARGS_HELP = 1, /* --help: print mg_bench_usage and exit 0 */
    MG_BENCH_ARGS_BAD = 2,  /* err names the option, its value and what is accepted */
};

/* What a run ends in; the values other than OK are meshgate-bench's exit codes. */
enum mg_bench_status {
    MG_BENCH_OK = 0,
    MG_BENCH_CANNOT_CONNECT = 1, /* the probe connection before the run failed */
    MG_BENCH_UNEXPECTED = 2,     /* a stream's unexpected answers exceed --max-unexpected-pct */
    MG_BENCH_REFUSED = 64,       /* the configuration is not acceptable (non-loopback...) */
    MG_BENCH_SYSTEM_ERROR = 71,  /* threads, epoll, memory, the open-file limit */
};

void mg_bench_config_init(struct mg_bench_config *cfg);
void mg_bench_config_free(struct mg_bench_config *cfg);

/* argv[0] is the program's name. Fills cfg (after mg_bench_config_init) and checks the whole
 * configuration (headers name streams, {key} has keys, once:N has N keys). */
enum mg_bench_args mg_bench_parse_args(struct mg_bench_config *cfg, int argc, char *const *argv,
                                       char *err, size_t errlen);
/* The --help text. */
void mg_bench_usage(struct mg_buf *out);

/* "127.0.0.1:PORT" or "[::1]:PORT"; anything else is refused without a lookup. 0 or -1. */
int mg_bench_parse_target(const char *text, struct mg_bench_target *t, char *err, size_t errlen);
bool mg_bench_target_is_loopback(const struct mg_bench_target *t);

/* "NAME:PATH:closed:CONNS[:PAUSE_MS]", "NAME:PATH:open:RATE", "NAME:PATH:once:N". The path
 * may itself hold colons. 0 or -1 (err quotes the spec). */
int mg_bench_parse_stream(const char *spec, struct mg_bench_stream *s, char *err, size_t errlen);

/* The stream's mode with its number, e.g. "closed:16", "closed:4:50", "open:200", "once:48". */
void mg_bench_stream_mode_text(const struct mg_bench_stream *s, char *out, size_t cap);

/*
 * Nearest-rank percentile: the smallest sample such that at least permille/1000 of all samples
 * are less than or equal to it, i.e. sorted[ceil(permille * n / 1000) - 1]. Integer arithmetic,
 * so p7 of 100 samples is the 7th, not the 8th by a rounding error (0.07 * 100 is
 * 7.000000000000001 in doubles). Samples must be sorted ascending. permille is 1..1000
 * (1000: the maximum). -1 when n is 0.
 */
int64_t mg_bench_percentile(const int64_t *sorted, size_t n, unsigned permille);

/* A response head as meshgate sends it: status line, Content-Length, Connection. */
struct mg_bench_response_head {
    int status;
    bool has_content_length;
    uint64_t content_length;
    bool connection_close; /* "Connection: close", or HTTP/1.0 without keep-alive */
    bool chunked;          /* Transfer-Encoding: chunked (only with --chunked) */
    size_t head_len;       /* bytes up to and including the blank line */
};

enum mg_bench_parse {
    MG_BENCH_PARSE_BAD = -1,
    MG_BENCH_PARSE_MORE = 0, /* no blank line yet, and not too long yet */
    MG_BENCH_PARSE_DONE = 1,
};

/* Never reads past buf[len - 1]; never allocates. On BAD, *why says what was wrong. A head
 * without Content-Length is accepted only for 204 and 304 (no body); chunked is refused. */
enum mg_bench_parse mg_bench_parse_response_head(const char *buf, size_t len,
                                                 struct mg_bench_response_head *h,
                                                 const char **why);

struct mg_bench_latency {
    uint64_t samples;
    int64_t min_ns, p50_ns, p95_ns, p99_ns, max_ns; /* -1 when there are no samples */
    double mean_ns;
};

enum mg_bench_error_kind {
    MG_BENCH_ERR_CONNECT,  /* connect failed (refused, no ports, no descriptors) */
    MG_BENCH_ERR_TIMEOUT,  /* no whole response within --timeout-ms of the scheduled start */
    MG_BENCH_ERR_CLOSED,   /* the server closed or reset the connection mid-request */
    MG_BENCH_ERR_PROTOCOL, /* not an HTTP response meshgate would send */
    MG_BENCH_ERR_ABORTED,  /* still outstanding when the run was interrupted */
    MG_BENCH_ERR_KINDS
};

struct mg_bench_stream_report {
    uint64_t sent;
    uint64_t responses; /* of any status */
    uint64_t status_200, status_429, status_503, status_other;
    uint64_t status_counts[600]; /* by code, 100..599 */
    uint64_t errors[MG_BENCH_ERR_KINDS];
    uint64_t errors_total;
    uint64_t dropped;  /* open: not sent, the outstanding cap was reached */
    uint64_t retried;  /* a reused keep-alive connection closed before any answer: sent again
                        * once on a new connection (not an error, not a second request) */
    uint64_t overlong; /* responses followed by bytes past their Content-Length */
    bool max_requests_reached;
    int64_t max_send_lag_ns;             /* actual send minus scheduled start, largest */
    int64_t elapsed_ns;                  /* what rps divides by (see mg_bench_run) */
    double rps;                          /* responses per second of elapsed_ns */
    struct mg_bench_latency latency;     /* every response */
    struct mg_bench_latency latency_200; /* 200 responses only */
    /* Outcomes of requests in the window by the second of the window they completed in
     * (second i: from i to i + 1 s after the window opened): 200s, and every other status
     * or error. Seconds past the window's last are not kept. nseconds: the window's whole
     * and partial seconds. Kept always; rendered with --per-second. */
    uint64_t per_second_200[MG_BENCH_SECONDS_MAX];
    uint64_t per_second_not_200[MG_BENCH_SECONDS_MAX];
    unsigned nseconds;
    int64_t *latencies_ns; /* sorted; every response; malloc'd */
    size_t nlatencies;
    char first_error[160]; /* the first error seen, as a sentence */
};

struct mg_bench_report {
    unsigned nstreams;
    struct mg_bench_stream_report streams[MG_BENCH_MAX_STREAMS];
    int64_t started_realtime_ns;
    int64_t run_ns; /* from start to the last thread's end */
    bool interrupted;
};

/*
 * Runs cfg and fills rep. First refuses a non-loopback target, then checks the open-file
 * limit, then makes one probe connection (CANNOT_CONNECT when it fails: nothing is sent).
 * elapsed_ns of a stream: closed and open, the measured window (shorter when the stream
 * stopped early at --max-requests or an interruption); once, from the burst to its last
 * outcome. rep holds malloc'd samples even on failure: call mg_bench_report_free.
 */
enum mg_bench_status mg_bench_run(const struct mg_bench_config *cfg, struct mg_bench_report *rep,
                                  char *err, size_t errlen);
void mg_bench_report_free(struct mg_bench_report *rep);

/*
 * Requests of a stream whose outcome the scenario did not ask for: responses with a status
 * its --expect does not list, and errors unless it lists "err". Dropped requests were never
 * sent and do not count. mg_bench_check_unexpected applies --max-unexpected-pct to every
 * stream: false (with a sentence in err naming the stream, the share and what came back)
 * when a stream's share of unexpected outcomes among its sent requests is above it.
 */
uint64_t mg_bench_unexpected(const struct mg_bench_stream *s,
                             const struct mg_bench_stream_report *r);
bool mg_bench_check_unexpected(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                               char *err, size_t errlen);

/* Descriptors a run of cfg may hold at once (sockets, epoll), to compare with RLIMIT_NOFILE. */
uint64_t mg_bench_descriptors_needed(const struct mg_bench_config *cfg);

/* The text report: header (label, command, settings, streams), table, notes. */
void mg_bench_render_text(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                          struct mg_buf *out);
/* The same as one JSON object (shape at the top of bench/report.c). */
void mg_bench_render_json(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                          struct mg_buf *out);

#endif
