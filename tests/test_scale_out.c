/* SPDX-License-Identifier: ISC */
/*
 * Past one machine, on one machine, with the real engines (docs/scale-out.md): a writer on a
 * primary database, Litestream replicating it to a directory, two meshgate groups (each with
 * its own segment, port, agent port, replica copy and follower), and HAProxy in front with
 * the example configuration etc/haproxy/meshgate.cfg, which takes its addresses from the
 * environment. Then:
 *
 *   1. rows written on the primary appear through HAProxy within the lag bound;
 *   2. with group A's anonymous line held full, HAProxy's answers come from B and no client
 *      sees a 503;
 *   3. SIGTERM to A during a load loses no request;
 *   4. kill -9 of B's master during a load loses at most the requests in flight on it, and
 *      HAProxy marks B down within its check interval.
 *
 * Skipped, with a message, where haproxy or Litestream is missing (make check-deps installs
 * both). Every process it starts is stopped by its pid (a follower by its process group) and
 * dies with the test (PR_SET_PDEATHSIG). Every wait has a generous ceiling; the numbers
 * measured are logged for docs/scale-out.md.
 */
#include "harness.h"

#include "gate_fifo.h"
#include "segment.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(scale_out, .timeout = 900);

#define LITESTREAM_NPM                                                                             \
    MESHGATE_SOURCE_DIR "/build/npm-litestream/node_modules/@flydotio/litestream-linux-x64/"       \
                        "litestream"
/* The replicas' lag bound (MESHGATE_REPLICA_MAX_LAG_MS): generous, since a group past it
 * answers 503 to HAProxy's checks, and on a loaded machine Litestream's copy can take 10 s
 * and more; the lag measured is logged (docs/scale-out.md has the quiet numbers). */
#define MAX_LAG_MS 30000
#define STR_(x) #x
#define STR(x) STR_(x)
/* HAProxy's check interval and fall count in etc/haproxy/meshgate.cfg. */
#define CHECK_INTER_MS 1000
#define CHECK_FALL 2
#define CEILING_MS 60000

static char dir[128];
static char litestream[512];

/* ---- processes ---- */

#define PROCS_MAX 8
static pid_t procs[PROCS_MAX];
static bool procs_group[PROCS_MAX];

/* Starts argv with exactly env (and PATH), output to log; in a process group of its own when
 * group is true (a shell and its children stop together). */
static pid_t start_process(const char *const *argv, const char *const *env, const char *log,
                           bool group)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (group)
            setsid();
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close_range(3, ~0U, 0);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        clearenv();
        setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin", 1);
        for (; env && *env; env++)
            putenv((char *)*env);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < PROCS_MAX; i++)
        if (procs[i] == 0) {
            procs[i] = pid;
            procs_group[i] = group;
            break;
        }
    return pid;
}

static void stop_process(pid_t pid)
{
    for (int i = 0; i < PROCS_MAX; i++) {
        if (procs[i] != pid || pid == 0)
            continue;
        kill(procs_group[i] ? -pid : pid, SIGTERM);
        int64_t give_up = mg_test_now_ms() + 10000;
        int status;
        while (waitpid(pid, &status, WNOHANG) != pid) {
            if (mg_test_now_ms() > give_up) {
                kill(procs_group[i] ? -pid : pid, SIGKILL);
                waitpid(pid, &status, 0);
                break;
            }
            mg_test_sleep_ms(10);
        }
        if (procs_group[i])
            kill(-pid, SIGKILL); /* what the shell left, if anything */
        procs[i] = 0;
    }
}

static bool tool_found(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    char buf[1024];
    snprintf(buf, sizeof buf, "%s:/usr/sbin:/sbin", path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, cap, "%s/%s", d, name);
        if (access(out, X_OK) == 0)
            return true;
    }
    return false;
}

/* ---- the writer on the primary, shaped like the ingestor: one commit every 100 ms ---- */

static char primary[256];
static atomic_int committed; /* nodes in the primary */
static atomic_bool writer_paused, writer_stop;
static pthread_t writer_thread;

static void *writer(void *arg)
{
    (void)arg;
    sqlite3 *db;
    if (mg_test_sqlite_open_v2(primary, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_busy_timeout(db, 10000);
    while (!atomic_load(&writer_stop)) {
        if (!atomic_load(&writer_paused)) {
            int n = atomic_load(&committed) + 1;
            char sql[256];
            snprintf(sql, sizeof sql,
                     "INSERT INTO nodes (public_key, name, role) VALUES ('%064x', 'W%d', "
                     "'companion')",
                     n, n);
            if (sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK)
                atomic_store(&committed, n);
        }
        mg_test_sleep_ms(100);
    }
    sqlite3_close(db);
    return NULL;
}

/* ---- HAProxy's runtime API: a server's status and weight ---- */

static char haproxy_socket[160];

/* "UP", "DOWN", "DRAIN", "MAINT"... and the weight, of meshgate/<server>; false when the
 * socket does not answer. */
static bool server_state(const char *server, char *status, size_t cap, int *weight)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t path_len = strlen(haproxy_socket);
    if (path_len < sizeof a.sun_path)
        memcpy(a.sun_path, haproxy_socket, path_len + 1);
    if (fd < 0 || path_len >= sizeof a.sun_path ||
        connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    const char cmd[] = "show stat\n";
    (void)!write(fd, cmd, sizeof cmd - 1);
    static char buf[65536];
    size_t used = 0;
    ssize_t n;
    while (used + 1 < sizeof buf && (n = read(fd, buf + used, sizeof buf - 1 - used)) > 0)
        used += (size_t)n;
    buf[used] = '\0';
    close(fd);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "\nmeshgate,%s,", server);
    char *line = strstr(buf, prefix);
    if (!line)
        return false;
    line++;
    /* pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,
     * wredis,status,weight,... */
    char *field = line;
    for (int i = 0; i < 17 && field; i++) {
        field = strchr(field, ',');
        if (field)
            field++;
    }
    if (!field)
        return false;
    size_t len = strcspn(field, ",");
    snprintf(status, cap, "%.*s", (int)len, field);
    *weight = atoi(field + len + 1);
    return true;
}

struct state_wait {
    const char *server;
    const char *status; /* a prefix */
    int weight_at_most; /* -1: any */
    char last[32];
};

static bool server_is(void *arg)
{
    struct state_wait *w = arg;
    int weight = -1;
    if (!server_state(w->server, w->last, sizeof w->last, &weight))
        return false;
    return strncmp(w->last, w->status, strlen(w->status)) == 0 &&
           (w->weight_at_most < 0 || weight <= w->weight_at_most);
}

static bool wait_server(const char *server, const char *status, int weight_at_most, int ms)
{
    struct state_wait w = {server, status, weight_at_most, ""};
    bool ok = mg_test_wait_until(server_is, &w, ms, 10);
    if (!ok)
        cr_log_error("HAProxy says %s is \"%s\", not %s", server, w.last, status);
    return ok;
}

/* ---- requests through HAProxy ---- */

static int front_port;

struct answer {
    int status; /* -1: no answer */
    char server[8];
    int total; /* /api/nodes: "total" */
};

static void get_front(const char *target, const char *headers, struct answer *a)
{
    struct mg_test_response r;
    a->status = -1;
    a->server[0] = '\0';
    a->total = -1;
    if (!mg_test_get(front_port, target, headers, &r))
        return;
    a->status = r.status;
    mg_test_header(&r, "X-Meshgate-Server", a->server, sizeof a->server);
    const char *t = r.body ? strstr(r.body, "\"total\":") : NULL;
    if (t)
        a->total = atoi(t + 8);
    mg_test_response_free(&r);
}

/* A load of clients through HAProxy: each on a new connection, a mix of endpoints. */
struct load {
    atomic_bool stop;
    atomic_int ok, failed, refused;
    int threads;
    pthread_t thread[8];
    char failures[1024];
    pthread_mutex_t lock;
};

static void *load_client(void *arg)
{
    struct load *l = arg;
    static const char *const targets[] = {"/api/nodes?limit=5", "/api/packets?limit=5",
                                          "/api/healthz", "/api/stats", "/api/nodes?limit=50"};
    for (unsigned i = 0; !atomic_load(&l->stop); i++) {
        struct answer ans;
        get_front(targets[i % 5], NULL, &ans);
        if (ans.status == 200) {
            atomic_fetch_add(&l->ok, 1);
            continue;
        }
        atomic_fetch_add(ans.status == 503 ? &l->refused : &l->failed, 1);
        pthread_mutex_lock(&l->lock);
        size_t used = strlen(l->failures);
        if (used + 64 < sizeof l->failures)
            snprintf(l->failures + used, sizeof l->failures - used, "%s: %d (%s); ", targets[i % 5],
                     ans.status, ans.server);
        pthread_mutex_unlock(&l->lock);
    }
    return NULL;
}

static void load_start(struct load *l, int threads)
{
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->lock, NULL);
    l->threads = threads;
    for (int i = 0; i < threads; i++)
        cr_assert_eq(pthread_create(&l->thread[i], NULL, load_client, l), 0);
}

static void load_stop(struct load *l)
{
    atomic_store(&l->stop, true);
    for (int i = 0; i < l->threads; i++)
        pthread_join(l->thread[i], NULL);
}

/* Lets the load run for ms (the load is what is measured; nothing waits on it). */
static void load_for(int ms)
{
    int64_t until = mg_test_now_ms() + ms;
    while (mg_test_now_ms() < until)
        mg_test_sleep_ms(20);
}

/* ---- one held request on a group, directly ---- */

struct held {
    int port;
    const char *headers;
    int status;
    pthread_t thread;
};

static void *held_call(void *arg)
{
    struct held *h = arg;
    struct mg_test_response r;
    h->status = -1;
    if (mg_test_get(h->port, "/api/packets?expand=observations&limit=1", h->headers, &r)) {
        h->status = r.status;
        mg_test_response_free(&r);
    }
    return NULL;
}

static bool wait_for(const volatile uint32_t *value, uint32_t want)
{
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (*value != want && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(2);
    return *value == want;
}

static long long healthz_lag_ms(int port)
{
    struct mg_test_response r;
    if (!mg_test_get(port, "/api/healthz", NULL, &r))
        return -1;
    const char *p = r.body ? strstr(r.body, "\"lagMs\":") : NULL;
    long long lag = p ? atoll(p + 8) : -1;
    mg_test_response_free(&r);
    return lag;
}

/* A group: a follower keeping its copy, and a meshgate over it. */
struct group {
    const char *name;
    char copy[256];
    int port, agent_port;
    pid_t follower;
    struct mg_test_server server;
    bool running;
};

static struct group a, b;

static void prepare(void)
{
    mg_test_tmpdir(dir, sizeof dir);
}

static void clean_up(void)
{
    atomic_store(&writer_stop, true);
    if (writer_thread)
        pthread_join(writer_thread, NULL);
    writer_thread = 0;
    struct group *groups[] = {&a, &b};
    for (int i = 0; i < 2; i++)
        if (groups[i]->running) {
            mg_test_server_stop(&groups[i]->server, 10000);
            groups[i]->running = false;
        }
    for (int i = 0; i < PROCS_MAX; i++)
        if (procs[i])
            stop_process(procs[i]);
    mg_test_rmdir(dir);
}

static bool file_exists(void *arg)
{
    return access((const char *)arg, R_OK) == 0;
}

static void start_follower(struct group *g, const char *replica_url)
{
    snprintf(g->copy, sizeof g->copy, "%s/%s.db", dir, g->name);
    char log[300], env_ls[600];
    snprintf(log, sizeof log, "%s/follow-%s.log", dir, g->name);
    snprintf(env_ls, sizeof env_ls, "LITESTREAM=%s", litestream);
    const char *argv[] = {"sh",        MESHGATE_SOURCE_DIR "/tools/meshgate-replica-follow.sh",
                          replica_url, g->copy,
                          "0.5",       NULL};
    const char *env[] = {env_ls, NULL};
    g->follower = start_process(argv, env, log, true);
}

static void start_group(struct group *g)
{
    char port[32], agent[64];
    snprintf(port, sizeof port, "MG_TEST_PORT=%d", g->port);
    snprintf(agent, sizeof agent, "MESHGATE_AGENT_LISTEN=127.0.0.1:%d", g->agent_port);
    const char *env[] = {
        "MESHGATE_WORKERS=2", "MESHGATE_ANON_CONCURRENCY=1", "MESHGATE_ANON_QUEUE=4",
        "MESHGATE_ANON_WAIT_MS=20000", "MESHGATE_ANON_RATE=0", "MESHGATE_TEST_HOOKS=park",
        "MESHGATE_REPLICA_MAX_LAG_MS=" STR(MAX_LAG_MS),
        /* a copy replaced while A's line is held reloads A: its old workers
         * finish the held requests rather than being killed at 10 s */
        "MESHGATE_DRAIN_TIMEOUT_MS=60000", "MESHGATE_TRUSTED_PROXIES=127.0.0.1", port, agent, NULL};
    cr_assert(mg_test_server_start(&g->server, g->copy, env), "group %s did not start", g->name);
    g->running = true;
}

struct visible {
    int want;
    bool seen_a, seen_b;
};

/* Both groups answered, through HAProxy, with at least want nodes. */
static bool rows_visible(void *arg)
{
    struct visible *v = arg;
    struct answer ans;
    get_front("/api/nodes?limit=1", NULL, &ans);
    if (ans.status == 200 && ans.total >= v->want) {
        v->seen_a |= strcmp(ans.server, "a") == 0;
        v->seen_b |= strcmp(ans.server, "b") == 0;
    }
    return v->seen_a && v->seen_b;
}

Test(scale_out, two_groups_behind_haproxy_over_litestream_replicas, .init = prepare,
     .fini = clean_up)
{
    char haproxy[512];
    if (!tool_found("haproxy", haproxy, sizeof haproxy))
        cr_skip_test("haproxy is not installed (make check-deps installs Debian's haproxy)");
    if (access(LITESTREAM_NPM, X_OK) == 0)
        snprintf(litestream, sizeof litestream, "%s", LITESTREAM_NPM);
    else if (!tool_found("litestream", litestream, sizeof litestream))
        cr_skip_test("Litestream is not installed (make check-deps installs it from npm into "
                     "build/npm-litestream)");

    /* The primary, in WAL mode as CoreScope's ingestor keeps it, and its writer. */
    snprintf(primary, sizeof primary, "%s/primary.db", dir);
    cr_assert_eq(mg_test_make_db(primary, true, NULL), 0);
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(primary, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    atomic_store(&committed, 0);
    atomic_store(&writer_stop, false);
    atomic_store(&writer_paused, false);
    cr_assert_eq(pthread_create(&writer_thread, NULL, writer, NULL), 0);

    /* Litestream on the primary, with the example configuration. */
    char env_db[300], env_url[400], replica_url[300], log[300];
    snprintf(replica_url, sizeof replica_url, "file://%s/replica", dir);
    snprintf(env_db, sizeof env_db, "MESHGATE_PRIMARY_DB=%s", primary);
    snprintf(env_url, sizeof env_url, "MESHGATE_REPLICA_URL=%s", replica_url);
    snprintf(log, sizeof log, "%s/litestream.log", dir);
    const char *ls_argv[] = {litestream, "replicate", "-config",
                             MESHGATE_SOURCE_DIR "/etc/litestream/litestream.yml", NULL};
    const char *ls_env[] = {env_db, env_url, NULL};
    start_process(ls_argv, ls_env, log, false);

    /* Two groups, each with its follower and copy. */
    a = (struct group){.name = "a"};
    b = (struct group){.name = "b"};
    struct group *groups[] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        start_follower(groups[i], replica_url);
        cr_assert(mg_test_wait_until(file_exists, groups[i]->copy, CEILING_MS, 20),
                  "no replica copy %s", groups[i]->copy);
        groups[i]->port = mg_test_free_port();
        groups[i]->agent_port = mg_test_free_port();
        start_group(groups[i]);
    }

    /* HAProxy with the example configuration, its addresses from the environment. */
    front_port = mg_test_free_port();
    char e_front[64], e_a_addr[64], e_a_port[64], e_a_agent[64], e_b_addr[64], e_b_port[64],
        e_b_agent[64], e_socket[300];
    snprintf(haproxy_socket, sizeof haproxy_socket, "%s/haproxy.sock", dir);
    snprintf(e_front, sizeof e_front, "MESHGATE_FRONT=127.0.0.1:%d", front_port);
    snprintf(e_a_addr, sizeof e_a_addr, "MESHGATE_A_ADDR=127.0.0.1");
    snprintf(e_a_port, sizeof e_a_port, "MESHGATE_A_PORT=%d", a.port);
    snprintf(e_a_agent, sizeof e_a_agent, "MESHGATE_A_AGENT_PORT=%d", a.agent_port);
    snprintf(e_b_addr, sizeof e_b_addr, "MESHGATE_B_ADDR=127.0.0.1");
    snprintf(e_b_port, sizeof e_b_port, "MESHGATE_B_PORT=%d", b.port);
    snprintf(e_b_agent, sizeof e_b_agent, "MESHGATE_B_AGENT_PORT=%d", b.agent_port);
    snprintf(e_socket, sizeof e_socket, "MESHGATE_HAPROXY_SOCKET=%s", haproxy_socket);
    snprintf(log, sizeof log, "%s/haproxy.log", dir);
    const char *hp_argv[] = {haproxy, "-db", "-f", MESHGATE_SOURCE_DIR "/etc/haproxy/meshgate.cfg",
                             NULL};
    const char *hp_env[] = {e_front,  e_a_addr,  e_a_port, e_a_agent, e_b_addr,
                            e_b_port, e_b_agent, e_socket, NULL};
    start_process(hp_argv, hp_env, log, false);
    cr_assert(wait_server("a", "UP", -1, CEILING_MS));
    cr_assert(wait_server("b", "UP", -1, CEILING_MS));

    /* 1. Rows written on the primary appear through HAProxy, on both groups, within the lag
     * bound. */
    long long worst_ms = 0;
    for (int round = 0; round < 5; round++) {
        int want = atomic_load(&committed);
        while (atomic_load(&committed) == want)
            mg_test_sleep_ms(5);
        want = atomic_load(&committed);
        int64_t t0 = mg_test_now_ms();
        struct visible v = {want, false, false};
        cr_assert(mg_test_wait_until(rows_visible, &v, CEILING_MS, 5),
                  "row %d never appeared on both groups", want);
        long long ms = mg_test_now_ms() - t0;
        cr_expect_leq(ms, MAX_LAG_MS, "row %d took %lld ms to appear on both groups", want, ms);
        if (ms > worst_ms)
            worst_ms = ms;
    }
    long long lag_a = healthz_lag_ms(a.port), lag_b = healthz_lag_ms(b.port);
    cr_expect(lag_a >= 0 && lag_a <= MAX_LAG_MS, "group a reports a lag of %lld ms", lag_a);
    cr_expect(lag_b >= 0 && lag_b <= MAX_LAG_MS, "group b reports a lag of %lld ms", lag_b);
    cr_log_info("scale-out: a commit appeared on both groups through HAProxy within %lld ms "
                "(worst of 5); healthz lag a %lld ms, b %lld ms",
                worst_ms, lag_a, lag_b);

    /* 2. Group A's anonymous line held full: its agent answers the floor, HAProxy follows,
     * and every anonymous heavy request is answered by B. The writer pauses, so A's copy is
     * not replaced (a reload would drain the held requests). */
    atomic_store(&writer_paused, true);
    struct held hold[5];
    struct mg_segment seg_a;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg_a, a.server.shm_name, true, err, sizeof err), 0, "%s", err);
    hold[0] = (struct held){a.port, "X-Test-Hold-Ms: 25000\r\n", 0, 0};
    cr_assert_eq(pthread_create(&hold[0].thread, NULL, held_call, &hold[0]), 0);
    cr_assert(wait_for(&seg_a.anon->in_flight, 1), "A's permit was not taken");
    for (int i = 1; i < 5; i++) {
        hold[i] = (struct held){a.port, NULL, 0, 0};
        cr_assert_eq(pthread_create(&hold[i].thread, NULL, held_call, &hold[i]), 0);
    }
    cr_assert(wait_for(&seg_a.anon->waiting, 4), "A's line did not fill");
    mg_segment_detach(&seg_a);
    cr_assert(wait_server("a", "UP", 1, CEILING_MS), "HAProxy did not take A's weight down");
    int from_b = 0, refused = 0, total = 0;
    for (int i = 0; i < 40; i++) {
        struct answer ans;
        get_front("/api/packets?limit=5", NULL, &ans);
        total++;
        refused += ans.status == 503;
        from_b += ans.status == 200 && strcmp(ans.server, "b") == 0;
        cr_expect_eq(ans.status, 200, "request %d: %d from %s", i, ans.status, ans.server);
    }
    cr_expect_eq(from_b, total, "%d of %d answered by B", from_b, total);
    cr_log_info("scale-out: A's line full: %d of %d anonymous heavy requests answered by B, %d "
                "refused",
                from_b, total, refused);
    for (int i = 0; i < 5; i++)
        pthread_join(hold[i].thread, NULL);
    cr_expect_eq(hold[0].status, 200, "the request holding A's permit got %d", hold[0].status);
    cr_assert(wait_server("a", "UP", -1, CEILING_MS));
    atomic_store(&writer_paused, false);

    /* 3. SIGTERM to A during a load: nothing lost. */
    struct load l;
    load_start(&l, 4);
    load_for(1500);
    int before = atomic_load(&l.ok);
    cr_expect_eq(mg_test_server_stop(&a.server, 30000), 0, "A did not stop cleanly");
    a.running = false;
    cr_assert(wait_server("a", "DOWN", -1, CEILING_MS));
    load_for(1500);
    load_stop(&l);
    cr_expect_eq(atomic_load(&l.failed) + atomic_load(&l.refused), 0,
                 "SIGTERM to A lost %d and refused %d request(s): %s", atomic_load(&l.failed),
                 atomic_load(&l.refused), l.failures);
    cr_expect_gt(atomic_load(&l.ok), before, "the load went on");
    cr_log_info("scale-out: SIGTERM to A under 4 clients: %d answered, %d lost, %d refused",
                atomic_load(&l.ok), atomic_load(&l.failed), atomic_load(&l.refused));

    /* A comes back where HAProxy expects it. */
    start_group(&a);
    cr_assert(wait_server("a", "UP", -1, CEILING_MS));

    /* 4. kill -9 of B's master during a load: only B's requests in flight may be lost, and
     * HAProxy marks B down within its check interval. */
    load_start(&l, 4);
    load_for(1500);
    int64_t killed_at = mg_test_now_ms();
    cr_assert_eq(kill(b.server.pid, SIGKILL), 0);
    cr_assert(wait_server("b", "DOWN", -1, CEILING_MS));
    long long down_ms = mg_test_now_ms() - killed_at;
    load_for(1500);
    load_stop(&l);
    int lost = atomic_load(&l.failed) + atomic_load(&l.refused);
    cr_expect_leq(lost, l.threads, "kill -9 of B lost %d request(s), more than were in flight: %s",
                  lost, l.failures);
    /* fall x inter, plus one interval for the check under way and slack for a loaded machine */
    cr_expect_leq(down_ms, (CHECK_FALL + 1) * CHECK_INTER_MS + 5000,
                  "HAProxy took %lld ms to mark B down", down_ms);
    cr_log_info("scale-out: kill -9 of B under 4 clients: HAProxy marked it down after %lld ms "
                "(inter %d ms, fall %d); %d answered, %d lost: %s",
                down_ms, CHECK_INTER_MS, CHECK_FALL, atomic_load(&l.ok), lost, l.failures);
    mg_test_server_stop(&b.server, 5000); /* reaps it */
    b.running = false;
    cr_expect_eq(mg_test_server_stop(&a.server, 30000), 0);
    a.running = false;
}
