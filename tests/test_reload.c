/* SPDX-License-Identifier: ISC */
/*
 * SIGHUP reads MESHGATE_ENV_FILE again, with the real binary: a live setting takes effect
 * (in the segment's gates at once, in the workers as they are replaced), a restart-only one
 * is kept with one warning naming it, a bad file changes nothing and the server keeps
 * serving, the environment wins over the file at start and after a reload, and the number
 * of workers follows the file up to the slots made at start.
 */
#include "harness.h"

#include "client_limit.h"
#include "conn_limit.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "result_cache.h"
#include "scoreboard.h"
#include "segment.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(reload, .timeout = 60);

static char dir[128], env_path[256], env_setting[300];

static void make_dir(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(env_path, sizeof env_path, "%s/meshgate.env", dir);
    snprintf(env_setting, sizeof env_setting, "MESHGATE_ENV_FILE=%s", env_path);
}

static void remove_dir(void)
{
    mg_test_rmdir(dir);
}

static void write_env(const char *text)
{
    /* As an editor saves: a new file moved over the old one. */
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.new", env_path);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(rename(tmp, env_path), 0);
}

static int count(const char *text, const char *needle)
{
    return mg_test_count(text, needle);
}

static char *wait_log(const struct mg_test_server *s, const char *needle, int times)
{
    return mg_test_wait_log(s, needle, times, 15000);
}

/* SIGHUP, then waits for the reload to finish (or to be refused); returns the log. */
static char *reload_and_wait(const struct mg_test_server *s, int nth, bool expect_done)
{
    cr_assert_eq(kill(s->pid, SIGHUP), 0);
    char *log = wait_log(s, expect_done ? "reload done" : "nothing changed", nth);
    cr_assert(count(log, expect_done ? "reload done" : "nothing changed") >= nth,
              "reload %d did not %s; log:\n%s", nth, expect_done ? "finish" : "fail", log);
    return log;
}

static void attach(const struct mg_test_server *s, struct mg_segment *seg)
{
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
}

static void expect_serving(const struct mg_test_server *s)
{
    struct mg_test_response r;
    cr_expect(mg_test_get(s->port, "/api/healthz", NULL, &r) && r.status == 200, "not serving");
    mg_test_response_free(&r);
}

Test(reload, a_live_setting_changed_in_the_file_takes_effect, .init = make_dir, .fini = remove_dir)
{
    write_env("MESHGATE_REACH_COLD_MAX=2\nMESHGATE_ANON_RATE=300\n");
    const char *env[] = {env_setting, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    cr_expect_eq(seg.cold->cap, 2);
    cr_expect_eq(atomic_load(&seg.clients.table->per_minute), 300);

    write_env("# edited\nMESHGATE_REACH_COLD_MAX=5\nMESHGATE_ANON_RATE=60\n"
              "MESHGATE_ANON_BURST=3\nMESHGATE_HEADER_TIMEOUT_MS=300\n"
              "MESHGATE_REACH_CACHE_TTL_MS=1000\nMESHGATE_PERF_MEM_COOLDOWN_MS=700\n");
    char *log = reload_and_wait(&s, 1, true);
    /* In place, in the segment's gates. */
    cr_expect_eq(seg.cold->cap, 5);
    cr_expect_eq(atomic_load(&seg.clients.table->per_minute), 60);
    cr_expect_eq(atomic_load(&seg.clients.table->burst), 3);
    cr_expect_eq(seg.cache.cache->ttl_ns, 1000 * 1000000LL);
    cr_expect_eq(seg.diag->cooldown_ns, 700 * 1000000LL);
    /* The segment's copy, which meshgate-shm prints. */
    cr_expect_eq(seg.config->header_timeout_ms, 300);
    cr_expect_eq(seg.config->reach_cold_max, 5);
    cr_expect(strstr(log, "reload: MESHGATE_REACH_COLD_MAX=2 -> 5"), "%s", log);
    cr_expect(strstr(log, "reload (generation 1): 6 setting(s) changed"), "%s", log);
    free(log);
    /* In the replaced workers: a silent connection is cut after the new header timeout. */
    int fd = mg_test_connect(s.port);
    cr_assert(fd >= 0);
    int64_t started = mg_test_now_ms();
    /* The old timeout is the default, 10 s: well under it tells the new one applies. */
    cr_expect(mg_test_wait_closed(fd, 30000), "the new header timeout did not apply");
    cr_expect_lt(mg_test_now_ms() - started, 8000);
    close(fd);
    /* /api/healthz reports the gates from the segment. */
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r) && r.status == 200);
    cr_expect(strstr(r.body, "\"cap\":5"), "%s", r.body);
    mg_test_response_free(&r);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(reload, a_restart_setting_is_kept_with_one_warning_naming_it, .init = make_dir,
     .fini = remove_dir)
{
    write_env("MESHGATE_REACH_CACHE_ENTRIES=256\n");
    const char *env[] = {env_setting, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    write_env("MESHGATE_REACH_CACHE_ENTRIES=100\nMESHGATE_ANON_CLIENTS=64\n"
              "MESHGATE_GZIP_MIN_BYTES=2048\n");
    char *log = reload_and_wait(&s, 1, true);
    cr_expect_eq(count(log, "MESHGATE_REACH_CACHE_ENTRIES=100 needs a restart; keeping "
                            "MESHGATE_REACH_CACHE_ENTRIES=256"),
                 1, "%s", log);
    cr_expect_eq(count(log, "MESHGATE_ANON_CLIENTS=64 needs a restart; keeping "
                            "MESHGATE_ANON_CLIENTS=4096"),
                 1, "%s", log);
    cr_expect_eq(count(log, "needs a restart"), 2, "one warning each: %s", log);
    cr_expect(strstr(log, "MESHGATE_GZIP_MIN_BYTES=1024 -> 2048"), "the live one applies: %s", log);
    free(log);
    struct mg_segment seg;
    attach(&s, &seg);
    cr_expect_eq(seg.config->reach_cache_entries, 256);
    cr_expect_eq(seg.cache.cache->entries, 256);
    cr_expect_eq(seg.config->gzip_min_bytes, 2048);
    mg_segment_detach(&seg);
    expect_serving(&s);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(reload, a_file_that_fails_its_checks_changes_nothing_and_the_server_keeps_serving,
     .init = make_dir, .fini = remove_dir)
{
    write_env("MESHGATE_ANON_RATE=300\n");
    const char *env[] = {env_setting, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    int pid0 = atomic_load(&seg.slots[0].pid);

    const char *bad[] = {
        "MESHGATE_ANON_RATE=60\nMESHGATE_IDLE_TIMEOUT_MS=5\n",
        "MESHGATE_ANON_RATE=60\nMESHGATE_TRUSTED_PROXIES=\"10.0.0.0/8\n",
        "MESHGATE_ANON_RATE=60\nMESHGATE_PUBLIC_DIR=/nonexistent\n",
    };
    const char *message[] = {
        "MESHGATE_IDLE_TIMEOUT_MS=5: must be a whole number from 100",
        "line 2: the double quote opened here is never closed",
        "MESHGATE_PUBLIC_DIR=/nonexistent: must be an existing directory",
    };
    for (int i = 0; i < 3; i++) {
        write_env(bad[i]);
        char *log = reload_and_wait(&s, i + 1, false);
        cr_expect(strstr(log, message[i]), "%s", log);
        cr_expect(strstr(log, "error: reload: "), "logged as an error: %s", log);
        free(log);
        cr_expect_eq(atomic_load(&seg.header->generation), 0, "a refused reload replaced workers");
        cr_expect_eq(atomic_load(&seg.clients.table->per_minute), 300, "case %d changed a gate", i);
        cr_expect_eq(seg.config->anon_rate, 300);
        cr_expect_eq(atomic_load(&seg.slots[0].pid), pid0);
        expect_serving(&s);
    }
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_RELOADS), 0);
    /* Fixed, the next reload applies it. */
    write_env("MESHGATE_ANON_RATE=60\n");
    free(reload_and_wait(&s, 1, true));
    cr_expect_eq(atomic_load(&seg.clients.table->per_minute), 60);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(reload, the_environment_wins_over_the_file_at_start_and_after_a_reload, .init = make_dir,
     .fini = remove_dir)
{
    write_env("MESHGATE_ANON_BURST=9\nMESHGATE_ANON_RATE=100\n");
    const char *env[] = {env_setting, "MESHGATE_ANON_BURST=7", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    cr_expect_eq(atomic_load(&seg.clients.table->burst), 7, "the environment wins at start");
    cr_expect_eq(atomic_load(&seg.clients.table->per_minute), 100, "the file fills the rest");
    char *log = mg_test_server_log(&s);
    cr_expect(strstr(log, "MESHGATE_ANON_BURST=9 is overridden by the process environment "
                          "(MESHGATE_ANON_BURST=7)"),
              "%s", log);
    free(log);

    write_env("MESHGATE_ANON_BURST=11\nMESHGATE_ANON_RATE=50\n");
    free(reload_and_wait(&s, 1, true));
    cr_expect_eq(atomic_load(&seg.clients.table->burst), 7, "the environment still wins");
    cr_expect_eq(atomic_load(&seg.clients.table->per_minute), 50);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(reload, the_number_of_workers_follows_the_file_up_to_the_slots_made_at_start, .init = make_dir,
     .fini = remove_dir)
{
    write_env("MESHGATE_WORKERS=3\n");
    /* The harness sets MESHGATE_WORKERS=2 unless env names it: the environment holds the
     * file's own value, as systemd's EnvironmentFile= passes it, so the file decides. */
    const char *env[] = {env_setting, "MESHGATE_WORKERS=3", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    cr_expect_eq(mg_scoreboard_alive(&seg), 3);

    write_env("MESHGATE_WORKERS=2\n");
    char *log = reload_and_wait(&s, 1, true);
    cr_expect(strstr(log, "worker 2 (pid"), "%s", log);
    cr_expect(strstr(log, "retired (MESHGATE_WORKERS=2)"), "%s", log);
    free(log);
    int64_t give_up = mg_test_now_ms() + 5000;
    while (mg_scoreboard_alive(&seg) != 2 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(20);
    cr_expect_eq(mg_scoreboard_alive(&seg), 2);
    cr_expect_eq(atomic_load(&seg.slots[2].state), MG_SLOT_EMPTY);
    cr_expect_eq(seg.config->workers, 2);

    write_env("MESHGATE_WORKERS=4\n");
    log = reload_and_wait(&s, 2, true);
    cr_expect_eq(count(log, "MESHGATE_WORKERS=4 needs a restart: more workers than the segment "
                            "has slots for"),
                 1, "%s", log);
    free(log);
    cr_expect_eq(seg.config->workers, 2);

    write_env("MESHGATE_WORKERS=3\n");
    free(reload_and_wait(&s, 3, true));
    give_up = mg_test_now_ms() + 5000;
    while (mg_scoreboard_alive(&seg) != 3 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(20);
    cr_expect_eq(mg_scoreboard_alive(&seg), 3, "a retired slot serves again");
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_WORKER_CRASHES), 0);
    mg_segment_detach(&seg);
    expect_serving(&s);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(reload, without_an_env_file_a_reload_still_replaces_the_workers)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    char *log = reload_and_wait(&s, 1, true);
    cr_expect(strstr(log, "0 setting(s) changed (no MESHGATE_ENV_FILE)"), "%s", log);
    free(log);
    expect_serving(&s);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(reload, a_missing_env_file_stops_the_start_with_78, .init = make_dir, .fini = remove_dir)
{
    char v_db[300];
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s/none.db", dir);
    const char *env[] = {env_setting, v_db, NULL};
    static char out[8192];
    int status = mg_test_run_expect_exit(env, out, sizeof out, 5000);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 78, "status %d: %s", status, out);
    cr_expect(strstr(out, "MESHGATE_ENV_FILE=") && strstr(out, "cannot read it"), "%s", out);
}

/* Clients that send requests back to back on kept-alive connections, during reloads. */
#define KEEPALIVE_CLIENTS 6
#define RELOADS 4

struct busy_client {
    int port;
    atomic_bool *stop;
    unsigned answered, lost, closes;
};

static void *busy_client(void *arg)
{
    struct busy_client *b = arg;
    static const char req[] = "GET /api/healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    int fd = -1;
    while (!atomic_load(b->stop)) {
        if (fd < 0 && (fd = mg_test_connect(b->port)) < 0)
            continue;
        struct mg_test_response r;
        if (!mg_test_send(fd, req, sizeof req - 1) ||
            !mg_test_read_response(fd, &r, false, 10000)) {
            b->lost++; /* sent on an open connection and never answered: reset or closed */
            close(fd);
            fd = -1;
            continue;
        }
        b->answered++;
        char v[32];
        if (mg_test_header(&r, "Connection", v, sizeof v) && strcmp(v, "close") == 0) {
            b->closes++;
            close(fd);
            fd = -1;
        }
        mg_test_response_free(&r);
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

Test(reload, requests_on_kept_alive_connections_are_answered_through_reloads, .timeout = 120)
{
    const char *env[] = {"MESHGATE_WORKERS=2", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    atomic_bool stop = false;
    struct busy_client clients[KEEPALIVE_CLIENTS];
    pthread_t threads[KEEPALIVE_CLIENTS];
    for (int i = 0; i < KEEPALIVE_CLIENTS; i++) {
        clients[i] = (struct busy_client){.port = s.port, .stop = &stop};
        cr_assert_eq(pthread_create(&threads[i], NULL, busy_client, &clients[i]), 0);
    }
    for (int i = 1; i <= RELOADS; i++)
        free(reload_and_wait(&s, i, true));
    atomic_store(&stop, true);
    unsigned answered = 0, lost = 0, closes = 0;
    for (int i = 0; i < KEEPALIVE_CLIENTS; i++) {
        pthread_join(threads[i], NULL);
        answered += clients[i].answered;
        lost += clients[i].lost;
        closes += clients[i].closes;
    }
    cr_expect_eq(lost, 0, "%u of %u requests on kept-alive connections lost over %d reloads", lost,
                 answered + lost, RELOADS);
    cr_expect_gt(closes, 0, "no answer said Connection: close while its worker drained");
    cr_expect_gt(answered, 100u);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}
