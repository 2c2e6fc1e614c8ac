/* SPDX-License-Identifier: ISC */
#include "log.h"

#include "clock.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static enum mg_log_level current_level = MG_LOG_INFO;
static char current_role[32] = "meshgate";
static bool to_journal;

bool mg_log_journal_stream_is(const char *journal_stream, uint64_t dev, uint64_t ino)
{
    if (!journal_stream || !*journal_stream)
        return false;
    char *end;
    errno = 0;
    unsigned long long d = strtoull(journal_stream, &end, 10);
    if (errno || end == journal_stream || *end != ':')
        return false;
    const char *i = end + 1;
    unsigned long long n = strtoull(i, &end, 10);
    if (errno || end == i || *end)
        return false;
    return d == dev && n == ino;
}

void mg_log_init(void)
{
    /* systemd sets JOURNAL_STREAM for a unit whose stderr is the journal; a child whose
     * stderr was redirected inherits the variable, hence the check against stderr itself. */
    struct stat st;
    to_journal = fstat(STDERR_FILENO, &st) == 0 &&
                 mg_log_journal_stream_is(getenv("JOURNAL_STREAM"), (uint64_t)st.st_dev,
                                          (uint64_t)st.st_ino);
}

void mg_log_set_level(enum mg_log_level level)
{
    current_level = level;
}

void mg_log_set_role(const char *role)
{
    snprintf(current_role, sizeof current_role, "%s", role);
}

static void put_digits(char *out, unsigned value, int width)
{
    for (int i = width - 1; i >= 0; i--, value /= 10)
        out[i] = (char)('0' + value % 10);
}

void mg_log_format_time(int64_t realtime_ns, char *out, size_t outlen)
{
    if (outlen < MG_LOG_TIME_MAX) {
        if (outlen)
            out[0] = '\0';
        return;
    }
    if (realtime_ns < 0)
        realtime_ns = 0;
    int64_t secs = realtime_ns / 1000000000;
    int64_t year;
    int month, day;
    mg_civil_from_days(secs / 86400, &year, &month, &day);
    int64_t in_day = secs % 86400;
    memcpy(out, "0000-00-00T00:00:00.000Z", MG_LOG_TIME_MAX);
    put_digits(out, (unsigned)year % 10000, 4);
    put_digits(out + 5, (unsigned)month, 2);
    put_digits(out + 8, (unsigned)day, 2);
    put_digits(out + 11, (unsigned)(in_day / 3600), 2);
    put_digits(out + 14, (unsigned)(in_day / 60 % 60), 2);
    put_digits(out + 17, (unsigned)(in_day % 60), 2);
    put_digits(out + 20, (unsigned)(realtime_ns % 1000000000 / 1000000), 3);
}

/* "<6>" under the journal; the time and a blank elsewhere unless the line has its own.
 * Async-signal-safe (mg_log_signal_safe uses it). */
static size_t line_prefix(enum mg_log_level level, bool has_time, char out[MG_LOG_TIME_MAX + 1])
{
    if (to_journal) {
        static const char priority[] = {'3', '4', '6', '7'}; /* LOG_ERR .. LOG_DEBUG */
        out[0] = '<', out[1] = priority[level], out[2] = '>', out[3] = '\0';
        return 3;
    }
    out[0] = '\0';
    if (has_time)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    mg_log_format_time((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec, out, MG_LOG_TIME_MAX);
    out[MG_LOG_TIME_MAX - 1] = ' ';
    out[MG_LOG_TIME_MAX] = '\0';
    return MG_LOG_TIME_MAX;
}

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

void mg_log(enum mg_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    if (level > current_level)
        return;
    int saved_errno = errno;
    char line[1024 + MG_LOG_TIME_MAX];
    int p = (int)line_prefix(level, false, line);
    int n = snprintf(line + p, sizeof line - (size_t)p, "meshgate[%d] %s %s: ", (int)getpid(),
                     current_role, names[level]);
    if (n < 0 || (size_t)(p + n) >= sizeof line)
        n = 0;
    n += p;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    write_all(line, len);
    errno = saved_errno;
}

void mg_log_raw(const char *line, size_t len, bool has_time)
{
    /* Not held to the log level: MESHGATE_ACCESS_LOG alone turns the access log on. */
    char out[MG_LOG_LINE_MAX];
    size_t p = line_prefix(MG_LOG_INFO, has_time, out);
    if (len > sizeof out - 1 - p)
        len = sizeof out - 1 - p;
    memcpy(out + p, line, len);
    out[p + len] = '\n';
    write_all(out, p + len + 1);
}

void mg_log_signal_safe(enum mg_log_level level, const char *msg, size_t len)
{
    /* One write, as every line: line_prefix, memcpy and write are async-signal-safe. */
    char line[512];
    size_t p = line_prefix(level, false, line);
    if (len > sizeof line - p)
        len = sizeof line - p;
    memcpy(line + p, msg, len);
    write_all(line, p + len);
}
