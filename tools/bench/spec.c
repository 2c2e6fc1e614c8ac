/* SPDX-License-Identifier: ISC */
/*
 * bench/spec.c: what each value of the command line means: numbers, the target (a literal
 * loopback address, never looked up), a stream's spec, --header, --expect and --keys.
 */
#include "internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void mg_bench_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Digits only (no sign, no spaces), at most max. */
bool mg_bench_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out)
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
bool mg_bench_parse_decimal(const char *text, double min, bool min_open, double max, double *out)
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
        mg_bench_set_err(err, errlen, "--target %s: must be %s", text, TARGET_ACCEPTED);
        return -1;
    }
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof host) {
            mg_bench_set_err(err, errlen, "--target %s: must be %s", text, TARGET_ACCEPTED);
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
            mg_bench_set_err(err, errlen,
                             "--target %s: an IPv6 address goes in brackets; must be %s", text,
                             TARGET_ACCEPTED);
            return -1;
        }
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        port_text = colon + 1;
        family = AF_INET;
    }
    uint64_t port;
    if (!mg_bench_parse_uint(port_text, 1, 65535, &port)) {
        mg_bench_set_err(err, errlen,
                         "--target %s: the port \"%s\" must be a number from 1 to 65535", text,
                         port_text);
        return -1;
    }
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&t->addr;
        if (inet_pton(AF_INET, host, &sin->sin_addr) != 1) {
            mg_bench_set_err(err, errlen,
                             "--target %s: \"%s\" is not a literal address; must be %s", text, host,
                             TARGET_ACCEPTED);
            return -1;
        }
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        t->addr_len = sizeof *sin;
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&t->addr;
        if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1) {
            mg_bench_set_err(err, errlen,
                             "--target %s: \"%s\" is not a literal address; must be %s", text, host,
                             TARGET_ACCEPTED);
            return -1;
        }
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        t->addr_len = sizeof *sin6;
    }
    t->port = (int)port;
    snprintf(t->text, sizeof t->text, "%s", text);
    if (!mg_bench_target_is_loopback(t)) {
        mg_bench_set_err(err, errlen,
                         "--target %s: %s is not this machine's loopback address; must be %s", text,
                         host, TARGET_ACCEPTED);
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
        mg_bench_set_err(err, errlen, "--stream %s: the path \"%s\" must start with '/'", spec,
                         path);
        return -1;
    }
    s->key_slots = 0;
    for (const char *p = path; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c <= 0x20 || c >= 0x7f) {
            mg_bench_set_err(
                err, errlen,
                "--stream %s: the path may hold only visible ASCII characters (no spaces; "
                "percent-encode the rest)",
                spec);
            return -1;
        }
        if (c == '{' && strncmp(p, "{key}", 5) == 0) {
            s->key_slots++;
            p += 4;
        } else if (c == '{' || c == '}') {
            mg_bench_set_err(err, errlen, "--stream %s: only {key} may stand in braces in the path",
                             spec);
            return -1;
        }
    }
    return 0;
}

/* NAME, before the first colon of spec. */
static int parse_stream_name(const char *spec, const char *colon, struct mg_bench_stream *s,
                             char *err, size_t errlen)
{
    size_t name_len = (size_t)(colon - spec);
    if (name_len == 0 || name_len > MG_BENCH_NAME_MAX) {
        mg_bench_set_err(err, errlen, "--stream %s: the NAME must have 1 to %d characters", spec,
                         MG_BENCH_NAME_MAX);
        return -1;
    }
    for (size_t i = 0; i < name_len; i++)
        if (!name_char(spec[i])) {
            mg_bench_set_err(
                err, errlen,
                "--stream %s: the NAME may hold only letters, digits, '_', '-' and '.'", spec);
            return -1;
        }
    copy_field(s->name, sizeof s->name, spec, name_len);
    return 0;
}

/* The mode and its numbers, found from the right of rest since the path may hold colons:
 * sets the mode, where the path ends, and where the number and the pause (or NULL) start. */
static bool find_mode(const char *rest, enum mg_bench_mode *mode, const char **path_end,
                      const char **number_at, const char **pause_at)
{
    const char *c[3] = {NULL, NULL, NULL}; /* the last three colons of rest: c[0] the last */
    int found = 0;
    for (const char *p = rest + strlen(rest); p > rest && found < 3;) {
        if (*--p == ':')
            c[found++] = p;
    }
    *pause_at = NULL;
    if (c[1] && mode_word(c[1] + 1, (size_t)(c[0] - c[1] - 1), mode)) {
        *path_end = c[1];
        *number_at = c[0] + 1;
        return true;
    }
    if (c[2] && mode_word(c[2] + 1, (size_t)(c[1] - c[2] - 1), mode)) {
        *path_end = c[2];
        *number_at = c[1] + 1;
        *pause_at = c[0] + 1;
        return true;
    }
    return false;
}

/* The mode's number (CONNS, RATE or N) and a closed stream's PAUSE_MS. */
static int parse_stream_numbers(const char *spec, struct mg_bench_stream *s, const char *number,
                                const char *pause_at, const char *pause, char *err, size_t errlen)
{
    uint64_t v;
    switch (s->mode) {
    case MG_BENCH_CLOSED:
        if (!mg_bench_parse_uint(number, 1, MG_BENCH_CONNS_MAX, &v)) {
            mg_bench_set_err(
                err, errlen,
                "--stream %s: CONNS \"%s\" must be a whole number of connections from 1 to %u",
                spec, number, MG_BENCH_CONNS_MAX);
            return -1;
        }
        s->connections = (unsigned)v;
        if (pause_at) {
            if (!mg_bench_parse_uint(pause, 0, MG_BENCH_PAUSE_MAX_MS, &v)) {
                mg_bench_set_err(
                    err, errlen,
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
            mg_bench_set_err(
                err, errlen,
                "--stream %s: only closed streams take a PAUSE_MS; open is NAME:PATH:open:RATE",
                spec);
            return -1;
        }
        if (!mg_bench_parse_decimal(number, 0, true, MG_BENCH_RATE_MAX, &s->rate_per_s)) {
            mg_bench_set_err(
                err, errlen,
                "--stream %s: RATE \"%s\" must be requests a second, more than 0 and at most "
                "%.0f (decimals allowed, e.g. 0.5)",
                spec, number, MG_BENCH_RATE_MAX);
            return -1;
        }
        break;
    case MG_BENCH_ONCE:
        if (pause_at) {
            mg_bench_set_err(
                err, errlen,
                "--stream %s: only closed streams take a PAUSE_MS; once is NAME:PATH:once:N", spec);
            return -1;
        }
        if (!mg_bench_parse_uint(number, 1, MG_BENCH_ONCE_MAX, &v)) {
            mg_bench_set_err(
                err, errlen,
                "--stream %s: N \"%s\" must be a whole number of requests from 1 to %u", spec,
                number, MG_BENCH_ONCE_MAX);
            return -1;
        }
        s->count = (unsigned)v;
        break;
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
        mg_bench_set_err(err, errlen, "--stream %s: must be %s", spec, STREAM_FORMS);
        return -1;
    }
    if (parse_stream_name(spec, colon, s, err, errlen) < 0)
        return -1;
    const char *rest = colon + 1;
    const char *number_at, *pause_at, *path_end;
    if (!find_mode(rest, &s->mode, &path_end, &number_at, &pause_at)) {
        mg_bench_set_err(err, errlen,
                         "--stream %s: no mode (closed, open or once) with its number at the end; "
                         "must be %s",
                         spec, STREAM_FORMS);
        return -1;
    }
    if (!copy_field(s->path, sizeof s->path, rest, (size_t)(path_end - rest))) {
        mg_bench_set_err(err, errlen, "--stream %s: the path is longer than %d bytes", spec,
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
    return parse_stream_numbers(spec, s, number, pause_at, pause, err, errlen);
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

bool mg_bench_token_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* "STREAM:Name: value" -> the stream's index and the header line. */
/* --expect STREAM:LIST, LIST a comma list of statuses (429), classes (2xx) and "err". */
int mg_bench_add_expect(struct mg_bench_config *cfg, const char *arg, char *err, size_t errlen)
{
    const char *colon = strchr(arg, ':');
    size_t name_len = colon ? (size_t)(colon - arg) : 0;
    struct mg_bench_stream *s = NULL;
    for (unsigned i = 0; colon && i < cfg->nstreams; i++)
        if (strlen(cfg->streams[i].name) == name_len &&
            memcmp(cfg->streams[i].name, arg, name_len) == 0)
            s = &cfg->streams[i];
    if (!s) {
        mg_bench_set_err(err, errlen,
                         colon ? "--expect %s: no --stream is called \"%.*s\""
                               : "--expect %s: must be STREAM:LIST, e.g. --expect 'cold:200,429'",
                         arg, (int)name_len, arg);
        return -1;
    }
    const char *list = colon + 1;
    if (strlen(list) >= sizeof s->expect_text) {
        mg_bench_set_err(err, errlen, "--expect %s: the list is longer than %zu characters", arg,
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
            mg_bench_set_err(
                err, errlen,
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

int mg_bench_add_header(struct mg_bench_config *cfg, const char *arg, char *err, size_t errlen)
{
    const char *colon = strchr(arg, ':');
    if (!colon) {
        mg_bench_set_err(
            err, errlen,
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
        mg_bench_set_err(err, errlen, "--header %s: no --stream is called \"%.*s\"", arg,
                         (int)name_len, arg);
        return -1;
    }
    const char *line = colon + 1;
    const char *hcolon = strchr(line, ':');
    size_t hname_len = hcolon ? (size_t)(hcolon - line) : 0;
    bool ok = hname_len > 0;
    for (size_t i = 0; ok && i < hname_len; i++)
        ok = mg_bench_token_char(line[i]);
    if (!ok) {
        mg_bench_set_err(
            err, errlen,
            "--header %s: after the stream's name comes a header line 'Name: value' (the "
            "name made of letters, digits and !#$%%&'*+-.^_`|~)",
            arg);
        return -1;
    }
    for (const char *p = hcolon + 1; *p; p++)
        if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f) {
            mg_bench_set_err(err, errlen, "--header %s: the value may not hold control characters",
                             arg);
            return -1;
        }
    static const char *const reserved[] = {"Host", "Connection", "Content-Length",
                                           "Transfer-Encoding"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strlen(reserved[i]) == hname_len && strncasecmp(line, reserved[i], hname_len) == 0) {
            mg_bench_set_err(
                err, errlen,
                "--header %s: meshgate-bench sets Host, Connection, Content-Length and "
                "Transfer-Encoding itself",
                arg);
            return -1;
        }
    if (strlen(line) > MG_BENCH_HEADER_MAX) {
        mg_bench_set_err(err, errlen, "--header %.60s...: longer than %d bytes", arg,
                         MG_BENCH_HEADER_MAX);
        return -1;
    }
    if (s->nheaders >= MG_BENCH_MAX_HEADERS) {
        mg_bench_set_err(err, errlen,
                         "--header %s: stream %s already has %d headers, the most allowed", arg,
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

int mg_bench_load_keys(struct mg_bench_config *cfg, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        mg_bench_set_err(err, errlen, "--keys %s: cannot open it: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t line_cap = 0, cap = 0, lineno = 0;
    ssize_t n;
    int rc = 0;
    while ((n = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        if (strlen(line) != (size_t)n) {
            mg_bench_set_err(err, errlen, "--keys %s: line %zu holds a NUL byte", path, lineno);
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
            mg_bench_set_err(
                err, errlen,
                "--keys %s: line %zu: a key has 1 to %d visible ASCII characters and no "
                "'/', '?', '#', '{' or '}' (percent-encode them)",
                path, lineno, MG_BENCH_KEY_MAX);
            rc = -1;
            break;
        }
        if (cfg->nkeys >= MG_BENCH_KEYS_MAX) {
            mg_bench_set_err(err, errlen, "--keys %s: more than %d keys", path, MG_BENCH_KEYS_MAX);
            rc = -1;
            break;
        }
        if (cfg->nkeys == cap) {
            size_t want = cap ? cap * 2 : 64;
            char **grown = realloc(cfg->keys, want * sizeof *grown);
            if (!grown) {
                mg_bench_set_err(err, errlen, "--keys %s: out of memory", path);
                rc = -1;
                break;
            }
            cfg->keys = grown;
            cap = want;
        }
        cfg->keys[cfg->nkeys] = strdup(p);
        if (!cfg->keys[cfg->nkeys]) {
            mg_bench_set_err(err, errlen, "--keys %s: out of memory", path);
            rc = -1;
            break;
        }
        cfg->nkeys++;
    }
    if (rc == 0 && ferror(f)) {
        mg_bench_set_err(err, errlen, "--keys %s: cannot read it: %s", path, strerror(errno));
        rc = -1;
    }
    if (rc == 0 && cfg->nkeys == 0) {
        mg_bench_set_err(
            err, errlen,
            "--keys %s: holds no keys (one a line; empty lines and # comments are skipped)", path);
        rc = -1;
    }
    free(line);
    fclose(f);
    return rc;
}
