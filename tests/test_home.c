/* SPDX-License-Identifier: ISC */
/*
 * `/` without a front end (issue 27, item 8): meshgate's own small page, and a WebSocket
 * upgrade with no upstream to pass it to and no live feed of meshgate's own
 * (MESHGATE_LIVE_CLIENTS=0) answered 404, never with a page (item 9).
 */
#include "harness.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(home, .timeout = 60);

#define CEILING_MS 30000

static const char websocket[] = "GET %s HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n"
                                "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/* The answer to one raw request on a connection of its own. */
static void exchange(int port, const char *request, bool head, struct mg_test_response *r)
{
    int fd = mg_test_connect(port);
    cr_assert_geq(fd, 0);
    cr_assert(mg_test_send(fd, request, strlen(request)));
    cr_assert(mg_test_read_response(fd, r, head, CEILING_MS), "no answer to %s", request);
    close(fd);
}

static void expect_websocket_refused(int port, const char *path)
{
    char request[512];
    snprintf(request, sizeof request, websocket, path);
    struct mg_test_response r;
    exchange(port, request, false, &r);
    cr_expect_eq(r.status, 404, "WebSocket upgrade on %s: %d %s", path, r.status, r.body);
    cr_expect(strstr(r.body, "MESHGATE_UPSTREAM is not set"), "%s", r.body);
    cr_expect(!strstr(r.body, "<html"), "%s answered a page: %s", path, r.body);
    mg_test_response_free(&r);
}

Test(home, without_a_front_end_the_root_is_meshgates_own_page)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(
        &s, NULL, (const char *[]){"MESHGATE_WORKERS=1", "MESHGATE_LIVE_CLIENTS=0", NULL}));
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/", NULL, &r));
    cr_expect_eq(r.status, 200, "%s", r.body);
    char v[128];
    cr_expect(mg_test_header(&r, "Content-Type", v, sizeof v) &&
                  strcmp(v, "text/html; charset=utf-8") == 0,
              "%s", r.head);
    cr_expect(mg_test_header(&r, "Cache-Control", v, sizeof v) && strcmp(v, "no-cache") == 0, "%s",
              r.head);
    static const char *const holds[] = {
        "<h1>meshgate</h1>",
        "href=\"/server-status\"",
        "href=\"/api/healthz\"",
        "href=\"/metrics\"",
        "href=\"/api/nodes\"", /* from the route table */
        "href=\"/api/packets\"",
        "MESHGATE_PUBLIC_DIR", /* how to serve CoreScope's front end */
        "public/",
        "MESHGATE_UPSTREAM",
    };
    for (size_t i = 0; i < sizeof holds / sizeof holds[0]; i++)
        cr_expect(strstr(r.body, holds[i]), "the page has no %s: %s", holds[i], r.body);
    cr_expect(!strstr(r.body, ":pubkey"), "a templated route is linked: %s", r.body);
    cr_expect(!strstr(r.body, s.dir), "the page names the database: %s", r.body);

    /* Every link the page gives answers: a route that needs a parameter is linked with
     * one (timestamps' since=, resolve-hops' hops=). */
    unsigned links = 0;
    for (const char *p = r.body; (p = strstr(p, "href=\"/")) != NULL; p++) {
        const char *u = p + 6, *e = strchr(u, '"');
        cr_assert(e && (size_t)(e - u) < 256, "%s", p);
        char url[256];
        memcpy(url, u, (size_t)(e - u));
        url[e - u] = '\0';
        struct mg_test_response l;
        cr_assert(mg_test_get(s.port, url, NULL, &l), "%s", url);
        /* 501 only where the database lacks what the route reads (this one has no scopes);
         * 500 where CoreScope answers so for a table its ingestor has not created (this one
         * has no observer_metrics, as CoreScope's own fixtures). */
        cr_expect(l.status == 200 || (l.status == 501 && strstr(l.body, "not been migrated")) ||
                      (l.status == 500 && strstr(l.body, "no such table: observer_metrics")),
                  "the page links %s, which answers %d: %s", url, l.status, l.body);
        mg_test_response_free(&l);
        links++;
    }
    cr_expect_gt(links, 20, "%s", r.body);
    mg_test_response_free(&r);

    exchange(s.port, "HEAD / HTTP/1.1\r\nHost: t\r\n\r\n", true, &r);
    cr_expect_eq(r.status, 200);
    cr_expect_eq(r.body_len, 0);
    mg_test_response_free(&r);
    /* Only "/": other paths outside /api/ are still not found. */
    cr_assert(mg_test_get(s.port, "/index.html", NULL, &r));
    cr_expect_eq(r.status, 404);
    mg_test_response_free(&r);

    expect_websocket_refused(s.port, "/");
    expect_websocket_refused(s.port, "/ws");
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
}

Test(home, a_websocket_upgrade_without_an_upstream_never_gets_the_front_ends_page)
{
    char dir[128], public[256], index[300], setting[300];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(public, sizeof public, "%s/public", dir);
    cr_assert_eq(mkdir(public, 0755), 0);
    snprintf(index, sizeof index, "%s/index.html", public);
    FILE *f = fopen(index, "w");
    cr_assert(f);
    fputs("<!doctype html><title>CoreScope</title>\n", f);
    fclose(f);
    snprintf(setting, sizeof setting, "MESHGATE_PUBLIC_DIR=%s", public);
    struct mg_test_server s;
    cr_assert(mg_test_server_start(
        &s, NULL,
        (const char *[]){setting, "MESHGATE_WORKERS=1", "MESHGATE_LIVE_CLIENTS=0", NULL}));
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/", NULL, &r));
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.body, "<title>CoreScope</title>"), "the public directory wins: %s", r.body);
    mg_test_response_free(&r);
    expect_websocket_refused(s.port, "/");
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
    mg_test_rmdir(dir);
}
