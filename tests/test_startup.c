/* SPDX-License-Identifier: ISC */
/*
 * How the real binary starts and refuses to start: bad configuration (exit 78, the message
 * names the variable, its value and what is accepted), a missing or foreign database, a
 * segment name in use, a stale segment, systemd's socket and notification protocol.
 */
#include "harness.h"

#include "segment.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(startup, .timeout = 60);

static char test_db[256];
static char test_dir[128];

static void make_dir_and_db(void)
{
    mg_test_tmpdir(test_dir, sizeof test_dir);
    snprintf(test_db, sizeof test_db, "%s/ok.db", test_dir);
    cr_assert_eq(mg_test_make_db(test_db, false, NULL), 0);
}

static void cleanup(void)
{
    mg_test_rmdir(test_dir);
}

static int run_with(const char *const *extra, char *out, size_t cap)
{
    char v_db[300], v_listen[64], v_shm[64];
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s", test_db);
    snprintf(v_listen, sizeof v_listen, "MESHGATE_LISTEN=127.0.0.1:%d", mg_test_free_port());
    snprintf(v_shm, sizeof v_shm, "MESHGATE_SHM_NAME=/mgtest-start-%d", (int)getpid());
    const char *env[32] = {v_db, v_listen, v_shm, "MESHGATE_WORKERS=1"};
    size_t n = 4;
    for (; extra && *extra && n < 31; extra++) {
        /* a later value of the same name wins: drop the default */
        for (size_t i = 0; i < n; i++)
            if (strncmp(env[i], *extra, strcspn(*extra, "=") + 1) == 0)
                env[i] = "MG_TEST_UNUSED=1";
        env[n++] = *extra;
    }
    env[n] = NULL;
    int status = mg_test_run_expect_exit(env, out, cap, 5000);
    shm_unlink(v_shm + strlen("MESHGATE_SHM_NAME="));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct bad_env {
    const char *setting;
    const char *must_say;
};

Test(startup, bad_environment_values_stop_the_start_with_78_and_a_message, .init = make_dir_and_db,
     .fini = cleanup)
{
    const struct bad_env cases[] = {
        {"MESHGATE_WORKERS=0", "MESHGATE_WORKERS=0: must be a whole number from 1 to 1024"},
        {"MESHGATE_WORKERS=lots", "MESHGATE_WORKERS=lots"},
        {"MESHGATE_LISTEN=8080", "MESHGATE_LISTEN=8080: must be HOST:PORT"},
        {"MESHGATE_LISTEN=127.0.0.1:70000", "MESHGATE_LISTEN=127.0.0.1:70000"},
        {"MESHGATE_HEADER_TIMEOUT_MS=5",
         "MESHGATE_HEADER_TIMEOUT_MS=5: must be a whole number from 100"},
        {"MESHGATE_SHM_NAME=no-slash", "MESHGATE_SHM_NAME=no-slash"},
        {"MESHGATE_LOG_LEVEL=loud",
         "MESHGATE_LOG_LEVEL=loud: must be error, warning, info or debug"},
        {"MESHGATE_ACCESS_LOG=maybe", "MESHGATE_ACCESS_LOG=maybe"},
        {"MESHGATE_DB=", "MESHGATE_DB="},
        {"MESHGATE_WORKERS=+5", "MESHGATE_WORKERS=+5: must be a whole number"},
        {"MESHGATE_PUBLIC_DIR=/nonexistent",
         "MESHGATE_PUBLIC_DIR=/nonexistent: must be an existing directory"},
        {"MESHGATE_PUBLIC_DIR=/etc/passwd", "MESHGATE_PUBLIC_DIR=/etc/passwd: must be a directory"},
        {"MESHGATE_PUBLIC_DIR=relative/dir",
         "MESHGATE_PUBLIC_DIR=relative/dir: must be an absolute"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *extra[] = {cases[i].setting, NULL};
        char out[16384];
        int code = run_with(extra, out, sizeof out);
        cr_expect_eq(code, 78, "%s: exit %d, output: %s", cases[i].setting, code, out);
        cr_expect(strstr(out, cases[i].must_say), "%s: output: %s", cases[i].setting, out);
    }
}

Test(startup, unset_database_variable_is_named, .init = make_dir_and_db, .fini = cleanup)
{
    const char *env[] = {"MESHGATE_WORKERS=1", NULL};
    char out[16384];
    int status = mg_test_run_expect_exit(env, out, sizeof out, 5000);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 78);
    cr_expect(strstr(out, "MESHGATE_DB is not set"), "output: %s", out);
}

Test(startup, missing_database_is_refused_with_66, .init = make_dir_and_db, .fini = cleanup)
{
    char setting[300], out[16384];
    snprintf(setting, sizeof setting, "MESHGATE_DB=%s/nope.db", test_dir);
    const char *extra[] = {setting, NULL};
    cr_expect_eq(run_with(extra, out, sizeof out), 66, "output: %s", out);
    cr_expect(strstr(out, "No such file or directory"), "output: %s", out);
}

Test(startup, foreign_database_is_refused_with_65_and_nothing_written, .init = make_dir_and_db,
     .fini = cleanup)
{
    char path[300], setting[320], out[16384];
    snprintf(path, sizeof path, "%s/other.db", test_dir);
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(path, &db), SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE nodes (public_key TEXT); CREATE TABLE users (id INT)", NULL,
                 NULL, NULL);
    sqlite3_close(db);
    struct stat before, after;
    stat(path, &before);
    snprintf(setting, sizeof setting, "MESHGATE_DB=%s", path);
    const char *extra[] = {setting, NULL};
    cr_expect_eq(run_with(extra, out, sizeof out), 65, "output: %s", out);
    cr_expect(strstr(out, "not a CoreScope database"), "output: %s", out);
    stat(path, &after);
    cr_expect_eq(before.st_size, after.st_size);
    cr_expect_eq(before.st_mtime, after.st_mtime);
}

Test(startup, file_that_is_not_sqlite_is_refused_with_65, .init = make_dir_and_db, .fini = cleanup)
{
    char path[300], setting[320], out[16384];
    snprintf(path, sizeof path, "%s/text.db", test_dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 200; i++)
        fputs("this is not a database at all\n", f);
    fclose(f);
    snprintf(setting, sizeof setting, "MESHGATE_DB=%s", path);
    const char *extra[] = {setting, NULL};
    cr_expect_eq(run_with(extra, out, sizeof out), 65, "output: %s", out);
    cr_expect(strstr(out, "not a database"), "output: %s", out);
}

Test(startup, second_instance_on_the_same_segment_refuses_with_73)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    char v_shm[96], v_db[300], v_listen[64], out[16384];
    snprintf(v_shm, sizeof v_shm, "MESHGATE_SHM_NAME=%s", s.shm_name);
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s/test.db", s.dir);
    snprintf(v_listen, sizeof v_listen, "MESHGATE_LISTEN=127.0.0.1:%d", mg_test_free_port());
    const char *env[] = {v_shm, v_db, v_listen, "MESHGATE_WORKERS=1", NULL};
    int status = mg_test_run_expect_exit(env, out, sizeof out, 5000);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 73, "status %d: %s", status, out);
    cr_expect(strstr(out, "another meshgate"), "output: %s", out);
    /* The first instance is untouched. */
    struct mg_test_response r;
    cr_expect(mg_test_get(s.port, "/api/healthz", NULL, &r) && r.status == 200);
    mg_test_response_free(&r);
    mg_test_server_stop(&s, 5000);
}

Test(startup, segment_left_by_a_killed_instance_is_replaced)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    char shm_name[64], dir[128];
    snprintf(shm_name, sizeof shm_name, "%s", s.shm_name);
    snprintf(dir, sizeof dir, "%s", s.dir);
    /* kill -9 the master: the segment stays behind; the workers follow their master. */
    kill(s.pid, SIGKILL);
    waitpid(s.pid, NULL, 0);
    mg_test_sleep_ms(200);
    int fd = shm_open(shm_name, O_RDONLY, 0);
    cr_assert_geq(fd, 0, "the killed instance left no segment");
    close(fd);

    char v_shm[96], v_db[300], v_listen[64];
    int port = mg_test_free_port();
    snprintf(v_shm, sizeof v_shm, "MESHGATE_SHM_NAME=%s", shm_name);
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s/test.db", dir);
    snprintf(v_listen, sizeof v_listen, "MESHGATE_LISTEN=127.0.0.1:%d", port);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close_range(3, ~0U, 0);
        int log = open("/dev/null", O_WRONLY);
        dup2(log, 2);
        clearenv();
        putenv(v_shm), putenv(v_db), putenv(v_listen), putenv("MESHGATE_WORKERS=1");
        execl(MESHGATE_BUILD_DIR "/meshgate", "meshgate", (char *)NULL);
        _exit(127);
    }
    bool up = false;
    for (int i = 0; i < 500 && !up; i++) {
        struct mg_test_response r;
        up = mg_test_get(port, "/api/healthz", NULL, &r) && r.status == 200;
        mg_test_response_free(&r);
        if (!up)
            mg_test_sleep_ms(10);
    }
    cr_expect(up, "the new instance did not take over the stale segment");
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, shm_name, true, err, sizeof err), 0, "%s", err);
    cr_expect_eq(atomic_load(&seg.header->master_pid), pid);
    mg_segment_detach(&seg);
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    shm_unlink(shm_name);
    mg_test_rmdir(dir);
}

Test(startup, foreign_segment_under_the_name_is_refused_and_kept, .init = make_dir_and_db,
     .fini = cleanup)
{
    char name[64], v_shm[96], out[16384];
    snprintf(name, sizeof name, "/mgtest-foreign-%d", (int)getpid());
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "somebody else's data, not ours", 30), 30);
    close(fd);
    snprintf(v_shm, sizeof v_shm, "MESHGATE_SHM_NAME=%s", name);
    const char *extra[] = {v_shm, NULL};
    cr_expect_eq(run_with(extra, out, sizeof out), 78, "output: %s", out);
    cr_expect(strstr(out, "not a meshgate segment"), "output: %s", out);
    fd = shm_open(name, O_RDONLY, 0);
    cr_expect_geq(fd, 0, "the foreign segment was removed");
    char buf[8] = "";
    cr_expect_eq(read(fd, buf, 8), 8);
    cr_expect_eq(memcmp(buf, "somebody", 8), 0);
    close(fd);
    shm_unlink(name);
}

static pid_t start_with_fds(int listen_fd, const char *notify_path, int port, char *shm_name,
                            const char *db)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char v_db[300], v_shm[96], v_notify[200], v_pid[32], v_listen[64];
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s", db);
    snprintf(v_shm, sizeof v_shm, "MESHGATE_SHM_NAME=%s", shm_name);
    snprintf(v_notify, sizeof v_notify, "NOTIFY_SOCKET=%s", notify_path);
    snprintf(v_pid, sizeof v_pid, "LISTEN_PID=%d", (int)getpid());
    /* A port that is not the socket's: the socket from systemd wins. */
    snprintf(v_listen, sizeof v_listen, "MESHGATE_LISTEN=127.0.0.1:%d", port + 1);
    int log = open("/dev/null", O_WRONLY);
    dup2(log, 2);
    if (listen_fd != 3) {
        dup2(listen_fd, 3);
        close(listen_fd);
    }
    close_range(4, ~0U, 0);
    clearenv();
    putenv(v_db), putenv(v_shm), putenv(v_notify), putenv(v_pid), putenv(v_listen);
    putenv("LISTEN_FDS=1"), putenv("MESHGATE_WORKERS=2");
    execl(MESHGATE_BUILD_DIR "/meshgate", "meshgate", (char *)NULL);
    _exit(127);
}

static bool read_notification(int fd, const char *want, char *all, size_t cap, int timeout_ms)
{
    int64_t deadline = mg_test_now_ms() + timeout_ms;
    while (mg_test_now_ms() < deadline) {
        char msg[1024];
        ssize_t n = recv(fd, msg, sizeof msg - 1, MSG_DONTWAIT);
        if (n > 0) {
            msg[n] = '\0';
            strncat(all, msg, cap - strlen(all) - 2);
            strcat(all, "|");
            if (strstr(msg, want))
                return true;
        } else {
            mg_test_sleep_ms(5);
        }
    }
    return false;
}

Test(startup, socket_activation_and_readiness_notifications, .init = make_dir_and_db,
     .fini = cleanup)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sin;
    cr_assert_eq(bind(lfd, (struct sockaddr *)&sin, sizeof sin), 0);
    cr_assert_eq(listen(lfd, 16), 0);
    getsockname(lfd, (struct sockaddr *)&sin, &len);
    int port = ntohs(sin.sin_port);

    char notify_path[100];
    snprintf(notify_path, sizeof notify_path, "/tmp/mgtest-notify-%d.sock", (int)getpid());
    unlink(notify_path);
    int nfd = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", notify_path);
    cr_assert_eq(bind(nfd, (struct sockaddr *)&sun, sizeof sun), 0);

    char shm_name[64];
    snprintf(shm_name, sizeof shm_name, "/mgtest-sd-%d", (int)getpid());
    pid_t pid = start_with_fds(lfd, notify_path, port, shm_name, test_db);
    close(lfd);
    char all[8192] = "";
    cr_expect(read_notification(nfd, "READY=1", all, sizeof all, 10000), "got: %s", all);
    struct mg_test_response r;
    cr_expect(mg_test_get(port, "/api/healthz", NULL, &r) && r.status == 200,
              "the server does not answer on systemd's socket");
    mg_test_response_free(&r);
    kill(pid, SIGTERM);
    cr_expect(read_notification(nfd, "STOPPING=1", all, sizeof all, 10000), "got: %s", all);
    int status;
    waitpid(pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_expect(strstr(all, "STATUS="), "got: %s", all);
    close(nfd);
    unlink(notify_path);
    shm_unlink(shm_name);
}
