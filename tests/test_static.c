/* SPDX-License-Identifier: ISC */
/*
 * Static files from MESHGATE_PUBLIC_DIR: served for paths outside /api/, never from
 * anywhere else (no "..", no encoded slash, no symbolic link, only regular files).
 */
#include "harness.h"
#include "inproc.h"

#include "scoreboard.h"
#include "segment.h"
#include "static_files.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

TestSuite(static_files, .timeout = 30);

struct fixture {
    char dir[128];    /* holds the database, public/ and a secret outside public/ */
    char public[256]; /* the public directory */
    char db[256];
    struct mg_test_ctx t;
};

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void in_dir(char *out, size_t cap, const char *dir, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

/* public/ with index.html, app.css, sub/index.html, empty/; a secret next to public/. */
static void open_fixture(struct fixture *f, bool public_on)
{
    mg_test_tmpdir(f->dir, sizeof f->dir);
    in_dir(f->public, sizeof f->public, f->dir, "public");
    in_dir(f->db, sizeof f->db, f->dir, "test.db");
    cr_assert_eq(mg_test_make_db(f->db, false, NULL), 0);
    cr_assert_eq(mkdir(f->public, 0755), 0);
    char path[512];
    in_dir(path, sizeof path, f->public, "sub");
    cr_assert_eq(mkdir(path, 0755), 0);
    in_dir(path, sizeof path, f->public, "empty");
    cr_assert_eq(mkdir(path, 0755), 0);
    write_file(f->public, "index.html", "<!doctype html><title>CoreScope</title>\n");
    write_file(f->public, "app.css", "body { color: black }\n");
    write_file(f->public, "sub/index.html", "sub index\n");
    write_file(f->dir, "secret.txt", "TOP SECRET\n");
    cr_assert(mg_test_ctx_open(&f->t, f->db));
    if (public_on)
        snprintf(f->t.seg.config->public_dir, sizeof f->t.seg.config->public_dir, "%s", f->public);
}

static void close_fixture(struct fixture *f)
{
    mg_test_ctx_close(&f->t);
    mg_test_rmdir(f->dir);
}

static const char *extra_header(struct fixture *f, const char *name)
{
    static char value[256];
    size_t n = strlen(name);
    const char *h = f->t.res.headers.data;
    for (const char *line = h; line && line < h + f->t.res.headers.len;) {
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *end = strstr(line, "\r\n");
            snprintf(value, sizeof value, "%.*s", (int)(end - line - n - 2), line + n + 2);
            return value;
        }
        line = strstr(line, "\r\n");
        line = line ? line + 2 : NULL;
    }
    return NULL;
}

static void expect_refused(struct fixture *f, const char *target, int status)
{
    mg_test_ctx_get(&f->t, target);
    cr_expect_eq(f->t.res.status, status, "%s answered %d: %s", target, f->t.res.status,
                 f->t.res.body.data);
    cr_expect_str_eq(f->t.res.content_type, "application/json", "%s", target);
    cr_expect(strncmp(f->t.res.body.data, "{\"error\":\"", 10) == 0, "%s: %s", target,
              f->t.res.body.data);
    cr_expect(strstr(f->t.res.body.data, "SECRET") == NULL, "%s leaked the secret", target);
    cr_expect(strstr(f->t.res.body.data, "root:") == NULL, "%s leaked /etc/passwd", target);
}

Test(static_files, root_serves_index_html_that_is_never_cached_stale)
{
    struct fixture f;
    open_fixture(&f, true);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/"), 200);
    cr_expect_str_eq(f.t.res.body.data, "<!doctype html><title>CoreScope</title>\n");
    cr_expect_str_eq(f.t.res.content_type, "text/html; charset=utf-8");
    cr_expect_str_eq(extra_header(&f, "Cache-Control"), "no-cache");
    cr_expect_not(f.t.res.no_store);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/index.html"), 200);
    cr_expect_str_eq(extra_header(&f, "Cache-Control"), "no-cache");
    close_fixture(&f);
}

Test(static_files, directory_paths_serve_their_index_html)
{
    struct fixture f;
    open_fixture(&f, true);
    const char *targets[] = {"/sub/", "/sub", "//sub//", "/sub?x=1"};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        cr_assert_eq(mg_test_ctx_get(&f.t, targets[i]), 200, "%s", targets[i]);
        cr_expect_str_eq(f.t.res.body.data, "sub index\n", "%s", targets[i]);
        cr_expect_str_eq(f.t.res.content_type, "text/html; charset=utf-8");
        cr_expect_str_eq(extra_header(&f, "Cache-Control"), "no-cache");
    }
    /* A directory without index.html has nothing to serve. */
    cr_expect_eq(mg_test_ctx_get(&f.t, "/empty/"), 404);
    cr_expect_eq(mg_test_ctx_get(&f.t, "/empty"), 404);
    close_fixture(&f);
}

Test(static_files, other_files_are_cacheable_for_an_hour)
{
    struct fixture f;
    open_fixture(&f, true);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/app.css"), 200);
    cr_expect_str_eq(f.t.res.body.data, "body { color: black }\n");
    cr_expect_str_eq(f.t.res.content_type, "text/css; charset=utf-8");
    cr_expect_str_eq(extra_header(&f, "Cache-Control"), "public, max-age=3600");
    close_fixture(&f);
}

Test(static_files, content_type_follows_the_extension)
{
    const struct {
        const char *name, *type;
    } cases[] = {
        {"a.html", "text/html; charset=utf-8"},
        {"a.css", "text/css; charset=utf-8"},
        {"a.js", "text/javascript; charset=utf-8"},
        {"a.mjs", "text/javascript; charset=utf-8"},
        {"a.json", "application/json"},
        {"a.svg", "image/svg+xml"},
        {"a.png", "image/png"},
        {"a.jpg", "image/jpeg"},
        {"a.JPEG", "image/jpeg"},
        {"a.gif", "image/gif"},
        {"favicon.ico", "image/x-icon"},
        {"a.webp", "image/webp"},
        {"a.woff", "font/woff"},
        {"a.woff2", "font/woff2"},
        {"robots.txt", "text/plain; charset=utf-8"},
        {"app.js.map", "application/json"},
        {"a.wasm", "application/wasm"},
        {"a.bin", "application/octet-stream"},
        {"Makefile", "application/octet-stream"},
        {"dir.css/file", "application/octet-stream"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_str_eq(mg_static_content_type(cases[i].name), cases[i].type, "%s", cases[i].name);

    struct fixture f;
    open_fixture(&f, true);
    write_file(f.public, "app.mjs", "export {};\n");
    write_file(f.public, "logo.svg", "<svg/>\n");
    cr_assert_eq(mg_test_ctx_get(&f.t, "/app.mjs"), 200);
    cr_expect_str_eq(f.t.res.content_type, "text/javascript; charset=utf-8");
    cr_assert_eq(mg_test_ctx_get(&f.t, "/logo.svg"), 200);
    cr_expect_str_eq(f.t.res.content_type, "image/svg+xml");
    close_fixture(&f);
}

Test(static_files, missing_files_answer_404_json)
{
    struct fixture f;
    open_fixture(&f, true);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/nope.js"), 404);
    cr_expect_str_eq(f.t.res.body.data, "{\"error\":\"Not found\"}\n");
    cr_expect_str_eq(f.t.res.content_type, "application/json");
    cr_expect(f.t.res.no_store);
    cr_expect_eq(mg_test_ctx_get(&f.t, "/app.css/x"), 404, "a file is not a directory");
    close_fixture(&f);
}

Test(static_files, dot_dot_segments_are_refused_even_percent_encoded)
{
    struct fixture f;
    open_fixture(&f, true);
    const char *targets[] = {"/../etc/passwd",  "/..",
                             "/%2e%2e/x",       "/%2E%2E/secret.txt",
                             "/a/../../x",      "/sub/../index.html",
                             "/./index.html",   "/sub/%2e/index.html",
                             "/.%2e/secret.txt"};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
        expect_refused(&f, targets[i], 400);
    close_fixture(&f);
}

Test(static_files, an_encoded_slash_is_refused)
{
    struct fixture f;
    open_fixture(&f, true);
    expect_refused(&f, "/sub%2findex.html", 400);
    expect_refused(&f, "/..%2Fsecret.txt", 400);
    expect_refused(&f, "/%2e%2e%2fsecret.txt", 400);
    close_fixture(&f);
}

Test(static_files, an_encoded_nul_is_refused)
{
    struct fixture f;
    open_fixture(&f, true);
    expect_refused(&f, "/index.html%00.png", 400);
    close_fixture(&f);
}

Test(static_files, hidden_files_are_not_served)
{
    struct fixture f;
    open_fixture(&f, true);
    write_file(f.public, ".env", "PASSWORD=x\n");
    expect_refused(&f, "/.env", 404);
    cr_expect(strstr(f.t.res.body.data, "PASSWORD") == NULL);
    close_fixture(&f);
}

Test(static_files, a_symlink_pointing_outside_is_refused)
{
    struct fixture f;
    open_fixture(&f, true);
    char target[512], link[512];
    in_dir(target, sizeof target, f.dir, "secret.txt");
    in_dir(link, sizeof link, f.public, "leak.txt");
    cr_assert_eq(symlink(target, link), 0);
    in_dir(link, sizeof link, f.public, "etc");
    cr_assert_eq(symlink("/etc", link), 0);
    in_dir(link, sizeof link, f.public, "up");
    cr_assert_eq(symlink("..", link), 0);
    expect_refused(&f, "/leak.txt", 403);
    expect_refused(&f, "/etc/passwd", 403);
    expect_refused(&f, "/up/secret.txt", 403);
    close_fixture(&f);
}

Test(static_files, a_symlink_inside_the_directory_is_refused_too)
{
    /* RESOLVE_NO_SYMLINKS refuses every link, harmless or not: links are not served. */
    struct fixture f;
    open_fixture(&f, true);
    char link[512];
    in_dir(link, sizeof link, f.public, "alias.css");
    cr_assert_eq(symlink("app.css", link), 0);
    in_dir(link, sizeof link, f.public, "subalias");
    cr_assert_eq(symlink("sub", link), 0);
    expect_refused(&f, "/alias.css", 403);
    expect_refused(&f, "/subalias/index.html", 403);
    expect_refused(&f, "/subalias/", 403);
    close_fixture(&f);
}

Test(static_files, only_regular_files_are_served)
{
    struct fixture f;
    open_fixture(&f, true);
    char path[512];
    in_dir(path, sizeof path, f.public, "pipe");
    cr_assert_eq(mkfifo(path, 0644), 0);
    /* Opening a FIFO must not wait for a writer. */
    expect_refused(&f, "/pipe", 403);
    close_fixture(&f);
}

static void link_in(const char *target, const char *dir, const char *name, bool symbolic)
{
    char path[512];
    in_dir(path, sizeof path, dir, name);
    cr_assert_eq(symbolic ? symlink(target, path) : link(target, path), 0, "%s -> %s: %s", path,
                 target, strerror(errno));
}

/* Every event the watch saw since the last call (non-blocking). */
static unsigned inotify_events(int fd)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    unsigned events = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        for (char *p = buf; p < buf + n;
             p += sizeof(struct inotify_event) + ((struct inotify_event *)(void *)p)->len)
            events++;
    return events;
}

/*
 * The database (live, in WAL mode, a writer's connection open), its side files and
 * meshgate's secrets, put in the public directory by hard and symbolic links under any
 * name: each answers 404 and none is ever opened (inotify IN_OPEN on each file: an open of
 * the database file in a worker would drop its process's POSIX locks on it). A NAME-wal
 * beside a NAME is refused by its name alone; ordinary files are still served.
 */
Test(static_files, the_database_and_meshgates_secrets_are_404_and_never_opened)
{
    struct fixture f;
    open_fixture(&f, true);
    sqlite3 *writer;
    cr_assert_eq(mg_test_sqlite_open(f.db, &writer), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(writer,
                              "PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS mg_guard(x);"
                              " INSERT INTO mg_guard VALUES (1)",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(writer));
    struct mg_config *cfg = f.t.seg.config;
    char keys[300], env[300], corescope[300], wal[300], shm[300];
    write_file(f.dir, "keys", "0123456789abcdef0123456789abcdef\n");
    write_file(f.dir, "meshgate.env", "MESHGATE_WORKERS=1\n");
    write_file(f.dir, "corescope.json", "{\"apiKey\": \"secret\"}\n");
    in_dir(keys, sizeof keys, f.dir, "keys");
    in_dir(env, sizeof env, f.dir, "meshgate.env");
    in_dir(corescope, sizeof corescope, f.dir, "corescope.json");
    snprintf(wal, sizeof wal, "%s-wal", f.db);
    snprintf(shm, sizeof shm, "%s-shm", f.db);
    snprintf(cfg->api_keys_file, sizeof cfg->api_keys_file, "%s", keys);
    snprintf(cfg->env_file, sizeof cfg->env_file, "%s", env);
    snprintf(cfg->corescope_config, sizeof cfg->corescope_config, "%s", corescope);
    cr_assert_str_eq(cfg->db_path, f.db);

    char dbdir[300];
    in_dir(dbdir, sizeof dbdir, f.public, "dbdir");
    cr_assert_eq(mkdir(dbdir, 0755), 0);
    link_in(f.db, f.public, "meshcore.db", false);
    link_in(f.db, f.public, "pretty.png", false);
    link_in(f.db, f.public, "linked.db", true);
    link_in(f.db, dbdir, "index.html", false);
    link_in(wal, f.public, "wal.bin", false);
    link_in(shm, f.public, "shm.bin", false);
    link_in(keys, f.public, "keys.txt", false);
    link_in(env, f.public, "env.txt", false);
    link_in(corescope, f.public, "config.json", false);
    write_file(f.public, "other.db", "not a database\n");
    write_file(f.public, "other.db-journal", "a journal by its name\n");
    write_file(f.public, "notes-wal", "no notes beside it: served\n");

    int watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    cr_assert(watch >= 0);
    const char *const watched[] = {f.db, wal, shm, keys, env, corescope};
    for (size_t i = 0; i < sizeof watched / sizeof watched[0]; i++)
        cr_assert(inotify_add_watch(watch, watched[i], IN_OPEN | IN_ACCESS) >= 0, "%s", watched[i]);

    const char *const refused[] = {"/meshcore.db", "/pretty.png",  "/linked.db",       "/dbdir",
                                   "/dbdir/",      "/wal.bin",     "/shm.bin",         "/keys.txt",
                                   "/env.txt",     "/config.json", "/other.db-journal"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        expect_refused(&f, refused[i], 404);
        cr_expect_str_eq(f.t.res.body.data, "{\"error\":\"Not found\"}\n", "%s", refused[i]);
    }
    cr_expect_eq(inotify_events(watch), 0, "a guarded file was opened or read");
    cr_expect_eq(mg_test_ctx_get(&f.t, "/other.db"), 200);
    cr_expect_eq(mg_test_ctx_get(&f.t, "/notes-wal"), 200);
    cr_expect_eq(mg_test_ctx_get(&f.t, "/app.css"), 200);
    close(watch);
    sqlite3_close(writer);
    close_fixture(&f);
}

/* --check names each guarded file it finds in the public directory (and passes). */
Test(static_files, check_warns_of_the_database_and_secrets_in_the_public_directory)
{
    struct fixture f;
    open_fixture(&f, true);
    char keys_setting[400], public_setting[400], db_setting[400], shm_setting[128],
        listen_setting[64];
    mg_test_write_keys_file(f.dir, "0123456789abcdef0123456789abcdef", keys_setting,
                            sizeof keys_setting);
    snprintf(public_setting, sizeof public_setting, "MESHGATE_PUBLIC_DIR=%s", f.public);
    snprintf(db_setting, sizeof db_setting, "MESHGATE_DB=%s", f.db);
    snprintf(shm_setting, sizeof shm_setting, "MESHGATE_SHM_NAME=/mgtest-guard-%d", (int)getpid());
    snprintf(listen_setting, sizeof listen_setting, "MESHGATE_LISTEN=127.0.0.1:%d",
             mg_test_free_port());
    const char *env[] = {"MG_TEST_ARG=--check", db_setting,   shm_setting,          listen_setting,
                         public_setting,        keys_setting, "MESHGATE_WORKERS=1", NULL};
    static char out[16384];
    int status = mg_test_run_expect_exit(env, out, sizeof out, 10000);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
    cr_expect_null(strstr(out, "does not belong in the public directory"), "%s", out);

    char keys[300];
    in_dir(keys, sizeof keys, f.dir, "keys");
    char sub[300];
    in_dir(sub, sizeof sub, f.public, "sub");
    link_in(f.db, sub, "copy.db", false);
    link_in(keys, f.public, "k.txt", true);
    status = mg_test_run_expect_exit(env, out, sizeof out, 10000);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
    cr_expect(strstr(out, "sub/copy.db is MESHGATE_DB:"), "%s", out);
    cr_expect(strstr(out, "k.txt is MESHGATE_API_KEYS_FILE:"), "%s", out);
    close_fixture(&f);
}

Test(static_files, range_values_parse_as_rfc_9110_says)
{
    const struct {
        const char *value;
        uint64_t size;
        int result;
        uint64_t first, last;
    } cases[] = {
        {"bytes=0-99", 1000, MG_RANGE_OK, 0, 99},
        {"bytes=100-", 1000, MG_RANGE_OK, 100, 999},
        {"bytes=-10", 1000, MG_RANGE_OK, 990, 999},
        {"bytes=-5000", 1000, MG_RANGE_OK, 0, 999},
        {"bytes=990-5000", 1000, MG_RANGE_OK, 990, 999},
        {"BYTES=1-1", 1000, MG_RANGE_OK, 1, 1},
        {" bytes=999-999 ", 1000, MG_RANGE_OK, 999, 999},
        {"bytes=1000-", 1000, MG_RANGE_UNSATISFIABLE, 0, 0},
        {"bytes=5000-6000", 1000, MG_RANGE_UNSATISFIABLE, 0, 0},
        {"bytes=-0", 1000, MG_RANGE_UNSATISFIABLE, 0, 0},
        {"bytes=99999999999999999999999-", 1000, MG_RANGE_UNSATISFIABLE, 0, 0},
        {"bytes=0-1,5-6", 1000, MG_RANGE_IGNORED, 0, 0}, /* several: the whole file */
        {"bytes=5-1", 1000, MG_RANGE_IGNORED, 0, 0},
        {"bytes=", 1000, MG_RANGE_IGNORED, 0, 0},
        {"bytes=-", 1000, MG_RANGE_IGNORED, 0, 0},
        {"bytes=a-b", 1000, MG_RANGE_IGNORED, 0, 0},
        {"bytes=+1-2", 1000, MG_RANGE_IGNORED, 0, 0},
        {"bytes=1-2x", 1000, MG_RANGE_IGNORED, 0, 0},
        {"items=0-1", 1000, MG_RANGE_IGNORED, 0, 0},
        {"bytes=0-", 0, MG_RANGE_IGNORED, 0, 0}, /* an empty file: 200, empty */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t first = 7, last = 7;
        int r = mg_static_parse_range(cases[i].value, strlen(cases[i].value), cases[i].size, &first,
                                      &last);
        cr_expect_eq(r, cases[i].result, "\"%s\" of %llu: %d", cases[i].value,
                     (unsigned long long)cases[i].size, r);
        if (r == MG_RANGE_OK && cases[i].result == MG_RANGE_OK)
            cr_expect(first == cases[i].first && last == cases[i].last,
                      "\"%s\": %llu-%llu, expected %llu-%llu", cases[i].value,
                      (unsigned long long)first, (unsigned long long)last,
                      (unsigned long long)cases[i].first, (unsigned long long)cases[i].last);
    }
}

/* The byte at offset i of the generated large file: differs from block to block, so a
 * misplaced chunk is seen. */
static unsigned char pattern_byte(uint64_t i)
{
    uint64_t block = i >> 12;
    return (unsigned char)((block * 2654435761u >> 7) ^ (i & 0xff));
}

static void write_pattern_file(const char *path, uint64_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0, "cannot write %s", path);
    static unsigned char block[1 << 16];
    for (uint64_t off = 0; off < size; off += sizeof block) {
        size_t n = size - off < sizeof block ? (size_t)(size - off) : sizeof block;
        for (size_t i = 0; i < n; i++)
            block[i] = pattern_byte(off + i);
        cr_assert_eq(write(fd, block, n), (ssize_t)n);
    }
    close(fd);
}

/* Sends a GET (with extra header lines) and reads the head; returns the status or -1. */
static int send_and_read_head(int fd, const char *target, const char *extra, char *head, size_t cap)
{
    char req[1024];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", target,
                     extra ? extra : "");
    if (!mg_test_send(fd, req, (size_t)n))
        return -1;
    size_t have = 0;
    while (have + 1 < cap) {
        ssize_t got = recv(fd, head + have, 1, 0); /* byte by byte: the body stays queued */
        if (got <= 0)
            return -1;
        have++;
        if (have >= 4 && memcmp(head + have - 4, "\r\n\r\n", 4) == 0)
            break;
    }
    head[have] = '\0';
    int status = 0;
    return sscanf(head, "HTTP/1.1 %d", &status) == 1 ? status : -1;
}

/* Reads exactly len bytes of body and checks each against the pattern from offset. */
static bool read_pattern_body(int fd, uint64_t offset, uint64_t len, size_t chunk)
{
    static unsigned char buf[1 << 16];
    if (chunk > sizeof buf)
        chunk = sizeof buf;
    uint64_t have = 0;
    while (have < len) {
        size_t want = len - have < chunk ? (size_t)(len - have) : chunk;
        ssize_t got = recv(fd, buf, want, 0);
        if (got <= 0)
            return false;
        for (ssize_t i = 0; i < got; i++)
            if (buf[i] != pattern_byte(offset + have + (uint64_t)i))
                return false;
        have += (uint64_t)got;
    }
    return true;
}

/* VmRSS of pid in KiB, 0 when unknown. */
static long rss_kib(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static long workers_rss_kib(const struct mg_test_server *s)
{
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
    long total = 0;
    for (uint32_t i = 0; i < seg.slot_count; i++) {
        int pid = atomic_load(&seg.slots[i].pid);
        if (pid > 0)
            total += rss_kib(pid);
    }
    mg_segment_detach(&seg);
    return total;
}

static char *header_value(const char *head, const char *name, char *out, size_t cap)
{
    struct mg_test_response r;
    memset(&r, 0, sizeof r);
    snprintf(r.head, sizeof r.head, "%s", head);
    return mg_test_header(&r, name, out, cap) ? out : NULL;
}

#define LARGE_BYTES ((uint64_t)64 * 1024 * 1024 + 12345)
#define SLOW_READERS 8

Test(static_files, a_large_file_read_slowly_by_many_is_streamed_in_bounded_memory, .timeout = 120)
{
    char dir[128], public[256], env_public[300], path[512];
    mg_test_tmpdir(dir, sizeof dir);
    in_dir(public, sizeof public, dir, "public");
    cr_assert_eq(mkdir(public, 0755), 0);
    in_dir(path, sizeof path, public, "big.bin");
    write_pattern_file(path, LARGE_BYTES);
    snprintf(env_public, sizeof env_public, "MESHGATE_PUBLIC_DIR=%s", public);
    const char *env[] = {env_public, "MESHGATE_WORKERS=2", "MESHGATE_SEND_TIMEOUT_MS=100000", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    long idle_kib = workers_rss_kib(&s);

    /* Every reader asks, takes its first 256 KiB, then stops reading: the server holds
     * SLOW_READERS responses of 64 MiB in flight at once. Held whole, as they once were,
     * that is over 512 MiB. */
    int fd[SLOW_READERS];
    char head[4096], v[64];
    for (int i = 0; i < SLOW_READERS; i++) {
        fd[i] = mg_test_connect(s.port);
        cr_assert(fd[i] >= 0);
        int rcvbuf = 64 * 1024;
        setsockopt(fd[i], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        cr_assert_eq(
            send_and_read_head(fd[i], "/big.bin", "Accept-Encoding: gzip\r\n", head, sizeof head),
            200, "%s", head);
        cr_expect(header_value(head, "Content-Length", v, sizeof v) &&
                      strtoull(v, NULL, 10) == LARGE_BYTES,
                  "%s", head);
        cr_expect(!header_value(head, "Content-Encoding", v, sizeof v), "%s", head);
        cr_assert(read_pattern_body(fd[i], 0, 256 * 1024, 4096), "reader %d: wrong bytes", i);
    }
    mg_test_sleep_ms(300); /* the workers fill the sockets' buffers and wait */
    long busy_kib = workers_rss_kib(&s);
    cr_expect_lt(busy_kib - idle_kib, 64 * 1024,
                 "the workers grew by %ld KiB with %d slow readers of a %llu-byte file",
                 busy_kib - idle_kib, SLOW_READERS, (unsigned long long)LARGE_BYTES);

    /* Then every reader takes the rest, a little at a time, round robin. */
    uint64_t offset[SLOW_READERS];
    for (int i = 0; i < SLOW_READERS; i++)
        offset[i] = 256 * 1024;
    for (bool left = true; left;) {
        left = false;
        for (int i = 0; i < SLOW_READERS; i++) {
            if (offset[i] == LARGE_BYTES)
                continue;
            uint64_t n = LARGE_BYTES - offset[i] < 4 << 20 ? LARGE_BYTES - offset[i] : 4 << 20;
            cr_assert(read_pattern_body(fd[i], offset[i], n, 1 << 16),
                      "reader %d: wrong bytes near %llu", i, (unsigned long long)offset[i]);
            offset[i] += n;
            left = true;
        }
    }
    /* Kept alive: the same connection answers again. */
    cr_assert_eq(send_and_read_head(fd[0], "/big.bin", "Range: bytes=-3\r\n", head, sizeof head),
                 206, "%s", head);
    cr_expect(read_pattern_body(fd[0], LARGE_BYTES - 3, 3, 3));
    for (int i = 0; i < SLOW_READERS; i++)
        close(fd[i]);
    mg_test_server_stop(&s, 5000);
    mg_test_rmdir(dir);
}

Test(static_files, ranges_get_206_or_416_and_several_ranges_get_the_whole_file)
{
    char dir[128], public[256], env_public[300], path[512];
    mg_test_tmpdir(dir, sizeof dir);
    in_dir(public, sizeof public, dir, "public");
    cr_assert_eq(mkdir(public, 0755), 0);
    in_dir(path, sizeof path, public, "data.bin");
    enum { SIZE = 100000 };
    write_pattern_file(path, SIZE);
    write_file(public, "app.js", "console.log(1);\n");
    static char text[MG_STATIC_GZIP_MAX_BYTES + 2];
    memset(text, 'a', sizeof text - 1);
    text[4096] = '\0';
    write_file(public, "small.css", text);
    text[4096] = 'a';
    text[MG_STATIC_GZIP_MAX_BYTES + 1] = '\0';
    write_file(public, "large.css", text);
    snprintf(env_public, sizeof env_public, "MESHGATE_PUBLIC_DIR=%s", public);
    const char *env[] = {env_public, "MESHGATE_WORKERS=1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    char head[4096], v[128];
    int fd = mg_test_connect(s.port);

    cr_assert_eq(
        send_and_read_head(fd, "/data.bin", "Range: bytes=1000-1999\r\n", head, sizeof head), 206,
        "%s", head);
    cr_expect_str_eq(header_value(head, "Content-Range", v, sizeof v), "bytes 1000-1999/100000");
    cr_expect_str_eq(header_value(head, "Content-Length", v, sizeof v), "1000");
    cr_expect_str_eq(header_value(head, "Accept-Ranges", v, sizeof v), "bytes");
    cr_expect(read_pattern_body(fd, 1000, 1000, 4096));

    cr_assert_eq(send_and_read_head(fd, "/data.bin", "Range: bytes=99990-\r\n", head, sizeof head),
                 206, "%s", head);
    cr_expect_str_eq(header_value(head, "Content-Range", v, sizeof v), "bytes 99990-99999/100000");
    cr_expect(read_pattern_body(fd, 99990, 10, 4096));

    cr_assert_eq(send_and_read_head(fd, "/data.bin", "Range: bytes=-100\r\n", head, sizeof head),
                 206, "%s", head);
    cr_expect_str_eq(header_value(head, "Content-Range", v, sizeof v), "bytes 99900-99999/100000");
    cr_expect(read_pattern_body(fd, 99900, 100, 4096));

    /* Past the end: 416 naming the size, with a JSON error body. */
    cr_assert_eq(send_and_read_head(fd, "/data.bin", "Range: bytes=100000-\r\n", head, sizeof head),
                 416, "%s", head);
    cr_expect_str_eq(header_value(head, "Content-Range", v, sizeof v), "bytes */100000");
    cr_assert(header_value(head, "Content-Length", v, sizeof v));
    size_t len = strtoul(v, NULL, 10);
    char body[512] = "";
    cr_assert_lt(len, sizeof body);
    cr_assert_eq(recv(fd, body, len, MSG_WAITALL), (ssize_t)len);
    cr_expect(strncmp(body, "{\"error\":", 9) == 0, "%s", body);

    /* Several ranges: the whole file, 200 (RFC 9110 allows ignoring Range). */
    cr_assert_eq(send_and_read_head(fd, "/data.bin", "Range: bytes=0-1,5-6\r\n", head, sizeof head),
                 200, "%s", head);
    cr_expect_str_eq(header_value(head, "Content-Length", v, sizeof v), "100000");
    cr_expect(read_pattern_body(fd, 0, SIZE, 4096));

    /* If-Range: no validator is ever sent, so the range is ignored. */
    cr_assert_eq(send_and_read_head(fd, "/data.bin", "Range: bytes=0-9\r\nIf-Range: \"x\"\r\n",
                                    head, sizeof head),
                 200, "%s", head);
    cr_expect(read_pattern_body(fd, 0, SIZE, 4096));

    /* HEAD with a range: the 206 head, no body (the next answer follows at once). */
    const char *both = "HEAD /data.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=10-19\r\n\r\n";
    cr_assert(mg_test_send(fd, both, strlen(both)));
    struct mg_test_response r;
    cr_assert(mg_test_read_response(fd, &r, true, 5000));
    cr_expect_eq(r.status, 206);
    cr_expect(mg_test_header(&r, "Content-Length", v, sizeof v) && strcmp(v, "10") == 0, "%s",
              r.head);
    mg_test_response_free(&r);

    /* A small text file for a client that takes gzip is still compressed (when large
     * enough) or served as it is; a range of it is served as it is. */
    cr_assert_eq(send_and_read_head(fd, "/app.js", "Range: bytes=0-6\r\n", head, sizeof head), 206,
                 "%s", head);
    cr_expect_str_eq(header_value(head, "Content-Length", v, sizeof v), "7");
    cr_assert_eq(recv(fd, body, 7, MSG_WAITALL), 7);
    cr_expect(memcmp(body, "console", 7) == 0);

    /* gzip: a small text file is compressed for a client that takes it; one past
     * MG_STATIC_GZIP_MAX_BYTES goes out as it is, streamed. */
    cr_assert_eq(
        send_and_read_head(fd, "/small.css", "Accept-Encoding: gzip\r\n", head, sizeof head), 200,
        "%s", head);
    cr_expect_str_eq(header_value(head, "Content-Encoding", v, sizeof v), "gzip");
    cr_assert(header_value(head, "Content-Length", v, sizeof v));
    len = strtoul(v, NULL, 10);
    cr_expect_lt(len, 4096, "compressed");
    char *zipped = malloc(len);
    cr_assert_eq(recv(fd, zipped, len, MSG_WAITALL), (ssize_t)len);
    free(zipped);
    cr_assert_eq(
        send_and_read_head(fd, "/large.css", "Accept-Encoding: gzip\r\n", head, sizeof head), 200,
        "%s", head);
    cr_expect(!header_value(head, "Content-Encoding", v, sizeof v), "%s", head);
    cr_expect_str_eq(header_value(head, "Content-Length", v, sizeof v), "1048577");
    zipped = malloc(1048577);
    cr_assert_eq(recv(fd, zipped, 1048577, MSG_WAITALL), 1048577);
    free(zipped);
    close(fd);
    mg_test_server_stop(&s, 5000);
    mg_test_rmdir(dir);
}

Test(static_files, api_paths_never_fall_through_to_files)
{
    struct fixture f;
    open_fixture(&f, true);
    char path[512];
    in_dir(path, sizeof path, f.public, "api");
    cr_assert_eq(mkdir(path, 0755), 0);
    write_file(f.public, "api/nope", "a file\n");
    cr_assert_eq(mg_test_ctx_get(&f.t, "/api/nope"), 404);
    cr_expect_str_eq(f.t.res.body.data, "{\"error\":\"Not found\"}\n");
    close_fixture(&f);
}

Test(static_files, are_off_when_no_public_directory_is_set)
{
    struct fixture f;
    open_fixture(&f, false);
    cr_assert_eq(f.t.seg.config->public_dir[0], '\0', "off by default");
    cr_assert_eq(mg_test_ctx_get(&f.t, "/index.html"), 404);
    cr_expect_str_eq(f.t.res.body.data, "{\"error\":\"Not found\"}\n");
    cr_expect_eq(mg_test_ctx_get(&f.t, "/"), 200); /* meshgate's own page: test_home.c */
    close_fixture(&f);
}

Test(static_files, a_missing_public_directory_answers_500_with_a_message)
{
    struct fixture f;
    open_fixture(&f, true);
    snprintf(f.t.seg.config->public_dir, sizeof f.t.seg.config->public_dir, "%s/gone", f.dir);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/"), 500);
    cr_expect(strstr(f.t.res.body.data, "public directory") != NULL, "%s", f.t.res.body.data);
    close_fixture(&f);
}

Test(static_files, real_server_answers_head_and_counts_static_requests)
{
    char dir[128], public[256], env_public[300];
    mg_test_tmpdir(dir, sizeof dir);
    in_dir(public, sizeof public, dir, "public");
    cr_assert_eq(mkdir(public, 0755), 0);
    write_file(public, "index.html", "<!doctype html>\n");
    write_file(public, "app.js", "console.log(1);\n");
    static char text[MG_STATIC_GZIP_MAX_BYTES + 2];
    memset(text, 'a', sizeof text - 1);
    text[4096] = '\0';
    write_file(public, "small.css", text);
    text[4096] = 'a';
    text[MG_STATIC_GZIP_MAX_BYTES + 1] = '\0';
    write_file(public, "large.css", text);
    snprintf(env_public, sizeof env_public, "MESHGATE_PUBLIC_DIR=%s", public);
    const char *env[] = {env_public, "MESHGATE_WORKERS=1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));

    int fd = mg_test_connect(s.port);
    const char *req = "HEAD /app.js HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /app.js HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert(mg_test_send(fd, req, strlen(req)));
    struct mg_test_response r;
    cr_assert(mg_test_read_response(fd, &r, true, 5000));
    char v[128];
    cr_expect_eq(r.status, 200);
    cr_expect(mg_test_header(&r, "Content-Length", v, sizeof v) && strcmp(v, "16") == 0, "%s",
              r.head);
    cr_expect(mg_test_header(&r, "Content-Type", v, sizeof v) &&
              strcmp(v, "text/javascript; charset=utf-8") == 0);
    cr_expect(mg_test_header(&r, "Cache-Control", v, sizeof v) &&
              strcmp(v, "public, max-age=3600") == 0);
    mg_test_response_free(&r);
    /* The next bytes are the pipelined GET's answer, not a body of the HEAD. */
    cr_assert(mg_test_read_response(fd, &r, false, 5000));
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(r.body, "console.log(1);\n");
    mg_test_response_free(&r);
    close(fd);

    cr_assert(mg_test_get(s.port, "/missing.png", NULL, &r));
    cr_expect_eq(r.status, 404);
    cr_expect(mg_test_header(&r, "Cache-Control", v, sizeof v) && strcmp(v, "no-store") == 0);
    mg_test_response_free(&r);

    cr_assert(mg_test_get(s.port, "/api/perf", NULL, &r));
    cr_expect(strstr(r.body, "\"(static)\":{\"count\":3,") != NULL, "%s", r.body);
    mg_test_response_free(&r);
    mg_test_server_stop(&s, 5000);
    mg_test_rmdir(dir);
}

/* The plain bytes of a gzip body (a malloc'ed copy, its length in *len). */
static char *inflate_all(const char *zipped, size_t zipped_len, size_t *len)
{
    struct mg_buf out;
    mg_buf_init(&out);
    z_stream z;
    memset(&z, 0, sizeof z);
    cr_assert_eq(inflateInit2(&z, 16 + MAX_WBITS), Z_OK);
    z.next_in = (Bytef *)zipped;
    z.avail_in = (uInt)zipped_len;
    int rc = Z_OK;
    while (rc == Z_OK) {
        cr_assert(mg_buf_reserve(&out, 65536));
        z.next_out = (Bytef *)out.data + out.len;
        z.avail_out = 65536;
        rc = inflate(&z, Z_NO_FLUSH);
        out.len = z.total_out;
    }
    cr_assert_eq(rc, Z_STREAM_END, "not one whole gzip stream: %d", rc);
    inflateEnd(&z);
    *len = out.len;
    return out.data;
}

/* static_gzips and static_gzip_hits of the server's cache. */
static void gzip_counts(const struct mg_test_server *s, uint64_t *made, uint64_t *hits)
{
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
    *made = atomic_load(&seg.cache.cache->static_gzips);
    *hits = atomic_load(&seg.cache.cache->static_gzip_hits);
    mg_segment_detach(&seg);
}

/* GET target with gzip accepted: the body must be gzip and inflate to want (want_len). */
static void expect_gzip_of(int port, const char *target, const char *want, size_t want_len,
                           struct mg_test_response *r)
{
    cr_assert(mg_test_get(port, target, "Accept-Encoding: gzip\r\n", r));
    cr_assert_eq(r->status, 200, "%s", r->head);
    char v[64];
    cr_assert(mg_test_header(r, "Content-Encoding", v, sizeof v) && strcmp(v, "gzip") == 0,
              "%s: %s", target, r->head);
    size_t len;
    char *plain = inflate_all(r->body, r->body_len, &len);
    cr_expect(len == want_len && memcmp(plain, want, len) == 0,
              "%s inflates to %zu bytes, not the "
              "file's %zu",
              target, len, want_len);
    free(plain);
}

/* A text file of about n bytes that compresses as a real script does. */
static char *script_text(size_t n, int seed)
{
    char *text = malloc(n + 64);
    size_t len = 0;
    for (int i = 0; len < n; i++)
        len += (size_t)snprintf(text + len, 64, "var v%d = %d * %d;\n", i, i ^ seed, seed);
    return text;
}

static void set_mtime(const char *path, time_t sec)
{
    struct timespec ts[2] = {{sec, 0}, {sec, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

Test(static_files, a_text_file_is_compressed_once_for_the_group_and_again_when_it_changes,
     .timeout = 60)
{
    char dir[128], public[256], env_public[300], path[512];
    mg_test_tmpdir(dir, sizeof dir);
    in_dir(public, sizeof public, dir, "public");
    cr_assert_eq(mkdir(public, 0755), 0);
    char *text = script_text(268 * 1024, 1);
    write_file(public, "analytics.js", text);
    snprintf(env_public, sizeof env_public, "MESHGATE_PUBLIC_DIR=%s", public);
    const char *env[] = {env_public, "MESHGATE_WORKERS=2", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));

    struct mg_test_response first, r;
    expect_gzip_of(s.port, "/analytics.js", text, strlen(text), &first);
    uint64_t made, hits;
    gzip_counts(&s, &made, &hits);
    cr_expect_eq(made, 1);
    /* Later requests, whichever worker takes them, compress nothing: the same bytes. */
    for (int i = 0; i < 6; i++) {
        expect_gzip_of(s.port, "/analytics.js", text, strlen(text), &r);
        cr_expect(r.body_len == first.body_len && memcmp(r.body, first.body, r.body_len) == 0,
                  "request %d got other compressed bytes", i);
        mg_test_response_free(&r);
    }
    gzip_counts(&s, &made, &hits);
    cr_expect_eq(made, 1, "compressed %llu times", (unsigned long long)made);
    cr_expect_eq(hits, 6);
    mg_test_response_free(&first);

    /* Changed in place (same size, later modification time): a fresh body. */
    text[0] = 'V';
    write_file(public, "analytics.js", text);
    in_dir(path, sizeof path, public, "analytics.js");
    set_mtime(path, time(NULL) + 10);
    expect_gzip_of(s.port, "/analytics.js", text, strlen(text), &r);
    mg_test_response_free(&r);
    gzip_counts(&s, &made, &hits);
    cr_expect_eq(made, 2);

    /* A NAME.gz beside it, no older than the file, is sent as it is; a stale one is not. */
    struct mg_buf plain, zipped;
    mg_buf_init(&plain);
    mg_buf_init(&zipped);
    mg_buf_puts(&plain, "/* precompressed */\n");
    mg_buf_puts(&plain, text);
    cr_assert(mg_gzip(&plain, &zipped));
    in_dir(path, sizeof path, public, "analytics.js.gz");
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fwrite(zipped.data, 1, zipped.len, f);
    fclose(f);
    set_mtime(path, time(NULL) + 20);
    expect_gzip_of(s.port, "/analytics.js", plain.data, plain.len, &r);
    cr_expect(r.body_len == zipped.len && memcmp(r.body, zipped.data, zipped.len) == 0);
    mg_test_response_free(&r);
    set_mtime(path, time(NULL) - 100);
    expect_gzip_of(s.port, "/analytics.js", text, strlen(text), &r);
    mg_test_response_free(&r);
    gzip_counts(&s, &made, &hits);
    cr_expect_eq(made, 2, "the precompressed file or the stored body was compressed again");
    /* Without gzip, the file itself. */
    cr_assert(mg_test_get(s.port, "/analytics.js", NULL, &r));
    cr_expect(r.body_len == strlen(text) && memcmp(r.body, text, r.body_len) == 0);
    mg_test_response_free(&r);

    mg_buf_free(&plain);
    mg_buf_free(&zipped);
    free(text);
    mg_test_server_stop(&s, 5000);
    mg_test_rmdir(dir);
}
