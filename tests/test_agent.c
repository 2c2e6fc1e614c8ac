/* SPDX-License-Identifier: ISC */
/*
 * HAProxy's agent-check port (server/agent.h) and a replica copy's lag (docs/scale-out.md):
 * the weight's table, the order of the answers, and the real binary's port while its gates
 * are filled (the test hooks of dispatch.c hold anonymous heavy requests, as in
 * test_anon.c), its maintenance file, a database that does not answer, a reload and a drain;
 * a replica copy that is old, touched, and replaced.
 */
#include "harness.h"

#include "agent.h"
#include "gate_fifo.h"
#include "segment.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(agent, .timeout = 120);

#define WAIT_CEILING_MS 30000

/* ---- the weight and the answer, as functions ---- */

struct weight_row {
    unsigned configured, alive, busy;
    struct mg_agent_gate cold, anon;
    unsigned want;
};

Test(agent, weight_follows_free_workers_and_the_fullest_gate)
{
    static const struct weight_row rows[] = {
        /* idle: everything free */
        {4, 4, 0, {1, 0, 4, 0}, {2, 0, 4, 0}, 100},
        /* every worker busy: half (a busy worker still serves its other connections) */
        {4, 4, 4, {1, 0, 4, 0}, {2, 0, 4, 0}, 50},
        /* half the workers dead, the rest idle */
        {4, 2, 0, {1, 0, 4, 0}, {2, 0, 4, 0}, 50},
        /* no worker alive: the floor, never 0 */
        {4, 0, 0, {1, 0, 4, 0}, {2, 0, 4, 0}, 1},
        /* the anonymous line half full: (2 + 1) of (2 + 4) places used */
        {4, 4, 0, {1, 0, 4, 0}, {2, 2, 4, 1}, 50},
        /* the anonymous line full: the floor */
        {4, 4, 0, {1, 0, 4, 0}, {2, 2, 4, 4}, 1},
        /* the cold gate full, the line empty: the fuller one decides */
        {4, 4, 0, {1, 1, 3, 3}, {2, 0, 4, 0}, 1},
        /* both partly used and one worker busy: 100 x (4 + 3) / 8 x min(3/4, 1/2) = 43.75 */
        {4, 4, 1, {1, 1, 3, 0}, {2, 2, 4, 1}, 44},
        /* a gate without a cap (cap 0) has room whatever it counts */
        {2, 2, 0, {0, 9, 0, 9}, {0, 5, 0, 0}, 100},
        /* counts past the bounds (a reload lowered them): no room, not negative */
        {2, 2, 0, {1, 0, 1, 0}, {1, 5, 1, 5}, 1},
        /* more busy than alive (the slots are read one at a time): all alive are busy */
        {2, 2, 5, {1, 0, 1, 0}, {1, 0, 1, 0}, 50},
        /* more alive than configured (a reload lowered MESHGATE_WORKERS): at most 100 */
        {2, 4, 0, {1, 0, 1, 0}, {1, 0, 1, 0}, 100},
        /* one of three free: 100 x (3 + 1) / 6 = 66.7 */
        {3, 3, 2, {1, 0, 1, 0}, {1, 0, 1, 0}, 67},
        /* nothing configured (cannot happen): the floor rather than a division by 0 */
        {0, 0, 0, {1, 0, 1, 0}, {1, 0, 1, 0}, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct weight_row *r = &rows[i];
        struct mg_agent_load load = {r->configured, r->alive, r->busy, r->cold, r->anon};
        cr_expect_eq(mg_agent_weight(&load), r->want, "row %zu: %u, want %u", i,
                     mg_agent_weight(&load), r->want);
    }
}

Test(agent, maint_wins_over_down_over_drain_over_ready)
{
    struct mg_agent_load idle = {2, 2, 0, {1, 0, 1, 0}, {1, 0, 1, 0}};
    struct mg_agent_load half = {2, 2, 2, {1, 0, 1, 0}, {1, 0, 1, 0}};
    static const struct {
        bool maint, down, draining, reloading;
        int64_t lag_ms;
        int32_t max_lag_ms;
        bool half;
        const char *want;
    } rows[] = {
        {false, false, false, false, 0, 0, false, "ready up 100%\n"},
        {false, false, false, false, 0, 0, true, "ready up 50%\n"},
        {true, true, true, true, 9000, 1000, false, "maint\n"},
        {false, true, true, true, 9000, 1000, false, "down\n"},
        {false, false, true, false, 0, 0, false, "drain\n"},
        {false, false, false, true, 0, 0, false, "drain\n"},
        /* a replica past its bound drains; at the bound it does not */
        {false, false, false, false, 1001, 1000, false, "drain\n"},
        {false, false, false, false, 1000, 1000, false, "ready up 100%\n"},
        /* not a replica (bound 0): the lag means nothing */
        {false, false, false, false, 999999, 0, false, "ready up 100%\n"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct mg_agent_status s = {
            .maint = rows[i].maint,
            .db_down = rows[i].down,
            .draining = rows[i].draining,
            .reloading = rows[i].reloading,
            .replica_lag_ms = rows[i].lag_ms,
            .replica_max_lag_ms = rows[i].max_lag_ms,
            .load = rows[i].half ? half : idle,
        };
        char line[64];
        size_t n = mg_agent_answer(&s, line, sizeof line);
        cr_expect_str_eq(line, rows[i].want, "row %zu", i);
        cr_expect_eq(n, strlen(rows[i].want), "row %zu", i);
    }
}

/* ---- the real binary ---- */

/* One line from the agent port; "" when it cannot connect or nothing came. */
static void agent_read(int port, char *out, size_t cap)
{
    out[0] = '\0';
    int fd = mg_test_connect(port);
    if (fd < 0)
        return;
    size_t used = 0;
    ssize_t n;
    while (used + 1 < cap && (n = recv(fd, out + used, cap - 1 - used, 0)) > 0)
        used += (size_t)n;
    out[used] = '\0';
    close(fd);
}

struct agent_wait {
    int port;
    const char *want; /* a prefix */
    char last[64];
};

static bool agent_says(void *arg)
{
    struct agent_wait *w = arg;
    agent_read(w->port, w->last, sizeof w->last);
    return strncmp(w->last, w->want, strlen(w->want)) == 0;
}

static void expect_agent(int port, const char *want)
{
    struct agent_wait w = {port, want, ""};
    cr_expect(mg_test_wait_until(agent_says, &w, WAIT_CEILING_MS, 20), "agent said \"%s\", not %s",
              w.last, want);
}

static char dir[128];
static void make_dir(void)
{
    mg_test_tmpdir(dir, sizeof dir);
}
static void remove_dir(void)
{
    mg_test_rmdir(dir);
}

struct call {
    int port;
    const char *path;
    const char *headers;
    int status;
    pthread_t thread;
};

static void *run_call(void *p)
{
    struct call *c = p;
    struct mg_test_response r;
    c->status = -1;
    if (mg_test_get(c->port, c->path, c->headers, &r)) {
        c->status = r.status;
        mg_test_response_free(&r);
    }
    return NULL;
}

static void call_start(struct call *c, int port, const char *path, const char *headers)
{
    c->port = port;
    c->path = path;
    c->headers = headers;
    cr_assert_eq(pthread_create(&c->thread, NULL, run_call, c), 0);
}

static bool wait_for(const volatile uint32_t *value, uint32_t want)
{
    int64_t give_up = mg_test_now_ms() + WAIT_CEILING_MS;
    while (*value != want && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(2);
    return *value == want;
}

static int agent_weight(int port)
{
    char line[64];
    agent_read(port, line, sizeof line);
    unsigned w;
    return sscanf(line, "ready up %u%%", &w) == 1 ? (int)w : -1;
}

Test(agent, the_port_answers_from_the_gates_while_they_are_filled, .init = make_dir,
     .fini = remove_dir)
{
    int agent_port = mg_test_free_port();
    char listen[64];
    snprintf(listen, sizeof listen, "MESHGATE_AGENT_LISTEN=127.0.0.1:%d", agent_port);
    const char *env[] = {"MESHGATE_WORKERS=4",
                         "MESHGATE_ANON_CONCURRENCY=1",
                         "MESHGATE_ANON_QUEUE=2",
                         "MESHGATE_ANON_WAIT_MS=20000",
                         "MESHGATE_ANON_RATE=0",
                         "MESHGATE_TEST_HOOKS=park",
                         listen,
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    expect_agent(agent_port, "ready up 100%");

    /* One permit held of one, no one waiting: the line is a third used, (1 + 0) of (1 + 2),
     * so the weight is between 100 x 1/2 x 2/3 and 100 x 2/3 whatever the workers do. */
    struct call holder, waiter[2];
    call_start(&holder, s.port, "/api/packets?expand=observations", "X-Test-Hold-Ms: 6000\r\n");
    cr_assert(wait_for(&seg.anon->in_flight, 1));
    int w = agent_weight(agent_port);
    cr_expect(w >= 33 && w <= 67, "one permit of one held: weight %d", w);

    /* The line full too: the floor, whatever the workers do. */
    for (int i = 0; i < 2; i++)
        call_start(&waiter[i], s.port, "/api/packets?expand=observations", NULL);
    cr_assert(wait_for(&seg.anon->waiting, 2));
    char line[64];
    agent_read(agent_port, line, sizeof line);
    cr_expect_str_eq(line, "ready up 1%\n");
    /* The port is the master's: it answers at once however full the workers are. */
    int64_t t0 = mg_test_now_ms();
    for (int i = 0; i < 20; i++)
        agent_read(agent_port, line, sizeof line);
    cr_expect_lt(mg_test_now_ms() - t0, 5000, "20 answers took %lld ms",
                 (long long)(mg_test_now_ms() - t0));
    cr_expect_str_eq(line, "ready up 1%\n");

    pthread_join(holder.thread, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(waiter[i].thread, NULL);
    cr_expect_eq(holder.status, 200);
    expect_agent(agent_port, "ready up 100%");
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

Test(agent, maint_file_database_gone_reload_and_drain, .init = make_dir, .fini = remove_dir)
{
    char db[256], moved[256], maint[256], maint_env[300], listen[64];
    snprintf(db, sizeof db, "%s/db.sqlite", dir);
    snprintf(moved, sizeof moved, "%s/moved.sqlite", dir);
    snprintf(maint, sizeof maint, "%s/maint", dir);
    snprintf(maint_env, sizeof maint_env, "MESHGATE_AGENT_MAINT_FILE=%s", maint);
    cr_assert_eq(mg_test_make_db(db, true, NULL), 0);
    int agent_port = mg_test_free_port();
    snprintf(listen, sizeof listen, "MESHGATE_AGENT_LISTEN=127.0.0.1:%d", agent_port);
    const char *env[] = {"MESHGATE_WORKERS=2",
                         "MESHGATE_ANON_RATE=0",
                         "MESHGATE_TEST_HOOKS=park",
                         listen,
                         maint_env,
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    expect_agent(agent_port, "ready up 100%");

    FILE *f = fopen(maint, "w");
    cr_assert(f);
    fclose(f);
    expect_agent(agent_port, "maint");
    unlink(maint);
    expect_agent(agent_port, "ready up ");

    cr_assert_eq(rename(db, moved), 0);
    expect_agent(agent_port, "down");
    cr_assert_eq(rename(moved, db), 0);
    expect_agent(agent_port, "ready up ");

    /* A reload waits for a held request to finish in its old worker: drain meanwhile. */
    struct call held;
    call_start(&held, s.port, "/api/packets?expand=observations", "X-Test-Hold-Ms: 3000\r\n");
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    cr_assert(wait_for(&seg.anon->in_flight, 1));
    cr_assert_eq(kill(s.pid, SIGHUP), 0);
    expect_agent(agent_port, "drain");
    pthread_join(held.thread, NULL);
    cr_expect_eq(held.status, 200);
    expect_agent(agent_port, "ready up ");

    /* SIGTERM: drain until the master is gone. */
    call_start(&held, s.port, "/api/packets?expand=observations", "X-Test-Hold-Ms: 3000\r\n");
    cr_assert(wait_for(&seg.anon->in_flight, 1));
    cr_assert_eq(kill(s.pid, SIGTERM), 0);
    expect_agent(agent_port, "drain");
    pthread_join(held.thread, NULL);
    cr_expect_eq(held.status, 200, "the request in flight is finished by the drain");
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    char line[64];
    agent_read(agent_port, line, sizeof line);
    cr_expect_str_eq(line, "", "the port closed with the master");
}

Test(agent, a_port_that_cannot_be_bound_exits_71_naming_the_variable, .init = make_dir,
     .fini = remove_dir)
{
    /* A port something listens on: this test's own socket. */
    int taken = mg_test_free_port();
    char listen_taken[64], listen_main[64], db[256], db_env[300];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)taken)};
    a.sin_addr.s_addr = htonl(0x7f000001);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(fd, 1), 0);
    snprintf(listen_taken, sizeof listen_taken, "MESHGATE_AGENT_LISTEN=127.0.0.1:%d", taken);
    snprintf(listen_main, sizeof listen_main, "MESHGATE_LISTEN=127.0.0.1:%d", mg_test_free_port());
    snprintf(db, sizeof db, "%s/db.sqlite", dir);
    snprintf(db_env, sizeof db_env, "MESHGATE_DB=%s", db);
    cr_assert_eq(mg_test_make_db(db, true, NULL), 0);
    const char *env[] = {listen_taken, listen_main, db_env, NULL};
    char out[4096];
    int status = mg_test_run_expect_exit(env, out, sizeof out, 20000);
    close(fd);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 71, "status %d: %s", status, out);
    cr_expect(strstr(out, "MESHGATE_AGENT_LISTEN=127.0.0.1:") && strstr(out, "cannot listen"), "%s",
              out);
    const char *bad[] = {"MESHGATE_AGENT_LISTEN=8081", listen_main, db_env, NULL};
    status = mg_test_run_expect_exit(bad, out, sizeof out, 20000);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 78, "status %d: %s", status, out);
    cr_expect(strstr(out, "MESHGATE_AGENT_LISTEN=8081: must be empty, HOST:PORT"), "%s", out);
}

/* ---- a replica copy ---- */

static void set_mtime(const char *path, int64_t seconds_ago)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct timespec t[2] = {now, now};
    t[1].tv_sec -= seconds_ago;
    cr_assert_eq(utimensat(AT_FDCWD, path, t, 0), 0);
}

static const char *node_sql(int count, char *out, size_t cap)
{
    size_t used = 0;
    for (int i = 0; i < count; i++)
        used += (size_t)snprintf(out + used, cap - used,
                                 "INSERT INTO nodes (public_key, name, role) VALUES "
                                 "('%064x', 'N%d', 'repeater');",
                                 i + 1, i);
    return out;
}

/* Rows in the file, by SQL, not by meshgate. */
static int nodes_in(const char *path)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT count(*) FROM nodes", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

struct nodes_wait {
    int port;
    int want;
};

static bool serves_nodes(void *arg)
{
    struct nodes_wait *w = arg;
    struct mg_test_response r;
    if (!mg_test_get(w->port, "/api/nodes?limit=1", NULL, &r))
        return false;
    char want[32];
    snprintf(want, sizeof want, "\"total\":%d", w->want);
    bool ok = r.status == 200 && r.body && strstr(r.body, want);
    mg_test_response_free(&r);
    return ok;
}

static long long healthz_lag_ms(int port)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(port, "/api/healthz", NULL, &r));
    const char *p = r.body ? strstr(r.body, "\"replica\":{\"lagMs\":") : NULL;
    long long lag = p ? atoll(p + strlen("\"replica\":{\"lagMs\":")) : -1;
    cr_expect(r.body && strstr(r.body, ",\"maxLagMs\":60000}"), "%s", r.body);
    mg_test_response_free(&r);
    return lag;
}

Test(agent, a_replica_copy_reports_its_lag_and_is_reloaded_when_replaced, .init = make_dir,
     .fini = remove_dir)
{
    char copy[256], next[256], sql[4096], listen[64];
    snprintf(copy, sizeof copy, "%s/copy.sqlite", dir);
    snprintf(next, sizeof next, "%s/next.sqlite", dir);
    cr_assert_eq(mg_test_make_db(copy, true, node_sql(3, sql, sizeof sql)), 0);
    cr_assert_eq(mg_test_make_db(next, true, node_sql(5, sql, sizeof sql)), 0);
    int old_nodes = nodes_in(copy), new_nodes = nodes_in(next);
    cr_assert_neq(old_nodes, new_nodes);
    /* The follower stamped the copy an hour ago: it is an hour behind. */
    set_mtime(copy, 3600);
    int agent_port = mg_test_free_port();
    snprintf(listen, sizeof listen, "MESHGATE_AGENT_LISTEN=127.0.0.1:%d", agent_port);
    const char *env[] = {"MESHGATE_WORKERS=2",
                         "MESHGATE_REPLICA_MAX_LAG_MS=60000",
                         "MESHGATE_ANON_RATE=0",
                         "MESHGATE_TEST_HOOKS=park",
                         listen,
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, copy, env));
    struct nodes_wait nw = {s.port, old_nodes};
    /* Right after the start the group is taking its tables: under ASan with four busy loops
     * the first list was not answered within one GET's timeout. */
    cr_expect(mg_test_wait_until(serves_nodes, &nw, 120000, 20), "the copy was not served");
    long long lag = healthz_lag_ms(s.port);
    cr_expect(lag >= 3600 * 1000 && lag < 3700 * 1000, "lag %lld ms", lag);
    expect_agent(agent_port, "drain");
    struct mg_test_response m;
    cr_assert(mg_test_get(s.port, "/metrics", NULL, &m));
    const char *g = strstr(m.body, "\nmeshgate_replica_lag_seconds ");
    cr_expect(g && atof(g + strlen("\nmeshgate_replica_lag_seconds ")) >= 3600.0, "%s",
              g ? g : m.body);
    g = strstr(m.body, "\nmeshgate_replica_max_lag_seconds ");
    cr_expect(g && atof(g + strlen("\nmeshgate_replica_max_lag_seconds ")) == 60.0, "%s", m.body);
    mg_test_response_free(&m);

    /* The follower found nothing new and stamped the same file: current again. The bound
     * is a minute, so that a loaded machine's agent sees the stamp before it is old. */
    set_mtime(copy, 0);
    expect_agent(agent_port, "ready up ");
    cr_expect_lt(healthz_lag_ms(s.port), 60000);

    /* A new copy moved over the path: reloaded without a signal, and served. A request held
     * in an old worker keeps the reload going; it is routine, so no drain meanwhile. */
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    struct call held;
    call_start(&held, s.port, "/api/packets?expand=observations", "X-Test-Hold-Ms: 4000\r\n");
    cr_assert(wait_for(&seg.anon->in_flight, 1));
    cr_assert_eq(rename(next, copy), 0);
    int64_t give_up = mg_test_now_ms() + WAIT_CEILING_MS;
    while (atomic_load(&seg.header->server_state) != MG_SERVER_RELOADING &&
           mg_test_now_ms() < give_up)
        mg_test_sleep_ms(2);
    cr_assert_eq(atomic_load(&seg.header->server_state), MG_SERVER_RELOADING, "no reload");
    char line[64];
    agent_read(agent_port, line, sizeof line);
    cr_expect(strncmp(line, "ready up ", 9) == 0, "during the copy's reload: %s", line);
    pthread_join(held.thread, NULL);
    cr_expect_eq(held.status, 200);
    nw.want = new_nodes;
    cr_expect(mg_test_wait_until(serves_nodes, &nw, 120000, 20), "the new copy was not served");
    /* The reload replaces the workers one at a time: it is over when the group runs again
     * (a worker not yet replaced still answers from the old copy until then). */
    give_up = mg_test_now_ms() + WAIT_CEILING_MS;
    while ((atomic_load(&seg.header->generation) < 1 ||
            atomic_load(&seg.header->server_state) != MG_SERVER_RUNNING) &&
           mg_test_now_ms() < give_up)
        mg_test_sleep_ms(10);
    cr_expect_eq(atomic_load(&seg.header->server_state), MG_SERVER_RUNNING,
                 "the reload never ended");
    mg_segment_detach(&seg);
    expect_agent(agent_port, "ready up ");
    char *log = mg_test_server_log(&s);
    cr_expect(log && strstr(log, "was replaced: reloading to serve it"), "%s", log ? log : "");
    free(log);
    /* Every worker serves it: both answer the new count. */
    for (int i = 0; i < 6; i++)
        cr_expect(serves_nodes(&nw), "request %d after the reload", i);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

Test(agent, not_a_replica_healthz_and_metrics_say_nothing_of_lag, .init = make_dir,
     .fini = remove_dir)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r));
    cr_expect_null(strstr(r.body, "replica"), "%s", r.body);
    mg_test_response_free(&r);
    cr_assert(mg_test_get(s.port, "/metrics", NULL, &r));
    cr_expect_null(strstr(r.body, "meshgate_replica"), "%s", r.body);
    mg_test_response_free(&r);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}
