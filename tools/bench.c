/* SPDX-License-Identifier: ISC */
/*
 * bench: streams of HTTP GET requests at one local meshgate, and an honest account of them
 * (see bench.h for the rules that make the numbers trustworthy).
 *
 * How a run works. mg_bench_run starts --threads workers; each owns an epoll instance, a share
 * of every stream and a min-heap of deadlines (a request's timeout, or the end of a closed
 * connection's pause). Streams are shared out so their sum is exactly what was asked:
 * closed connection i and once request i go to thread i % T, and tick k of an open stream's
 * schedule (at start + k / RATE) goes to thread k % T. Workers share nothing but a few atomic
 * counters per stream (requests counted against --max-requests, next key, open requests in
 * flight against --max-outstanding); each keeps its own tallies and latency samples, merged
 * and sorted once every thread has ended.
 *
 * A connection's life: IDLE -> CONNECTING -> SENDING -> RECEIVING, then by mode: closed goes
 * to WAITING (its pause, or a back-off after an error) and sends again, open goes back to a
 * pool of kept-alive connections (POOLED), once ends (DONE). An epoll event carries the
 * connection's id and the generation of its socket, so an event for a socket already closed
 * is recognised and ignored even when the kernel hands the same descriptor number out again.
 *
 * The JSON report (mg_bench_render_json):
 *   {"tool":"meshgate-bench","label":S,"command":S,"target":S,"started_at":ISO-8601,
 *    "duration_s":N,"warmup_s":N,"timeout_ms":N,"threads":N,"max_requests":N,
 *    "max_outstanding":N,"interrupted":B,"run_s":N,
 *    "streams":[{"name":S,"mode":"closed"|"open"|"once","spec":"closed:16","path":S,
 *                "connections":N,"pause_ms":N | "rate_per_s":N | "count":N,
 *                "headers":[S...],"sent":N,"responses":N,
 *                "status":{"200":N,"429":N,"503":N,"other":N},"statuses":{"404":N,...},
 *                "errors":{"total":N,"connect":N,"timeout":N,"closed":N,"protocol":N,
 *                          "aborted":N},"first_error":S|null,"dropped":N,"retried":N,
 *                "overlong":N,
 *                "max_requests_reached":B,"max_send_lag_ms":N,"elapsed_s":N,"rps":N,
 *                "latency_ms":{"samples":N,"min":N,"p50":N,"p95":N,"p99":N,"max":N,
 *                              "mean":N},"latency_200_ms":{...same...}}]}
 *   Latencies are null when there are no samples.
 */
#include "bench.h"

#include "clock.h"
#include "json.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define NOT_IN_HEAP ((size_t)-1)
#define PROBE_TIMEOUT_MS 2000
#define STOP_POLL_NS (50 * MG_NS_PER_MS) /* how often a worker looks at the stop flag */
#define EVENTS_PER_WAIT 256
#define SCRATCH_BYTES 65536

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* --- numbers on the command line ------------------------------------------------------------ */

/* Digits only (no sign, no spaces), at most max. */
static bool parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!*text || strlen(text) > 12)
        return false;
    uint64_t v = 0;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* Digits with at most one '.', no exponent, no sign; min <= v <= max (min_open: v > min). */
static bool parse_decimal(const char *text, double min, bool min_open, double max, double *out)
{
    size_t digits = 0, dots = 0;
    for (const char *p = text; *p; p++) {
        if (*p >= '0' && *p <= '9')
            digits++;
        else if (*p == '.')
            dots++;
        else
            return false;
    }
    if (digits == 0 || dots > 1 || strlen(text) > 20)
        return false;
    double v = strtod(text, NULL);
    if (!isfinite(v) || v > max || v < min || (min_open && v <= min))
        return false;
    *out = v;
    return true;
}

/* --- target ---------------------------------------------------------------------------------- */

#define TARGET_ACCEPTED                                                                            \
    "127.0.0.1:PORT or [::1]:PORT (meshgate-bench loads only this machine, and looks up no names)"

int mg_bench_parse_target(const char *text, struct mg_bench_target *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    size_t len = strlen(text);
    char host[64];
    const char *port_text;
    int family;
    if (len == 0 || len >= sizeof t->text) {
        set_err(err, errlen, "--target %s: must be %s", text, TARGET_ACCEPTED);
        return -1;
    }
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof host) {
            set_err(err, errlen, "--target %s: must be %s", text, TARGET_ACCEPTED);
            return -1;
        }
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
        port_text = close + 2;
        family = AF_INET6;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon || memchr(text, ':', (size_t)(colon - text)) ||
            (size_t)(colon - text) >= sizeof host) {
            set_err(err, errlen, "--target %s: an IPv6 address goes in brackets; must be %s", text,
                    TARGET_ACCEPTED);
            return -1;
        }
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        port_text = colon + 1;
        family = AF_INET;
    }
    uint64_t port;
    if (!parse_uint(port_text, 1, 65535, &port)) {
        set_err(err, errlen, "--target %s: the port \"%s\" must be a number from 1 to 65535", text,
                port_text);
        return -1;
    }
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&t->addr;
        if (inet_pton(AF_INET, host, &sin->sin_addr) != 1) {
            set_err(err, errlen, "--target %s: \"%s\" is not a literal address; must be %s", text,
                    host, TARGET_ACCEPTED);
            return -1;
        }
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        t->addr_len = sizeof *sin;
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&t->addr;
        if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1) {
            set_err(err, errlen, "--target %s: \"%s\" is not a literal address; must be %s", text,
                    host, TARGET_ACCEPTED);
            return -1;
        }
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        t->addr_len = sizeof *sin6;
    }
    t->port = (int)port;
    snprintf(t->text, sizeof t->text, "%s", text);
    if (!mg_bench_target_is_loopback(t)) {
        set_err(err, errlen, "--target %s: %s is not this machine's loopback address; must be %s",
                text, host, TARGET_ACCEPTED);
        memset(t, 0, sizeof *t);
        return -1;
    }
    return 0;
}

/* Exactly 127.0.0.1 or ::1: the only addresses this tool ever connects to. */
bool mg_bench_target_is_loopback(const struct mg_bench_target *t)
{
    if (t->addr.ss_family == AF_INET && t->addr_len == sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&t->addr;
        return sin->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && sin->sin_port != 0;
    }
    if (t->addr.ss_family == AF_INET6 && t->addr_len == sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&t->addr;
        return memcmp(&sin6->sin6_addr, &in6addr_loopback, sizeof in6addr_loopback) == 0 &&
               sin6->sin6_port != 0;
    }
    return false;
}

/* --- streams --------------------------------------------------------------------------------- */

#define STREAM_FORMS "NAME:PATH:closed:CONNS[:PAUSE_MS], NAME:PATH:open:RATE or NAME:PATH:once:N"

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

static bool mode_word(const char *p, size_t n, enum mg_bench_mode *mode)
{
    if (n == 6 && memcmp(p, "closed", 6) == 0)
        *mode = MG_BENCH_CLOSED;
    else if (n == 4 && memcmp(p, "open", 4) == 0)
        *mode = MG_BENCH_OPEN;
    else if (n == 4 && memcmp(p, "once", 4) == 0)
        *mode = MG_BENCH_ONCE;
    else
        return false;
    return true;
}

/* Copies p[0..n) into a NUL-terminated field of cap bytes; false when it does not fit. */
static bool copy_field(char *out, size_t cap, const char *p, size_t n)
{
    if (n >= cap)
        return false;
    memcpy(out, p, n);
    out[n] = '\0';
    return true;
}

/* The path: starts with '/', visible ASCII only, braces only as {key}. */
static int check_path(const char *spec, struct mg_bench_stream *s, char *err, size_t errlen)
{
    const char *path = s->path;
    if (path[0] != '/') {
        set_err(err, errlen, "--stream %s: the path \"%s\" must start with '/'", spec, path);
        return -1;
    }
    s->key_slots = 0;
    for (const char *p = path; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c <= 0x20 || c >= 0x7f) {
            set_err(err, errlen,
                    "--stream %s: the path may hold only visible ASCII characters (no spaces; "
                    "percent-encode the rest)",
                    spec);
            return -1;
        }
        if (c == '{' && strncmp(p, "{key}", 5) == 0) {
            s->key_slots++;
            p += 4;
        } else if (c == '{' || c == '}') {
            set_err(err, errlen, "--stream %s: only {key} may stand in braces in the path", spec);
            return -1;
        }
    }
    return 0;
}

int mg_bench_parse_stream(const char *spec, struct mg_bench_stream *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    for (int code = 200; code < 300; code++)
        s->expect_status[code] = true;
    snprintf(s->expect_text, sizeof s->expect_text, "2xx");
    const char *colon = strchr(spec, ':');
    if (!colon) {
        set_err(err, errlen, "--stream %s: must be %s", spec, STREAM_FORMS);
        return -1;
    }
    size_t name_len = (size_t)(colon - spec);
    if (name_len == 0 || name_len > MG_BENCH_NAME_MAX) {
        set_err(err, errlen, "--stream %s: the NAME must have 1 to %d characters", spec,
                MG_BENCH_NAME_MAX);
        return -1;
    }
    for (size_t i = 0; i < name_len; i++)
        if (!name_char(spec[i])) {
            set_err(err, errlen,
                    "--stream %s: the NAME may hold only letters, digits, '_', '-' and '.'", spec);
            return -1;
        }
    copy_field(s->name, sizeof s->name, spec, name_len);

    /* The path may hold colons: the mode and its numbers are found from the right. */
    const char *rest = colon + 1;
    const char *c[3] = {NULL, NULL, NULL}; /* the last three colons of rest: c[0] the last */
    int found = 0;
    for (const char *p = rest + strlen(rest); p > rest && found < 3;) {
        if (*--p == ':')
            c[found++] = p;
    }
    const char *number_at, *pause_at = NULL, *path_end;
    enum mg_bench_mode mode;
    if (c[1] && mode_word(c[1] + 1, (size_t)(c[0] - c[1] - 1), &mode)) {
        path_end = c[1];
        number_at = c[0] + 1;
    } else if (c[2] && mode_word(c[2] + 1, (size_t)(c[1] - c[2] - 1), &mode)) {
        path_end = c[2];
        number_at = c[1] + 1;
        pause_at = c[0] + 1;
    } else {
        set_err(err, errlen,
                "--stream %s: no mode (closed, open or once) with its number at the end; must be "
                "%s",
                spec, STREAM_FORMS);
        return -1;
    }
    s->mode = mode;
    if (!copy_field(s->path, sizeof s->path, rest, (size_t)(path_end - rest))) {
        set_err(err, errlen, "--stream %s: the path is longer than %d bytes", spec,
                MG_BENCH_PATH_MAX);
        return -1;
    }
    if (check_path(spec, s, err, errlen) < 0)
        return -1;

    char number[32], pause[32] = "";
    size_t number_len = (size_t)((pause_at ? pause_at - 1 : spec + strlen(spec)) - number_at);
    if (!copy_field(number, sizeof number, number_at, number_len))
        number[0] = '\0', number_len = 0;
    if (pause_at && !copy_field(pause, sizeof pause, pause_at, strlen(pause_at)))
        snprintf(pause, sizeof pause, "(too long)");

    uint64_t v;
    switch (mode) {
    case MG_BENCH_CLOSED:
        if (!parse_uint(number, 1, MG_BENCH_CONNS_MAX, &v)) {
            set_err(err, errlen,
                    "--stream %s: CONNS \"%s\" must be a whole number of connections from 1 to %u",
                    spec, number, MG_BENCH_CONNS_MAX);
            return -1;
        }
        s->connections = (unsigned)v;
        if (pause_at) {
            if (!parse_uint(pause, 0, MG_BENCH_PAUSE_MAX_MS, &v)) {
                set_err(err, errlen,
                        "--stream %s: PAUSE_MS \"%s\" must be a whole number of milliseconds from "
                        "0 to %u",
                        spec, pause, MG_BENCH_PAUSE_MAX_MS);
                return -1;
            }
            s->pause_ms = (unsigned)v;
        }
        break;
    case MG_BENCH_OPEN:
        if (pause_at) {
            set_err(err, errlen,
                    "--stream %s: only closed streams take a PAUSE_MS; open is NAME:PATH:open:RATE",
                    spec);
            return -1;
        }
        if (!parse_decimal(number, 0, true, MG_BENCH_RATE_MAX, &s->rate_per_s)) {
            set_err(err, errlen,
                    "--stream %s: RATE \"%s\" must be requests a second, more than 0 and at most "
                    "%.0f (decimals allowed, e.g. 0.5)",
                    spec, number, MG_BENCH_RATE_MAX);
            return -1;
        }
        break;
    case MG_BENCH_ONCE:
        if (pause_at) {
            set_err(err, errlen,
                    "--stream %s: only closed streams take a PAUSE_MS; once is NAME:PATH:once:N",
                    spec);
            return -1;
        }
        if (!parse_uint(number, 1, MG_BENCH_ONCE_MAX, &v)) {
            set_err(err, errlen,
                    "--stream %s: N \"%s\" must be a whole number of requests from 1 to %u", spec,
                    number, MG_BENCH_ONCE_MAX);
            return -1;
        }
        s->count = (unsigned)v;
        break;
    }
    return 0;
}

void mg_bench_stream_mode_text(const struct mg_bench_stream *s, char *out, size_t cap)
{
    switch (s->mode) {
    case MG_BENCH_CLOSED:
        if (s->pause_ms)
            snprintf(out, cap, "closed:%u:%u", s->connections, s->pause_ms);
        else
            snprintf(out, cap, "closed:%u", s->connections);
        break;
    case MG_BENCH_OPEN:
        snprintf(out, cap, "open:%g", s->rate_per_s);
        break;
    case MG_BENCH_ONCE:
        snprintf(out, cap, "once:%u", s->count);
        break;
    }
}

static const char *mode_name(enum mg_bench_mode m)
{
    return m == MG_BENCH_CLOSED ? "closed" : m == MG_BENCH_OPEN ? "open" : "once";
}

/* --- headers and keys ------------------------------------------------------------------------ */

static bool token_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* "STREAM:Name: value" -> the stream's index and the header line. */
/* --expect STREAM:LIST, LIST a comma list of statuses (429), classes (2xx) and "err". */
static int add_expect(struct mg_bench_config *cfg, const char *arg, char *err, size_t errlen)
{
    const char *colon = strchr(arg, ':');
    size_t name_len = colon ? (size_t)(colon - arg) : 0;
    struct mg_bench_stream *s = NULL;
    for (unsigned i = 0; colon && i < cfg->nstreams; i++)
        if (strlen(cfg->streams[i].name) == name_len &&
            memcmp(cfg->streams[i].name, arg, name_len) == 0)
            s = &cfg->streams[i];
    if (!s) {
        set_err(err, errlen,
                colon ? "--expect %s: no --stream is called \"%.*s\""
                      : "--expect %s: must be STREAM:LIST, e.g. --expect 'cold:200,429'",
                arg, (int)name_len, arg);
        return -1;
    }
    const char *list = colon + 1;
    if (strlen(list) >= sizeof s->expect_text) {
        set_err(err, errlen, "--expect %s: the list is longer than %zu characters", arg,
                sizeof s->expect_text - 1);
        return -1;
    }
    bool status[600] = {false}, errors = false;
    for (const char *p = list;;) {
        size_t n = strcspn(p, ",");
        bool digits = n == 3 && p[0] >= '1' && p[0] <= '5' && isdigit((unsigned char)p[1]) &&
                      isdigit((unsigned char)p[2]);
        if (n == 3 && strncmp(p, "err", 3) == 0) {
            errors = true;
        } else if (digits) {
            status[(p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0')] = true;
        } else if (n == 3 && p[0] >= '1' && p[0] <= '5' && p[1] == 'x' && p[2] == 'x') {
            for (int code = (p[0] - '0') * 100; code < (p[0] - '0') * 100 + 100; code++)
                status[code] = true;
        } else {
            set_err(err, errlen,
                    "--expect %s: \"%.*s\" is not a status (100 to 599), a class (2xx) or err", arg,
                    (int)n, p);
            return -1;
        }
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
    memcpy(s->expect_status, status, sizeof status);
    s->expect_errors = errors;
    snprintf(s->expect_text, sizeof s->expect_text, "%s", list);
    return 0;
}

static int add_header(struct mg_bench_config *cfg, const char *arg, char *err, size_t errlen)
{
    const char *colon = strchr(arg, ':');
    if (!colon) {
        set_err(err, errlen,
                "--header %s: must be STREAM:'Name: value', e.g. --header 'user:Authorization: "
                "Bearer x'",
                arg);
        return -1;
    }
    size_t name_len = (size_t)(colon - arg);
    struct mg_bench_stream *s = NULL;
    for (unsigned i = 0; i < cfg->nstreams; i++)
        if (strlen(cfg->streams[i].name) == name_len &&
            memcmp(cfg->streams[i].name, arg, name_len) == 0)
            s = &cfg->streams[i];
    if (!s) {
        set_err(err, errlen, "--header %s: no --stream is called \"%.*s\"", arg, (int)name_len,
                arg);
        return -1;
    }
    const char *line = colon + 1;
    const char *hcolon = strchr(line, ':');
    size_t hname_len = hcolon ? (size_t)(hcolon - line) : 0;
    bool ok = hname_len > 0;
    for (size_t i = 0; ok && i < hname_len; i++)
        ok = token_char(line[i]);
    if (!ok) {
        set_err(err, errlen,
                "--header %s: after the stream's name comes a header line 'Name: value' (the "
                "name made of letters, digits and !#$%%&'*+-.^_`|~)",
                arg);
        return -1;
    }
    for (const char *p = hcolon + 1; *p; p++)
        if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f) {
            set_err(err, errlen, "--header %s: the value may not hold control characters", arg);
            return -1;
        }
    static const char *const reserved[] = {"Host", "Connection", "Content-Length",
                                           "Transfer-Encoding"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strlen(reserved[i]) == hname_len && strncasecmp(line, reserved[i], hname_len) == 0) {
            set_err(err, errlen,
                    "--header %s: meshgate-bench sets Host, Connection, Content-Length and "
                    "Transfer-Encoding itself",
                    arg);
            return -1;
        }
    if (strlen(line) > MG_BENCH_HEADER_MAX) {
        set_err(err, errlen, "--header %.60s...: longer than %d bytes", arg, MG_BENCH_HEADER_MAX);
        return -1;
    }
    if (s->nheaders >= MG_BENCH_MAX_HEADERS) {
        set_err(err, errlen, "--header %s: stream %s already has %d headers, the most allowed", arg,
                s->name, MG_BENCH_MAX_HEADERS);
        return -1;
    }
    snprintf(s->headers[s->nheaders++], sizeof s->headers[0], "%s", line);
    return 0;
}

static bool key_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && !strchr("/?#{}", c);
}

static int load_keys(struct mg_bench_config *cfg, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        set_err(err, errlen, "--keys %s: cannot open it: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t line_cap = 0, cap = 0, lineno = 0;
    ssize_t n;
    int rc = 0;
    while ((n = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        if (strlen(line) != (size_t)n) {
            set_err(err, errlen, "--keys %s: line %zu holds a NUL byte", path, lineno);
            rc = -1;
            break;
        }
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t len = strlen(p);
        while (len && strchr(" \t\r\n", p[len - 1]))
            p[--len] = '\0';
        if (len == 0 || p[0] == '#')
            continue;
        bool ok = len <= MG_BENCH_KEY_MAX;
        for (size_t i = 0; ok && i < len; i++)
            ok = key_char((unsigned char)p[i]);
        if (!ok) {
            set_err(err, errlen,
                    "--keys %s: line %zu: a key has 1 to %d visible ASCII characters and no "
                    "'/', '?', '#', '{' or '}' (percent-encode them)",
                    path, lineno, MG_BENCH_KEY_MAX);
            rc = -1;
            break;
        }
        if (cfg->nkeys >= MG_BENCH_KEYS_MAX) {
            set_err(err, errlen, "--keys %s: more than %d keys", path, MG_BENCH_KEYS_MAX);
            rc = -1;
            break;
        }
        if (cfg->nkeys == cap) {
            size_t want = cap ? cap * 2 : 64;
            char **grown = realloc(cfg->keys, want * sizeof *grown);
            if (!grown) {
                set_err(err, errlen, "--keys %s: out of memory", path);
                rc = -1;
                break;
            }
            cfg->keys = grown;
            cap = want;
        }
        cfg->keys[cfg->nkeys] = strdup(p);
        if (!cfg->keys[cfg->nkeys]) {
            set_err(err, errlen, "--keys %s: out of memory", path);
            rc = -1;
            break;
        }
        cfg->nkeys++;
    }
    if (rc == 0 && ferror(f)) {
        set_err(err, errlen, "--keys %s: cannot read it: %s", path, strerror(errno));
        rc = -1;
    }
    if (rc == 0 && cfg->nkeys == 0) {
        set_err(err, errlen,
                "--keys %s: holds no keys (one a line; empty lines and # comments are skipped)",
                path);
        rc = -1;
    }
    free(line);
    fclose(f);
    return rc;
}

/* --- the request as sent ------------------------------------------------------------------- */

/* Writes the request head for s with key (NULL: no {key} in the path) into out; returns its
 * length, or the length it would have when out is NULL or too small. */
static size_t format_request(const struct mg_bench_config *cfg, const struct mg_bench_stream *s,
                             const char *key, char *out, size_t cap)
{
    struct mg_buf b;
    mg_buf_init(&b);
    mg_buf_puts(&b, "GET ");
    for (const char *p = s->path; *p;) {
        if (strncmp(p, "{key}", 5) == 0 && key) {
            mg_buf_puts(&b, key);
            p += 5;
        } else {
            mg_buf_putc(&b, *p++);
        }
    }
    mg_buf_printf(&b, " HTTP/1.1\r\nHost: %s\r\nUser-Agent: meshgate-bench\r\n", cfg->target.text);
    for (unsigned i = 0; i < s->nheaders; i++)
        mg_buf_printf(&b, "%s\r\n", s->headers[i]);
    if (s->mode == MG_BENCH_ONCE)
        mg_buf_puts(&b, "Connection: close\r\n");
    mg_buf_puts(&b, "\r\n");
    size_t len = b.failed ? (size_t)-1 : b.len;
    if (out && len < cap) {
        memcpy(out, b.data, len);
        out[len] = '\0';
    }
    mg_buf_free(&b);
    return len;
}

/* The longest request s can send: with its longest possible key in every slot. */
static size_t longest_request(const struct mg_bench_config *cfg, const struct mg_bench_stream *s)
{
    size_t longest_key = 0;
    for (size_t i = 0; i < cfg->nkeys; i++)
        if (strlen(cfg->keys[i]) > longest_key)
            longest_key = strlen(cfg->keys[i]);
    size_t base = format_request(cfg, s, "", NULL, 0);
    return base + s->key_slots * longest_key;
}

/* --- the command line ------------------------------------------------------------------------ */

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
        "                      [--label TEXT] [--json]\n"
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
    {"--expect", OPT_EXPECT, true, true, "STREAM:LIST, e.g. cold:200,429"},
    {"--max-unexpected-pct", OPT_MAX_UNEXPECTED, true, false, "a percentage from 0 to 100"},
};

#define OPTIONS_ACCEPTED                                                                           \
    "accepted are --target, --stream, --header, --keys, --duration, --warmup, --timeout-ms, "      \
    "--threads, --max-requests, --max-outstanding, --label, --json, --chunked, --expect, "         \
    "--max-unexpected-pct and --help"

static int apply_option(struct mg_bench_config *cfg, enum option_id id, const char *value,
                        const char **header_args, unsigned *nheader_args, const char **expect_args,
                        unsigned *nexpect_args, char *err, size_t errlen)
{
    uint64_t v;
    switch (id) {
    case OPT_TARGET:
        return mg_bench_parse_target(value, &cfg->target, err, errlen);
    case OPT_STREAM:
        if (cfg->nstreams >= MG_BENCH_MAX_STREAMS) {
            set_err(err, errlen, "--stream %s: at most %d streams", value, MG_BENCH_MAX_STREAMS);
            return -1;
        }
        if (mg_bench_parse_stream(value, &cfg->streams[cfg->nstreams], err, errlen) < 0)
            return -1;
        for (unsigned i = 0; i < cfg->nstreams; i++)
            if (strcmp(cfg->streams[i].name, cfg->streams[cfg->nstreams].name) == 0) {
                set_err(err, errlen, "--stream %s: another stream is already called %s", value,
                        cfg->streams[i].name);
                return -1;
            }
        cfg->nstreams++;
        return 0;
    case OPT_HEADER:
        if (*nheader_args >= MG_BENCH_MAX_STREAMS * MG_BENCH_MAX_HEADERS) {
            set_err(err, errlen, "--header %s: too many headers", value);
            return -1;
        }
        header_args[(*nheader_args)++] = value;
        return 0;
    case OPT_KEYS:
        cfg->keys_path = strdup(value);
        if (!cfg->keys_path) {
            set_err(err, errlen, "--keys %s: out of memory", value);
            return -1;
        }
        return load_keys(cfg, value, err, errlen);
    case OPT_DURATION:
        if (!parse_decimal(value, MG_BENCH_DURATION_MIN_S, false, MG_BENCH_DURATION_MAX_S,
                           &cfg->duration_s)) {
            set_err(err, errlen,
                    "--duration %s: must be seconds from %g to %g (decimals allowed, e.g. 2.5)",
                    value, MG_BENCH_DURATION_MIN_S, MG_BENCH_DURATION_MAX_S);
            return -1;
        }
        return 0;
    case OPT_WARMUP:
        if (!parse_decimal(value, 0, false, MG_BENCH_WARMUP_MAX_S, &cfg->warmup_s)) {
            set_err(err, errlen,
                    "--warmup %s: must be seconds from 0 to %g (decimals allowed, e.g. 0.5)", value,
                    MG_BENCH_WARMUP_MAX_S);
            return -1;
        }
        return 0;
    case OPT_TIMEOUT:
        if (!parse_uint(value, 1, MG_BENCH_TIMEOUT_MAX_MS, &v)) {
            set_err(err, errlen,
                    "--timeout-ms %s: must be a whole number of milliseconds from 1 "
                    "to %u",
                    value, MG_BENCH_TIMEOUT_MAX_MS);
            return -1;
        }
        cfg->timeout_ms = (unsigned)v;
        return 0;
    case OPT_THREADS:
        if (!parse_uint(value, 1, MG_BENCH_THREADS_MAX, &v)) {
            set_err(err, errlen, "--threads %s: must be a whole number from 1 to %u", value,
                    MG_BENCH_THREADS_MAX);
            return -1;
        }
        cfg->threads = (unsigned)v;
        return 0;
    case OPT_MAX_REQUESTS:
        if (!parse_uint(value, 1, MG_BENCH_MAX_REQUESTS_MAX, &v)) {
            set_err(err, errlen, "--max-requests %s: must be a whole number from 1 to %llu", value,
                    (unsigned long long)MG_BENCH_MAX_REQUESTS_MAX);
            return -1;
        }
        cfg->max_requests = v;
        return 0;
    case OPT_MAX_OUTSTANDING:
        if (!parse_uint(value, 1, MG_BENCH_OUTSTANDING_MAX, &v)) {
            set_err(err, errlen, "--max-outstanding %s: must be a whole number from 1 to %u", value,
                    MG_BENCH_OUTSTANDING_MAX);
            return -1;
        }
        cfg->max_outstanding = (unsigned)v;
        cfg->max_outstanding_given = true;
        return 0;
    case OPT_LABEL: {
        bool ok = strlen(value) <= MG_BENCH_LABEL_MAX;
        for (const char *p = value; ok && *p; p++)
            ok = (unsigned char)*p >= 0x20 && *p != 0x7f;
        if (!ok) {
            set_err(err, errlen,
                    "--label %.60s: must be up to %d characters, no control "
                    "characters",
                    value, MG_BENCH_LABEL_MAX);
            return -1;
        }
        snprintf(cfg->label, sizeof cfg->label, "%s", value);
        return 0;
    }
    case OPT_JSON:
        cfg->json = true;
        return 0;
    case OPT_CHUNKED:
        cfg->accept_chunked = true;
        return 0;
    case OPT_EXPECT:
        if (*nexpect_args >= MG_BENCH_MAX_STREAMS) {
            set_err(err, errlen, "--expect %s: at most one a stream", value);
            return -1;
        }
        expect_args[(*nexpect_args)++] = value;
        return 0;
    case OPT_MAX_UNEXPECTED:
        if (!parse_decimal(value, 0, false, 100, &cfg->max_unexpected_pct)) {
            set_err(err, errlen, "--max-unexpected-pct %s: must be a percentage from 0 to 100",
                    value);
            return -1;
        }
        return 0;
    }
    return -1;
}

/* What only the whole command line can tell: keys for {key}, headers for named streams. */
static int check_config(struct mg_bench_config *cfg, const char **header_args,
                        unsigned nheader_args, const char **expect_args, unsigned nexpect_args,
                        char *err, size_t errlen)
{
    if (cfg->nstreams == 0) {
        set_err(err, errlen,
                "no --stream given: name at least one, e.g. --stream "
                "'health:/api/healthz:closed:4'");
        return -1;
    }
    for (unsigned i = 0; i < nheader_args; i++)
        if (add_header(cfg, header_args[i], err, errlen) < 0)
            return -1;
    for (unsigned i = 0; i < nexpect_args; i++)
        if (add_expect(cfg, expect_args[i], err, errlen) < 0)
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
            set_err(err, errlen,
                    "--stream %s:%s:%s: the path holds {key}, so --keys FILE must give the keys",
                    s->name, s->path, mode);
            return -1;
        }
        if (s->mode == MG_BENCH_ONCE && s->count > cfg->nkeys) {
            set_err(err, errlen, "--stream %s:%s:%s: needs %u distinct keys, --keys %s has %zu",
                    s->name, s->path, mode, s->count, cfg->keys_path, cfg->nkeys);
            return -1;
        }
    }
    if (cfg->nkeys && !any_key) {
        set_err(err, errlen, "--keys %s: no --stream path holds {key} to put them in",
                cfg->keys_path);
        return -1;
    }
    for (unsigned i = 0; i < cfg->nstreams; i++) {
        size_t len = longest_request(cfg, &cfg->streams[i]);
        if (len >= MG_BENCH_REQUEST_MAX) {
            set_err(err, errlen,
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
        set_err(err, errlen, "out of memory");
        return MG_BENCH_ARGS_BAD;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
            return MG_BENCH_ARGS_HELP;
        if (strncmp(arg, "--", 2) != 0) {
            set_err(err, errlen,
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
            set_err(err, errlen, "unknown option %.*s: %s", (int)name_len, arg, OPTIONS_ACCEPTED);
            return MG_BENCH_ARGS_BAD;
        }
        const char *value = NULL;
        if (opt->takes_value) {
            if (eq) {
                value = eq + 1;
            } else if (i + 1 < argc) {
                value = argv[++i];
            } else {
                set_err(err, errlen, "%s needs a value: %s", opt->name, opt->value_hint);
                return MG_BENCH_ARGS_BAD;
            }
        } else if (eq) {
            set_err(err, errlen, "%s takes no value (given \"%s\")", opt->name, eq + 1);
            return MG_BENCH_ARGS_BAD;
        }
        if (!opt->repeatable) {
            if (seen & (1u << opt->id)) {
                set_err(err, errlen, "%s %s: %s was already given once", opt->name,
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

/* --- percentiles ----------------------------------------------------------------------------- */

int64_t mg_bench_percentile(const int64_t *sorted, size_t n, unsigned permille)
{
    if (n == 0 || permille == 0)
        return -1;
    if (permille > 1000)
        permille = 1000;
    uint64_t rank = ((uint64_t)permille * n + 999) / 1000; /* ceil(permille * n / 1000) */
    if (rank < 1)
        rank = 1;
    return sorted[rank - 1];
}

static void summarize(const int64_t *sorted, size_t n, struct mg_bench_latency *l)
{
    l->samples = n;
    l->min_ns = n ? sorted[0] : -1;
    l->p50_ns = mg_bench_percentile(sorted, n, 500);
    l->p95_ns = mg_bench_percentile(sorted, n, 950);
    l->p99_ns = mg_bench_percentile(sorted, n, 990);
    l->max_ns = mg_bench_percentile(sorted, n, 1000);
    long double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += sorted[i];
    l->mean_ns = n ? (double)(sum / n) : -1;
}

/* --- the response head ----------------------------------------------------------------------- */

static bool equals_ci(const char *p, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(p, lit, n) == 0;
}

/* --chunked, for the run under way (the parser is shared with the tests, which never set it). */
static bool accept_chunked;

enum mg_bench_parse mg_bench_parse_response_head(const char *buf, size_t len,
                                                 struct mg_bench_response_head *h, const char **why)
{
    memset(h, 0, sizeof *h);
    *why = NULL;
    static const char prefix[] = "HTTP/1.";
    size_t check = len < sizeof prefix - 1 ? len : sizeof prefix - 1;
    if (memcmp(buf, prefix, check) != 0) {
        *why = "not an HTTP/1.x status line";
        return MG_BENCH_PARSE_BAD;
    }
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end) {
        if (len >= MG_BENCH_RESPONSE_HEAD_MAX) {
            *why = "response head longer than 16384 bytes";
            return MG_BENCH_PARSE_BAD;
        }
        return MG_BENCH_PARSE_MORE;
    }
    size_t head_len = (size_t)(end - buf) + 4;
    if (head_len > MG_BENCH_RESPONSE_HEAD_MAX) {
        *why = "response head longer than 16384 bytes";
        return MG_BENCH_PARSE_BAD;
    }
    /* "HTTP/1.x SSS" then a space (and a reason) or the end of the line. */
    if (head_len < 16 || (buf[7] != '0' && buf[7] != '1') || buf[8] != ' ' || buf[9] < '1' ||
        buf[9] > '5' || buf[10] < '0' || buf[10] > '9' || buf[11] < '0' || buf[11] > '9' ||
        (buf[12] != ' ' && buf[12] != '\r')) {
        *why = "not an HTTP/1.x status line";
        return MG_BENCH_PARSE_BAD;
    }
    h->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    if (h->status < 200) {
        *why = "an interim 1xx response (meshgate sends none)";
        return MG_BENCH_PARSE_BAD;
    }
    bool http10 = buf[7] == '0', keep_alive = false;
    const char *lines_end = end + 2; /* the CRLF ending the last header line */
    const char *p = memmem(buf, head_len, "\r\n", 2) + 2;
    while (p < lines_end) {
        const char *eol = memmem(p, (size_t)(lines_end - p), "\r\n", 2);
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (!colon || colon == p) {
            *why = "a header line without a name";
            return MG_BENCH_PARSE_BAD;
        }
        for (const char *q = p; q < colon; q++)
            if (!token_char(*q)) {
                *why = "a header name with a character outside the token set";
                return MG_BENCH_PARSE_BAD;
            }
        const char *v = colon + 1, *v_end = eol;
        while (v < v_end && (*v == ' ' || *v == '\t'))
            v++;
        while (v_end > v && (v_end[-1] == ' ' || v_end[-1] == '\t'))
            v_end--;
        size_t name_len = (size_t)(colon - p), value_len = (size_t)(v_end - v);
        if (equals_ci(p, name_len, "content-length")) {
            uint64_t n = 0;
            if (value_len == 0 || value_len > 15) {
                *why = "a Content-Length that is not a number";
                return MG_BENCH_PARSE_BAD;
            }
            for (size_t i = 0; i < value_len; i++) {
                if (v[i] < '0' || v[i] > '9') {
                    *why = "a Content-Length that is not a number";
                    return MG_BENCH_PARSE_BAD;
                }
                n = n * 10 + (uint64_t)(v[i] - '0');
            }
            if (h->has_content_length && n != h->content_length) {
                *why = "two different Content-Length headers";
                return MG_BENCH_PARSE_BAD;
            }
            h->has_content_length = true;
            h->content_length = n;
        } else if (equals_ci(p, name_len, "transfer-encoding")) {
            if (!accept_chunked || !equals_ci(v, value_len, "chunked")) {
                *why = "Transfer-Encoding is not supported (meshgate always sends Content-Length)";
                return MG_BENCH_PARSE_BAD;
            }
            h->chunked = true;
        } else if (equals_ci(p, name_len, "connection")) {
            for (const char *t = v; t < v_end;) {
                while (t < v_end && (*t == ' ' || *t == '\t' || *t == ','))
                    t++;
                const char *t_end = t;
                while (t_end < v_end && *t_end != ',' && *t_end != ' ' && *t_end != '\t')
                    t_end++;
                if (equals_ci(t, (size_t)(t_end - t), "close"))
                    h->connection_close = true;
                else if (equals_ci(t, (size_t)(t_end - t), "keep-alive"))
                    keep_alive = true;
                t = t_end;
            }
        }
        p = eol + 2;
    }
    if (http10 && !keep_alive)
        h->connection_close = true;
    if (h->chunked && h->has_content_length) {
        *why = "both Content-Length and Transfer-Encoding";
        return MG_BENCH_PARSE_BAD;
    }
    if (!h->has_content_length && !h->chunked) {
        if (h->status != 204 && h->status != 304) {
            *why = "no Content-Length (meshgate always sends one)";
            return MG_BENCH_PARSE_BAD;
        }
        h->content_length = 0;
    }
    h->head_len = head_len;
    return MG_BENCH_PARSE_DONE;
}

/* --- the engine: shared state ---------------------------------------------------------------- */

/* One stream as every thread sees it. Only the atomics change during a run. */
struct plan {
    const struct mg_bench_stream *spec;
    char *fixed_request; /* the request when the path holds no {key} */
    size_t fixed_len;
    size_t request_cap; /* room for the longest keyed request */
    double period_ns;   /* open: time between two ticks of the schedule */
    atomic_uint_fast64_t next_key;
    atomic_uint_fast64_t counted;     /* requests counted, against --max-requests */
    atomic_uint_fast64_t outstanding; /* open: requests in flight, against --max-outstanding */
    atomic_int_fast64_t stopped_ns;   /* when --max-requests stopped it; 0: it did not */
};

struct run {
    const struct mg_bench_config *cfg;
    struct plan plans[MG_BENCH_MAX_STREAMS];
    int64_t start_ns;      /* the first tick of every schedule; warm-up begins */
    int64_t measure_ns;    /* the window opens */
    int64_t window_end_ns; /* the window closes: nothing is sent from here on */
    int64_t timeout_ns;
    atomic_int_fast64_t interrupted_ns; /* when a worker first saw the stop flag; 0: never */
    atomic_bool failed;                 /* a worker hit a system error: all stop */
};

/* --- the engine: one thread's state ---------------------------------------------------------- */

enum conn_state {
    CONN_IDLE,       /* no request; for open streams: on the free list */
    CONN_CONNECTING, /* a request is out from here to RECEIVING */
    CONN_SENDING,
    CONN_RECEIVING,
    CONN_WAITING, /* closed: pause (or back-off) before the next request */
    CONN_POOLED,  /* open: kept alive, waiting for a tick */
    CONN_DONE,    /* closed and once: nothing more to send */
};

enum chunk_step {
    CHUNK_NONE = 0,
    CHUNK_SIZE,
    CHUNK_EXTENSION,
    CHUNK_DATA,
    CHUNK_DATA_END,
    CHUNK_TRAILER
};

struct shard;

struct conn {
    struct shard *shard;
    uint32_t id;  /* index in the worker's table */
    uint32_t gen; /* bumps with every new socket */
    int fd;
    uint32_t events; /* registered with epoll; 0: not registered */
    enum conn_state state;
    int64_t start_ns;    /* the request's scheduled start */
    int64_t deadline_ns; /* timeout, or end of the pause */
    size_t heap_pos;
    bool counted;   /* the request is in the window */
    bool reused;    /* the socket already carried a whole exchange */
    bool retried;   /* the request was sent again once */
    bool got_bytes; /* some of the response came */
    bool head_done; /* the head is parsed; body_left bytes to go */
    bool close_after;
    /* A chunked body (--chunked): where its reading is (enum chunk_step), the chunk size
     * being read, the length of the trailer line being read. */
    int chunk_step;
    uint64_t chunk_size;
    size_t trailer_line;
    int status;
    uint64_t body_left;
    unsigned once_index;
    const char *req;
    size_t req_len, req_sent;
    char *req_buf;  /* this connection's keyed request */
    char *head_buf; /* a head that came in pieces */
    size_t head_len;
    struct conn *prev, *next; /* the pool, or the free list */
};

struct samples {
    int64_t *v;
    size_t n, cap;
};

struct tally {
    uint64_t sent, responses, dropped, retried, overlong;
    uint64_t status_counts[600];
    uint64_t errors[MG_BENCH_ERR_KINDS];
    int64_t max_send_lag_ns;
    int64_t last_outcome_ns;
    struct samples ok, other; /* latencies of 200s and of every other response */
    char first_error[160];
};

struct shard {
    struct plan *plan;
    enum mg_bench_mode mode;
    struct tally t;
    unsigned inflight;
    struct conn **own; /* closed and once: this thread's connections */
    unsigned nown, done;
    uint64_t next_tick; /* open: the next tick of the schedule this thread sends */
    bool schedule_over; /* open: no tick left in the window */
    struct conn *pool;  /* open: kept-alive idle connections */
    struct conn *free_list;
    bool fired; /* once: the burst went out */
};

struct worker {
    struct run *run;
    unsigned index;
    int epfd;
    bool stopping;
    struct shard shards[MG_BENCH_MAX_STREAMS];
    struct conn **table;
    uint32_t ntable, table_cap;
    struct conn **heap;
    size_t heap_len, heap_cap;
    char err[256]; /* a system error, when there was one */
    pthread_t thread;
    char scratch[SCRATCH_BYTES];
};

static const char *const error_names[MG_BENCH_ERR_KINDS] = {"connect", "timeout", "closed",
                                                            "protocol", "aborted"};

static void worker_fail(struct worker *w, const char *what)
{
    if (!w->err[0])
        snprintf(w->err, sizeof w->err, "%s", what);
    atomic_store(&w->run->failed, true);
}

/* --- the deadline heap: a min-heap of connections by deadline_ns, each knowing its place --- */

static void heap_place(struct worker *w, size_t i, struct conn *c)
{
    w->heap[i] = c;
    c->heap_pos = i;
}

static void heap_up(struct worker *w, size_t i)
{
    struct conn *c = w->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (w->heap[parent]->deadline_ns <= c->deadline_ns)
            break;
        heap_place(w, i, w->heap[parent]);
        i = parent;
    }
    heap_place(w, i, c);
}

static void heap_down(struct worker *w, size_t i)
{
    struct conn *c = w->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= w->heap_len)
            break;
        if (child + 1 < w->heap_len &&
            w->heap[child + 1]->deadline_ns < w->heap[child]->deadline_ns)
            child++;
        if (c->deadline_ns <= w->heap[child]->deadline_ns)
            break;
        heap_place(w, i, w->heap[child]);
        i = child;
    }
    heap_place(w, i, c);
}

static void heap_remove(struct worker *w, struct conn *c)
{
    size_t i = c->heap_pos;
    if (i == NOT_IN_HEAP)
        return;
    c->heap_pos = NOT_IN_HEAP;
    struct conn *last = w->heap[--w->heap_len];
    if (last == c)
        return;
    heap_place(w, i, last);
    heap_up(w, i);
    heap_down(w, last->heap_pos);
}

static bool heap_set(struct worker *w, struct conn *c, int64_t deadline_ns)
{
    heap_remove(w, c);
    if (w->heap_len == w->heap_cap) {
        size_t want = w->heap_cap ? w->heap_cap * 2 : 64;
        struct conn **grown = realloc(w->heap, want * sizeof *grown);
        if (!grown) {
            worker_fail(w, "out of memory for the deadline heap");
            return false;
        }
        w->heap = grown;
        w->heap_cap = want;
    }
    c->deadline_ns = deadline_ns;
    heap_place(w, w->heap_len++, c);
    heap_up(w, c->heap_pos);
    return true;
}

/* --- connections ----------------------------------------------------------------------------- */

static struct conn *conn_new(struct worker *w, struct shard *sh)
{
    if (w->ntable == w->table_cap) {
        uint32_t want = w->table_cap ? w->table_cap * 2 : 64;
        struct conn **grown = realloc(w->table, want * sizeof *grown);
        if (!grown) {
            worker_fail(w, "out of memory for connections");
            return NULL;
        }
        w->table = grown;
        w->table_cap = want;
    }
    struct conn *c = calloc(1, sizeof *c);
    if (c && sh->plan->spec->key_slots) {
        c->req_buf = malloc(sh->plan->request_cap);
        if (!c->req_buf) {
            free(c);
            c = NULL;
        }
    }
    if (!c) {
        worker_fail(w, "out of memory for connections");
        return NULL;
    }
    c->shard = sh;
    c->id = w->ntable;
    c->fd = -1;
    c->heap_pos = NOT_IN_HEAP;
    c->state = CONN_IDLE;
    w->table[w->ntable++] = c;
    return c;
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->events = 0;
    c->reused = false;
}

static bool conn_watch(struct worker *w, struct conn *c, uint32_t events)
{
    if (c->events == events)
        return true;
    struct epoll_event ev = {.events = events, .data.u64 = ((uint64_t)c->id << 32) | c->gen};
    if (epoll_ctl(w->epfd, c->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        char what[128];
        snprintf(what, sizeof what, "epoll_ctl: %s", strerror(errno));
        worker_fail(w, what);
        return false;
    }
    c->events = events;
    return true;
}

static void list_push(struct conn **head, struct conn *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head)
        (*head)->prev = c;
    *head = c;
}

static void list_remove(struct conn **head, struct conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static bool samples_push(struct worker *w, struct samples *s, int64_t v)
{
    if (s->n == s->cap) {
        size_t want = s->cap ? s->cap * 2 : 1024;
        int64_t *grown = realloc(s->v, want * sizeof *grown);
        if (!grown) {
            worker_fail(w, "out of memory for latency samples (lower --max-requests)");
            return false;
        }
        s->v = grown;
        s->cap = want;
    }
    s->v[s->n++] = v;
    return true;
}

/* --- requests ------------------------------------------------------------------------------- */

static void start_exchange(struct worker *w, struct conn *c, int64_t now);
static void next_closed(struct worker *w, struct conn *c, int64_t now, int64_t wait_ns);

/*
 * Ends the request on c: a response (status > 0) or an error of kind. Records it when it is
 * counted, then moves the connection on by its stream's mode.
 */
static void finish(struct worker *w, struct conn *c, int status, enum mg_bench_error_kind kind,
                   int errnum, int64_t now)
{
    struct shard *sh = c->shard;
    struct tally *t = &sh->t;
    heap_remove(w, c);
    sh->inflight--;
    if (sh->mode == MG_BENCH_OPEN)
        atomic_fetch_sub(&sh->plan->outstanding, 1);
    if (c->counted) {
        if (status > 0) {
            int64_t latency = now - c->start_ns;
            t->responses++;
            t->status_counts[status]++;
            samples_push(w, status == 200 ? &t->ok : &t->other, latency);
        } else {
            t->errors[kind]++;
            if (!t->first_error[0]) {
                const struct mg_bench_config *cfg = w->run->cfg;
                switch (kind) {
                case MG_BENCH_ERR_CONNECT:
                    snprintf(t->first_error, sizeof t->first_error, "connect to %s: %s",
                             cfg->target.text, strerror(errnum));
                    break;
                case MG_BENCH_ERR_TIMEOUT:
                    snprintf(t->first_error, sizeof t->first_error,
                             "no whole response within %u ms", cfg->timeout_ms);
                    break;
                case MG_BENCH_ERR_CLOSED:
                    snprintf(t->first_error, sizeof t->first_error,
                             "connection closed before the whole response: %s",
                             errnum ? strerror(errnum) : "end of stream");
                    break;
                case MG_BENCH_ERR_PROTOCOL:
                    snprintf(t->first_error, sizeof t->first_error, "bad response: %s",
                             errnum ? strerror(errnum) : "unexpected bytes");
                    break;
                default:
                    snprintf(t->first_error, sizeof t->first_error,
                             "still outstanding when the run was interrupted");
                    break;
                }
            }
        }
        if (now > t->last_outcome_ns)
            t->last_outcome_ns = now;
    }
    bool keep = status > 0 && !c->close_after && c->fd >= 0;
    if (keep)
        c->reused = true;
    else
        conn_close(c);
    free(c->head_buf);
    c->head_buf = NULL;
    c->head_len = 0;

    switch (sh->mode) {
    case MG_BENCH_CLOSED: {
        /* After an error (but a timeout, which has waited already) a short back-off, so a
         * stopped server is counted and not hammered in a busy loop. */
        int64_t wait_ns = (int64_t)sh->plan->spec->pause_ms * MG_NS_PER_MS;
        if (status <= 0 && kind != MG_BENCH_ERR_TIMEOUT &&
            wait_ns < MG_BENCH_ERROR_BACKOFF_MS * MG_NS_PER_MS)
            wait_ns = MG_BENCH_ERROR_BACKOFF_MS * MG_NS_PER_MS;
        next_closed(w, c, now, wait_ns);
        break;
    }
    case MG_BENCH_OPEN:
        if (keep && !w->stopping) {
            c->state = CONN_POOLED;
            list_push(&sh->pool, c);
        } else {
            conn_close(c);
            c->state = CONN_IDLE;
            list_push(&sh->free_list, c);
        }
        break;
    case MG_BENCH_ONCE:
        conn_close(c);
        c->state = CONN_DONE;
        sh->done++;
        break;
    }
}

/* The request failed on the way: send it again once on a new connection when a kept-alive
 * one was closed by the server before answering (it may close an idle connection at any
 * time, and a GET may be repeated), else it is an error. */
static void fail_or_retry(struct worker *w, struct conn *c, enum mg_bench_error_kind kind,
                          int errnum, int64_t now)
{
    if (kind == MG_BENCH_ERR_CLOSED && c->reused && !c->got_bytes && !c->retried) {
        c->retried = true;
        if (c->counted)
            c->shard->t.retried++;
        conn_close(c);
        start_exchange(w, c, now);
        return;
    }
    finish(w, c, 0, kind, errnum, now);
}

static void try_send(struct worker *w, struct conn *c, int64_t now)
{
    while (c->req_sent < c->req_len) {
        ssize_t n = send(c->fd, c->req + c->req_sent, c->req_len - c->req_sent, MSG_NOSIGNAL);
        if (n > 0) {
            c->req_sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            conn_watch(w, c, EPOLLOUT);
            return;
        }
        fail_or_retry(w, c, MG_BENCH_ERR_CLOSED, n < 0 ? errno : 0, now);
        return;
    }
    c->state = CONN_RECEIVING;
    conn_watch(w, c, EPOLLIN | EPOLLRDHUP);
}

/* Sends c's request: on its kept-alive socket, or on a new connection. */
static void start_exchange(struct worker *w, struct conn *c, int64_t now)
{
    c->req_sent = 0;
    c->got_bytes = c->head_done = c->close_after = false;
    c->head_len = 0;
    c->status = 0;
    c->chunk_step = CHUNK_NONE;
    c->chunk_size = 0;
    c->trailer_line = 0;
    if (c->fd < 0) {
        const struct mg_bench_target *target = &w->run->cfg->target;
        int fd = socket(target->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            c->state = CONN_CONNECTING;
            finish(w, c, 0, MG_BENCH_ERR_CONNECT, errno, now);
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->gen++;
        c->events = 0;
        c->reused = false;
        if (connect(fd, (const struct sockaddr *)&target->addr, target->addr_len) < 0) {
            if (errno == EINPROGRESS) {
                c->state = CONN_CONNECTING;
                conn_watch(w, c, EPOLLOUT);
                return;
            }
            c->state = CONN_CONNECTING;
            finish(w, c, 0, MG_BENCH_ERR_CONNECT, errno, now);
            return;
        }
    }
    c->state = CONN_SENDING;
    try_send(w, c, now);
}

/* Starts a request scheduled at start_ns on c. False when the stream may count no more
 * requests (--max-requests): then nothing was sent. */
static bool issue(struct worker *w, struct conn *c, int64_t start_ns, int64_t now)
{
    struct shard *sh = c->shard;
    struct plan *p = sh->plan;
    const struct run *r = w->run;
    bool counted = start_ns >= r->measure_ns;
    if (counted) {
        if (atomic_fetch_add(&p->counted, 1) >= r->cfg->max_requests) {
            int_fast64_t zero = 0;
            atomic_compare_exchange_strong(&p->stopped_ns, &zero, now);
            return false;
        }
        sh->t.sent++;
        if (now - start_ns > sh->t.max_send_lag_ns)
            sh->t.max_send_lag_ns = now - start_ns;
    }
    c->counted = counted;
    c->start_ns = start_ns;
    c->retried = false;
    if (p->spec->key_slots) {
        const struct mg_bench_config *cfg = r->cfg;
        size_t k = sh->mode == MG_BENCH_ONCE
                       ? c->once_index
                       : (size_t)(atomic_fetch_add(&p->next_key, 1) % cfg->nkeys);
        c->req_len = format_request(cfg, p->spec, cfg->keys[k], c->req_buf, p->request_cap);
        c->req = c->req_buf;
    } else {
        c->req = p->fixed_request;
        c->req_len = p->fixed_len;
    }
    sh->inflight++;
    if (!heap_set(w, c, start_ns + r->timeout_ns)) {
        sh->inflight--;
        return false;
    }
    start_exchange(w, c, now);
    return true;
}

/* A closed connection's next request: now, after wait_ns, or none when the window is over. */
static void next_closed(struct worker *w, struct conn *c, int64_t now, int64_t wait_ns)
{
    struct shard *sh = c->shard;
    int64_t at = now + wait_ns;
    if (w->stopping || at >= w->run->window_end_ns || atomic_load(&sh->plan->stopped_ns)) {
        conn_close(c);
        c->state = CONN_DONE;
        sh->done++;
        return;
    }
    if (wait_ns == 0) {
        if (!issue(w, c, now, now)) {
            conn_close(c);
            c->state = CONN_DONE;
            sh->done++;
        }
        return;
    }
    c->state = CONN_WAITING;
    heap_set(w, c, at);
}

/* --- reading a response ---------------------------------------------------------------------- */

static void complete(struct worker *w, struct conn *c, bool extra_bytes, int64_t now)
{
    if (extra_bytes) {
        /* Bytes past Content-Length: a server bug worth seeing. The response counts; the
         * connection is not trusted again. */
        c->close_after = true;
        if (c->counted)
            c->shard->t.overlong++;
    }
    finish(w, c, c->status, 0, 0, now);
}

static void protocol_error(struct worker *w, struct conn *c, const char *why, int64_t now)
{
    struct tally *t = &c->shard->t;
    if (c->counted && !t->first_error[0])
        snprintf(t->first_error, sizeof t->first_error, "bad response: %s", why);
    conn_close(c);
    finish(w, c, 0, MG_BENCH_ERR_PROTOCOL, 0, now);
}

/* Takes n bytes of a chunked body; the response is complete after the last chunk's trailer. */
static void feed_chunked(struct worker *w, struct conn *c, const char *data, size_t n, int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        char ch = data[i];
        switch (c->chunk_step) {
        case CHUNK_SIZE:
        case CHUNK_EXTENSION: {
            int v = ch >= '0' && ch <= '9'   ? ch - '0'
                    : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                    : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                             : -1;
            if (c->chunk_step == CHUNK_SIZE && v >= 0) {
                if (c->chunk_size >> 56) {
                    protocol_error(w, c, "a chunk size too large", now);
                    return;
                }
                c->chunk_size = c->chunk_size * 16 + (uint64_t)v;
            } else if (ch == '\n') {
                c->chunk_step = c->chunk_size ? CHUNK_DATA : CHUNK_TRAILER;
                c->body_left = c->chunk_size;
                c->chunk_size = 0;
                c->trailer_line = 0;
            } else if (ch != '\r') {
                c->chunk_step = CHUNK_EXTENSION;
            }
            break;
        }
        case CHUNK_DATA: {
            size_t take = n - i < c->body_left ? n - i : (size_t)c->body_left;
            c->body_left -= take;
            i += take - 1;
            if (c->body_left == 0)
                c->chunk_step = CHUNK_DATA_END;
            break;
        }
        case CHUNK_DATA_END:
            if (ch == '\n')
                c->chunk_step = CHUNK_SIZE;
            break;
        case CHUNK_TRAILER:
            if (ch == '\n') {
                if (c->trailer_line == 0) {
                    c->chunk_step = CHUNK_NONE;
                    complete(w, c, i + 1 < n, now);
                    return;
                }
                c->trailer_line = 0;
            } else if (ch != '\r') {
                c->trailer_line++;
            }
            break;
        }
    }
}

/* Takes n bytes of the response from data. */
static void feed(struct worker *w, struct conn *c, const char *data, size_t n, int64_t now)
{
    if (!c->head_done) {
        const char *head = data;
        size_t have = n;
        if (c->head_len || !memmem(data, n, "\r\n\r\n", 4)) {
            /* The head comes in pieces: gather it. */
            if (!c->head_buf && !(c->head_buf = malloc(MG_BENCH_RESPONSE_HEAD_MAX))) {
                worker_fail(w, "out of memory for a response head");
                return;
            }
            size_t take = n;
            if (take > MG_BENCH_RESPONSE_HEAD_MAX - c->head_len)
                take = MG_BENCH_RESPONSE_HEAD_MAX - c->head_len;
            memcpy(c->head_buf + c->head_len, data, take);
            c->head_len += take;
            head = c->head_buf;
            have = c->head_len;
            /* what follows the head is counted from data: keep its offset right */
            data += take;
            n -= take;
        } else {
            data += n;
            n = 0;
        }
        struct mg_bench_response_head h;
        const char *why;
        enum mg_bench_parse rc = mg_bench_parse_response_head(head, have, &h, &why);
        if (rc == MG_BENCH_PARSE_BAD) {
            protocol_error(w, c, why, now);
            return;
        }
        if (rc == MG_BENCH_PARSE_MORE) {
            if (n > 0) /* the head buffer is full and still no end */
                protocol_error(w, c, "response head longer than 16384 bytes", now);
            return;
        }
        c->head_done = true;
        c->status = h.status;
        c->close_after = h.connection_close;
        c->body_left = h.content_length;
        if (h.chunked) {
            c->chunk_step = CHUNK_SIZE;
            c->chunk_size = 0;
            size_t after = have - h.head_len;
            /* The rest of the parsed bytes, then what did not fit the head buffer. */
            feed_chunked(w, c, head + h.head_len, after, now);
            if (n > 0 && c->chunk_step != CHUNK_NONE && c->state == CONN_RECEIVING)
                feed_chunked(w, c, data, n, now);
            return;
        }
        /* Bytes after the head in what was parsed, plus what did not fit the head buffer. */
        size_t after = have - h.head_len + n;
        if (after > c->body_left) {
            c->body_left = 0;
            complete(w, c, true, now);
            return;
        }
        c->body_left -= after;
        if (c->body_left == 0)
            complete(w, c, false, now);
        return;
    }
    if (c->chunk_step != CHUNK_NONE) {
        feed_chunked(w, c, data, n, now);
        return;
    }
    if (n > c->body_left) {
        c->body_left = 0;
        complete(w, c, true, now);
        return;
    }
    c->body_left -= n;
    if (c->body_left == 0)
        complete(w, c, false, now);
}

/* Epoll is level-triggered: a short read means the socket is drained for now, and whatever
 * comes later is announced again, so a recv that would only say EAGAIN is saved. */
static void on_readable(struct worker *w, struct conn *c)
{
    uint32_t gen = c->gen;
    while (c->state == CONN_RECEIVING && c->gen == gen && c->fd >= 0) {
        ssize_t n = recv(c->fd, w->scratch, sizeof w->scratch, 0);
        int64_t now = mg_monotonic_ns();
        if (n > 0) {
            c->got_bytes = true;
            feed(w, c, w->scratch, (size_t)n, now);
            if ((size_t)n < sizeof w->scratch)
                return;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        fail_or_retry(w, c, MG_BENCH_ERR_CLOSED, n < 0 ? errno : 0, now);
        return;
    }
}

static void on_event(struct worker *w, struct conn *c, uint32_t events)
{
    int64_t now = mg_monotonic_ns();
    switch (c->state) {
    case CONN_CONNECTING: {
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
            soerr = errno;
        if (!soerr && (events & (EPOLLERR | EPOLLHUP)))
            soerr = ECONNREFUSED;
        if (soerr) {
            finish(w, c, 0, MG_BENCH_ERR_CONNECT, soerr, now);
            return;
        }
        if (!(events & EPOLLOUT))
            return;
        c->state = CONN_SENDING;
        try_send(w, c, now);
        return;
    }
    case CONN_SENDING:
        try_send(w, c, now);
        return;
    case CONN_RECEIVING:
        on_readable(w, c);
        return;
    case CONN_WAITING:
        /* An idle kept-alive socket became readable: the server closed it (idle timeout,
         * shutdown) or sent something unasked. Either way it is not used again. */
        conn_close(c);
        return;
    case CONN_POOLED:
        list_remove(&c->shard->pool, c);
        conn_close(c);
        c->state = CONN_IDLE;
        list_push(&c->shard->free_list, c);
        return;
    default:
        return;
    }
}

/* --- the worker loop ------------------------------------------------------------------------- */

/* The schedule of an open stream: this thread sends ticks index, index + T, index + 2T... */
static int64_t tick_time(const struct run *r, const struct plan *p, uint64_t tick)
{
    return r->start_ns + (int64_t)llround((double)tick * p->period_ns);
}

static void pump_open(struct worker *w, struct shard *sh, int64_t now)
{
    struct run *r = w->run;
    struct plan *p = sh->plan;
    while (!sh->schedule_over) {
        if (w->stopping || atomic_load(&p->stopped_ns)) {
            sh->schedule_over = true;
            break;
        }
        int64_t at = tick_time(r, p, sh->next_tick);
        if (at >= r->window_end_ns) {
            sh->schedule_over = true;
            break;
        }
        if (at > now)
            break;
        sh->next_tick += r->cfg->threads;
        bool counted = at >= r->measure_ns;
        if (atomic_fetch_add(&p->outstanding, 1) >= r->cfg->max_outstanding) {
            atomic_fetch_sub(&p->outstanding, 1);
            if (counted)
                sh->t.dropped++;
            continue;
        }
        struct conn *c = sh->pool;
        if (c)
            list_remove(&sh->pool, c);
        else if ((c = sh->free_list))
            list_remove(&sh->free_list, c);
        else if (!(c = conn_new(w, sh))) {
            atomic_fetch_sub(&p->outstanding, 1);
            return;
        }
        if (!issue(w, c, at, now)) {
            atomic_fetch_sub(&p->outstanding, 1);
            if (c->fd >= 0) {
                c->state = CONN_POOLED;
                list_push(&sh->pool, c);
            } else {
                c->state = CONN_IDLE;
                list_push(&sh->free_list, c);
            }
            sh->schedule_over = true;
            break;
        }
    }
}

static void fire_once(struct worker *w, struct shard *sh, int64_t now)
{
    sh->fired = true;
    for (unsigned i = 0; i < sh->nown; i++) {
        struct conn *c = sh->own[i];
        if (w->stopping || !issue(w, c, w->run->measure_ns, now)) {
            c->state = CONN_DONE;
            sh->done++;
        }
    }
}

static void expire(struct worker *w, int64_t now)
{
    while (w->heap_len && w->heap[0]->deadline_ns <= now) {
        struct conn *c = w->heap[0];
        heap_remove(w, c);
        if (c->state == CONN_WAITING) {
            int64_t scheduled = c->deadline_ns;
            c->state = CONN_IDLE;
            if (w->stopping || !issue(w, c, scheduled, now)) {
                conn_close(c);
                c->state = CONN_DONE;
                c->shard->done++;
            }
        } else if (c->state == CONN_CONNECTING || c->state == CONN_SENDING ||
                   c->state == CONN_RECEIVING) {
            conn_close(c);
            finish(w, c, 0, MG_BENCH_ERR_TIMEOUT, 0, now);
        }
    }
}

/* Every request still out becomes an aborted error; nothing more is sent. */
static void abort_all(struct worker *w, int64_t now)
{
    w->stopping = true;
    for (uint32_t i = 0; i < w->ntable; i++) {
        struct conn *c = w->table[i];
        if (c->state == CONN_CONNECTING || c->state == CONN_SENDING || c->state == CONN_RECEIVING) {
            conn_close(c);
            finish(w, c, 0, MG_BENCH_ERR_ABORTED, 0, now);
        }
    }
    /* What was waiting to send (a pause, a burst not fired yet) sends nothing now. */
    for (uint32_t i = 0; i < w->ntable; i++) {
        struct conn *c = w->table[i];
        if (c->shard->mode != MG_BENCH_OPEN && c->state != CONN_DONE) {
            heap_remove(w, c);
            conn_close(c);
            c->state = CONN_DONE;
            c->shard->done++;
        }
    }
    for (unsigned s = 0; s < w->run->cfg->nstreams; s++) {
        struct shard *sh = &w->shards[s];
        sh->schedule_over = true;
        sh->fired = true;
    }
}

static bool worker_finished(const struct worker *w)
{
    for (unsigned s = 0; s < w->run->cfg->nstreams; s++) {
        const struct shard *sh = &w->shards[s];
        if (sh->inflight)
            return false;
        if (sh->mode == MG_BENCH_OPEN ? !sh->schedule_over : sh->done < sh->nown)
            return false;
    }
    return true;
}

static int64_t next_wake(struct worker *w, int64_t now)
{
    const struct run *r = w->run;
    int64_t wake = now + STOP_POLL_NS;
    if (w->heap_len && w->heap[0]->deadline_ns < wake)
        wake = w->heap[0]->deadline_ns;
    for (unsigned s = 0; s < r->cfg->nstreams; s++) {
        const struct shard *sh = &w->shards[s];
        if (sh->mode == MG_BENCH_OPEN && !sh->schedule_over) {
            int64_t at = tick_time(r, sh->plan, sh->next_tick);
            if (at < wake)
                wake = at;
        } else if (sh->mode == MG_BENCH_ONCE && !sh->fired && r->measure_ns < wake) {
            wake = r->measure_ns;
        }
    }
    return wake;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->run;
    const struct mg_bench_config *cfg = r->cfg;
    struct epoll_event events[EVENTS_PER_WAIT];
    for (;;) {
        int64_t now = mg_monotonic_ns();
        if (!w->stopping && ((cfg->stop && atomic_load(cfg->stop)) || atomic_load(&r->failed))) {
            int_fast64_t zero = 0;
            if (!atomic_load(&r->failed))
                atomic_compare_exchange_strong(&r->interrupted_ns, &zero, now);
            abort_all(w, now);
        }
        for (unsigned s = 0; s < cfg->nstreams; s++) {
            struct shard *sh = &w->shards[s];
            if (sh->mode == MG_BENCH_OPEN)
                pump_open(w, sh, now);
            else if (sh->mode == MG_BENCH_ONCE && !sh->fired && now >= r->measure_ns)
                fire_once(w, sh, now);
        }
        expire(w, now);
        if (worker_finished(w))
            break;
        int64_t wait_ns = next_wake(w, now) - mg_monotonic_ns();
        if (wait_ns < 0)
            wait_ns = 0;
        struct timespec ts = {.tv_sec = wait_ns / MG_NS_PER_SEC,
                              .tv_nsec = wait_ns % MG_NS_PER_SEC};
        int n = epoll_pwait2(w->epfd, events, EVENTS_PER_WAIT, &ts, NULL);
        if (n < 0 && errno != EINTR) {
            char what[128];
            snprintf(what, sizeof what, "epoll_pwait2: %s", strerror(errno));
            worker_fail(w, what);
            continue;
        }
        for (int i = 0; i < n; i++) {
            uint32_t id = (uint32_t)(events[i].data.u64 >> 32);
            uint32_t gen = (uint32_t)events[i].data.u64;
            if (id >= w->ntable)
                continue;
            struct conn *c = w->table[id];
            if (c->gen != gen || c->fd < 0)
                continue; /* an event of a socket closed since */
            on_event(w, c, events[i].events);
        }
    }
    for (uint32_t i = 0; i < w->ntable; i++)
        conn_close(w->table[i]);
    return NULL;
}

/* --- a run ----------------------------------------------------------------------------------- */

static int probe(const struct mg_bench_target *t, char *err, size_t errlen)
{
    int fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        set_err(err, errlen, "cannot make a socket: %s", strerror(errno));
        return -1;
    }
    int soerr = 0;
    if (connect(fd, (const struct sockaddr *)&t->addr, t->addr_len) < 0) {
        soerr = errno;
        if (soerr == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n;
            while ((n = poll(&p, 1, PROBE_TIMEOUT_MS)) < 0 && errno == EINTR)
                ;
            socklen_t len = sizeof soerr;
            if (n == 0)
                soerr = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
                soerr = errno;
        }
    }
    close(fd);
    if (soerr) {
        set_err(err, errlen,
                "cannot connect to %s: %s; is meshgate listening there? (start it, or fix "
                "--target)",
                t->text, strerror(soerr));
        return -1;
    }
    return 0;
}

static int plans_init(struct run *r, char *err, size_t errlen)
{
    const struct mg_bench_config *cfg = r->cfg;
    for (unsigned i = 0; i < cfg->nstreams; i++) {
        struct plan *p = &r->plans[i];
        p->spec = &cfg->streams[i];
        atomic_init(&p->next_key, 0);
        atomic_init(&p->counted, 0);
        atomic_init(&p->outstanding, 0);
        atomic_init(&p->stopped_ns, 0);
        if (p->spec->mode == MG_BENCH_OPEN)
            p->period_ns = (double)MG_NS_PER_SEC / p->spec->rate_per_s;
        if (p->spec->key_slots) {
            p->request_cap = longest_request(cfg, p->spec) + 1;
            continue;
        }
        size_t len = format_request(cfg, p->spec, NULL, NULL, 0);
        p->fixed_request = malloc(len + 1);
        if (!p->fixed_request) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
        p->fixed_len = format_request(cfg, p->spec, NULL, p->fixed_request, len + 1);
    }
    return 0;
}

static int worker_init(struct worker *w, struct run *r, unsigned index, char *err, size_t errlen)
{
    const struct mg_bench_config *cfg = r->cfg;
    unsigned threads = cfg->threads;
    w->run = r;
    w->index = index;
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0) {
        set_err(err, errlen, "epoll_create1: %s", strerror(errno));
        return -1;
    }
    for (unsigned s = 0; s < cfg->nstreams; s++) {
        struct shard *sh = &w->shards[s];
        sh->plan = &r->plans[s];
        sh->mode = cfg->streams[s].mode;
        sh->next_tick = index;
        if (sh->mode == MG_BENCH_OPEN)
            continue;
        unsigned total =
            sh->mode == MG_BENCH_CLOSED ? cfg->streams[s].connections : cfg->streams[s].count;
        unsigned mine = total / threads + (index < total % threads ? 1 : 0);
        sh->own = calloc(mine ? mine : 1, sizeof *sh->own);
        if (!sh->own) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
        for (unsigned k = 0; k < mine; k++) {
            struct conn *c = conn_new(w, sh);
            if (!c) {
                set_err(err, errlen, "out of memory for connections");
                return -1;
            }
            c->once_index = index + k * threads;
            sh->own[sh->nown++] = c;
            if (sh->mode == MG_BENCH_CLOSED) {
                /* Every closed connection starts with the run. */
                c->state = CONN_WAITING;
                if (!heap_set(w, c, r->start_ns)) {
                    set_err(err, errlen, "out of memory");
                    return -1;
                }
            }
        }
    }
    return 0;
}

static void worker_free(struct worker *w)
{
    if (w->epfd > 0)
        close(w->epfd);
    for (uint32_t i = 0; i < w->ntable; i++) {
        conn_close(w->table[i]);
        free(w->table[i]->req_buf);
        free(w->table[i]->head_buf);
        free(w->table[i]);
    }
    free(w->table);
    free(w->heap);
    for (unsigned s = 0; s < MG_BENCH_MAX_STREAMS; s++) {
        free(w->shards[s].own);
        free(w->shards[s].t.ok.v);
        free(w->shards[s].t.other.v);
    }
}

static int compare_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Gathers one kind of sample of stream s from every worker, sorted. */
static int64_t *gather(struct worker *workers, unsigned nworkers, unsigned s, bool ok, size_t *n)
{
    size_t total = 0;
    for (unsigned i = 0; i < nworkers; i++)
        total += ok ? workers[i].shards[s].t.ok.n : workers[i].shards[s].t.other.n;
    int64_t *v = malloc((total ? total : 1) * sizeof *v);
    if (!v)
        return NULL;
    size_t at = 0;
    for (unsigned i = 0; i < nworkers; i++) {
        const struct samples *src = ok ? &workers[i].shards[s].t.ok : &workers[i].shards[s].t.other;
        if (src->n)
            memcpy(v + at, src->v, src->n * sizeof *v);
        at += src->n;
    }
    qsort(v, total, sizeof *v, compare_int64);
    *n = total;
    return v;
}

static int merge_stream(struct run *r, struct worker *workers, unsigned nworkers, unsigned s,
                        struct mg_bench_stream_report *out)
{
    const struct mg_bench_stream *spec = &r->cfg->streams[s];
    int64_t last_outcome = 0;
    for (unsigned i = 0; i < nworkers; i++) {
        const struct tally *t = &workers[i].shards[s].t;
        out->sent += t->sent;
        out->responses += t->responses;
        out->dropped += t->dropped;
        out->retried += t->retried;
        out->overlong += t->overlong;
        for (int code = 0; code < 600; code++)
            out->status_counts[code] += t->status_counts[code];
        for (int k = 0; k < MG_BENCH_ERR_KINDS; k++)
            out->errors[k] += t->errors[k];
        if (t->max_send_lag_ns > out->max_send_lag_ns)
            out->max_send_lag_ns = t->max_send_lag_ns;
        if (t->last_outcome_ns > last_outcome)
            last_outcome = t->last_outcome_ns;
        if (!out->first_error[0] && t->first_error[0])
            snprintf(out->first_error, sizeof out->first_error, "%s", t->first_error);
    }
    out->status_200 = out->status_counts[200];
    out->status_429 = out->status_counts[429];
    out->status_503 = out->status_counts[503];
    out->status_other = out->responses - out->status_200 - out->status_429 - out->status_503;
    for (int k = 0; k < MG_BENCH_ERR_KINDS; k++)
        out->errors_total += out->errors[k];
    int64_t stopped = atomic_load(&r->plans[s].stopped_ns);
    out->max_requests_reached = stopped != 0;

    if (spec->mode == MG_BENCH_ONCE) {
        out->elapsed_ns = last_outcome > r->measure_ns ? last_outcome - r->measure_ns : 0;
    } else {
        int64_t end = r->window_end_ns;
        int64_t interrupted = atomic_load(&r->interrupted_ns);
        if (stopped && stopped < end)
            end = stopped;
        if (interrupted && interrupted < end)
            end = interrupted;
        out->elapsed_ns = end > r->measure_ns ? end - r->measure_ns : 0;
    }
    out->rps = out->elapsed_ns > 0 ? (double)out->responses * 1e9 / (double)out->elapsed_ns : 0;

    size_t n_ok = 0, n_other = 0;
    int64_t *ok = gather(workers, nworkers, s, true, &n_ok);
    int64_t *other = gather(workers, nworkers, s, false, &n_other);
    int64_t *all = malloc((n_ok + n_other ? n_ok + n_other : 1) * sizeof *all);
    if (!ok || !other || !all) {
        free(ok);
        free(other);
        free(all);
        return -1;
    }
    /* Both are sorted: merge them into every response's latency, sorted. */
    size_t i = 0, j = 0, k = 0;
    while (i < n_ok || j < n_other)
        all[k++] = (j >= n_other || (i < n_ok && ok[i] <= other[j])) ? ok[i++] : other[j++];
    summarize(ok, n_ok, &out->latency_200);
    summarize(all, k, &out->latency);
    out->latencies_ns = all;
    out->nlatencies = k;
    free(ok);
    free(other);
    return 0;
}

enum mg_bench_status mg_bench_run(const struct mg_bench_config *cfg, struct mg_bench_report *rep,
                                  char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    accept_chunked = cfg->accept_chunked;
    if (!mg_bench_target_is_loopback(&cfg->target)) {
        set_err(err, errlen,
                "--target %s: not 127.0.0.1 or ::1; meshgate-bench loads only this "
                "machine and sends nothing elsewhere",
                cfg->target.text[0] ? cfg->target.text : "(unset)");
        return MG_BENCH_REFUSED;
    }
    if (cfg->nstreams == 0 || cfg->nstreams > MG_BENCH_MAX_STREAMS || cfg->threads == 0 ||
        cfg->threads > MG_BENCH_THREADS_MAX || !(cfg->duration_s >= MG_BENCH_DURATION_MIN_S) ||
        cfg->duration_s > MG_BENCH_DURATION_MAX_S || !(cfg->warmup_s >= 0) ||
        cfg->warmup_s > MG_BENCH_WARMUP_MAX_S || cfg->timeout_ms == 0 ||
        cfg->timeout_ms > MG_BENCH_TIMEOUT_MAX_MS || cfg->max_requests == 0 ||
        cfg->max_requests > MG_BENCH_MAX_REQUESTS_MAX || cfg->max_outstanding == 0) {
        set_err(err, errlen,
                "the configuration is out of bounds (streams, threads, duration, "
                "warm-up, timeout or limits): see meshgate-bench --help");
        return MG_BENCH_REFUSED;
    }
    struct rlimit rl;
    uint64_t needed = mg_bench_descriptors_needed(cfg);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        needed > rl.rlim_cur) {
        set_err(err, errlen,
                "this run may hold %llu open files, the limit (ulimit -n) is %llu: lower the "
                "connections, once:N or --max-outstanding, or raise the limit",
                (unsigned long long)needed, (unsigned long long)rl.rlim_cur);
        return MG_BENCH_REFUSED;
    }
    if (probe(&cfg->target, err, errlen) < 0)
        return MG_BENCH_CANNOT_CONNECT;

    enum mg_bench_status status = MG_BENCH_OK;
    struct run *r = calloc(1, sizeof *r);
    struct worker *workers = calloc(cfg->threads, sizeof *workers);
    if (!r || !workers) {
        free(r);
        free(workers);
        set_err(err, errlen, "out of memory");
        return MG_BENCH_SYSTEM_ERROR;
    }
    r->cfg = cfg;
    atomic_init(&r->interrupted_ns, 0);
    atomic_init(&r->failed, false);
    r->timeout_ns = (int64_t)cfg->timeout_ms * MG_NS_PER_MS;
    rep->started_realtime_ns = mg_realtime_ns();
    r->start_ns = mg_monotonic_ns();
    r->measure_ns = r->start_ns + (int64_t)llround(cfg->warmup_s * (double)MG_NS_PER_SEC);
    r->window_end_ns = r->measure_ns + (int64_t)llround(cfg->duration_s * (double)MG_NS_PER_SEC);

    unsigned created = 0;
    if (plans_init(r, err, errlen) < 0) {
        status = MG_BENCH_SYSTEM_ERROR;
        goto out;
    }
    for (unsigned i = 0; i < cfg->threads; i++)
        if (worker_init(&workers[i], r, i, err, errlen) < 0) {
            status = MG_BENCH_SYSTEM_ERROR;
            goto out;
        }
    for (; created < cfg->threads; created++) {
        int rc = pthread_create(&workers[created].thread, NULL, worker_main, &workers[created]);
        if (rc != 0) {
            set_err(err, errlen, "cannot start a thread: %s", strerror(rc));
            atomic_store(&r->failed, true);
            status = MG_BENCH_SYSTEM_ERROR;
            break;
        }
    }
    for (unsigned i = 0; i < created; i++)
        pthread_join(workers[i].thread, NULL);
    rep->run_ns = mg_monotonic_ns() - r->start_ns;
    if (status == MG_BENCH_OK && atomic_load(&r->failed)) {
        for (unsigned i = 0; i < cfg->threads; i++)
            if (workers[i].err[0]) {
                set_err(err, errlen, "the run failed: %s", workers[i].err);
                break;
            }
        status = MG_BENCH_SYSTEM_ERROR;
    }
    if (status == MG_BENCH_OK) {
        rep->nstreams = cfg->nstreams;
        rep->interrupted = atomic_load(&r->interrupted_ns) != 0;
        for (unsigned s = 0; s < cfg->nstreams; s++)
            if (merge_stream(r, workers, cfg->threads, s, &rep->streams[s]) < 0) {
                set_err(err, errlen, "out of memory while sorting latencies");
                status = MG_BENCH_SYSTEM_ERROR;
                break;
            }
    }
out:
    for (unsigned i = 0; i < cfg->threads; i++)
        worker_free(&workers[i]);
    for (unsigned s = 0; s < MG_BENCH_MAX_STREAMS; s++)
        free(r->plans[s].fixed_request);
    free(workers);
    free(r);
    return status;
}

void mg_bench_report_free(struct mg_bench_report *rep)
{
    for (unsigned s = 0; s < MG_BENCH_MAX_STREAMS; s++) {
        free(rep->streams[s].latencies_ns);
        rep->streams[s].latencies_ns = NULL;
        rep->streams[s].nlatencies = 0;
    }
}

/* --- the report ------------------------------------------------------------------------------ */

static void format_ms(char *out, size_t cap, int64_t ns)
{
    if (ns < 0)
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.3f", (double)ns / 1e6);
}

static void format_started(char *out, size_t cap, int64_t realtime_ns)
{
    time_t secs = (time_t)(realtime_ns / MG_NS_PER_SEC);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void mg_bench_render_text(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                          struct mg_buf *out)
{
    char started[32];
    format_started(started, sizeof started, rep->started_realtime_ns);
    mg_buf_printf(out, "meshgate-bench%s%s%s\n", cfg->label[0] ? ": " : "", cfg->label,
                  rep->interrupted ? "  (INTERRUPTED: partial results)" : "");
    mg_buf_printf(out, "command: %s\n", cfg->command_line ? cfg->command_line : "(not given)");
    mg_buf_printf(out,
                  "target %s, started %s, warm-up %g s, window %g s, timeout %u ms, %u thread%s, "
                  "max %llu requests a stream\n",
                  cfg->target.text, started, cfg->warmup_s, cfg->duration_s, cfg->timeout_ms,
                  cfg->threads, cfg->threads == 1 ? "" : "s",
                  (unsigned long long)cfg->max_requests);

    int name_w = 6;
    for (unsigned s = 0; s < cfg->nstreams; s++)
        if ((int)strlen(cfg->streams[s].name) > name_w)
            name_w = (int)strlen(cfg->streams[s].name);
    mg_buf_puts(out, "streams:\n");
    for (unsigned s = 0; s < cfg->nstreams; s++) {
        const struct mg_bench_stream *st = &cfg->streams[s];
        char mode[48];
        mg_bench_stream_mode_text(st, mode, sizeof mode);
        mg_buf_printf(out, "  %-*s  %-12s GET %s", name_w, st->name, mode, st->path);
        if (st->key_slots)
            mg_buf_printf(out, "  ({key}: %zu keys from %s, %s)", cfg->nkeys, cfg->keys_path,
                          st->mode == MG_BENCH_ONCE ? "each once" : "round-robin");
        if (st->mode == MG_BENCH_OPEN)
            mg_buf_printf(out, "  (at most %u outstanding)", cfg->max_outstanding);
        mg_buf_putc(out, '\n');
        for (unsigned h = 0; h < st->nheaders; h++)
            mg_buf_printf(out, "  %-*s  %-12s + %s\n", name_w, "", "", st->headers[h]);
    }
    mg_buf_putc(out, '\n');
    mg_buf_printf(out, "%-*s %9s %9s %8s %8s %7s %7s %9s %9s %9s %9s %10s\n", name_w, "stream",
                  "sent", "200", "429", "503", "other", "err", "p50_ms", "p95_ms", "p99_ms",
                  "max_ms", "rps");
    for (unsigned s = 0; s < rep->nstreams; s++) {
        const struct mg_bench_stream_report *sr = &rep->streams[s];
        char p50[24], p95[24], p99[24], max[24];
        format_ms(p50, sizeof p50, sr->latency.p50_ns);
        format_ms(p95, sizeof p95, sr->latency.p95_ns);
        format_ms(p99, sizeof p99, sr->latency.p99_ns);
        format_ms(max, sizeof max, sr->latency.max_ns);
        mg_buf_printf(out, "%-*s %9llu %9llu %8llu %8llu %7llu %7llu %9s %9s %9s %9s %10.1f\n",
                      name_w, cfg->streams[s].name, (unsigned long long)sr->sent,
                      (unsigned long long)sr->status_200, (unsigned long long)sr->status_429,
                      (unsigned long long)sr->status_503, (unsigned long long)sr->status_other,
                      (unsigned long long)sr->errors_total, p50, p95, p99, max, sr->rps);
    }

    struct mg_buf notes;
    mg_buf_init(&notes);
    for (unsigned s = 0; s < rep->nstreams; s++) {
        const struct mg_bench_stream_report *sr = &rep->streams[s];
        const struct mg_bench_stream *st = &cfg->streams[s];
        if (sr->errors_total) {
            mg_buf_printf(&notes, "  %s: err =", st->name);
            bool first = true;
            for (int k = 0; k < MG_BENCH_ERR_KINDS; k++)
                if (sr->errors[k]) {
                    mg_buf_printf(&notes, "%s %llu %s", first ? "" : ",",
                                  (unsigned long long)sr->errors[k], error_names[k]);
                    first = false;
                }
            mg_buf_printf(&notes, "; the first: %s\n", sr->first_error);
        }
        if (sr->status_other) {
            mg_buf_printf(&notes, "  %s: other =", st->name);
            bool first = true;
            for (int code = 100; code < 600; code++)
                if (code != 200 && code != 429 && code != 503 && sr->status_counts[code]) {
                    mg_buf_printf(&notes, "%s %llu x %d", first ? "" : ",",
                                  (unsigned long long)sr->status_counts[code], code);
                    first = false;
                }
            mg_buf_putc(&notes, '\n');
        }
        if (sr->dropped)
            mg_buf_printf(&notes,
                          "  %s: %llu dropped: due while %u requests were out (--max-outstanding), "
                          "not sent, not in sent or latencies\n",
                          st->name, (unsigned long long)sr->dropped, cfg->max_outstanding);
        if (sr->retried)
            mg_buf_printf(&notes,
                          "  %s: %llu sent again on a new connection: the server closed a "
                          "kept-alive one before answering\n",
                          st->name, (unsigned long long)sr->retried);
        if (sr->overlong)
            mg_buf_printf(&notes,
                          "  %s: %llu responses were followed by bytes past their "
                          "Content-Length (counted by status; the connection was closed)\n",
                          st->name, (unsigned long long)sr->overlong);
        if (sr->max_requests_reached)
            mg_buf_printf(&notes, "  %s: stopped at --max-requests %llu before the window ended\n",
                          st->name, (unsigned long long)cfg->max_requests);
        if (sr->max_send_lag_ns >= MG_NS_PER_MS && st->mode != MG_BENCH_CLOSED)
            mg_buf_printf(&notes,
                          "  %s: sent up to %.1f ms after schedule (counted in its latency)\n",
                          st->name, (double)sr->max_send_lag_ns / 1e6);
        if (sr->status_429 + sr->status_503 && sr->latency_200.samples)
            mg_buf_printf(
                &notes, "  %s: 200 only: p50 %.3f, p95 %.3f, p99 %.3f, max %.3f ms\n", st->name,
                (double)sr->latency_200.p50_ns / 1e6, (double)sr->latency_200.p95_ns / 1e6,
                (double)sr->latency_200.p99_ns / 1e6, (double)sr->latency_200.max_ns / 1e6);
    }
    if (notes.len) {
        mg_buf_puts(out, "\nnotes:\n");
        mg_buf_append(out, notes.data, notes.len);
    }
    mg_buf_free(&notes);
    mg_buf_puts(out, "\nsent = 200 + 429 + 503 + other + err. Percentiles: nearest rank over every "
                     "response\n(any status) to a request scheduled in the window; latency counts "
                     "from the\nscheduled start. rps: responses / window (once: / burst to last "
                     "answer).\n");
}

static void json_latency(struct mg_json *j, const char *key, const struct mg_bench_latency *l)
{
    mg_json_key(j, key);
    if (!l->samples) {
        mg_json_null(j);
        return;
    }
    mg_json_object_begin(j);
    mg_json_kv_uint(j, "samples", l->samples);
    mg_json_key(j, "min");
    mg_json_double_rounded(j, (double)l->min_ns / 1e6, 3);
    mg_json_key(j, "p50");
    mg_json_double_rounded(j, (double)l->p50_ns / 1e6, 3);
    mg_json_key(j, "p95");
    mg_json_double_rounded(j, (double)l->p95_ns / 1e6, 3);
    mg_json_key(j, "p99");
    mg_json_double_rounded(j, (double)l->p99_ns / 1e6, 3);
    mg_json_key(j, "max");
    mg_json_double_rounded(j, (double)l->max_ns / 1e6, 3);
    mg_json_key(j, "mean");
    mg_json_double_rounded(j, l->mean_ns / 1e6, 3);
    mg_json_object_end(j);
}

void mg_bench_render_json(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                          struct mg_buf *out)
{
    struct mg_json j;
    mg_json_init(&j, out);
    char started[32];
    format_started(started, sizeof started, rep->started_realtime_ns);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "tool", "meshgate-bench");
    mg_json_kv_string(&j, "label", cfg->label);
    mg_json_kv_string(&j, "command", cfg->command_line);
    mg_json_kv_string(&j, "target", cfg->target.text);
    mg_json_kv_string(&j, "started_at", started);
    mg_json_kv_double(&j, "duration_s", cfg->duration_s);
    mg_json_kv_double(&j, "warmup_s", cfg->warmup_s);
    mg_json_kv_uint(&j, "timeout_ms", cfg->timeout_ms);
    mg_json_kv_uint(&j, "threads", cfg->threads);
    mg_json_kv_uint(&j, "max_requests", cfg->max_requests);
    mg_json_kv_uint(&j, "max_outstanding", cfg->max_outstanding);
    mg_json_kv_bool(&j, "interrupted", rep->interrupted);
    mg_json_key(&j, "run_s");
    mg_json_double_rounded(&j, (double)rep->run_ns / 1e9, 3);
    mg_json_key(&j, "streams");
    mg_json_array_begin(&j);
    for (unsigned s = 0; s < rep->nstreams; s++) {
        const struct mg_bench_stream *st = &cfg->streams[s];
        const struct mg_bench_stream_report *sr = &rep->streams[s];
        char mode[48];
        mg_bench_stream_mode_text(st, mode, sizeof mode);
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "name", st->name);
        mg_json_kv_string(&j, "mode", mode_name(st->mode));
        mg_json_kv_string(&j, "spec", mode);
        mg_json_kv_string(&j, "path", st->path);
        if (st->mode == MG_BENCH_CLOSED) {
            mg_json_kv_uint(&j, "connections", st->connections);
            mg_json_kv_uint(&j, "pause_ms", st->pause_ms);
        } else if (st->mode == MG_BENCH_OPEN) {
            mg_json_kv_double(&j, "rate_per_s", st->rate_per_s);
        } else {
            mg_json_kv_uint(&j, "count", st->count);
        }
        mg_json_key(&j, "headers");
        mg_json_array_begin(&j);
        for (unsigned h = 0; h < st->nheaders; h++)
            mg_json_string(&j, st->headers[h]);
        mg_json_array_end(&j);
        mg_json_kv_uint(&j, "sent", sr->sent);
        mg_json_kv_uint(&j, "responses", sr->responses);
        mg_json_key(&j, "status");
        mg_json_object_begin(&j);
        mg_json_kv_uint(&j, "200", sr->status_200);
        mg_json_kv_uint(&j, "429", sr->status_429);
        mg_json_kv_uint(&j, "503", sr->status_503);
        mg_json_kv_uint(&j, "other", sr->status_other);
        mg_json_object_end(&j);
        mg_json_key(&j, "statuses");
        mg_json_object_begin(&j);
        for (int code = 100; code < 600; code++)
            if (sr->status_counts[code]) {
                char key[16];
                snprintf(key, sizeof key, "%d", code);
                mg_json_kv_uint(&j, key, sr->status_counts[code]);
            }
        mg_json_object_end(&j);
        mg_json_key(&j, "errors");
        mg_json_object_begin(&j);
        mg_json_kv_uint(&j, "total", sr->errors_total);
        for (int k = 0; k < MG_BENCH_ERR_KINDS; k++)
            mg_json_kv_uint(&j, error_names[k], sr->errors[k]);
        mg_json_object_end(&j);
        mg_json_kv_string(&j, "first_error", sr->first_error[0] ? sr->first_error : NULL);
        mg_json_kv_uint(&j, "dropped", sr->dropped);
        mg_json_kv_uint(&j, "retried", sr->retried);
        mg_json_kv_uint(&j, "overlong", sr->overlong);
        mg_json_kv_bool(&j, "max_requests_reached", sr->max_requests_reached);
        mg_json_key(&j, "max_send_lag_ms");
        mg_json_double_rounded(&j, (double)sr->max_send_lag_ns / 1e6, 3);
        mg_json_key(&j, "elapsed_s");
        mg_json_double_rounded(&j, (double)sr->elapsed_ns / 1e9, 3);
        mg_json_key(&j, "rps");
        mg_json_double_rounded(&j, sr->rps, 1);
        json_latency(&j, "latency_ms", &sr->latency);
        json_latency(&j, "latency_200_ms", &sr->latency_200);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_object_end(&j);
}

uint64_t mg_bench_unexpected(const struct mg_bench_stream *s,
                             const struct mg_bench_stream_report *r)
{
    uint64_t n = s->expect_errors ? 0 : r->errors_total;
    for (int code = 100; code < 600; code++)
        if (!s->expect_status[code])
            n += r->status_counts[code];
    return n;
}

bool mg_bench_check_unexpected(const struct mg_bench_config *cfg, const struct mg_bench_report *rep,
                               char *err, size_t errlen)
{
    if (cfg->max_unexpected_pct < 0)
        return true;
    for (unsigned i = 0; i < cfg->nstreams && i < rep->nstreams; i++) {
        const struct mg_bench_stream *s = &cfg->streams[i];
        const struct mg_bench_stream_report *r = &rep->streams[i];
        uint64_t bad = mg_bench_unexpected(s, r);
        if (r->sent == 0 || (double)bad * 100.0 <= cfg->max_unexpected_pct * (double)r->sent)
            continue;
        char got[256];
        size_t len = 0;
        got[0] = '\0';
        for (int code = 100; code < 600 && len < sizeof got - 32; code++)
            if (!s->expect_status[code] && r->status_counts[code])
                len += (size_t)snprintf(got + len, sizeof got - len, "%s%d x %llu", len ? ", " : "",
                                        code, (unsigned long long)r->status_counts[code]);
        if (!s->expect_errors && r->errors_total && len < sizeof got - 32)
            snprintf(got + len, sizeof got - len, "%serrors x %llu (%s)", len ? ", " : "",
                     (unsigned long long)r->errors_total, r->first_error);
        set_err(err, errlen,
                "stream %s: %llu of %llu requests (%.2f %%) ended in what it does not expect "
                "(--expect %s:%s): %s; more than --max-unexpected-pct %g",
                s->name, (unsigned long long)bad, (unsigned long long)r->sent,
                100.0 * (double)bad / (double)r->sent, s->name, s->expect_text, got,
                cfg->max_unexpected_pct);
        return false;
    }
    return true;
}
