/* SPDX-License-Identifier: ISC */
#include "notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int mg_notify(const char *fmt, ...)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || (path[0] != '/' && path[0] != '@'))
        return -1;
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n >= sizeof sun.sun_path)
        return -1;
    memcpy(sun.sun_path, path, n);
    if (path[0] == '@')
        sun.sun_path[0] = '\0'; /* abstract namespace */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);

    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m < 0)
        return -1;
    if ((size_t)m >= sizeof msg)
        m = sizeof msg - 1;

    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    ssize_t sent = sendto(fd, msg, (size_t)m, MSG_NOSIGNAL, (struct sockaddr *)&sun, len);
    int saved = errno;
    close(fd);
    errno = saved;
    return sent == m ? 0 : -1;
}

int64_t mg_notify_watchdog_usec(void)
{
    const char *usec = getenv("WATCHDOG_USEC");
    const char *pid = getenv("WATCHDOG_PID");
    if (!usec)
        return 0;
    if (pid && strtol(pid, NULL, 10) != (long)getpid())
        return 0;
    long long v = strtoll(usec, NULL, 10);
    return v > 0 ? v : 0;
}
