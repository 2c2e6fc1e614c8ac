/* SPDX-License-Identifier: ISC */
/*
 * Tests of the generator's --corescope-hashes (tools/fixture/content_hash.c): each
 * transmission's hash is CoreScope's content hash of its raw_hex, checked against vectors
 * worked out with sha256sum, against tests/corescope_content_hash.py (Python's hashlib) on
 * every row of a small file, and against CoreScope's own server, which rewrites (and logs)
 * every hash that is not its content hash when it loads a file.
 */
#include <criterion/criterion.h>

#include "fixture.h"
#include "fixture/internal.h"
#include "harness.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOW 1779041349 /* 2026-05-17T18:09:09Z */
#define HASH_SCRIPT MESHGATE_SOURCE_DIR "/tests/corescope_content_hash.py"
#define CORESCOPE_SERVER "/work/peer/corescope-server"
#define CORESCOPE_CONFIG MESHGATE_SOURCE_DIR "/../shared/corescope/server/config.example.json"

static char dir[128];

static void make_dir(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    cr_assert(dir[0], "no temporary directory under /tmp");
}

static void remove_dir(void)
{
    if (dir[0])
        mg_test_rmdir(dir);
}

TestSuite(fixture_hash, .init = make_dir, .fini = remove_dir);

/* A small generated file (3000 observations, 750 transmissions) named name in dir, its
 * newest time NOW or, when now is false, the current time. */
static const char *generate_at(const char *name, uint64_t seed, bool corescope_hashes, bool now)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.seed = seed;
    o.observations = 3000;
    o.nodes = 60;
    o.observers = 8;
    o.now_unix = now ? NOW : 0;
    o.corescope_hashes = corescope_hashes;
    char err[512] = "";
    cr_assert_eq(mg_fixture_generate(path, &o, err, sizeof err), 0, "generate %s: %s", path, err);
    return path;
}

static const char *generate(const char *name, uint64_t seed, bool corescope_hashes)
{
    return generate_at(name, seed, corescope_hashes, true);
}

static void expect_hash(const char *raw, const char *want, bool whole)
{
    char got[17];
    uint64_t value;
    cr_expect_eq(mg_fixture_content_hash(raw, strlen(raw), got, &value), whole, "%s", raw);
    cr_expect_str_eq(got, want, "content hash of %s", raw);
}

/* Worked out by hand from the rule: e.g. printf '\x03\xde\xad\xbe\xef' | sha256sum. */
Test(fixture_hash, content_hash_follows_corescopes_rule_on_known_vectors)
{
    /* TRACE, direct, hop size 2 and no hops: type 9, the path-length byte 0x40 and 0x00. */
    expect_hash("26400102030405060708090a", "98382dfa39a46e45", true);
    /* The same TRACE heard one hop on: the length byte counts, the hop does not. */
    expect_hash("2641AABB0102030405060708090a", "e89a306aa16482bb", true);
    /* An ACK by transport flood (route 0: 4 transport bytes), two 2-byte hops: only type 3
     * and the payload DEADBEEF count, so by transport direct (route 3) with other transport
     * codes, other hops and lower case it is the same. */
    expect_hash("0C1122334442AABBCCDDDEADBEEF", "2a4f80a18e795b28", true);
    expect_hash("0F99999999418877deadbeef", "2a4f80a18e795b28", true);
    /* Not a packet: the first 16 characters as they are. */
    expect_hash("zz00112233445566778899", "zz00112233445566", false);
    expect_hash("0C112233", "0C112233", false);
    expect_hash("11", "11", false);
}

/* The script's last line, "total ROWS MISMATCHES", and the lines before it, one per payload
 * type and route class. */
static int run_script(const char *db, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' 2>&1", HASH_SCRIPT, db);
    return mg_test_shell(cmd, out, cap);
}

Test(fixture_hash, every_hash_is_the_content_hash_pythons_hashlib_works_out)
{
    char lines[4096], *out = lines + 1;
    lines[0] = '\n';
    for (uint64_t seed = 1; seed <= 3; seed++) {
        const char *db = generate("h.db", seed, true);
        int rc = run_script(db, out, sizeof lines - 1);
        cr_assert_eq(rc, 0, "seed %llu: mismatches:\n%s", (unsigned long long)seed, out);
        cr_expect(strstr(out, "total 750 0\n"), "seed %llu:\n%s", (unsigned long long)seed, out);
        /* Every payload type the generator writes, plain and with transport codes. */
        static const char *const types[] = {"\n0 plain", "\n1 plain",  "\n2 plain",  "\n3 plain",
                                            "\n4 plain", "\n5 plain",  "\n7 plain",  "\n8 plain",
                                            "\n9 plain", "\n11 plain", " transport "};
        for (size_t i = 0; i < sizeof types / sizeof *types; i++)
            cr_expect(strstr(lines, types[i]) != NULL, "seed %llu: no row of '%s':\n%s",
                      (unsigned long long)seed, types[i] + 1, out);
        unlink(db);
    }
    /* Without the option the hashes are not content hashes (the script says so). */
    const char *db = generate("plain.db", 1, false);
    cr_expect_eq(run_script(db, out, sizeof lines - 1), 1, "%s", out);
    cr_expect(strstr(out, "total 750 750\n"), "%s", out);
}

Test(fixture_hash, only_the_hash_column_changes)
{
    const char *with = generate("with.db", 5, true);
    char cmd[1024], a[4096], b[4096];
    const char *q = "SELECT id, raw_hex, first_seen, route_type, payload_type, decoded_json, "
                    "created_at, channel_hash, from_pubkey, scope_name, last_seen FROM "
                    "transmissions ORDER BY id; SELECT * FROM observations ORDER BY id";
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"%s\" | md5sum", with, q);
    cr_assert_eq(mg_test_shell(cmd, a, sizeof a), 0, "%s", a);
    const char *without = generate("without.db", 5, false);
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"%s\" | md5sum", without, q);
    cr_assert_eq(mg_test_shell(cmd, b, sizeof b), 0, "%s", b);
    cr_expect(strncmp(a, "d41d8cd98f00b204", 16) != 0, "sqlite3 wrote nothing");
    cr_expect_str_eq(a, b);
}

/* CoreScope's server, started on the file, finishes its hash migration; what it logged. */
static void corescope_on(const char *db, char *out, size_t cap)
{
    int port = mg_test_free_port();
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/cfg' && cp '%s' '%s/cfg/config.json' && cd '%s' && "
             "{ CORESCOPE_LISTEN_HOST=127.0.0.1 timeout 150 '%s' -db '%s' -port %d -config-dir "
             "'%s/cfg' > '%s/peer.log' 2>&1 & pid=$!; "
             "for i in $(seq 1200); do curl -sf http://127.0.0.1:%d/api/stats | "
             "grep -q '\"hashMigrationComplete\":true' && break; sleep 0.1; done; "
             "curl -sf http://127.0.0.1:%d/api/stats | grep -o '\"hashMigrationComplete\":true'; "
             "kill $pid; wait $pid; grep -c 'hash-migrate' '%s/peer.log'; }",
             dir, CORESCOPE_CONFIG, dir, dir, CORESCOPE_SERVER, db, port, dir, dir, port, port,
             dir);
    mg_test_shell(cmd, out, cap);
}

static char *hashes_of(const char *db)
{
    char cmd[512];
    static char out[2][65536];
    static int next;
    char *o = out[next++ % 2];
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' 'SELECT id, hash FROM transmissions ORDER BY id' 2>&1",
             db);
    cr_assert_eq(mg_test_shell(cmd, o, sizeof out[0]), 0, "%s", o);
    return o;
}

Test(fixture_hash, corescopes_server_rewrites_no_hash_of_such_a_file, .timeout = 180)
{
    if (access(CORESCOPE_SERVER, X_OK) != 0)
        cr_skip_test("CoreScope's server is not built at %s", CORESCOPE_SERVER);
    if (access(CORESCOPE_CONFIG, R_OK) != 0)
        cr_skip_test("no %s", CORESCOPE_CONFIG);
    /* Today's traffic: CoreScope's server loads only its retention window. */
    const char *db = generate_at("peer.db", 2, true, false);
    char *before = strdup(hashes_of(db));
    char out[4096];
    corescope_on(db, out, sizeof out);
    cr_expect_str_eq(out, "\"hashMigrationComplete\":true\n0\n",
                     "CoreScope's server did not finish its hash migration, or logged a "
                     "rewrite");
    cr_expect_str_eq(hashes_of(db), before, "CoreScope's server changed a hash");
    free(before);
}
