/* SPDX-License-Identifier: ISC */
/*
 * Per-transmission summaries (shm/tx_summary.h): the pages of /api/packets answered from
 * them are byte-identical to the same pages read directly, over generated databases of
 * several seeds and shapes (one with 200 observations per transmission), CoreScope's own
 * database (freshened, when ../shared/data has it), and while a writer shaped like the
 * ingestor appends observations, updates resolved_path and deletes a best row. Each test
 * also proves that the summaries were used, so that it cannot pass by reading directly.
 */
#include "ep_packets.h"
#include "packet_scan.h"
#include "summaries.h"
#include "fixture.h"
#include "harness.h"
#include "admission.h"
#include "clock.h"
#include "gate_fifo.h"
#include "inproc.h"
#include "jobs.h"
#include "result_cache.h"
#include "scoreboard.h"
#include "segment.h"
#include "stats.h"
#include "table_stats.h"
#include "tx_summary.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(summaries, .timeout = 300);

static const char *const targets[] = {
    "/api/packets?limit=10000",
    "/api/packets?limit=50",
    "/api/packets?limit=50&offset=120",
    "/api/packets?order=asc&limit=3000",
    "/api/packets?type=4&limit=500",
    "/api/packets?route=1&limit=500",
    "/api/packets?type=5&order=asc&limit=500&offset=7",
};
#define TARGETS (sizeof targets / sizeof targets[0])

struct bodies {
    char *body[TARGETS];
};

/* Each set of answers counts its totals afresh: a slow count (every count, on a loaded
 * machine) may be served stale for a moment after a write, by design (packet_scan.h), and
 * these tests compare pages, not that window. */
static void get_all(struct mg_test_ctx *t, struct bodies *out)
{
    mg_packets_totals_forget();
    for (size_t i = 0; i < TARGETS; i++) {
        int status = mg_test_ctx_get(t, targets[i]);
        cr_assert_eq(status, 200, "%s answered %d: %s", targets[i], status, t->res.body.data);
        out->body[i] = strdup(t->res.body.data);
        cr_assert(out->body[i]);
    }
}

static void free_all(struct bodies *b)
{
    for (size_t i = 0; i < TARGETS; i++)
        free(b->body[i]);
}

/* Each target answered directly and from what the summaries hold now: the same bytes. */
static void assert_same_now(struct mg_test_ctx *t, struct mg_tx_summaries *s, const char *what)
{
    struct bodies direct, summed;
    t->env.summaries = NULL;
    get_all(t, &direct);
    t->env.summaries = s;
    get_all(t, &summed);
    for (size_t i = 0; i < TARGETS; i++)
        cr_assert_str_eq(summed.body[i], direct.body[i], "%s: %s differs", what, targets[i]);
    free_all(&direct);
    free_all(&summed);
}

/* Every target answered directly and from summaries: the same bytes; the first target
 * (every transmission) answered wholly from summaries. */
static void assert_same_answers(struct mg_test_ctx *t, struct mg_tx_summaries *s, const char *what)
{
    t->env.summaries = s;
    int status = mg_test_ctx_get(t, targets[0]);
    cr_assert_eq(status, 200);
    cr_assert(mg_packets_last_used_summaries(), "%s: a page row was read directly", what);
    assert_same_now(t, s, what);
}

static void first_pass(struct mg_test_ctx *t, const char *db, struct mg_tx_summaries *s)
{
    char err[512];
    cr_assert_eq(mg_summaries_open(db, 1000, s, err, sizeof err), 0, "%s", err);
    cr_assert(mg_tx_summary_lease_take(s, getpid(), 1));
    cr_assert_eq(mg_packets_summaries_pass(&t->db, s, getpid(), err, sizeof err), 0, "%s", err);
    mg_tx_summary_lease_release(s, getpid());
    cr_assert_geq(mg_tx_summary_high_water(s), 0);
}

static void generate(const char *path, uint64_t seed, long observations, long obs_per_tx)
{
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.seed = seed;
    o.observations = observations;
    o.obs_per_tx = obs_per_tx;
    if (obs_per_tx > 4)
        o.observers = obs_per_tx + obs_per_tx / 4; /* each hears a transmission once at most */
    char err[512];
    cr_assert_eq(mg_fixture_generate(path, &o, err, sizeof err), 0, "%s", err);
}

/* A generated database in a new temporary directory, open, with empty summaries mapped. */
static void open_generated(char dir[128], char db[256], uint64_t seed, long observations,
                           long obs_per_tx, struct mg_test_ctx *t, struct mg_tx_summaries *s)
{
    char err[256];
    mg_test_tmpdir(dir, 128);
    cr_assert(dir[0], "no temporary directory");
    snprintf(db, 256, "%s/summaries.db", dir);
    generate(db, seed, observations, obs_per_tx);
    cr_assert(mg_test_ctx_open(t, db));
    cr_assert_eq(mg_summaries_open(db, 1000, s, err, sizeof err), 0, "%s", err);
}

/* Their end. */
static void close_generated(const char *dir, struct mg_test_ctx *t, struct mg_tx_summaries *s)
{
    mg_tx_summaries_destroy(s);
    mg_test_ctx_close(t);
    mg_test_rmdir(dir);
}

static void check_generated(uint64_t seed, long observations, long obs_per_tx)
{
    char dir[128], db[256], what[96];
    mg_test_tmpdir(dir, sizeof dir);
    cr_assert(dir[0], "no temporary directory");
    snprintf(db, sizeof db, "%s/summaries.db", dir);
    generate(db, seed, observations, obs_per_tx);
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db));
    struct mg_tx_summaries s;
    first_pass(&t, db, &s);
    snprintf(what, sizeof what, "seed %llu, %ld observations, %ld per transmission",
             (unsigned long long)seed, observations, obs_per_tx);
    assert_same_answers(&t, &s, what);
    mg_tx_summaries_destroy(&s);
    mg_test_ctx_close(&t);
    mg_test_rmdir(dir);
}

Test(summaries, answers_equal_direct_on_generated_databases)
{
    check_generated(1, 20000, 0);
    check_generated(7, 12000, 3);
    check_generated(20260718, 16000, 0);
}

Test(summaries, answers_equal_direct_when_heard_two_hundred_times)
{
    check_generated(3, 40000, 200);
    check_generated(11, 30000, 200);
}

Test(summaries, answers_equal_direct_on_corescope_fixtures)
{
    const char *files[] = {"corescope-e2e-fixture.db", "corescope-e2e-fixture-migrated.db"};
    /* A missing file is skipped with a message, never failed (criterion's warnings would
     * make the run's exit status 1). */
    char src[512];
    for (size_t i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/../shared/data/%s", MESHGATE_SOURCE_DIR, files[i]);
        if (access(src, R_OK) != 0)
            cr_skip_test("%s is not there (CoreScope's fixtures live in ../shared)", src);
    }
    for (size_t i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/../shared/data/%s", MESHGATE_SOURCE_DIR, files[i]);
        char dir[128], db[256], err[512];
        mg_test_tmpdir(dir, sizeof dir);
        snprintf(db, sizeof db, "%s/fresh.db", dir);
        cr_assert_eq(mg_fixture_freshen(src, db, 0, err, sizeof err), 0, "%s", err);
        struct mg_test_ctx t;
        cr_assert(mg_test_ctx_open(&t, db));
        struct mg_tx_summaries s;
        first_pass(&t, db, &s);
        assert_same_answers(&t, &s, files[i]);
        mg_tx_summaries_destroy(&s);
        mg_test_ctx_close(&t);
        mg_test_rmdir(dir);
    }
}

/* --- a writer shaped like CoreScope's ingestor ----------------------------------------- */

static void exec_ok(sqlite3 *w, const char *sql)
{
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(w, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql, msg);
}

static int64_t scalar(sqlite3 *w, const char *sql)
{
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(w, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/*
 * One round of the ingestor: n observations appended, spread over the newest transmissions
 * (some with a path longer than any before, some repeating an (observer, path) pair already
 * there), one new transmission heard twice, and resolved_path set on the newest rows.
 */
static void ingest_round(sqlite3 *w, unsigned *rng, int n)
{
    exec_ok(w, "BEGIN IMMEDIATE");
    int64_t max_tx = scalar(w, "SELECT max(id) FROM transmissions");
    int64_t observers = scalar(w, "SELECT max(rowid) FROM observers");
    int64_t now = scalar(w, "SELECT max(timestamp) FROM observations");
    static const char *const paths[] = {"[]", "[\"7D\"]", "[\"7D\",\"DA2A\"]",
                                        "[\"7D\",\"DA2A\",\"0C\",\"11\",\"22\",\"33\",\"44\"]"};
    sqlite3_stmt *ins;
    cr_assert_eq(sqlite3_prepare_v2(w,
                                    "INSERT INTO observations (transmission_id, observer_idx,"
                                    " direction, snr, rssi, score, path_json, timestamp)"
                                    " VALUES (?1, ?2, 'rx', -5.5, -101, 1, ?3, ?4)",
                                    -1, &ins, NULL),
                 SQLITE_OK);
    for (int i = 0; i < n; i++) {
        *rng = *rng * 1103515245u + 12345u;
        unsigned x = *rng >> 8;
        sqlite3_reset(ins);
        sqlite3_bind_int64(ins, 1, max_tx - (int64_t)(x % 40));
        sqlite3_bind_int64(ins, 2, 1 + (int64_t)((x >> 6) % (unsigned)observers));
        sqlite3_bind_text(ins, 3, paths[(x >> 12) % 4], -1, SQLITE_STATIC);
        /* Equal timestamps happen: the id must break the tie. */
        sqlite3_bind_int64(ins, 4, now + (int64_t)((x >> 16) % 3));
        cr_assert_eq(sqlite3_step(ins), SQLITE_DONE);
    }
    sqlite3_finalize(ins);
    exec_ok(w, "INSERT INTO transmissions (raw_hex, hash, first_seen, route_type, payload_type,"
               " payload_version, decoded_json) SELECT '0011', printf('%016x', max(id) + 7777777),"
               " strftime('%Y-%m-%dT%H:%M:%SZ','now'), 1, 5, 1, '{}' FROM transmissions");
    exec_ok(w, "INSERT INTO observations (transmission_id, observer_idx, direction, path_json,"
               " timestamp) SELECT max(id), 1, 'rx', '[\"AB\"]', strftime('%s','now') FROM"
               " transmissions");
    exec_ok(w, "INSERT INTO observations (transmission_id, observer_idx, direction, path_json,"
               " timestamp) SELECT max(id), 2, 'rx', '[\"AB\",\"CD\"]', strftime('%s','now') FROM"
               " transmissions");
    exec_ok(w, "UPDATE observations SET resolved_path = '[\"" /* the ingestor's later write */
               "aa00000000000000000000000000000000000000000000000000000000000000\",null]'"
               " WHERE id > (SELECT max(id) - 30 FROM observations)");
    exec_ok(w, "COMMIT");
}

static sqlite3 *open_writer(const char *db)
{
    sqlite3 *w = NULL;
    cr_assert_eq(mg_test_sqlite_open(db, &w), SQLITE_OK);
    sqlite3_busy_timeout(w, 5000);
    return w;
}

Test(summaries, answers_equal_direct_while_a_writer_appends)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/live.db", dir);
    generate(db, 5, 20000, 50);
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db));
    /* Many heavy requests from one address: this test is not about the rate limit. */
    mg_client_limit_init(&t.seg.clients, t.seg.clients.table->sets, 0, 1);
    struct mg_tx_summaries s;
    first_pass(&t, db, &s);
    sqlite3 *w = open_writer(db);
    unsigned rng = 42;
    for (int round = 0; round < 12; round++) {
        /* Small rounds are folded in by the next request; the large one is more than an
         * extension takes at once, so rows read directly must agree too. */
        ingest_round(w, &rng, round == 6 ? 3000 : 20 + round * 15);
        char what[64];
        snprintf(what, sizeof what, "after round %d", round);
        struct bodies direct, summed;
        t.env.summaries = NULL;
        get_all(&t, &direct);
        t.env.summaries = &s;
        get_all(&t, &summed);
        for (size_t i = 0; i < TARGETS; i++)
            cr_assert_str_eq(summed.body[i], direct.body[i], "%s: %s differs", what, targets[i]);
        free_all(&direct);
        free_all(&summed);
    }
    cr_assert_gt(atomic_load(&s.header->extended_rows), 0, "no extension ran");
    /* Caught up: the newest page comes wholly from summaries. */
    cr_assert_eq(mg_test_ctx_get(&t, "/api/packets?limit=50"), 200);
    cr_assert_eq(mg_tx_summary_high_water(&s), scalar(w, "SELECT max(id) FROM observations"));
    cr_assert(mg_packets_last_used_summaries());
    sqlite3_close(w);
    mg_tx_summaries_destroy(&s);
    mg_test_ctx_close(&t);
    mg_test_rmdir(dir);
}

Test(summaries, deleted_best_observation_reads_the_row_directly)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/delete.db", dir);
    generate(db, 9, 8000, 20);
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db));
    struct mg_tx_summaries s;
    first_pass(&t, db, &s);
    sqlite3 *w = open_writer(db);
    int64_t newest = scalar(w, "SELECT max(id) FROM transmissions");
    struct mg_tx_summary sum;
    cr_assert(mg_tx_summary_read(&s, newest, &sum));
    cr_assert_geq(sum.best_obs_id, 0);
    char sql[128];
    snprintf(sql, sizeof sql, "DELETE FROM observations WHERE id = %lld",
             (long long)sum.best_obs_id);
    exec_ok(w, sql); /* CoreScope's retention reaper deletes rows */
    struct bodies direct, summed;
    t.env.summaries = NULL;
    get_all(&t, &direct);
    t.env.summaries = &s;
    get_all(&t, &summed);
    cr_assert_str_eq(summed.body[1], direct.body[1]);
    cr_assert_eq(mg_test_ctx_get(&t, targets[1]), 200);
    cr_assert_not(mg_packets_last_used_summaries(), "the row of the deleted best was not re-read");
    free_all(&direct);
    free_all(&summed);
    sqlite3_close(w);
    mg_tx_summaries_destroy(&s);
    mg_test_ctx_close(&t);
    mg_test_rmdir(dir);
}

/* Whether target, asked once, was answered light (on the loop, admitted light to the end),
 * with 200; body (when not NULL) gets a copy of the answer. */
static bool answered_light(struct mg_test_ctx *t, const char *target, char **body)
{
    int status = mg_test_ctx_get(t, target);
    cr_assert_eq(status, 200, "%s answered %d: %s", target, status, t->res.body.data);
    if (body)
        cr_assert(*body = strdup(t->res.body.data));
    return t->light;
}

/*
 * A page the summaries answer with a bounded cost is light (mg_packets_is_heavy: no filter,
 * at most MG_PACKETS_LIGHT_LIMIT rows MG_PACKETS_LIGHT_OFFSET down), and answers the bytes a
 * direct read does; one that turns out to need more at run time (no total kept for its
 * snapshot, the summaries more than MG_PACKETS_LIGHT_LAG observations behind) is admitted
 * again, heavy, in the same request; pages past the bounds are heavy from the start.
 */
Test(summaries, a_page_the_summaries_answer_is_light_and_one_they_cannot_is_admitted_heavy)
{
    char dir[128], db[256];
    struct mg_test_ctx t;
    struct mg_tx_summaries s;
    open_generated(dir, db, 33, 4000, 4, &t, &s); /* 1000 transmissions */
    t.env.summaries = NULL;
    char *direct = NULL, *readmitted = NULL, *light = NULL;
    cr_assert_not(answered_light(&t, "/api/packets?limit=50", &direct), "light with no summaries");
    char err[512];
    cr_assert(mg_tx_summary_lease_take(&s, getpid(), 1));
    cr_assert_eq(mg_packets_summaries_pass(&t.db, &s, getpid(), err, sizeof err), 0, "%s", err);
    mg_tx_summary_lease_release(&s, getpid());
    t.env.summaries = &s;
    mg_packets_totals_forget();
    /* No total kept for this snapshot: counting is not light. */
    cr_expect_not(answered_light(&t, "/api/packets?limit=50", &readmitted),
                  "counted the total on the loop");
    cr_expect(answered_light(&t, "/api/packets?limit=50", &light), "the summaries' page was heavy");
    cr_expect(mg_packets_last_used_summaries());
    cr_expect_str_eq(readmitted, direct);
    cr_expect_str_eq(light, direct);
    cr_expect(answered_light(&t, "/api/packets", NULL));
    cr_expect(answered_light(&t, "/api/packets?order=asc&limit=50&offset=1000", NULL));
    static const char *const heavy[] = {
        "/api/packets?limit=51",
        "/api/packets?limit=50&offset=1001",
        "/api/packets?expand=observations",
        "/api/packets?groupByHash=true",
        "/api/packets?type=4",
        "/api/packets?observer=zz",
    };
    for (size_t i = 0; i < sizeof heavy / sizeof heavy[0]; i++)
        cr_expect_not(answered_light(&t, heavy[i], NULL), "%s was light", heavy[i]);
    /* The summaries fall behind by more than a light page may list: admitted again, heavy,
     * whose run folds the new rows in; then light again, the same bytes as read directly. */
    sqlite3 *w = open_writer(db);
    unsigned rng = 7;
    ingest_round(w, &rng, MG_PACKETS_LIGHT_LAG + 100);
    sqlite3_close(w);
    cr_expect_not(answered_light(&t, "/api/packets?limit=50", NULL), "light while behind");
    free(light);
    free(direct);
    cr_expect(answered_light(&t, "/api/packets?limit=50", &light), "heavy once caught up");
    t.env.summaries = NULL;
    cr_expect_not(answered_light(&t, "/api/packets?limit=50", &direct));
    cr_expect_str_eq(light, direct);
    free(direct);
    free(readmitted);
    free(light);
    close_generated(dir, &t, &s);
}

Test(summaries, record_being_written_reads_as_absent)
{
    struct mg_tx_summaries s;
    char err[256];
    cr_assert_eq(mg_tx_summaries_create(&s, 16384, err, sizeof err), 0, "%s", err);
    struct mg_tx_summary out;
    cr_assert_not(mg_tx_summary_read(&s, 5, &out), "never written");
    mg_tx_summary_write(&s, 5, 77, 3, 2, 80);
    cr_assert(mg_tx_summary_read(&s, 5, &out));
    cr_assert_eq(out.best_obs_id, 77);
    cr_assert_eq(out.observation_count, 3);
    cr_assert_not(mg_tx_summary_read(&s, 5 + 16384, &out), "another id in the same slot");
    /* A writer that died mid-record leaves the number odd. */
    atomic_fetch_add(&s.records[5].seq, 1);
    cr_assert_not(mg_tx_summary_read(&s, 5, &out));
    mg_tx_summary_write(&s, 5, 78, 4, 2, 81);
    cr_assert(mg_tx_summary_read(&s, 5, &out));
    cr_assert_eq(out.best_obs_id, 78);
    mg_tx_summaries_destroy(&s);
}

/* 32 bytes a record: the 2M shape's 500,000 transmissions are 15.2 MB of the group's PSS (40
 * bytes a record made them 19). The id is kept as its turn of the ring, so every id that
 * shares a slot still reads as absent but its own, and an id no turn can name has none. */
Test(summaries, a_record_is_32_bytes_and_names_its_id_by_its_turn_of_the_ring)
{
    struct mg_tx_summaries s;
    char err[256];
    const uint64_t cap = 16384;
    cr_assert_eq(mg_tx_summaries_create(&s, cap, err, sizeof err), 0, "%s", err);
    size_t header = (size_t)((char *)s.records - (char *)s.header);
    cr_assert_eq(s.map_bytes, header + cap * 32, "%zu bytes mapped for %llu records", s.map_bytes,
                 (unsigned long long)cap);
    cr_assert_eq(s.header->record_size, 32);
    struct mg_tx_summary out;
    const int64_t ids[] = {7, 7 + (int64_t)cap, 7 + 3 * (int64_t)cap, 7 + ((int64_t)cap << 31)};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        mg_tx_summary_write(&s, ids[i], 100 + (int64_t)i, 3, 2, 200 + (int64_t)i);
        cr_assert(mg_tx_summary_read(&s, ids[i], &out), "id %lld", (long long)ids[i]);
        cr_assert_eq(out.tx_id, ids[i]);
        cr_assert_eq(out.best_obs_id, 100 + (int64_t)i);
        cr_assert_eq(out.last_obs_id, 200 + (int64_t)i);
        for (size_t j = 0; j < sizeof ids / sizeof ids[0]; j++)
            if (j != i)
                cr_assert_not(mg_tx_summary_read(&s, ids[j], &out), "id %lld in the slot of %lld",
                              (long long)ids[j], (long long)ids[i]);
    }
    /* Past 2^32 - 1 turns, or negative: never written, read as absent. */
    int64_t far = 7 + (int64_t)(cap * (uint64_t)UINT32_MAX);
    mg_tx_summary_write(&s, far, 1, 1, 1, 1);
    cr_assert_not(mg_tx_summary_read(&s, far, &out));
    cr_assert(mg_tx_summary_read(&s, ids[3], &out), "the slot's record is left as it was");
    mg_tx_summary_write(&s, -5, 1, 1, 1, 1);
    cr_assert_not(mg_tx_summary_read(&s, -5, &out));
    mg_tx_summaries_destroy(&s);
}

Test(summaries, lease_of_a_dead_holder_is_taken_over)
{
    struct mg_tx_summaries s;
    char err[256];
    cr_assert_eq(mg_tx_summaries_create(&s, 16384, err, sizeof err), 0, "%s", err);
    pid_t child = fork();
    if (child == 0)
        _exit(mg_tx_summary_lease_take(&s, getpid(), 1) ? 0 : 1);
    int status;
    waitpid(child, &status, 0);
    cr_assert_eq(WEXITSTATUS(status), 0);
    cr_assert_eq(atomic_load(&s.header->lease_pid), child, "the child held it and died");
    cr_assert(mg_tx_summary_lease_take(&s, getpid(), 2), "a dead holder's lease is free");
    cr_assert_not(mg_tx_summary_lease_take(&s, getpid(), 3), "not re-entrant");
    mg_tx_summary_lease_release(&s, getpid());
    cr_assert_eq(atomic_load(&s.header->lease_pid), 0);
    mg_tx_summaries_destroy(&s);
}

/* A helper thread for the worker's ticks of t (summaries s), and one cold permit, for which a
 * place in line waits at most wait_ms. */
static struct mg_jobs *start_helper(struct mg_test_ctx *t, struct mg_tx_summaries *s,
                                    int64_t wait_ms)
{
    char err[256];
    int fd = -1;
    struct mg_jobs *jobs = mg_jobs_start(&t->cfg, &t->db, 0, 1, &fd, NULL, 0, err, sizeof err);
    cr_assert(jobs, "%s", err);
    t->env.summaries = s;
    t->env.jobs = jobs;
    mg_fifo_gate_configure(t->seg.cold, getpid(), 1, 8, wait_ms * MG_NS_PER_MS);
    return jobs;
}

/* The pass is background work: while the cold gate is busy it takes no place in the line
 * (no wait, no cancel, no refusal with no client behind them); it tries again on a later
 * turn, counted as background work, and runs under a permit once one is free. */
Test(summaries, pass_never_joins_the_cold_line)
{
    char dir[128], db[256];
    struct mg_test_ctx t;
    struct mg_tx_summaries s;
    open_generated(dir, db, 3, 2000, 4, &t, &s);
    struct mg_jobs *jobs = start_helper(&t, &s, 5000);
    struct mg_fifo_gate *cold = t.seg.cold;
    uint64_t held = 0;
    int place = -1;
    uint64_t ticket = 0;
    cr_assert_eq(mg_fifo_gate_join(cold, getpid(), 0, "a client's build", &held, &place, &ticket),
                 MG_FIFO_ADMITTED);
    struct mg_fifo_snapshot before, after;
    mg_fifo_gate_read(cold, getpid(), true, &before);
    for (int i = 0; i < 10; i++)
        mg_summaries_tick(&t.env, &mg_background_cold, mg_monotonic_ns());
    mg_fifo_gate_read(cold, getpid(), true, &after);
    cr_assert_eq(after.waited, before.waited, "the pass joined the line: waited %llu",
                 (unsigned long long)after.waited);
    cr_assert_eq(after.cancelled, before.cancelled, "cancelled %llu",
                 (unsigned long long)after.cancelled);
    cr_assert_eq(after.refused_full, before.refused_full);
    cr_assert_eq(after.background_busy, before.background_busy + 10);
    cr_assert_lt(mg_tx_summary_high_water(&s), 0, "no pass ran while the gate was busy");
    cr_assert(mg_fifo_gate_release(cold, getpid(), held));
    /* A free permit: the next turn starts the pass; later turns collect it. */
    int64_t give_up = mg_monotonic_ns() + 120 * MG_NS_PER_SEC;
    while (mg_tx_summary_high_water(&s) < 0 && mg_monotonic_ns() < give_up) {
        mg_summaries_tick(&t.env, &mg_background_cold, mg_monotonic_ns());
        usleep(10000);
    }
    cr_assert_geq(mg_tx_summary_high_water(&s), 0, "the pass never ran");
    /* Its last chunk done, a later turn gives the permit back. */
    do {
        mg_summaries_tick(&t.env, &mg_background_cold, mg_monotonic_ns());
        mg_fifo_gate_read(cold, getpid(), true, &after);
    } while ((after.in_flight > 0 || atomic_load(&s.header->passes) == 0) &&
             mg_monotonic_ns() < give_up && usleep(10000) == 0);
    cr_assert_eq(atomic_load(&s.header->passes), 1u, "the pass never ended");
    cr_assert_eq(after.in_flight, 0u, "the pass kept its permit");
    mg_fifo_gate_read(cold, getpid(), true, &after);
    /* A permit per chunk. */
    cr_assert_eq(after.background, before.background + atomic_load(&s.header->chunks));
    cr_assert_eq(after.waited, before.waited);
    cr_assert_eq(after.cancelled, before.cancelled);
    mg_jobs_stop(jobs);
    close_generated(dir, &t, &s);
}

/* --- newest first, in chunks ---------------------------------------------------------------- */

/* One chunk of at most max_tx transmissions under the lease, which is given back after it (as
 * between the worker's chunks: a request may then extend). Returns whether it ended the pass. */
static bool chunk_of(struct mg_test_ctx *t, struct mg_tx_summaries *s, int64_t max_tx)
{
    char err[256];
    bool finished = false;
    struct mg_summaries_chunk c = {.max_tx = max_tx};
    cr_assert(mg_tx_summary_lease_take(s, getpid(), mg_monotonic_ns()));
    cr_assert_eq(mg_packets_summaries_chunk(&t->db, s, getpid(), &c, &finished, err, sizeof err), 0,
                 "%s", err);
    mg_tx_summary_lease_release(s, getpid());
    return finished;
}

/* Rows a request answered from summaries and read directly (the header's counters). */
static void get_counted(struct mg_test_ctx *t, const char *target, uint64_t *served,
                        uint64_t *direct)
{
    uint64_t s0 = atomic_load(&t->env.summaries->header->rows_from_summary);
    uint64_t d0 = atomic_load(&t->env.summaries->header->rows_direct);
    mg_packets_totals_forget();
    cr_assert_eq(mg_test_ctx_get(t, target), 200, "%s", t->res.body.data);
    *served = atomic_load(&t->env.summaries->header->rows_from_summary) - s0;
    *direct = atomic_load(&t->env.summaries->header->rows_direct) - d0;
}

/* After the first chunk the newest page comes wholly from summaries while the oldest is read
 * directly; a page across the low-water mark takes each row from where it is and is the same
 * bytes as read directly, and so is every page at every step, while a writer appends between
 * chunks (the first chunk's high-water mark stays until an extension moves it). */
Test(summaries, a_pass_newest_first_answers_across_its_low_water_mark)
{
    char dir[128], db[256];
    struct mg_test_ctx t;
    struct mg_tx_summaries s;
    open_generated(dir, db, 13, 24000, 20, &t, &s);
    mg_client_limit_init(&t.seg.clients, t.seg.clients.table->sets, 0, 1);
    sqlite3 *w = open_writer(db);
    int64_t top = scalar(w, "SELECT max(id) FROM transmissions");
    int64_t bottom = scalar(w, "SELECT min(id) FROM transmissions");
    cr_assert_gt(top - bottom, 600);
    cr_assert_eq(atomic_load(&s.header->low_water), -1);

    cr_assert_not(chunk_of(&t, &s, 300));
    int64_t low = atomic_load(&s.header->low_water);
    cr_assert_eq(low,
                 scalar(w, "SELECT id FROM transmissions ORDER BY id DESC LIMIT 1 OFFSET 299"));
    cr_assert_eq(atomic_load(&s.header->cursor), low, "the pass goes on below it");
    cr_assert_eq(mg_tx_summary_high_water(&s), scalar(w, "SELECT max(id) FROM observations"));
    cr_assert_eq(atomic_load(&s.header->passes), 0u);
    t.env.summaries = &s;
    uint64_t served, direct;
    get_counted(&t, "/api/packets?limit=50", &served, &direct);
    cr_assert_eq(served, 50u, "the newest page: %llu from summaries, %llu direct",
                 (unsigned long long)served, (unsigned long long)direct);
    cr_assert_eq(direct, 0u);
    get_counted(&t, "/api/packets?limit=50&offset=280", &served, &direct);
    cr_assert_eq(served, 20u, "a page across the mark: %llu from summaries",
                 (unsigned long long)served);
    cr_assert_eq(direct, 30u);
    get_counted(&t, "/api/packets?order=asc&limit=50", &served, &direct);
    cr_assert_eq(served, 0u, "the oldest page is read directly");
    assert_same_now(&t, &s, "after the first chunk");
    /* The straddling page itself, both ways. */
    t.env.summaries = NULL;
    mg_packets_totals_forget();
    cr_assert_eq(mg_test_ctx_get(&t, "/api/packets?limit=50&offset=280"), 200);
    char *plain = strdup(t.res.body.data);
    t.env.summaries = &s;
    mg_packets_totals_forget();
    cr_assert_eq(mg_test_ctx_get(&t, "/api/packets?limit=50&offset=280"), 200);
    cr_assert_str_eq(t.res.body.data, plain);
    free(plain);

    /* A writer between chunks: new rows on the newest transmissions, which the first chunk
     * summarized from an older snapshot. */
    unsigned rng = 7;
    ingest_round(w, &rng, 200);
    cr_assert_not(chunk_of(&t, &s, 200));
    cr_assert_lt(atomic_load(&s.header->low_water), low);
    assert_same_now(&t, &s, "a writer between chunks");
    ingest_round(w, &rng, 120);
    cr_assert(chunk_of(&t, &s, 0), "the rest in one chunk");
    cr_assert_eq(atomic_load(&s.header->low_water), bottom);
    cr_assert_eq(atomic_load(&s.header->cursor), -1);
    cr_assert_eq(atomic_load(&s.header->passes), 1u);
    assert_same_answers(&t, &s, "after the pass");
    sqlite3_close(w);
    close_generated(dir, &t, &s);
}

/* A first pass that fails goes on below its low-water mark when it is tried again, and what
 * it wrote before is used meanwhile. */
Test(summaries, a_failed_first_pass_goes_on_below_its_low_water_mark)
{
    char dir[128], db[256], err[256];
    struct mg_test_ctx t;
    struct mg_tx_summaries s;
    open_generated(dir, db, 17, 6000, 10, &t, &s);
    cr_assert_not(chunk_of(&t, &s, 100));
    int64_t low = atomic_load(&s.header->low_water);
    /* Its lease lost mid-chunk (another process took it over). */
    struct mg_summaries_chunk c = {.max_tx = 50};
    bool finished = true;
    cr_assert(mg_tx_summary_lease_take(&s, getpid(), mg_monotonic_ns()));
    atomic_store(&s.header->lease_pid, 1); /* init: it runs */
    cr_assert_eq(mg_packets_summaries_chunk(&t.db, &s, getpid(), &c, &finished, err, sizeof err),
                 -1);
    cr_assert(strstr(err, "lost its lease"), "%s", err);
    atomic_store(&s.header->lease_pid, 0);
    cr_assert_eq(atomic_load(&s.header->cursor), -1, "the pass ended, failed");
    cr_assert_eq(atomic_load(&s.header->low_water), low);
    cr_assert_neq(atomic_load(&s.header->failed_ns), 0);
    cr_assert_not(chunk_of(&t, &s, 10));
    sqlite3 *r = open_writer(db);
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT id FROM transmissions WHERE id < %lld ORDER BY id DESC LIMIT 1 OFFSET 9",
             (long long)low);
    cr_assert_eq(atomic_load(&s.header->low_water), scalar(r, sql), "it went on below the mark");
    sqlite3_close(r);
    cr_assert_eq(atomic_load(&s.header->chunks), 2u);
    struct mg_tx_summary sum;
    cr_assert(mg_tx_summary_read(&s, low, &sum));
    close_generated(dir, &t, &s);
}

/* A cold request that comes while the pass runs waits one chunk at most, never the pass: with
 * one cold permit, it joins the line behind the chunk that holds it and is admitted when that
 * chunk ends, while the pass (each transmission slowed by the test hook) is far from done; the
 * next chunk then waits for its permit, counted as background work. */
Test(summaries, a_cold_request_waits_one_chunk_not_the_pass)
{
    char dir[128], db[256];
    struct mg_test_ctx t;
    struct mg_tx_summaries s;
    open_generated(dir, db, 3, 8000, 4, &t, &s); /* 2000 transmissions: 20 s at 10 ms each */
    setenv("MESHGATE_TEST_SUMMARIES_TX_MS", "10", 1);
    t.env.test_hooks = MG_TEST_HOOKS_PARK;
    struct mg_jobs *jobs = start_helper(&t, &s, 60000);
    struct mg_fifo_gate *cold = t.seg.cold;
    /* The pass under way, its chunk holding the one permit. */
    struct mg_fifo_snapshot now;
    int64_t give_up = mg_monotonic_ns() + 60 * MG_NS_PER_SEC;
    do {
        mg_summaries_tick(&t.env, &mg_background_cold, mg_monotonic_ns());
        mg_fifo_gate_read(cold, getpid(), true, &now);
    } while (now.in_flight == 0 && mg_monotonic_ns() < give_up && usleep(1000) == 0);
    cr_assert_eq(now.in_flight, 1u, "no chunk started");
    uint64_t token = 0, ticket = 0;
    int place = -1;
    int64_t asked = mg_monotonic_ns();
    int rc = mg_fifo_gate_join(cold, getpid(), 0, "a client's build", &token, &place, &ticket);
    while (rc == MG_FIFO_QUEUED && mg_monotonic_ns() < give_up) {
        mg_summaries_tick(&t.env, &mg_background_cold, mg_monotonic_ns());
        usleep(1000);
        rc = mg_fifo_gate_poll(cold, getpid(), 0, "a client's build", place, ticket,
                               mg_monotonic_ns(), give_up, &token);
    }
    int64_t waited_ms = (mg_monotonic_ns() - asked) / MG_NS_PER_MS;
    cr_assert_eq(rc, MG_FIFO_ADMITTED, "the request was not admitted (%d) in %lld ms", rc,
                 (long long)waited_ms);
    cr_assert_eq(atomic_load(&s.header->passes), 0u,
                 "the request waited for the whole pass (%lld ms)", (long long)waited_ms);
    cr_assert_geq(atomic_load(&s.header->low_water), 0, "no chunk was done");
    /* While it holds the permit, no chunk runs: each turn is background work that found the
     * gate busy. */
    mg_fifo_gate_read(cold, getpid(), true, &now);
    for (int i = 0; i < 5; i++)
        mg_summaries_tick(&t.env, &mg_background_cold, mg_monotonic_ns());
    struct mg_fifo_snapshot after;
    mg_fifo_gate_read(cold, getpid(), true, &after);
    cr_assert_eq(after.in_flight, 1u);
    cr_assert_eq(after.background_busy, now.background_busy + 5);
    cr_assert(mg_fifo_gate_release(cold, getpid(), token));
    mg_jobs_stop(jobs);
    close_generated(dir, &t, &s);
}

/* The real server on db, two workers, each transmission of the pass slowed by the test hook
 * (tx_ms: "MESHGATE_TEST_SUMMARIES_TX_MS=N"), no rate limit (a page read directly is heavy);
 * returns the summaries' table numbers in its segment, attached in seg. */
static struct mg_table_stats *start_slowed(const char *db, const char *tx_ms,
                                           struct mg_test_server *srv, struct mg_segment *seg)
{
    char err[256];
    const char *env[] = {"MESHGATE_WORKERS=2", "MESHGATE_ANON_RATE=0", "MESHGATE_TEST_HOOKS=park",
                         tx_ms, NULL};
    cr_assert(mg_test_server_start(srv, db, env));
    cr_assert_eq(mg_segment_attach(seg, srv->shm_name, true, err, sizeof err), 0, "%s", err);
    return &seg->cache.cache->tables[MG_TABLE_summaries];
}

/* The real server, started on a database whose pass lasts (each transmission slowed by the
 * test hook): the newest page is answered from summaries while the pass is still under way,
 * which the group's table numbers show (building, no generation yet, the low-water mark above
 * the oldest transmission, rows served from the table). */
Test(summaries, the_newest_page_comes_from_summaries_before_the_pass_ends)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    cr_assert(dir[0], "no temporary directory");
    snprintf(db, sizeof db, "%s/start.db", dir);
    generate(db, 21, 12000, 4); /* 3000 transmissions: 30 s at 10 ms each */
    struct mg_test_server srv;
    struct mg_segment seg;
    struct mg_table_stats *st = start_slowed(db, "MESHGATE_TEST_SUMMARIES_TX_MS=10", &srv, &seg);
    /* Asked until a page comes wholly from summaries (the first chunks cover the newest 50). */
    int64_t t0 = mg_test_now_ms();
    uint64_t served = 0;
    while (mg_test_now_ms() - t0 < 60000) {
        uint64_t before = atomic_load(&st->rows_served);
        struct mg_test_response r;
        cr_assert(mg_test_get(srv.port, "/api/packets?limit=50", NULL, &r));
        cr_assert_eq(r.status, 200, "%s%s", r.head, r.body);
        mg_test_response_free(&r);
        served = atomic_load(&st->rows_served) - before;
        if (served == 50)
            break;
        mg_test_sleep_ms(20);
    }
    cr_assert_eq(served, 50u, "the newest page never came from summaries");
    cr_assert_eq(atomic_load(&st->generation), 0u, "the pass ended first");
    cr_assert_eq(atomic_load(&st->building), 1u);
    uint64_t low = atomic_load(&st->low_water);
    cr_assert_gt(low, 1u, "the low-water mark is not shown, or the pass is done: %llu",
                 (unsigned long long)low);
    /* An old page is read directly meanwhile, and says so. */
    uint64_t direct = atomic_load(&st->rows_direct);
    struct mg_test_response r;
    cr_assert(mg_test_get(srv.port, "/api/packets?order=asc&limit=20", NULL, &r));
    cr_assert_eq(r.status, 200);
    mg_test_response_free(&r);
    cr_assert_eq(atomic_load(&st->rows_direct), direct + 20);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&srv, 20000), 0);
    mg_test_rmdir(dir);
}

/* The real server's first page after a start, while the first chunk of the first pass is still
 * under way (each transmission slowed by the test hook: 100 of them take 4 s): the request for
 * the newest page parks for that chunk, which covers the newest two pages whatever it takes,
 * and is then answered wholly from summaries (not one row read directly beside the chunk that
 * summarizes the same observations); the pass goes on after it, and an old page is read
 * directly. */
Test(summaries, the_first_page_after_a_start_parks_for_the_first_chunk)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    cr_assert(dir[0], "no temporary directory");
    snprintf(db, sizeof db, "%s/first.db", dir);
    generate(db, 23, 12000, 4); /* 3000 transmissions */
    sqlite3 *w = open_writer(db);
    int64_t hundredth =
        scalar(w, "SELECT id FROM transmissions ORDER BY id DESC LIMIT 1 OFFSET 99");
    sqlite3_close(w);
    struct mg_test_server srv;
    struct mg_segment seg;
    struct mg_table_stats *st = start_slowed(db, "MESHGATE_TEST_SUMMARIES_TX_MS=40", &srv, &seg);
    cr_assert_eq(atomic_load(&st->rows_served) + atomic_load(&st->rows_direct), 0u);
    /* A page waits only for a first chunk that runs (one not begun may be queued behind the
     * group's other start passes): the test asks once it has begun. */
    int64_t give_up = mg_test_now_ms() + 120000;
    while (atomic_load(&st->building) == 0 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(5);
    cr_assert_eq(atomic_load(&st->building), 1u, "the first chunk never began");
    struct mg_test_response r;
    cr_assert(mg_test_get(srv.port, "/api/packets?limit=50", NULL, &r), "no answer");
    cr_assert_eq(r.status, 200, "%s%s", r.head, r.body);
    mg_test_response_free(&r);
    uint64_t served = atomic_load(&st->rows_served), direct = atomic_load(&st->rows_direct);
    cr_assert_eq(direct, 0u, "the first page read %llu rows directly (%llu from summaries)",
                 (unsigned long long)direct, (unsigned long long)served);
    cr_assert_eq(served, 50u);
    cr_assert_leq((int64_t)atomic_load(&st->low_water), hundredth,
                  "the first chunk did not cover the newest 100 transmissions");
    cr_assert_eq(atomic_load(&st->generation), 0u, "the pass ended first");
    cr_assert_eq(atomic_load(&st->building), 1u);
    /* The oldest page is read directly. */
    cr_assert(mg_test_get(srv.port, "/api/packets?order=asc&limit=20", NULL, &r));
    cr_assert_eq(r.status, 200);
    mg_test_response_free(&r);
    cr_assert_eq(atomic_load(&st->rows_direct), 20u);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&srv, 20000), 0);
    mg_test_rmdir(dir);
}

/* The pid of a worker of seg stopped by a signal (state T in /proc), or 0. */
static int stopped_worker(const struct mg_segment *seg)
{
    for (unsigned i = 0; i < seg->slot_count; i++) {
        int pid = atomic_load(&seg->slots[i].pid);
        char path[64], buf[256] = "";
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = pid > 0 ? fopen(path, "r") : NULL;
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        const char *p = strrchr(buf, ')');
        if (p && p[1] == ' ' && p[2] == 'T')
            return pid;
    }
    return 0;
}

/* The tests that freeze a worker inside a lock (X-Test-Stop-In-Lock, test_stall.c,
 * test_respawn.c) ask /api/packets right after a start: a request that first waits for the
 * first chunk stops all the same, on the turn it meets the gates. */
Test(summaries, a_request_that_waits_for_the_first_chunk_still_stops_in_a_lock)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    cr_assert(dir[0], "no temporary directory");
    snprintf(db, sizeof db, "%s/stop.db", dir);
    generate(db, 24, 4000, 4); /* 1000 transmissions; the first chunk lasts 100 x 40 ms */
    struct mg_test_server srv;
    struct mg_segment seg;
    struct mg_table_stats *st = start_slowed(db, "MESHGATE_TEST_SUMMARIES_TX_MS=40", &srv, &seg);
    int64_t give_up = mg_test_now_ms() + 120000;
    while (atomic_load(&st->building) == 0 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(5);
    cr_assert_eq(atomic_load(&st->building), 1u, "the first chunk never began");
    int fd = mg_test_connect(srv.port);
    const char *req = "GET /api/packets?limit=1 HTTP/1.1\r\nHost: x\r\n"
                      "X-Test-Stop-In-Lock: anon\r\n\r\n";
    cr_assert(mg_test_send(fd, req, strlen(req)));
    /* Until a worker stops, or the request is answered (it never stopped: a failure). */
    int victim = 0;
    bool answered = false;
    give_up = mg_test_now_ms() + 120000;
    while (!victim && !answered && mg_test_now_ms() < give_up) {
        victim = stopped_worker(&seg);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        answered = !victim && poll(&p, 1, 10) == 1;
    }
    cr_expect_gt(victim, 0, "no worker stopped inside the anonymous line's lock (%s)",
                 answered ? "the request was answered" : "no answer either");
    if (victim > 0)
        kill(victim, SIGKILL);
    close(fd);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&srv, 20000), 0);
    mg_test_rmdir(dir);
}

/* A fault of the connection on the handler's first call is healed and the request run again
 * when that call comes on a later turn than the request's first (here after the wait for the
 * first chunk; the anonymous page runs on a helper): X-Test-Db-Break breaks it then. */
Test(summaries, a_request_that_waits_for_the_first_chunk_is_run_again_after_a_connection_fault)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    cr_assert(dir[0], "no temporary directory");
    snprintf(db, sizeof db, "%s/fault.db", dir);
    generate(db, 25, 4000, 4); /* 1000 transmissions; the first chunk lasts 100 x 40 ms */
    struct mg_test_server srv;
    struct mg_segment seg;
    struct mg_table_stats *st = start_slowed(db, "MESHGATE_TEST_SUMMARIES_TX_MS=40", &srv, &seg);
    int64_t give_up = mg_test_now_ms() + 120000;
    while (atomic_load(&st->building) == 0 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(5);
    cr_assert_eq(atomic_load(&st->building), 1u, "the first chunk never began");
    uint64_t faults = mg_counter_get(&seg, MG_CTR_DB_FAULTS);
    struct mg_test_response r;
    /* Past MG_PACKETS_LIGHT_LIMIT: heavy, whatever the summaries hold. */
    cr_assert(mg_test_get(srv.port, "/api/packets?limit=51", "X-Test-Db-Break: 1\r\n", &r));
    cr_expect_eq(r.status, 200, "%s%s", r.head, r.body);
    mg_test_response_free(&r);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_DB_FAULTS), faults + 1,
                 "the connection was not broken on the handler's first call");
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_DB_FAULTS_UNHEALED), 0);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&srv, 20000), 0);
    mg_test_rmdir(dir);
}
