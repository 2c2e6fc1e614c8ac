/* SPDX-License-Identifier: ISC */
/*
 * A live writer: the real meshgate binary serves a generated database in WAL mode while a
 * forked process writes to it the way CoreScope's ingestor does (its own read-write
 * connection, short transactions every 100-300 ms, SQLite's default autocheckpoint of 1000
 * pages), and client threads load every read endpoint at once.
 *
 * What must hold: no answer is a 500, a busy database or a hang; committed rows show in
 * /api/packets at once, in /api/stats within its 10 s cache and in a reach report once its
 * cache entry expires; the -wal file stays near the autocheckpoint size, which it can only
 * do when no meshgate read transaction outlives its request (a control test shows that one
 * held snapshot makes it outgrow the same bound); and meshgate creates nothing next to the
 * database but -wal and -shm. A last test moves another file over the database's path:
 * the workers keep answering from the file they opened until SIGHUP replaces them.
 *
 * Every wait polls an event with a deadline; the writer and the server are stopped by pid
 * and the directory removed in .fini, also when an assertion fails.
 */
#include "fixture.h"
#include "harness.h"
#include "stats.h"
#include "segment.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TestSuite(live_writer, .timeout = 240);

/* The database: moderate, so that a generation and a reach build take well under a second
 * even under AddressSanitizer. */
#define FIXTURE_OBSERVATIONS 50000
#define FIXTURE_SEED 11

/* The writer: per transaction, like a burst of the ingestor's packets. */
#define WRITER_BATCHES 90
#define WRITER_SECONDS 60
#define TX_PER_BATCH 12
#define OBS_PER_TX 3
#define RELAY_PER_BATCH 2
#define NODE_UPDATES 8
#define OBSERVER_UPDATES 3
#define WRITER_HASH_BASE 0xfeed000000000000ULL

/*
 * The bound on the -wal file. Autocheckpoint runs when a commit leaves 1000 frames (4 KiB
 * pages plus a 24-byte header: about 4.1 MB); once a checkpoint has copied every frame and
 * no reader still uses them, the next transaction writes from the start of the file again.
 * Three times that allows the transactions committed while checkpoints wait for the
 * requests in flight; the writer writes about 21 MB in all, so a WAL that is never reset
 * passes the bound (the control test below).
 */
#define WAL_BOUND_BYTES (12L * 1024 * 1024)

#define CLIENTS 3
#define REQUESTS_PER_CLIENT 20000

/* What the writer process tells the test, in a shared anonymous mapping. */
struct writer_state {
    atomic_long batches;            /* committed transactions */
    atomic_long transmissions;      /* committed; the hashes of 0..n-1 are readable */
    atomic_long relay_observations; /* committed observations through the target's token */
    atomic_long failures;
    atomic_int done;
    char error[256];
};

static char dir[128], db_path[256], wal_path[300];
static struct writer_state *writer;
static pid_t writer_pid;
static struct mg_test_server server;
static bool server_started;

static void writer_hash(long seq, char out[17])
{
    snprintf(out, 17, "%016" PRIx64, (uint64_t)(WRITER_HASH_BASE | (uint64_t)seq));
}

/* ---- the writer process ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void rfc3339_now(char *out, size_t cap, bool millis)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    if (millis)
        snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
    else
        snprintf(out + n, cap - n, "Z");
}

static void writer_fail(sqlite3 *db, const char *what)
{
    atomic_fetch_add(&writer->failures, 1);
    if (writer->error[0] == '\0')
        snprintf(writer->error, sizeof writer->error, "%s: %s", what, sqlite3_errmsg(db));
}

static bool step_done(sqlite3 *db, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        writer_fail(db, what);
        return false;
    }
    return true;
}

/*
 * One transaction: TX_PER_BATCH transmissions with OBS_PER_TX observations each (the first
 * RELAY_PER_BATCH of them relayed through token), NODE_UPDATES nodes and OBSERVER_UPDATES
 * observers seen again.
 */
static bool write_batch(sqlite3 *db, sqlite3_stmt *const st[4], uint64_t *rng, long *seq,
                        char keys[][65], long n_keys, long n_observers, const char *token)
{
    char now_text[40], now_ms_text[40], hash[17], raw[97], path[64];
    rfc3339_now(now_text, sizeof now_text, false);
    rfc3339_now(now_ms_text, sizeof now_ms_text, true);
    int64_t now_s = (int64_t)time(NULL);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        writer_fail(db, "BEGIN");
        return false;
    }
    bool ok = true;
    for (int t = 0; ok && t < TX_PER_BATCH; t++) {
        writer_hash(*seq + t, hash);
        for (int i = 0; i < 96; i++)
            raw[i] = "0123456789ABCDEF"[rng_next(rng) & 15];
        raw[96] = '\0';
        const char *from = keys[rng_next(rng) % (uint64_t)n_keys];
        sqlite3_bind_text(st[0], 1, raw, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st[0], 2, hash, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st[0], 3, now_text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st[0], 4, (int)(rng_next(rng) % 3));
        sqlite3_bind_int(st[0], 5, t % 3 == 0 ? 4 : 2);
        sqlite3_bind_text(st[0], 6, from, -1, SQLITE_TRANSIENT);
        ok = step_done(db, st[0], "INSERT INTO transmissions");
        sqlite3_int64 tx_id = sqlite3_last_insert_rowid(db);
        for (int o = 0; ok && o < OBS_PER_TX; o++) {
            const char *a = keys[rng_next(rng) % (uint64_t)n_keys];
            const char *b = keys[rng_next(rng) % (uint64_t)n_keys];
            if (o == 0 && t < RELAY_PER_BATCH)
                snprintf(path, sizeof path, "[\"%.2s\",\"%s\",\"%.2s\"]", a, token, b);
            else
                snprintf(path, sizeof path, "[\"%.2s\",\"%.2s\"]", a, b);
            for (char *p = path; *p; p++)
                if (*p >= 'a' && *p <= 'f')
                    *p = (char)(*p - 'a' + 'A');
            sqlite3_bind_int64(st[1], 1, tx_id);
            sqlite3_bind_int64(st[1], 2, 1 + (int64_t)(rng_next(rng) % (uint64_t)n_observers));
            sqlite3_bind_double(st[1], 3, (double)(rng_next(rng) % 200) / 10.0 - 10.0);
            sqlite3_bind_double(st[1], 4, -(double)(60 + rng_next(rng) % 60));
            sqlite3_bind_text(st[1], 5, path, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(st[1], 6, now_s);
            ok = step_done(db, st[1], "INSERT INTO observations");
        }
    }
    for (int i = 0; ok && i < NODE_UPDATES; i++) {
        sqlite3_bind_text(st[2], 1, now_ms_text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st[2], 2, keys[rng_next(rng) % (uint64_t)n_keys], -1, SQLITE_TRANSIENT);
        ok = step_done(db, st[2], "UPDATE nodes");
    }
    for (int i = 0; ok && i < OBSERVER_UPDATES; i++) {
        sqlite3_bind_text(st[3], 1, now_text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st[3], 2, 1 + (int64_t)(rng_next(rng) % (uint64_t)n_observers));
        ok = step_done(db, st[3], "UPDATE observers");
    }
    if (!ok || sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        if (ok)
            writer_fail(db, "COMMIT");
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return false;
    }
    *seq += TX_PER_BATCH;
    atomic_store(&writer->transmissions, *seq);
    atomic_fetch_add(&writer->relay_observations, RELAY_PER_BATCH);
    atomic_fetch_add(&writer->batches, 1);
    return true;
}

static void writer_main(const char *token, long batches)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st[4] = {NULL};
    static char keys[2000][65];
    long n_keys = 0, n_observers = 0;
    if (mg_test_sqlite_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        writer_fail(db, "open");
        goto out;
    }
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &q, NULL) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_ROW || strcmp((const char *)sqlite3_column_text(q, 0), "wal")) {
        sqlite3_finalize(q);
        writer_fail(db, "PRAGMA journal_mode=WAL");
        goto out;
    }
    sqlite3_finalize(q);
    sqlite3_prepare_v2(db, "SELECT lower(public_key) FROM nodes WHERE length(public_key) = 64", -1,
                       &q, NULL);
    while (n_keys < 2000 && sqlite3_step(q) == SQLITE_ROW)
        snprintf(keys[n_keys++], 65, "%s", (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    sqlite3_prepare_v2(db, "SELECT max(rowid) FROM observers", -1, &q, NULL);
    if (sqlite3_step(q) == SQLITE_ROW)
        n_observers = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    const char *sql[4] = {
        "INSERT INTO transmissions (raw_hex, hash, first_seen, route_type, payload_type,"
        " payload_version, decoded_json, from_pubkey) VALUES (?1, ?2, ?3, ?4, ?5, 1, '{}', ?6)",
        "INSERT INTO observations (transmission_id, observer_idx, direction, snr, rssi, score,"
        " path_json, timestamp) VALUES (?1, ?2, 'rx', ?3, ?4, 1, ?5, ?6)",
        "UPDATE nodes SET last_seen = ?1, advert_count = advert_count + 1 WHERE public_key = ?2",
        "UPDATE observers SET last_seen = ?1, packet_count = packet_count + 1 WHERE rowid = ?2",
    };
    for (int i = 0; i < 4; i++)
        if (sqlite3_prepare_v2(db, sql[i], -1, &st[i], NULL) != SQLITE_OK) {
            writer_fail(db, sql[i]);
            goto out;
        }
    if (n_keys == 0 || n_observers == 0) {
        writer_fail(db, "no nodes or observers to write about");
        goto out;
    }
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    long seq = 0;
    int64_t give_up = mg_test_now_ms() + WRITER_SECONDS * 1000;
    for (long b = 0; b < batches && mg_test_now_ms() < give_up; b++) {
        write_batch(db, st, &rng, &seq, keys, n_keys, n_observers, token);
        /* Pacing, as packets arrive: not a synchronization. */
        mg_test_sleep_ms(100 + (int)(rng_next(&rng) % 201));
    }
out:
    for (int i = 0; i < 4; i++)
        sqlite3_finalize(st[i]);
    sqlite3_close(db);
    atomic_store(&writer->done, 1);
}

static void start_writer(const char *token, long batches)
{
    writer_pid = fork();
    cr_assert_geq(writer_pid, 0);
    if (writer_pid == 0) {
        writer_main(token, batches);
        _exit(0);
    }
}

static bool wait_writer(long batches, int timeout_ms)
{
    int64_t give_up = mg_test_now_ms() + timeout_ms;
    while (atomic_load(&writer->batches) < batches && !atomic_load(&writer->done) &&
           mg_test_now_ms() < give_up)
        mg_test_sleep_ms(5);
    return atomic_load(&writer->batches) >= batches;
}

/* ---- set-up and clean-up ------------------------------------------------------------------ */

static void make_live_db(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/live.db", dir);
    snprintf(wal_path, sizeof wal_path, "%s-wal", db_path);
    struct mg_fixture_options opt;
    mg_fixture_options_default(&opt);
    opt.seed = FIXTURE_SEED;
    opt.observations = FIXTURE_OBSERVATIONS;
    char err[256];
    cr_assert_eq(mg_fixture_generate(db_path, &opt, err, sizeof err), 0, "%s", err);
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(db_path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    writer = mmap(NULL, sizeof *writer, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(writer, MAP_FAILED);
    memset(writer, 0, sizeof *writer);
}

static void stop_threads(void);

static void clean_up(void)
{
    stop_threads();
    if (writer_pid > 0) {
        kill(writer_pid, SIGKILL);
        waitpid(writer_pid, NULL, 0);
        writer_pid = 0;
    }
    if (server_started) {
        mg_test_server_stop(&server, 5000);
        server_started = false;
    }
    if (writer && writer != MAP_FAILED)
        munmap(writer, sizeof *writer);
    writer = NULL;
    mg_test_rmdir(dir);
}

/* ---- the -wal file, sampled ------------------------------------------------------------- */

struct wal_sampler {
    pthread_t thread;
    atomic_int stop;
    atomic_long max_bytes;
    atomic_long samples;
};

static struct wal_sampler sampler;
static bool sampler_started;

static void *sample_wal(void *p)
{
    struct wal_sampler *s = p;
    /* Bounded: the test stops it long before this many samples. */
    for (long i = 0; i < 200000 && !atomic_load(&s->stop); i++) {
        struct stat st;
        if (stat(wal_path, &st) == 0 && st.st_size > atomic_load(&s->max_bytes))
            atomic_store(&s->max_bytes, (long)st.st_size);
        atomic_fetch_add(&s->samples, 1);
        mg_test_sleep_ms(2);
    }
    return NULL;
}

/* ---- answers ---------------------------------------------------------------------------- */

/* The integer after "key": in body, or def. */
static long long json_int(const char *body, const char *key, long long def)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = body ? strstr(body, pattern) : NULL;
    return p ? strtoll(p + strlen(pattern), NULL, 10) : def;
}

/* A GET that must answer 200; returns the body (malloc'ed). */
static char *get_ok(int port, const char *target)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(port, target, NULL, &r), "GET %s: no whole answer", target);
    cr_assert_eq(r.status, 200, "GET %s: %d %s", target, r.status, r.body);
    return r.body;
}

/* A refusal by an admission gate (429 or 503 with Retry-After, never for a busy database). */
static bool is_refusal(const struct mg_test_response *r)
{
    char retry[16];
    return (r->status == 429 || r->status == 503) &&
           mg_test_header(r, "Retry-After", retry, sizeof retry) && r->body &&
           !strstr(r->body, "busy");
}

/* A GET of a heavy endpoint, asked again while a gate refuses it (each refusal comes after
 * the gate's own wait); it must then answer 200. Returns the body (malloc'ed). */
static char *get_admitted(int port, const char *target)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        struct mg_test_response r;
        cr_assert(mg_test_get(port, target, NULL, &r), "GET %s: no whole answer", target);
        if (!is_refusal(&r)) {
            cr_assert_eq(r.status, 200, "GET %s: %d %s", target, r.status, r.body);
            return r.body;
        }
        mg_test_response_free(&r);
    }
    cr_assert_fail("GET %s was refused 20 times", target);
    return NULL;
}

/* ---- the client load -------------------------------------------------------------------- */

enum { EP_HEALTHZ, EP_NODES, EP_PACKETS, EP_PACKETS_EXPANDED, EP_STATS, EP_REACH, EP_PERF, EPS };
static const char *const ep_names[EPS] = {"healthz", "nodes", "packets", "packets+obs",
                                          "stats",   "reach", "perf"};
static char reach_target_path[160];

struct client {
    pthread_t thread;
    int port;
    long ok[EPS], refused[EPS];
    long failures;       /* no whole answer within 10 s */
    long bad;            /* a status or body that must never be */
    char first_bad[256]; /* what it was */
};

static struct client clients[CLIENTS];
static int clients_started;
static atomic_int clients_stop;

static bool is_heavy(int ep)
{
    return ep == EP_PACKETS || ep == EP_PACKETS_EXPANDED || ep == EP_REACH || ep == EP_PERF;
}

static void *client_run(void *p)
{
    struct client *c = p;
    char target[200];
    for (int i = 0; i < REQUESTS_PER_CLIENT && !atomic_load(&clients_stop); i++) {
        int ep = i % EPS;
        switch (ep) {
        case EP_HEALTHZ:
            snprintf(target, sizeof target, "/api/healthz");
            break;
        case EP_NODES:
            snprintf(target, sizeof target, "/api/nodes?limit=50&offset=%d", (i / EPS) % 4 * 50);
            break;
        case EP_PACKETS:
            snprintf(target, sizeof target, "/api/packets?limit=25");
            break;
        case EP_PACKETS_EXPANDED: {
            long n = atomic_load(&writer->transmissions);
            char hash[17];
            writer_hash(n > 0 ? n - 1 : 0, hash);
            snprintf(target, sizeof target, "/api/packets?hash=%s&expand=observations", hash);
            break;
        }
        case EP_STATS:
            snprintf(target, sizeof target, "/api/stats");
            break;
        case EP_REACH:
            snprintf(target, sizeof target, "%s", reach_target_path);
            break;
        default:
            snprintf(target, sizeof target, "/api/perf");
            break;
        }
        struct mg_test_response r;
        if (!mg_test_get(c->port, target, NULL, &r)) {
            c->failures++;
            if (!c->first_bad[0])
                snprintf(c->first_bad, sizeof c->first_bad, "GET %s: no whole answer", target);
            continue;
        }
        size_t len = r.body ? strlen(r.body) : 0;
        bool json =
            len >= 2 && r.body[0] == '{' && r.body[len - 2] == '}' && r.body[len - 1] == '\n';
        if (r.status == 200 && json) {
            c->ok[ep]++;
        } else if (is_heavy(ep) && is_refusal(&r)) {
            c->refused[ep]++;
        } else {
            c->bad++;
            if (!c->first_bad[0])
                snprintf(c->first_bad, sizeof c->first_bad, "GET %s: %d %.150s", target, r.status,
                         r.body ? r.body : "");
        }
        mg_test_response_free(&r);
    }
    return NULL;
}

/* Stops and joins the clients and the sampler (also from .fini, when an assertion failed). */
static void stop_threads(void)
{
    atomic_store(&clients_stop, 1);
    for (; clients_started > 0; clients_started--)
        pthread_join(clients[clients_started - 1].thread, NULL);
    atomic_store(&sampler.stop, 1);
    if (sampler_started)
        pthread_join(sampler.thread, NULL);
    sampler_started = false;
}

/* ---- the target of the reach reports ---------------------------------------------------- */

/* A repeater whose report has a reliable token: its key and its first token. */
static void find_reach_target(int port, char key[65], char token[16])
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT lower(public_key) FROM nodes WHERE role = 'repeater'"
                                    " AND length(public_key) = 64 ORDER BY advert_count DESC"
                                    " LIMIT 40",
                                    -1, &st, NULL),
                 SQLITE_OK);
    token[0] = '\0';
    while (!token[0] && sqlite3_step(st) == SQLITE_ROW) {
        snprintf(key, 65, "%s", (const char *)sqlite3_column_text(st, 0));
        char path[128];
        snprintf(path, sizeof path, "/api/nodes/%s/reach?days=7", key);
        char *body = get_admitted(port, path);
        const char *t = strstr(body, "\"reliable_tokens\":[\"");
        if (t)
            sscanf(t + strlen("\"reliable_tokens\":[\""), "%15[0-9A-F]", token);
        free(body);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_assert(token[0], "no repeater among the 40 most active has a reliable token");
}

/* ---- the tests -------------------------------------------------------------------------- */

Test(live_writer, reads_stay_correct_and_the_wal_stays_bounded_while_the_ingestor_writes,
     .init = make_live_db, .fini = clean_up)
{
    /* The anonymous line's wait is long: this test is about answers beside a writer, and on
     * a loaded machine a heavy request may wait seconds for its turn. */
    const char *env[] = {"MESHGATE_WORKERS=3", "MESHGATE_ANON_RATE=0",
                         "MESHGATE_ANON_WAIT_MS=60000", "MESHGATE_REACH_CACHE_TTL_MS=1000", NULL};
    cr_assert(mg_test_server_start(&server, db_path, env));
    server_started = true;
    int port = server.port;

    char key[65], token[16];
    find_reach_target(port, key, token);
    snprintf(reach_target_path, sizeof reach_target_path, "/api/nodes/%s/reach?days=7", key);
    char *body = get_admitted(port, reach_target_path);
    long long relay_before = json_int(body, "relay_observations", -1);
    free(body);
    body = get_ok(port, "/api/stats");
    long long tx_before = json_int(body, "totalTransmissions", -1);
    free(body);
    cr_assert(relay_before >= 0 && tx_before > 0);

    start_writer(token, WRITER_BATCHES);
    sampler_started = pthread_create(&sampler.thread, NULL, sample_wal, &sampler) == 0;
    for (int i = 0; i < CLIENTS; i++) {
        clients[i] = (struct client){.port = port};
        cr_assert_eq(pthread_create(&clients[i].thread, NULL, client_run, &clients[i]), 0);
        clients_started++;
    }

    /* A committed transmission is in the very next /api/packets answer: every request
     * reads a fresh snapshot, and the total is cached only per data version. */
    for (long batch = 1; batch <= 20; batch += 9) {
        cr_assert(wait_writer(batch, 30000), "the writer committed %ld batches: %s",
                  atomic_load(&writer->batches), writer->error);
        long n = atomic_load(&writer->transmissions);
        char hash[17], target[96];
        writer_hash(n - 1, hash);
        snprintf(target, sizeof target, "/api/packets?hash=%s", hash);
        body = get_admitted(port, target);
        cr_expect_eq(json_int(body, "total", -1), 1, "GET %s right after its commit: %s", target,
                     body);
        cr_expect(strstr(body, hash), "GET %s: %s", target, body);
        free(body);
    }

    /* /api/stats counts them within its 10 s group-wide cache. */
    long committed = atomic_load(&writer->transmissions);
    int64_t asked = mg_test_now_ms(), stats_ms = -1;
    while (mg_test_now_ms() - asked < 40000) {
        body = get_ok(port, "/api/stats");
        long long tx = json_int(body, "totalTransmissions", -1);
        free(body);
        if (tx >= tx_before + committed) {
            stats_ms = mg_test_now_ms() - asked;
            break;
        }
        mg_test_sleep_ms(100);
    }
    cr_expect(stats_ms >= 0, "/api/stats never counted %ld new transmissions", committed);

    /* A reach report shows the new relay observations once its cached entry expires. */
    cr_assert(wait_writer(25, 30000), "%s", writer->error);
    long relayed = atomic_load(&writer->relay_observations);
    long long relay_seen = -1;
    asked = mg_test_now_ms();
    int64_t reach_ms = -1;
    while (mg_test_now_ms() - asked < 40000) {
        body = get_admitted(port, reach_target_path);
        relay_seen = json_int(body, "relay_observations", -1);
        free(body);
        if (relay_seen >= relay_before + relayed) {
            reach_ms = mg_test_now_ms() - asked;
            break;
        }
        mg_test_sleep_ms(100);
    }
    cr_expect(reach_ms >= 0, "relay_observations %lld, never %lld + %ld", relay_seen, relay_before,
              relayed);

    /* The load runs while the writer finishes its bounded run. */
    int64_t writer_deadline = mg_test_now_ms() + 90000;
    while (!atomic_load(&writer->done) && mg_test_now_ms() < writer_deadline)
        mg_test_sleep_ms(20);
    stop_threads();
    long ok = 0, refused = 0, failures = 0, bad = 0;
    char per_endpoint[512] = "";
    size_t used = 0;
    for (int i = 0; i < CLIENTS; i++) {
        failures += clients[i].failures;
        bad += clients[i].bad;
        cr_expect(clients[i].failures == 0 && clients[i].bad == 0, "client %d: %s", i,
                  clients[i].first_bad);
    }
    for (int ep = 0; ep < EPS; ep++) {
        long o = 0, r = 0;
        for (int i = 0; i < CLIENTS; i++)
            o += clients[i].ok[ep], r += clients[i].refused[ep];
        ok += o, refused += r;
        used += (size_t)snprintf(per_endpoint + used, sizeof per_endpoint - used, " %s %ld/%ld",
                                 ep_names[ep], o, r);
        cr_expect_gt(o, 0, "no 200 from %s", ep_names[ep]);
    }
    long wal_max = atomic_load(&sampler.max_bytes);
    cr_log_info("live writer: %ld batches, %ld transmissions, %ld relay observations, %ld writer "
                "failures; %ld answers 200, %ld refused (429/503), %ld without answer, %ld bad "
                "(200/refused per endpoint:%s); new rows in /api/stats after %lld ms, in reach "
                "after %lld ms; -wal at most %ld bytes in %ld samples",
                atomic_load(&writer->batches), atomic_load(&writer->transmissions),
                atomic_load(&writer->relay_observations), atomic_load(&writer->failures), ok,
                refused, failures, bad, per_endpoint, (long long)stats_ms, (long long)reach_ms,
                wal_max, atomic_load(&sampler.samples));
    cr_expect(atomic_load(&writer->done), "the writer did not finish within its bounds");
    cr_expect_eq(atomic_load(&writer->failures), 0, "the writer failed: %s", writer->error);
    cr_expect_eq(atomic_load(&writer->batches), WRITER_BATCHES, "%s", writer->error);
    cr_expect_lt(wal_max, WAL_BOUND_BYTES, "the -wal file grew to %ld bytes", wal_max);

    /* Idle, meshgate holds no snapshot: a checkpoint can copy everything and truncate. */
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA wal_checkpoint(TRUNCATE)", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sqlite3_errmsg(db));
    cr_expect_eq(sqlite3_column_int(st, 0), 0, "the TRUNCATE checkpoint was blocked");
    cr_expect_eq(sqlite3_column_int(st, 1), 0, "%d frames left in the log",
                 sqlite3_column_int(st, 1));
    sqlite3_finalize(st);
    sqlite3_close(db);
    struct stat wal_st;
    cr_expect(stat(wal_path, &wal_st) != 0 || wal_st.st_size == 0, "-wal left with %lld bytes",
              (long long)wal_st.st_size);

    /* Beside the database, meshgate created nothing but SQLite's -wal and -shm. */
    DIR *d = opendir(dir);
    cr_assert(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        cr_expect(strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || strcmp(n, "live.db") == 0 ||
                      strcmp(n, "live.db-wal") == 0 || strcmp(n, "live.db-shm") == 0,
                  "unexpected file next to the database: %s", n);
    }
    closedir(d);

    cr_expect_eq(mg_test_server_stop(&server, 10000), 0);
    server_started = false;
}

/* The control: the same writer and bound, with one reader that keeps its snapshot (what a
 * statement left mid-step would do). The -wal file must outgrow the bound, or the bound
 * above proves nothing. */
Test(live_writer, one_held_snapshot_makes_the_wal_outgrow_the_bound, .init = make_live_db,
     .fini = clean_up)
{
    sqlite3 *reader;
    cr_assert_eq(mg_test_sqlite_open_v2(db_path, &reader, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM nodes", NULL, NULL, NULL),
                 SQLITE_OK);
    start_writer("ABCD", WRITER_BATCHES);
    sampler_started = pthread_create(&sampler.thread, NULL, sample_wal, &sampler) == 0;
    int64_t give_up = mg_test_now_ms() + 90000;
    while (atomic_load(&sampler.max_bytes) <= WAL_BOUND_BYTES && !atomic_load(&writer->done) &&
           mg_test_now_ms() < give_up)
        mg_test_sleep_ms(20);
    stop_threads();
    long wal_max = atomic_load(&sampler.max_bytes);
    cr_log_info("held snapshot: -wal at %ld bytes after %ld batches", wal_max,
                atomic_load(&writer->batches));
    cr_expect_eq(atomic_load(&writer->failures), 0, "the writer failed: %s", writer->error);
    cr_expect_gt(wal_max, WAL_BOUND_BYTES,
                 "a held snapshot left the -wal at %ld bytes after "
                 "%ld batches",
                 wal_max, atomic_load(&writer->batches));
    sqlite3_exec(reader, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(reader);
}

/* ---- a replaced file --------------------------------------------------------------------- */

static char next_path[256];

static void generate(const char *path, uint64_t seed)
{
    struct mg_fixture_options opt;
    mg_fixture_options_default(&opt);
    opt.seed = seed;
    opt.observations = 2000;
    char err[256];
    cr_assert_eq(mg_fixture_generate(path, &opt, err, sizeof err), 0, "%s", err);
}

static void make_two_dbs(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/live.db", dir);
    snprintf(next_path, sizeof next_path, "%s/next.db", dir);
    generate(db_path, 1);
    generate(next_path, 2);
}

/* The hash of the first transmission of path, checked to be absent from other. */
static void own_hash(const char *path, const char *other, char out[17])
{
    sqlite3 *db;
    sqlite3_stmt *st;
    cr_assert_eq(mg_test_sqlite_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT hash FROM transmissions ORDER BY id LIMIT 1", -1, &st, NULL),
        SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    snprintf(out, 17, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_assert_eq(mg_test_sqlite_open_v2(other, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT 1 FROM transmissions WHERE hash = ?1", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_text(st, 1, out, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE, "%s is in both databases", out);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static long long packets_with_hash(int port, const char *hash)
{
    char target[96];
    snprintf(target, sizeof target, "/api/packets?hash=%s", hash);
    char *body = get_admitted(port, target);
    long long total = json_int(body, "total", -1);
    free(body);
    return total;
}

/*
 * A worker keeps its connection, so it keeps reading the file it opened (the old inode)
 * after another is moved over the path; SIGHUP replaces the workers, and the new ones open
 * the new file. The operator's order, as docs/architecture.md gives it: no writer, the -wal
 * checkpointed and truncated, the move, SIGHUP.
 */
Test(live_writer, sighup_after_replacement_serves_the_new_file, .init = make_two_dbs,
     .fini = clean_up)
{
    char old_hash[17], new_hash[17];
    own_hash(db_path, next_path, old_hash);
    own_hash(next_path, db_path, new_hash);
    const char *env[] = {"MESHGATE_WORKERS=2", "MESHGATE_ANON_RATE=0", NULL};
    cr_assert(mg_test_server_start(&server, db_path, env));
    server_started = true;
    int port = server.port;
    cr_expect_eq(packets_with_hash(port, old_hash), 1);

    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    cr_assert_eq(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    cr_assert_eq(rename(next_path, db_path), 0);

    /* Both workers (each request may go to either) still answer from the old file. */
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(packets_with_hash(port, old_hash), 1, "request %d after the move", i);
        cr_expect_eq(packets_with_hash(port, new_hash), 0, "request %d after the move", i);
    }

    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, server.shm_name, true, err, sizeof err), 0, "%s", err);
    /* The master notices the replacement (it looks every 2 s) and says what to do. */
    int64_t warn_by = mg_test_now_ms() + 30000;
    while (mg_counter_get(&seg, MG_CTR_DATABASE_REPLACED) == 0 && mg_test_now_ms() < warn_by)
        mg_test_sleep_ms(20);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_DATABASE_REPLACED), 1);
    char *log = mg_test_server_log(&server);
    cr_expect(log && strstr(log, "was replaced by another file") &&
                  strstr(log, "wal_checkpoint(TRUNCATE)"),
              "no warning about the replaced file in the log:\n%s", log ? log : "(none)");
    free(log);
    cr_assert_eq(kill(server.pid, SIGHUP), 0);
    int64_t give_up = mg_test_now_ms() + 30000;
    while ((atomic_load(&seg.header->generation) < 1 ||
            atomic_load(&seg.header->server_state) != MG_SERVER_RUNNING) &&
           mg_test_now_ms() < give_up)
        mg_test_sleep_ms(10);
    bool reloaded = atomic_load(&seg.header->generation) >= 1 &&
                    atomic_load(&seg.header->server_state) == MG_SERVER_RUNNING;
    mg_segment_detach(&seg);
    cr_assert(reloaded, "the reload did not finish within 30 s");
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(packets_with_hash(port, new_hash), 1, "request %d after SIGHUP", i);
        cr_expect_eq(packets_with_hash(port, old_hash), 0, "request %d after SIGHUP", i);
    }
    cr_expect_eq(mg_test_server_stop(&server, 10000), 0);
    server_started = false;
}
