#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static enum mg_log_level current_level = MG_LOG_INFO;
static char current_role[32] = "meshgate";

void mg_log_set_level(enum mg_log_level level)
{
    current_level = level;
}

enum mg_log_level mg_log_get_level(void)
{
    return current_level;
}

void mg_log_set_role(const char *role)
{
    snprintf(current_role, sizeof current_role, "%s", role);
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
    char line[1024];
    int n = snprintf(line, sizeof line, "meshgate[%d] %s %s: ", (int)getpid(), current_role,
                     names[level]);
    if (n < 0 || (size_t)n >= sizeof line)
        n = 0;
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

void mg_log_raw(const char *line, int len)
{
    char out[2048];
    if (len < 0)
        len = 0;
    if ((size_t)len > sizeof out - 1)
        len = sizeof out - 1;
    memcpy(out, line, (size_t)len);
    out[len] = '\n';
    write_all(out, (size_t)len + 1);
}
