/* SPDX-License-Identifier: ISC */
#include "upstream_proc.h"

#include "harness.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define START_CEILING_MS 30000

static bool port_written(void *arg)
{
    struct stat st;
    return stat(((struct mg_test_upstream *)arg)->port_file, &st) == 0;
}

void mg_test_upstream_start(struct mg_test_upstream *u, int port, const char *const *args)
{
    if (!u->dir[0])
        mg_test_tmpdir(u->dir, sizeof u->dir);
    snprintf(u->log, sizeof u->log, "%s/received.log", u->dir);
    snprintf(u->port_file, sizeof u->port_file, "%s/port", u->dir);
    unlink(u->port_file);
    char bin[512], port_text[16];
    snprintf(bin, sizeof bin, "%s/mg-test-upstream", MESHGATE_BUILD_DIR);
    snprintf(port_text, sizeof port_text, "%d", port);
    const char *argv[32] = {bin, "--port-file", u->port_file, "--log", u->log, "--port", port_text};
    int n = 7;
    for (int i = 0; args && args[i] && n < 30; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    u->pid = fork();
    cr_assert_geq(u->pid, 0);
    if (u->pid == 0) {
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    cr_assert(mg_test_wait_until(port_written, u, START_CEILING_MS, 5),
              "the test upstream did not start");
    char *text = mg_test_read_file(u->port_file);
    cr_assert(text);
    u->port = atoi(text);
    free(text);
}

void mg_test_upstream_stop(struct mg_test_upstream *u)
{
    if (u->pid > 0) {
        kill(u->pid, SIGKILL);
        waitpid(u->pid, NULL, 0);
    }
    u->pid = 0;
}

int mg_test_connect_from(const char *from, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in src = {.sin_family = AF_INET};
    inet_pton(AF_INET, from, &src.sin_addr);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0 ||
        connect(fd, (struct sockaddr *)&dst, sizeof dst) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int mg_test_ws_open_from(const char *from, int port, const char *path, char *head, size_t cap)
{
    head[0] = '\0';
    int fd = mg_test_connect_from(from, port);
    cr_assert_geq(fd, 0, "connect from %s", from);
    char req[512];
    snprintf(req, sizeof req,
             "GET %s HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
             path);
    cr_assert(mg_test_send(fd, req, strlen(req)));
    size_t got = 0;
    int64_t give_up = mg_test_now_ms() + START_CEILING_MS;
    while (got < cap - 1 && mg_test_now_ms() < give_up) {
        ssize_t n = recv(fd, head + got, 1, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        head[got] = '\0';
        if (strstr(head, "\r\n\r\n"))
            break;
    }
    return fd;
}
