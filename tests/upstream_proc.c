/* SPDX-License-Identifier: ISC */
#include "upstream_proc.h"

#include "fixture.h"
#include "harness.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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
        /* A test that fails an assertion ends before its stop: the upstream ends with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
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

void *mg_test_pooled_client_run(void *arg)
{
    struct mg_test_pooled_client *c = arg;
    int fd = mg_test_connect(c->port);
    for (int i = 0; fd >= 0 && i < c->rounds; i++) {
        char request[512];
        c->request(c, i, request, sizeof request);
        struct mg_test_response r;
        if (!mg_test_send(fd, request, strlen(request)) ||
            !mg_test_read_response(fd, &r, false, 60000)) {
            c->wrong++;
            break;
        }
        if (c->own(c, i, request, &r))
            c->right++;
        else
            c->wrong++;
        mg_test_response_free(&r);
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* ---- CoreScope's own server ---- */

#define CORESCOPE_READY_CEILING_MS 120000
#define CORESCOPE_MIGRATED_FIXTURE                                                                 \
    MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"

static const char *corescope_binary(void)
{
    static const char *const places[] = {MESHGATE_SOURCE_DIR "/../peer/corescope-server",
                                         "/work/peer/corescope-server"};
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++)
        if (access(places[i], X_OK) == 0)
            return places[i];
    return NULL;
}

static bool corescope_ready(void *arg)
{
    struct mg_test_corescope *c = arg;
    if (waitpid(c->pid, NULL, WNOHANG) == c->pid) {
        c->pid = 0; /* it stopped (its port taken): the caller tries another */
        return true;
    }
    struct mg_test_response r;
    if (!mg_test_get(c->port, "/api/healthz", NULL, &r))
        return false;
    bool ready = r.status == 200 && r.body && strstr(r.body, "\"ready\":true");
    mg_test_response_free(&r);
    return ready;
}

bool mg_test_corescope_start(struct mg_test_corescope *c, char *why, size_t cap)
{
    memset(c, 0, sizeof *c);
    const char *bin = corescope_binary();
    if (!bin) {
        snprintf(why, cap,
                 "CoreScope's server is not built (../peer/corescope-server, /work/peer: "
                 "../shared/corescope/peer/build.sh builds it)");
        return false;
    }
    if (access(CORESCOPE_MIGRATED_FIXTURE, R_OK) != 0) {
        snprintf(why, cap, "%s is not present (../shared/data)", CORESCOPE_MIGRATED_FIXTURE);
        return false;
    }
    mg_test_tmpdir(c->dir, sizeof c->dir);
    char db[256], config_dir[256], log[256], err[512] = "";
    snprintf(db, sizeof db, "%s/fresh.db", c->dir);
    snprintf(config_dir, sizeof config_dir, "%s/config", c->dir);
    snprintf(log, sizeof log, "%s/corescope.log", c->dir);
    cr_assert_eq(mkdir(config_dir, 0700), 0);
    cr_assert_eq(mg_fixture_freshen(CORESCOPE_MIGRATED_FIXTURE, db, 0, err, sizeof err), 0,
                 "freshening: %s", err);
    for (int attempt = 0; attempt < 3 && !c->pid; attempt++) {
        c->port = mg_test_free_port();
        char port[16];
        snprintf(port, sizeof port, "%d", c->port);
        c->pid = fork();
        cr_assert_geq(c->pid, 0);
        if (c->pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
            setenv("CORESCOPE_LISTEN_HOST", "127.0.0.1", 1);
            if (chdir(c->dir) != 0)
                _exit(127);
            execl(bin, bin, "-db", db, "-port", port, "-config-dir", config_dir, (char *)NULL);
            _exit(127);
        }
        cr_assert(mg_test_wait_until(corescope_ready, c, CORESCOPE_READY_CEILING_MS, 100),
                  "CoreScope's server was not ready in %d ms (its log: %s)",
                  CORESCOPE_READY_CEILING_MS, log);
    }
    cr_assert_gt(c->pid, 0, "CoreScope's server did not start (its log: %s)", log);
    return true;
}

void mg_test_corescope_stop(struct mg_test_corescope *c)
{
    if (c->pid > 0) {
        kill(c->pid, SIGTERM);
        int64_t give_up = mg_test_now_ms() + 10000;
        while (waitpid(c->pid, NULL, WNOHANG) == 0) {
            if (mg_test_now_ms() > give_up) {
                kill(c->pid, SIGKILL);
                waitpid(c->pid, NULL, 0);
                break;
            }
            mg_test_sleep_ms(20);
        }
    }
    c->pid = 0;
    if (c->dir[0])
        mg_test_rmdir(c->dir);
    c->dir[0] = '\0';
}

long mg_test_corescope_count(const struct mg_test_corescope *c, const char *path)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(c->port, "/api/perf", NULL, &r), "CoreScope's /api/perf");
    json_error_t jerr;
    json_t *perf = r.body ? json_loads(r.body, 0, &jerr) : NULL;
    mg_test_response_free(&r);
    cr_assert_not_null(perf, "CoreScope's /api/perf is not JSON");
    json_t *count =
        json_object_get(json_object_get(json_object_get(perf, "endpoints"), path), "count");
    long n = json_is_integer(count) ? (long)json_integer_value(count) : 0;
    json_decref(perf);
    return n;
}
