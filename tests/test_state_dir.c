/* SPDX-License-Identifier: ISC */
/*
 * MESHGATE_STATE_DIR (workers/data/state_file.h, group_table.h): the group's tables kept across
 * restarts. The real binary: a first start builds the relay table, its probe and the hash
 * sizes and writes each to the state directory; a second start, whose passes a test hook makes
 * 20 s longer (MESHGATE_TEST_GROUP_PASS_MS), answers /api/nodes?limit=50 in its first turn,
 * before any pass has ended, with the bytes the first start answered once its tables were
 * built. A file flipped by one byte, writable by others, another database's or one covering
 * more rows than the database has is rejected with its reason in the log, and the server
 * serves as without it; a state directory that is missing or the database's own stops the
 * start (exit 78). The database is never written. And in process, the file itself: read back
 * as written, or refused for another version, fewer rows, another first row, a size over the
 * cap, a symbolic link, a cut.
 */
#include "harness.h"

#include "buf.h"
#include "result_cache.h"
#include "segment.h"
#include "state_file.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(state_dir, .timeout = 300);

#define KEY_AA "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define KEY_BB "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define KEY_DD "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
/* A time `minutes` ago as the rows store it, in SQL. */
static const char *ago(char *out, size_t cap, int minutes)
{
    snprintf(out, cap, "strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now', '-%d minutes')", minutes);
    return out;
}

/* Three repeaters; BB's ADVERT says 2-byte hashes (a hash size); DD's whole key is a hop (the
 * list needs the relay table: the probe says so); first_hash: the first transmission's hash
 * (another database: another hash); last: the last observation (a database with fewer rows:
 * without it). */
static void make_db(const char *path, const char *first_hash, bool last)
{
    char sql[4096], m1[80], m5[80], m10[80], h2[80];
    ago(m1, sizeof m1, 1);
    ago(m5, sizeof m5, 5);
    ago(m10, sizeof m10, 10);
    ago(h2, sizeof h2, 120);
    snprintf(sql, sizeof sql,
             "INSERT INTO nodes (public_key, name, role, last_seen, first_seen) VALUES"
             " ('%s', 'AA', 'repeater', %s, '2026-01-01T00:00:00Z'),"
             " ('%s', 'BB', 'repeater', %s, '2026-01-01T00:00:00Z'),"
             " ('%s', 'DD', 'repeater', %s, '2026-01-01T00:00:00Z');"
             "INSERT INTO observers (id, name, iata) VALUES ('OBS1', 'Observer', 'SJC');"
             "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type,"
             " payload_type, decoded_json) VALUES (1, '01', '%s', %s, 1, 2, NULL),"
             " (2, '02', 'h2', %s, 1, 2, NULL), (3, '1140', 'h3', %s, 1, 4,"
             " '{\"pubKey\":\"%s\"}'), (4, '04', 'h4', %s, 0, 2, NULL);"
             "INSERT INTO observations (transmission_id, observer_idx, path_json, timestamp)"
             " VALUES (1, 1, '[\"AA\",\"BB\"]', 1), (2, 1, '[\"AA\"]', 2),"
             " (3, 1, '[\"AA\"]', 3), (4, 1, '[\"%s\"]', 4)%s;",
             KEY_AA, m1, KEY_BB, m1, KEY_DD, m1, first_hash, m10, h2, m5, KEY_BB, m5, KEY_DD,
             last ? ", (2, 1, '[\"BB\"]', 5)" : "");
    cr_assert_eq(mg_test_make_db(path, false, sql), 0);
}

struct place {
    char dir[128];
    char db[256], db_dir[200], state[200];
    char state_setting[260];
};

static void make_place(struct place *p)
{
    mg_test_tmpdir(p->dir, sizeof p->dir);
    snprintf(p->db_dir, sizeof p->db_dir, "%s/db", p->dir);
    snprintf(p->state, sizeof p->state, "%s/state", p->dir);
    cr_assert_eq(mkdir(p->db_dir, 0700), 0);
    cr_assert_eq(mkdir(p->state, 0700), 0);
    snprintf(p->db, sizeof p->db, "%s/relay.db", p->db_dir);
    snprintf(p->state_setting, sizeof p->state_setting, "MESHGATE_STATE_DIR=%s", p->state);
}

static void attach(const struct mg_test_server *s, struct mg_segment *seg)
{
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
}

static bool file_there(const char *dir, const char *name)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/* Whether dir holds a non-empty regular file whose name starts with prefix. */
static bool kept_as(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        char name[300];
        snprintf(name, sizeof name, "%s", e->d_name);
        found = strncmp(name, prefix, strlen(prefix)) == 0 && !strstr(name, ".tmp") &&
                file_there(dir, name);
    }
    if (d)
        closedir(d);
    return found;
}

/* Every table the list reads is kept: the list of a first start taken after this answers
 * from the tables the restart loads (under load the usefulness and multi-byte passes could
 * land after the other three, and the first list then had their fields as before a pass). */
static bool tables_kept(void *arg)
{
    const char *dir = arg;
    return file_there(dir, "relay.v1") && file_there(dir, "hashsizes.v1") &&
           file_there(dir, "relayprobe.v1") && kept_as(dir, "usefulness.v") &&
           kept_as(dir, "multibyte.v");
}

/* /api/nodes?limit=50 of the server on port, 200 (malloc'ed body); prepared: its
 * X-Test-Prepared header (NULL: not asked). */
static char *node_list(int port, char *prepared, size_t cap)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(port, "/api/nodes?limit=50", NULL, &r));
    cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
    if (prepared)
        mg_test_header(&r, "X-Test-Prepared", prepared, cap);
    char *body = strdup(r.body);
    mg_test_response_free(&r);
    return body;
}

/* A first start on p's database: its tables built and kept; the list as they answer it. */
static char *first_start(const struct place *p)
{
    const char *env[] = {"MESHGATE_WORKERS=2", p->state_setting, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, p->db, env));
    cr_assert(mg_test_wait_until(tables_kept, (void *)p->state, 120000, 20),
              "the tables were not kept in %s", p->state);
    struct mg_segment seg;
    attach(&s, &seg);
    cr_expect_geq(atomic_load(&seg.cache.cache->state_written), 3);
    mg_segment_detach(&seg);
    char *list = node_list(s.port, NULL, 0);
    cr_expect_eq(mg_test_server_stop(&s, 30000), 0);
    return list;
}

static void copy_file(const char *from, const char *to)
{
    char cmd[700], out[256];
    snprintf(cmd, sizeof cmd, "cp -p '%s' '%s'", from, to);
    cr_assert_eq(mg_test_shell(cmd, out, sizeof out), 0, "%s", out);
}

/* The names in dir, sorted, one a line (malloc'ed). */
static char *listing(const char *dir)
{
    char cmd[300], out[4096];
    snprintf(cmd, sizeof cmd, "ls -a '%s'", dir);
    cr_assert_eq(mg_test_shell(cmd, out, sizeof out), 0);
    return strdup(out);
}

Test(state_dir, a_restart_answers_the_node_list_at_once_from_the_kept_tables_byte_for_byte)
{
    struct place p;
    make_place(&p);
    make_db(p.db, "h1", true);
    char db_before[300];
    snprintf(db_before, sizeof db_before, "%s/before.db", p.dir);
    copy_file(p.db, db_before);
    char *files_before = listing(p.db_dir);
    char *fresh = first_start(&p);

    /* Again, every group pass 20 s longer: the list is answered before any pass ends. */
    const char *env[] = {"MESHGATE_WORKERS=2", p.state_setting, "MESHGATE_TEST_HOOKS=park",
                         "MESHGATE_TEST_GROUP_PASS_MS=20000", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, p.db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    char prepared[128] = "";
    char *again = node_list(s.port, prepared, sizeof prepared);
    uint64_t relay = atomic_load(&c->relay_builds), sizes = atomic_load(&c->hash_size_builds),
             probe = atomic_load(&c->relay_probe_builds);
    cr_expect_eq(relay + sizes + probe, 0,
                 "the list was answered after a pass (relay %llu, hash sizes %llu, probe %llu)",
                 (unsigned long long)relay, (unsigned long long)sizes, (unsigned long long)probe);
    cr_expect_str_eq(again, fresh, "not the bytes the built tables answered");
    cr_expect(strncmp(prepared, "turns=1 ", 8) == 0, "the list parked: %s", prepared);
    cr_expect_geq(atomic_load(&c->state_loaded), 2, "the relay table and the hash sizes");
    cr_expect_eq(atomic_load(&c->state_rejected_bad) + atomic_load(&c->state_rejected_unsafe) +
                     atomic_load(&c->state_rejected_other_db),
                 0);
    char *log = mg_test_server_log(&s);
    cr_expect(strstr(log, "node hash sizes: took the table kept in"), "%s", log);
    cr_expect(strstr(log, "node relay activity: took the table kept in"), "%s", log);
    free(log);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 60000);

    /* The database: not a byte written, nothing beside it. */
    char cmd[700], out[512];
    snprintf(cmd, sizeof cmd, "cmp '%s' '%s' 2>&1", db_before, p.db);
    cr_expect_eq(mg_test_shell(cmd, out, sizeof out), 0, "the database was written: %s", out);
    char *files_after = listing(p.db_dir);
    cr_expect_str_eq(files_after, files_before);
    free(files_before);
    free(files_after);
    free(fresh);
    free(again);
    mg_test_rmdir(p.dir);
}

/* What a tampering does to the kept files. */
enum tamper { FLIP, WORLD_WRITABLE, OTHER_DB, FEWER_ROWS };

static void flip_last_byte(const char *path)
{
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fseek(f, -1, SEEK_END), 0);
    int ch = fgetc(f);
    cr_assert_eq(fseek(f, -1, SEEK_END), 0);
    fputc(ch ^ 0x01, f);
    fclose(f);
}

/* Every table's file the first start kept (every group table keeps one: relay, its probe,
 * hash sizes, usefulness, multi-byte, ...), at most 16. */
static size_t kept_files(const char *dir, char kept[16][64])
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || e->d_type != DT_REG || len >= 64)
            continue;
        cr_assert_lt(n, 16, "more than 16 state files in %s", dir);
        memcpy(kept[n++], e->d_name, len + 1);
    }
    closedir(d);
    return n;
}

Test(state_dir, a_tampered_or_foreign_state_file_is_rejected_with_its_reason_and_ignored)
{
    struct place p;
    make_place(&p);
    make_db(p.db, "h1", true);
    free(first_start(&p));
    char pristine[200];
    snprintf(pristine, sizeof pristine, "%s/pristine", p.dir);
    cr_assert_eq(mkdir(pristine, 0700), 0);
    char kept[16][64];
    size_t nkept = kept_files(p.state, kept);
    cr_assert_geq(nkept, 3, "the first start kept %zu files", nkept);
    for (size_t i = 0; i < nkept; i++) {
        char from[300], to[300];
        snprintf(from, sizeof from, "%s/%s", p.state, kept[i]);
        snprintf(to, sizeof to, "%s/%s", pristine, kept[i]);
        copy_file(from, to);
    }
    struct {
        enum tamper how;
        const char *reason;
        size_t counter; /* offsetof in struct mg_result_cache */
    } cases[] = {
        {FLIP, "its checksum does not match", offsetof(struct mg_result_cache, state_rejected_bad)},
        {WORLD_WRITABLE, "writable by it alone",
         offsetof(struct mg_result_cache, state_rejected_unsafe)},
        {OTHER_DB, "another database's", offsetof(struct mg_result_cache, state_rejected_other_db)},
        {FEWER_ROWS, "the database has fewer rows than the table covers",
         offsetof(struct mg_result_cache, state_rejected_other_db)},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char db[300];
        snprintf(db, sizeof db, "%s/case%zu.db", p.db_dir, k);
        make_db(db, cases[k].how == OTHER_DB ? "x1" : "h1", cases[k].how != FEWER_ROWS);
        /* Only the tampered files: none the last case's server kept for its own database. */
        char left[16][64];
        for (size_t i = 0, n = kept_files(p.state, left); i < n; i++) {
            char path[300];
            snprintf(path, sizeof path, "%s/%s", p.state, left[i]);
            cr_assert_eq(unlink(path), 0, "%s", path);
        }
        for (size_t i = 0; i < nkept; i++) {
            char from[300], to[300];
            snprintf(from, sizeof from, "%s/%s", pristine, kept[i]);
            snprintf(to, sizeof to, "%s/%s", p.state, kept[i]);
            copy_file(from, to);
            if (cases[k].how == FLIP)
                flip_last_byte(to);
            else if (cases[k].how == WORLD_WRITABLE)
                cr_assert_eq(chmod(to, 0666), 0);
        }
        const char *env[] = {"MESHGATE_WORKERS=2", p.state_setting, NULL};
        struct mg_test_server s;
        cr_assert(mg_test_server_start(&s, db, env));
        struct mg_segment seg;
        attach(&s, &seg);
        struct mg_result_cache *c = seg.cache.cache;
        /* The server serves as it does without the files: the list once the passes end
         * (waited for: with no kept tables they are built first, slowly under ASan). */
        cr_assert(mg_test_wait_node_list(s.port), "case %zu: the node list never answered", k);
        free(node_list(s.port, NULL, 0));
        _Atomic uint64_t *rejected = (_Atomic uint64_t *)((char *)c + cases[k].counter);
        cr_expect_geq(atomic_load(rejected), 1, "case %zu: not counted", k);
        cr_expect_eq(atomic_load(&c->state_loaded), 0, "case %zu: a file was used", k);
        char *log = mg_test_wait_log(&s, cases[k].reason, 1, 30000);
        cr_expect(strstr(log, cases[k].reason), "case %zu: no \"%s\" in:\n%s", k, cases[k].reason,
                  log);
        cr_expect(strstr(log, "the state file is rejected and ignored"), "%s", log);
        free(log);
        mg_segment_detach(&seg);
        cr_expect_eq(mg_test_server_stop(&s, 30000), 0);
    }
    mg_test_rmdir(p.dir);
}

Test(state_dir, a_missing_state_dir_or_the_databases_own_stops_the_start_with_exit_78)
{
    struct place p;
    make_place(&p);
    make_db(p.db, "h1", true);
    char db_setting[300], listen[64], shm[64], own[300];
    snprintf(db_setting, sizeof db_setting, "MESHGATE_DB=%s", p.db);
    snprintf(listen, sizeof listen, "MESHGATE_LISTEN=127.0.0.1:%d", mg_test_free_port());
    snprintf(shm, sizeof shm, "MESHGATE_SHM_NAME=/mgtest-state-%d", (int)getpid());
    snprintf(own, sizeof own, "MESHGATE_STATE_DIR=%s", p.db_dir);
    struct {
        const char *setting, *message;
    } cases[] = {
        {"MESHGATE_STATE_DIR=/nonexistent/meshgate",
         "MESHGATE_STATE_DIR=/nonexistent/meshgate: must be an existing directory"},
        {"MESHGATE_STATE_DIR=relative", "MESHGATE_STATE_DIR=relative: must be an absolute path"},
        {own, "must not be the database's directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *env[] = {db_setting, listen, shm, "MESHGATE_WORKERS=1", cases[i].setting, NULL};
        static char out[16384];
        int status = mg_test_run_expect_exit(env, out, sizeof out, 30000);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 78, "%s: status %d: %s",
                  cases[i].setting, status, out);
        cr_expect(strstr(out, cases[i].message), "%s: %s", cases[i].setting, out);
    }
    mg_test_rmdir(p.dir);
}

/* ---- the file itself, in process (state_file.h) ------------------------------------------- */

Test(state_dir, a_state_file_reads_back_only_whole_ours_and_for_its_database)
{
    char dir[128], path[300], link[300], why[512];
    mg_test_tmpdir(dir, sizeof dir);
    struct mg_state_key k = {.first_tx_id = 1,
                             .first_obs_id = 1,
                             .first_obs_tx = 1,
                             .first_obs_time = 7,
                             .tx_high = 10,
                             .obs_high = 40};
    snprintf(k.first_tx_hash, sizeof k.first_tx_hash, "06001f5d97f8ed9e");
    const char body[] = "the table's own encoding";
    cr_assert_eq(mg_state_write(dir, "hashsizes", 1, &k, 123, body, sizeof body, why, sizeof why),
                 0, "%s", why);
    snprintf(path, sizeof path, "%s/hashsizes.v1", dir);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600);

    struct mg_buf b;
    mg_buf_init(&b);
    int64_t built = 0;
    /* The database grew since: a stale copy, the same bytes. */
    struct mg_state_key grown = k;
    grown.tx_high = 11;
    grown.obs_high = 45;
    cr_expect_eq(mg_state_read(dir, "hashsizes", 1, &grown, 1 << 20, &b, &built, why, sizeof why),
                 MG_STATE_LOADED, "%s", why);
    cr_expect_eq(b.len, sizeof body);
    cr_expect(b.len == sizeof body && memcmp(b.data, body, sizeof body) == 0);
    cr_expect_eq(built, 123);
    mg_buf_reset(&b);
    /* Another version, another table: no file. */
    cr_expect_eq(mg_state_read(dir, "hashsizes", 2, &k, 1 << 20, &b, &built, why, sizeof why),
                 MG_STATE_NONE);
    /* Fewer rows, another first row. */
    struct mg_state_key fewer = k;
    fewer.obs_high = 39;
    cr_expect_eq(mg_state_read(dir, "hashsizes", 1, &fewer, 1 << 20, &b, &built, why, sizeof why),
                 MG_STATE_OTHER_DB);
    cr_expect(strstr(why, "fewer rows"), "%s", why);
    struct mg_state_key other = k;
    other.first_obs_time = 8;
    cr_expect_eq(mg_state_read(dir, "hashsizes", 1, &other, 1 << 20, &b, &built, why, sizeof why),
                 MG_STATE_OTHER_DB);
    cr_expect(strstr(why, "another database's"), "%s", why);
    /* Larger than the cap. */
    cr_expect_eq(mg_state_read(dir, "hashsizes", 1, &k, 4, &b, &built, why, sizeof why),
                 MG_STATE_BAD);
    /* A symbolic link to it. */
    snprintf(link, sizeof link, "%s/relay.v1", dir);
    cr_assert_eq(symlink(path, link), 0);
    cr_expect_eq(mg_state_read(dir, "relay", 1, &k, 1 << 20, &b, &built, why, sizeof why),
                 MG_STATE_UNSAFE, "%s", why);
    /* Cut short: its length is not the header's. */
    cr_assert_eq(truncate(path, st.st_size - 1), 0);
    cr_expect_eq(mg_state_read(dir, "hashsizes", 1, &k, 1 << 20, &b, &built, why, sizeof why),
                 MG_STATE_BAD);
    cr_expect(strstr(why, "length"), "%s", why);
    cr_expect_eq(b.len, 0, "a rejected file's bytes were kept");
    mg_buf_free(&b);
    mg_test_rmdir(dir);
}
