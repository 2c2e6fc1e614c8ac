/*
 * Static files from MESHGATE_PUBLIC_DIR: served for paths outside /api/, never from
 * anywhere else (no "..", no encoded slash, no symbolic link, only regular files).
 */
#include "harness.h"
#include "inproc.h"

#include "static_files.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

Test(static_files, files_over_the_size_limit_are_refused)
{
    struct fixture f;
    open_fixture(&f, true);
    char path[512];
    in_dir(path, sizeof path, f.public, "huge.bin");
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(ftruncate(fd, (off_t)MG_STATIC_MAX_BYTES + 1), 0); /* sparse: no disk used */
    close(fd);
    expect_refused(&f, "/huge.bin", 403);
    cr_expect(strstr(f.t.res.body.data, "64 MiB") != NULL, "%s", f.t.res.body.data);
    close_fixture(&f);
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
    cr_expect_eq(mg_test_ctx_get(&f.t, "/"), 404);
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
