/* SPDX-License-Identifier: ISC */
/*
 * The operations side: the systemd units verify, the man page documents every variable of
 * the configuration table with its default and range, the real binary speaks systemd's
 * protocols under systemd-socket-activate (LISTEN_FDS in, READY/STATUS/WATCHDOG/STOPPING
 * out), and `make install` puts every file where meshgate(8) says without overwriting an
 * operator's environment file.
 */
#include "harness.h"

#include "config.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

TestSuite(systemd, .timeout = 30);

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[4096];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            buf = realloc(buf, cap);
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (!buf)
        buf = calloc(1, 1);
    else
        buf[len] = '\0';
    return buf;
}

static bool write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static bool find_program(const char *name, char *path, size_t cap)
{
    const char *dirs[] = {"/usr/bin", "/bin", "/usr/local/bin", "/usr/sbin"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(path, cap, "%s/%s", dirs[i], name);
        if (access(path, X_OK) == 0)
            return true;
    }
    return false;
}

/* A copy of text with every occurrence of from replaced by to (malloc'ed). */
static char *replace_all(const char *text, const char *from, const char *to)
{
    size_t count = 0, fl = strlen(from), tl = strlen(to);
    for (const char *p = text; (p = strstr(p, from)); p += fl)
        count++;
    char *out = malloc(strlen(text) + count * tl + 1), *o = out;
    for (const char *p = text, *q;; p = q + fl) {
        q = strstr(p, from);
        size_t n = q ? (size_t)(q - p) : strlen(p);
        memcpy(o, p, n);
        o += n;
        if (!q)
            break;
        memcpy(o, to, tl);
        o += tl;
    }
    *o = '\0';
    return out;
}

/* The value of "Key=" on its own line of a unit file (first one), or NULL. */
static const char *unit_value(const char *unit, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    for (const char *line = unit; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, key, kl) == 0 && line[kl] == '=') {
            const char *v = line + kl + 1, *end = strchr(v, '\n');
            size_t n = end ? (size_t)(end - v) : strlen(v);
            if (n >= cap)
                n = cap - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return out;
        }
    }
    return NULL;
}

Test(systemd, units_pass_systemd_analyze_verify)
{
    char analyze[256];
    if (!find_program("systemd-analyze", analyze, sizeof analyze))
        cr_skip_test("systemd-analyze is not installed (Debian: apt-get install systemd)");
    char dir[128];
    mg_test_tmpdir(dir, sizeof dir);
    const char *names[] = {"meshgate.service", "meshgate.socket"};
    for (int i = 0; i < 2; i++) {
        char src[512], dst[512];
        snprintf(src, sizeof src, "%s/etc/%s", MESHGATE_SOURCE_DIR, names[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, names[i]);
        char *text = read_file(src);
        cr_assert(text, "cannot read %s", src);
        /* verify checks that ExecStart's binary exists: point it at this build's. */
        char *copy = replace_all(text, "/usr/local/bin/meshgate", MESHGATE_BUILD_DIR "/meshgate");
        cr_assert(write_file(dst, copy));
        free(copy);
        free(text);
    }
    char cmd[1024], out[16384];
    /* --man=no: the man pages are not installed here; Documentation= is checked by
     * units_document... below instead. */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && timeout 20 %s verify --man=no ./meshgate.service ./meshgate.socket 2>&1",
             dir, analyze);
    int rc = mg_test_shell(cmd, out, sizeof out);
    /* In a container verify may complain about the host (no D-Bus, missing units
     * elsewhere); only messages about our two units count. */
    char ours[16384] = "";
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, "meshgate.service") || strstr(line, "meshgate.socket") ||
            strstr(line, dir)) {
            strncat(ours, line, sizeof ours - strlen(ours) - 2);
            strcat(ours, "\n");
        }
    mg_test_rmdir(dir);
    cr_assert_neq(rc, 124, "systemd-analyze verify timed out");
    cr_assert_str_empty(ours, "systemd-analyze verify (exit %d) complains about our units:\n%s", rc,
                        ours);
}

/* The settings the man page and the brief promise, tied to the configuration table. */
Test(systemd, service_unit_keeps_its_promises)
{
    char path[512], v[256];
    snprintf(path, sizeof path, "%s/etc/meshgate.service", MESHGATE_SOURCE_DIR);
    char *unit = read_file(path);
    cr_assert(unit, "cannot read %s", path);
    cr_assert_str_eq(unit_value(unit, "Type", v, sizeof v), "notify");
    /* A reload checks first (systemd runs ExecReload= lines in order and stops at the first
     * that fails), so a bad edit never reaches the running server; a start checks too. */
    cr_assert_str_eq(unit_value(unit, "ExecReload", v, sizeof v),
                     "/usr/local/bin/meshgate --check");
    const char *second = strstr(unit, "\nExecReload=/usr/local/bin/meshgate --check\n");
    cr_assert(second);
    cr_assert_str_eq(unit_value(second + 1 + strlen("ExecReload=/usr/local/bin/meshgate --check"),
                                "ExecReload", v, sizeof v),
                     "/bin/kill -HUP $MAINPID");
    cr_assert_str_eq(unit_value(unit, "ExecStartPre", v, sizeof v),
                     "/usr/local/bin/meshgate --check");
    cr_assert_str_eq(unit_value(unit, "Environment", v, sizeof v),
                     "MESHGATE_ENV_FILE=/etc/meshgate/meshgate.env",
                     "meshgate must know the file EnvironmentFile= reads, to read it on reload");
    cr_assert_str_eq(unit_value(unit, "KillMode", v, sizeof v), "mixed");
    cr_assert_str_eq(unit_value(unit, "EnvironmentFile", v, sizeof v),
                     "/etc/meshgate/meshgate.env");
    cr_assert(unit_value(unit, "RestartPreventExitStatus", v, sizeof v));
    cr_assert(strstr(v, "78"), "a bad configuration (78) must not restart: %s", v);
    cr_assert_null(strstr(v, "66"), "a missing database (66) is retried: %s", v);
    cr_assert(unit_value(unit, "DynamicUser", v, sizeof v) || unit_value(unit, "User", v, sizeof v),
              "the service must run as a system user (logind's RemoveIPC)");
    cr_assert_null(unit_value(unit, "PrivateIPC", v, sizeof v));
    cr_assert_null(unit_value(unit, "ProtectProc", v, sizeof v),
                   "the master must see other masters in /proc to refuse a name in use");

    /* The stop timeout outlasts the default drain plus the master's 2 s kill grace. */
    long drain_ms = -1;
    for (const struct mg_config_var *c = mg_config_vars; c->name; c++)
        if (strcmp(c->name, "MESHGATE_DRAIN_TIMEOUT_MS") == 0)
            drain_ms = strtol(c->default_value, NULL, 10);
    cr_assert_gt(drain_ms, 0);
    cr_assert(unit_value(unit, "TimeoutStopSec", v, sizeof v));
    long stop_s = strtol(v, NULL, 10);
    cr_assert_gt(stop_s * 1000, drain_ms + 2000, "TimeoutStopSec=%s, drain %ld ms", v, drain_ms);

    /* LimitNOFILE covers one worker's connections and the defaults' whole group. */
    long workers = 0, conns = 0;
    for (const struct mg_config_var *c = mg_config_vars; c->name; c++) {
        if (strcmp(c->name, "MESHGATE_WORKERS") == 0)
            workers = strtol(c->default_value, NULL, 10);
        if (strcmp(c->name, "MESHGATE_MAX_CONNS_PER_WORKER") == 0)
            conns = strtol(c->default_value, NULL, 10);
    }
    cr_assert(unit_value(unit, "LimitNOFILE", v, sizeof v));
    cr_assert_gt(strtol(v, NULL, 10), workers * conns);
    free(unit);
}

Test(systemd, man_page_documents_every_variable_with_default_and_range)
{
    char path[512];
    snprintf(path, sizeof path, "%s/etc/meshgate.8", MESHGATE_SOURCE_DIR);
    char *man = read_file(path);
    cr_assert(man, "cannot read %s", path);
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        char tag[128];
        snprintf(tag, sizeof tag, ".It Ev %s\n", v->name);
        const char *entry = strstr(man, tag);
        cr_expect(entry, "meshgate.8 has no entry (%s) for %s", tag, v->name);
        if (!entry)
            continue;
        entry += strlen(tag);
        const char *end = strstr(entry, "\n.It ");
        const char *end2 = strstr(entry, "\n.El");
        if (!end || (end2 && end2 < end))
            end = end2;
        size_t n = end ? (size_t)(end - entry) : strlen(entry);
        char *text = strndup(entry, n);
        if (v->default_value && *v->default_value)
            cr_expect(strstr(text, v->default_value), "meshgate.8: %s does not say its default %s",
                      v->name, v->default_value);
        if (v->kind == MG_CFG_INT || v->kind == MG_CFG_INT_AUTO) {
            char range[64];
            snprintf(range, sizeof range, "%lld to %lld", (long long)v->min, (long long)v->max);
            cr_expect(strstr(text, range), "meshgate.8: %s does not say its range %s", v->name,
                      range);
        }
        free(text);
    }
    free(man);
}

static bool notify_has(const char *log, const char *what)
{
    return strstr(log, what) != NULL;
}

/* Appends every datagram that arrives within ms to log. */
static void notify_drain(int fd, char *log, size_t cap, int ms, const char *until)
{
    int64_t deadline = mg_test_now_ms() + ms;
    while (mg_test_now_ms() < deadline && !(until && notify_has(log, until))) {
        char msg[1100];
        ssize_t n = recv(fd, msg, sizeof msg - 1, 0);
        if (n <= 0)
            continue; /* receive timeout: look at the clock again */
        msg[n] = '\0';
        strncat(log, msg, cap - strlen(log) - 2);
        strcat(log, "\n");
    }
}

Test(systemd, socket_activation_notify_and_watchdog_end_to_end)
{
    char activate[256];
    if (!find_program("systemd-socket-activate", activate, sizeof activate))
        cr_skip_test("systemd-socket-activate is not installed (Debian: systemd package)");
    char dir[128], db[256], notify_path[256], logpath[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/sd.db", dir);
    snprintf(notify_path, sizeof notify_path, "%s/notify", dir);
    snprintf(logpath, sizeof logpath, "%s/server.log", dir);
    cr_assert_eq(mg_test_make_db(db, false, NULL), 0);

    int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(nfd, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(notify_path), sizeof sun.sun_path, "%s: path too long", notify_path);
    memcpy(sun.sun_path, notify_path, strlen(notify_path) + 1);
    cr_assert_eq(bind(nfd, (struct sockaddr *)&sun, sizeof sun), 0, "bind %s: %s", notify_path,
                 strerror(errno));
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
    setsockopt(nfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

    int port = mg_test_free_port(), own_port;
    do
        own_port = mg_test_free_port();
    while (own_port == port);
    char listen_arg[64], e_notify[300], e_db[300], e_listen[64], e_shm[64];
    snprintf(listen_arg, sizeof listen_arg, "127.0.0.1:%d", port);
    snprintf(e_notify, sizeof e_notify, "NOTIFY_SOCKET=%s", notify_path);
    snprintf(e_db, sizeof e_db, "MESHGATE_DB=%s", db);
    /* A different port: answers on `port` prove the socket came from systemd-socket-activate. */
    snprintf(e_listen, sizeof e_listen, "MESHGATE_LISTEN=127.0.0.1:%d", own_port);
    snprintf(e_shm, sizeof e_shm, "MESHGATE_SHM_NAME=/meshgate-sdtest-%d", (int)getpid());

    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int lfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(lfd, 1);
        dup2(lfd, 2);
        /*
         * systemd-socket-activate execs the server in its own pid, so WATCHDOG_PID is left
         * unset (mg_notify_watchdog_usec then accepts WATCHDOG_USEC). 2 s, not less: an idle
         * worker refreshes its heartbeat once a second, and the master pets only while every
         * heartbeat is younger than the interval.
         */
        const char *argv[32] = {
            activate, "-l", listen_arg, "-E", e_notify, "-E", "WATCHDOG_USEC=2000000", "-E",
            e_db,     "-E", e_listen,   "-E", e_shm,    "-E", "MESHGATE_WORKERS=2"};
        int argc = 15;
        const char *pass[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
        for (int i = 0; i < 3; i++)
            if (getenv(pass[i])) {
                argv[argc++] = "-E";
                argv[argc++] = pass[i]; /* NAME alone: its value from our environment */
            }
        argv[argc++] = MESHGATE_BUILD_DIR "/meshgate";
        argv[argc] = NULL;
        execv(activate, (char *const *)argv);
        _exit(127);
    }

    /* systemd-socket-activate listens first and execs on the first connection, as systemd
     * does: this request starts the server and waits in the backlog meanwhile. */
    struct mg_test_response r = {0};
    bool got = false;
    for (int64_t deadline = mg_test_now_ms() + 5000; !got && mg_test_now_ms() < deadline;) {
        got = mg_test_get(port, "/api/healthz", NULL, &r);
        if (!got)
            mg_test_sleep_ms(50);
    }
    char log[16384] = "";
    notify_drain(nfd, log, sizeof log, 4000, "WATCHDOG=1");
    int own_fd = mg_test_connect(own_port);
    if (own_fd >= 0)
        close(own_fd);

    kill(pid, SIGTERM);
    notify_drain(nfd, log, sizeof log, 5000, "STOPPING=1");
    int status = -1;
    for (int64_t deadline = mg_test_now_ms() + 5000; mg_test_now_ms() < deadline;) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            break;
        status = -1;
        mg_test_sleep_ms(20);
    }
    if (status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    char *server_log = read_file(logpath);
    close(nfd);
    unlink(notify_path);
    char shm_path[128];
    snprintf(shm_path, sizeof shm_path, "/dev/shm%s", e_shm + strlen("MESHGATE_SHM_NAME="));
    unlink(shm_path);
    mg_test_rmdir(dir);

    cr_assert(got, "no answer on systemd-socket-activate's socket 127.0.0.1:%d; log:\n%s", port,
              server_log ? server_log : "");
    cr_expect_eq(r.status, 200, "GET /api/healthz: %d", r.status);
    mg_test_response_free(&r);
    cr_expect_lt(own_fd, 0, "MESHGATE_LISTEN's port %d answers: the server made its own socket",
                 own_port);
    cr_expect(notify_has(log, "READY=1"), "no READY=1; notifications:\n%s", log);
    cr_expect(notify_has(log, "STATUS="), "no STATUS=; notifications:\n%s", log);
    cr_expect(notify_has(log, "WATCHDOG=1"), "no WATCHDOG=1; notifications:\n%s", log);
    cr_expect(notify_has(log, "STOPPING=1"), "no STOPPING=1 after SIGTERM; notifications:\n%s",
              log);
    cr_expect(strstr(server_log ? server_log : "", "systemd's socket"),
              "the log does not say it uses systemd's socket:\n%s", server_log ? server_log : "");
    cr_assert_neq(status, -1, "not stopped within 5 s of SIGTERM");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d; log:\n%s", status,
              server_log ? server_log : "");
    free(server_log);
}

static void expect_file(const char *root, const char *rel, mode_t mode)
{
    char path[1024];
    snprintf(path, sizeof path, "%s%s", root, rel);
    struct stat st;
    cr_expect_eq(stat(path, &st), 0, "make install did not create %s", rel);
    if (mode)
        cr_expect_eq(st.st_mode & 07777, mode, "%s has mode %o, not %o", rel, st.st_mode & 07777,
                     mode);
}

Test(systemd, make_install_places_files_and_keeps_an_edited_env_file)
{
    char dir[128], cmd[2048], out[16384];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "timeout 20 make -s --no-print-directory -C '%s' BUILD='%s' install DESTDIR='%s' "
             "PREFIX=/usr 2>&1",
             MESHGATE_SOURCE_DIR, MESHGATE_BUILD_DIR, dir);
    int rc = mg_test_shell(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "make install failed (%d):\n%s", rc, out);

    const char *bins[] = {"meshgate", "meshgate-shm", "meshgate-fixture", "meshgate-bench"};
    for (int i = 0; i < 4; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, i < 2 ? "/usr/bin/%s" : "/usr/libexec/meshgate/%s", bins[i]);
        expect_file(dir, rel, 0755);
    }
    /* The test tools stay off PATH; bin holds what has a man page. */
    for (int i = 2; i < 4; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/usr/bin/%s", dir, bins[i]);
        cr_expect_neq(access(path, F_OK), 0, "%s is a test tool, not for bin", bins[i]);
    }
    expect_file(dir, "/usr/share/man/man8/meshgate.8", 0644);
    expect_file(dir, "/usr/share/man/man8/meshgate-shm.8", 0644);
    expect_file(dir, "/usr/share/meshgate/grafana/meshgate.json", 0644);
    expect_file(dir, "/usr/share/meshgate/prometheus/meshgate-rules.yml", 0644);
    expect_file(dir, "/usr/share/meshgate/prometheus/scrape.yml", 0644);
    expect_file(dir, "/usr/share/meshgate/haproxy/meshgate.cfg", 0644);
    expect_file(dir, "/usr/share/meshgate/litestream/litestream.yml", 0644);
    expect_file(dir, "/usr/libexec/meshgate/meshgate-replica-follow", 0755);
    expect_file(dir, "/usr/lib/systemd/system/meshgate.socket", 0644);
    expect_file(dir, "/usr/lib/systemd/system/meshgate.service", 0644);
    expect_file(dir, "/etc/meshgate/meshgate.env", 0644);

    char path[1024], v[256];
    snprintf(path, sizeof path, "%s/usr/lib/systemd/system/meshgate.service", dir);
    char *unit = read_file(path);
    cr_assert(unit);
    cr_expect_str_eq(unit_value(unit, "ExecStart", v, sizeof v) ? v : "", "/usr/bin/meshgate",
                     "ExecStart not rewritten to PREFIX/bin");
    cr_expect_str_eq(unit_value(unit, "ExecStartPre", v, sizeof v) ? v : "",
                     "/usr/bin/meshgate --check", "ExecStartPre not rewritten to PREFIX/bin");
    cr_expect_str_eq(unit_value(unit, "ExecReload", v, sizeof v) ? v : "",
                     "/usr/bin/meshgate --check", "ExecReload not rewritten to PREFIX/bin");
    cr_expect_null(strstr(unit, "=/usr/local/bin/"), "a command left under /usr/local/bin");
    free(unit);

    /* The operator edits the file; a second install keeps it and ships the new one beside. */
    char env[1024];
    snprintf(env, sizeof env, "%s/etc/meshgate/meshgate.env", dir);
    const char *edited = "MESHGATE_DB=/srv/mine.db\n";
    cr_assert(write_file(env, edited));
    rc = mg_test_shell(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "second make install failed (%d):\n%s", rc, out);
    char *now = read_file(env);
    cr_expect_str_eq(now ? now : "", edited, "make install overwrote an edited meshgate.env");
    free(now);
    expect_file(dir, "/etc/meshgate/meshgate.env.dist", 0644);
    mg_test_rmdir(dir);
}
