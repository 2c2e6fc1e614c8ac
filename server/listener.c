/* SPDX-License-Identifier: ISC */
#include "listener.h"

#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SD_LISTEN_FDS_START 3

static int from_systemd_fds(char *err, size_t errlen)
{
    const char *pid = getenv("LISTEN_PID");
    const char *fds = getenv("LISTEN_FDS");
    if (!pid || !fds)
        return -2;
    if (strtol(pid, NULL, 10) != (long)getpid())
        return -2; /* meant for another process */
    long n = strtol(fds, NULL, 10);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    if (n < 1) {
        snprintf(err, errlen, "LISTEN_FDS=%s: systemd passed no socket", fds);
        return -1;
    }
    if (n > 1) {
        mg_warn("LISTEN_FDS=%ld: using the first socket, closing the rest", n);
        for (long i = 1; i < n; i++)
            close(SD_LISTEN_FDS_START + (int)i);
    }
    int fd = SD_LISTEN_FDS_START;
    int type = 0, listening = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM) {
        snprintf(err, errlen, "LISTEN_FDS: descriptor %d is not a stream socket", fd);
        return -1;
    }
    len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 || !listening) {
        snprintf(err, errlen,
                 "LISTEN_FDS: descriptor %d is not listening (the socket unit "
                 "must not use Accept=yes)",
                 fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

/* host "" means every address. what names the variable, for messages. */
static int resolve(const char *what, const char *host, unsigned port_number, struct addrinfo **res,
                   char *err, size_t errlen)
{
    char port[8];
    snprintf(port, sizeof port, "%u", port_number);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, res);
    if (rc != 0) {
        snprintf(err, errlen, "%s=%s:%s: cannot resolve the host: %s", what, host, port,
                 gai_strerror(rc));
        return -1;
    }
    return 0;
}

int mg_listener_check(const struct mg_config *cfg, char *err, size_t errlen)
{
    struct addrinfo *res = NULL;
    if (resolve("MESHGATE_LISTEN", cfg->listen_host, cfg->listen_port, &res, err, errlen) < 0)
        return -1;
    freeaddrinfo(res);
    return 0;
}

int mg_listener_bind(const char *what, const char *host_text, unsigned port, int backlog, char *err,
                     size_t errlen)
{
    struct addrinfo *res = NULL;
    if (resolve(what, host_text, port, &res, err, errlen) < 0)
        return -1;
    const char *host = host_text[0] ? host_text : NULL;
    /* With no host, prefer IPv6 (dual-stack) when the machine has it. */
    struct addrinfo *pick = res;
    if (!host)
        for (struct addrinfo *a = res; a; a = a->ai_next)
            if (a->ai_family == AF_INET6) {
                pick = a;
                break;
            }
    int last_errno = 0;
    for (struct addrinfo *a = pick; a; a = a->ai_next) {
        int fd =
            socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (a->ai_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, host ? &one : &zero, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
            freeaddrinfo(res);
            return fd;
        }
        last_errno = errno;
        close(fd);
    }
    freeaddrinfo(res);
    snprintf(err, errlen, "%s=%s%s%s:%u: cannot listen: %s", what,
             strchr(host_text, ':') ? "[" : "", host_text, strchr(host_text, ':') ? "]" : "", port,
             strerror(last_errno));
    return -1;
}

int mg_listener_open(const struct mg_config *cfg, bool *from_systemd, char *err, size_t errlen)
{
    int fd = from_systemd_fds(err, errlen);
    *from_systemd = fd >= 0;
    if (fd != -2)
        return fd;
    return mg_listener_bind("MESHGATE_LISTEN", cfg->listen_host, cfg->listen_port, cfg->backlog,
                            err, errlen);
}

void mg_listener_describe(int fd, char *out, size_t cap, char *host, size_t host_cap,
                          unsigned *port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char h[INET6_ADDRSTRLEN] = "?";
    unsigned p = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &sin->sin_addr, h, sizeof h);
            p = ntohs(sin->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &sin6->sin6_addr, h, sizeof h);
            p = ntohs(sin6->sin6_port);
        } else if (ss.ss_family == AF_UNIX) {
            snprintf(h, sizeof h, "unix");
        }
    }
    if (out)
        snprintf(out, cap, strchr(h, ':') ? "[%s]:%u" : "%s:%u", h, p);
    if (host)
        snprintf(host, host_cap, "%s", h);
    if (port)
        *port = p;
}
