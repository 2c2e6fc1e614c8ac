/* SPDX-License-Identifier: ISC */
/*
 * The segment's name at start-up and under a running server (docs/architecture.md, "The
 * segment's name"): what else may sit at the name (a FIFO, a link, an empty file, a crafted
 * stale record) and a segment truncated under the server. The start and meshgate-shm must
 * never block on the name, and must say what they found.
 */
#include "harness.h"

#include "segment.h"
#include "shmdump.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(shmname, .timeout = 60);

#define CEILING_MS 10000

static char name[64], path[96], dir[128], db[256];

/* A name of this test process; removed again however the test ends (fini). */
static void setup(void)
{
    snprintf(name, sizeof name, "/mgtest-name-%d", (int)getpid());
    snprintf(path, sizeof path, "/dev/shm%s", name);
    unlink(path);
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/test.db", dir);
    cr_assert_eq(mg_test_make_db(db, false, NULL), 0);
}

static void teardown(void)
{
    unlink(path);
    mg_test_rmdir(dir);
}

/* Runs the server on name with a valid database and returns its wait status (-1: it had to
 * be killed after CEILING_MS, i.e. it hung). */
static int run_start(char *out, size_t cap)
{
    char v_db[300], v_shm[96], v_listen[64];
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s", db);
    snprintf(v_shm, sizeof v_shm, "MESHGATE_SHM_NAME=%s", name);
    snprintf(v_listen, sizeof v_listen, "MESHGATE_LISTEN=127.0.0.1:%d", mg_test_free_port());
    const char *env[] = {v_db, v_shm, v_listen, "MESHGATE_WORKERS=1", NULL};
    return mg_test_run_expect_exit(env, out, cap, CEILING_MS);
}

/* Runs meshgate-shm --name name; returns its exit status, -1 when it did not end in time. */
static int run_dump_tool(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        execl(MESHGATE_BUILD_DIR "/meshgate-shm", "meshgate-shm", "--name", name, (char *)NULL);
        _exit(127);
    }
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    int status;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (mg_test_now_ms() > give_up) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        mg_test_sleep_ms(5);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(shmname, a_fifo_at_the_name_stops_the_start_at_once_with_a_message, .init = setup,
     .fini = teardown)
{
    cr_assert_eq(mkfifo(path, 0600), 0, "mkfifo %s: %s", path, strerror(errno));
    char out[8192];
    int64_t t0 = mg_test_now_ms();
    int status = run_start(out, sizeof out);
    cr_assert_neq(status, -1, "the start hung on a FIFO at %s", name);
    cr_expect_lt(mg_test_now_ms() - t0, 5000);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 78, "status %d: %s", status, out);
    cr_expect(strstr(out, "is a FIFO, not a shared-memory segment"), "%s", out);
    cr_expect(strstr(out, "MESHGATE_SHM_NAME"), "no way out offered: %s", out);
    struct stat st;
    cr_expect(lstat(path, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was touched");
}

Test(shmname, meshgate_shm_on_a_fifo_or_a_link_exits_2_at_once, .init = setup, .fini = teardown)
{
    cr_assert_eq(mkfifo(path, 0600), 0);
    int64_t t0 = mg_test_now_ms();
    cr_expect_eq(run_dump_tool(), 2, "meshgate-shm on a FIFO");
    cr_expect_lt(mg_test_now_ms() - t0, 5000);
    struct mg_shmdump d;
    char err[512];
    cr_expect_eq(mg_shmdump_take(&d, name, err, sizeof err), MG_SHMDUMP_NOT_UNDERSTOOD);
    cr_expect(strstr(err, "FIFO"), "%s", err);

    unlink(path);
    cr_assert_eq(symlink("/etc/hostname", path), 0);
    cr_expect_eq(run_dump_tool(), 2, "meshgate-shm on a symbolic link");
    cr_expect_eq(mg_shmdump_take(&d, name, err, sizeof err), MG_SHMDUMP_NOT_UNDERSTOOD);
    cr_expect(strstr(err, "symbolic link"), "%s", err);
}

Test(shmname, a_symbolic_link_at_the_name_stops_the_start_and_is_not_followed, .init = setup,
     .fini = teardown)
{
    char target[200];
    snprintf(target, sizeof target, "%s/target", dir);
    int fd = open(target, O_CREAT | O_WRONLY, 0600);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(symlink(target, path), 0);
    char out[8192];
    int status = run_start(out, sizeof out);
    cr_assert(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 78, "status %d: %s",
              status, out);
    cr_expect(strstr(out, "symbolic link"), "%s", out);
    struct stat st;
    cr_expect(stat(target, &st) == 0 && st.st_size == 0, "the link's target was written");
}

/* Starts the real server on the harness's next name after preparing it with prepare. The
 * harness names its n-th server of a test process /mgtest-PID-n. */
static bool start_on_prepared_name(struct mg_test_server *s, void (*prepare)(const char *))
{
    char next[64];
    snprintf(next, sizeof next, "/mgtest-%d-1", (int)getpid());
    prepare(next);
    return mg_test_server_start(s, NULL, NULL) && strcmp(s->shm_name, next) == 0;
}

static void stale_record_naming_pid_1(const char *shm)
{
    struct mg_config c;
    char err[512];
    memset(&c, 0, sizeof c);
    c.reach_cache_entries = 1;
    c.reach_cache_bytes = 4096;
    c.anon_clients = 8;
    const char *routes[] = {"/api/healthz"};
    struct mg_segment seg;
    cr_assert_eq(mg_segment_create(&seg, shm, &c, 1, routes, 1, err, sizeof err), 0, "%s", err);
    /* Crafted: pid 1 runs, but it is no meshgate; no start time to compare. */
    atomic_store(&seg.header->master_pid, 1);
    atomic_store(&seg.header->master_start_ticks, 0);
    mg_segment_detach(&seg);
}

Test(shmname, a_stale_record_naming_pid_1_is_replaced_not_taken_for_a_live_master)
{
    struct mg_test_server s;
    bool started = start_on_prepared_name(&s, stale_record_naming_pid_1);
    char *log = mg_test_server_log(&s);
    cr_assert(started, "the start refused a record naming pid 1:\n%s", log ? log : "");
    cr_expect(log && strstr(log, "replaced segment"), "%s", log);
    cr_expect(!log || !strstr(log, "another meshgate"), "%s", log);
    free(log);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

static void empty_file(const char *shm)
{
    int fd = shm_open(shm, O_CREAT | O_EXCL | O_RDWR, 0600);
    cr_assert_geq(fd, 0, "%s: %s", shm, strerror(errno));
    close(fd);
}

Test(shmname, an_empty_segment_file_of_ours_is_removed_and_the_start_succeeds)
{
    struct mg_test_server s;
    bool started = start_on_prepared_name(&s, empty_file);
    char *log = mg_test_server_log(&s);
    cr_assert(started, "the start refused an empty file of ours:\n%s", log ? log : "");
    cr_expect(log && strstr(log, "removed an empty segment file"), "%s", log);
    free(log);
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r));
    cr_expect_eq(r.status, 200);
    mg_test_response_free(&r);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

Test(shmname, truncating_the_live_segment_is_logged_and_the_master_stops_with_71)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL), "the server did not start");
    char shm_path[128];
    snprintf(shm_path, sizeof shm_path, "/dev/shm%s", s.shm_name);
    cr_assert_eq(truncate(shm_path, 0), 0, "%s", strerror(errno));

    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    int status = 0;
    bool ended = false;
    while (mg_test_now_ms() < give_up && !ended) {
        ended = waitpid(s.pid, &status, WNOHANG) == s.pid;
        if (!ended)
            mg_test_sleep_ms(10);
    }
    cr_assert(ended, "the master did not stop after its segment was truncated");
    s.pid = 0;
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 71, "wait status %d", status);
    char *log = mg_test_server_log(&s);
    cr_expect(log && strstr(log, "was truncated"), "nothing logged:\n%s", log);
    free(log);
    struct stat st;
    cr_expect(stat(shm_path, &st) < 0 && errno == ENOENT, "the truncated name was left behind");
    mg_test_server_stop(&s, 1000);
}

/* The stand-ins of name left in /dev/shm (the server's stand-in for a taken name). */
static int stand_ins(const char *taken)
{
    char cmd[256], out[4096];
    snprintf(cmd, sizeof cmd, "ls /dev/shm | grep -c '^%s-u' || true", taken + 1);
    mg_test_shell(cmd, out, sizeof out);
    return atoi(out);
}

Test(shmname, a_name_another_user_created_is_reported_with_its_owner_and_left_alone)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to create a name owned by another user");
    /* The harness names the first server of this test process /mgtest-PID-1. */
    char taken[64], taken_path[96];
    snprintf(taken, sizeof taken, "/mgtest-%d-1", (int)getpid());
    snprintf(taken_path, sizeof taken_path, "/dev/shm%s", taken);
    mg_test_cleanup_shm(taken);
    int fd = open(taken_path, O_CREAT | O_EXCL | O_RDWR, 0600);
    cr_assert_geq(fd, 0, "%s: %s", taken_path, strerror(errno));
    cr_assert_eq(fchown(fd, 65534, 65534), 0);
    static char junk[4096];
    memset(junk, 'x', sizeof junk);
    cr_assert_eq(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
    close(fd);

    struct mg_test_server s;
    bool started = mg_test_server_start(&s, NULL, NULL);
    cr_assert(started, "a name another user created stopped the start");
    cr_assert_str_eq(s.shm_name, taken);
    char *log = mg_test_server_log(&s);
    cr_expect(log && strstr(log, "(uid 65534), not by this server's user"), "%s", log);
    char instead[96];
    snprintf(instead, sizeof instead, "using %s-u0-", taken);
    cr_expect(log && strstr(log, instead), "%s", log);
    free(log);
    struct stat st;
    cr_expect(stat(taken_path, &st) == 0 && st.st_uid == 65534 && st.st_size == 4096,
              "the other user's object was touched");
    cr_expect_eq(stand_ins(taken), 1);

    /* Readers find the stand-in under the name they know. */
    snprintf(name, sizeof name, "%s", taken);
    cr_expect_eq(run_dump_tool(), 0, "meshgate-shm --name %s did not find the stand-in", taken);
    struct mg_test_response r;
    cr_expect(mg_test_get(s.port, "/api/healthz", NULL, &r) && r.status == 200);
    mg_test_response_free(&r);

    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    cr_expect_eq(stand_ins(taken), 0, "the stand-in was not removed at stop");
    unlink(taken_path);
}
