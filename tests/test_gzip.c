/* SPDX-License-Identifier: ISC */
/*
 * gzip end to end, against the real binary: large JSON bodies are compressed for clients
 * that accept gzip, the compressed bytes inflate to exactly the plain body, and nothing is
 * compressed for a client that does not accept it or when MESHGATE_GZIP_MIN_BYTES=0.
 *
 * /api/stats is the body: it is the same bytes for 10 s (one rendering per interval), so
 * the plain and the compressed answer can be compared byte for byte.
 */
#include "harness.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(gzip, .timeout = 30);

static struct mg_test_server start_with(const char *min_bytes, const char *workers)
{
    char var[64], wvar[64];
    snprintf(var, sizeof var, "MESHGATE_GZIP_MIN_BYTES=%s", min_bytes);
    snprintf(wvar, sizeof wvar, "MESHGATE_WORKERS=%s", workers);
    const char *env[] = {var, wvar, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    return s;
}

static struct mg_test_server start(const char *min_bytes)
{
    return start_with(min_bytes, "2");
}

static bool has_header(const struct mg_test_response *r, const char *name, const char *value)
{
    char v[256];
    return mg_test_header(r, name, v, sizeof v) && (!value || strcmp(v, value) == 0);
}

/* Inflates a gzip stream (RFC 1952) into a malloc'ed, NUL-terminated buffer. */
static char *gunzip(const char *in, size_t len, size_t *out_len)
{
    char *out = mg_test_gunzip(in, len, out_len);
    cr_assert(out, "not one whole gzip stream");
    return out;
}

Test(gzip, large_bodies_are_compressed_for_clients_that_accept_gzip)
{
    struct mg_test_server s = start("100");
    struct mg_test_response plain, zipped;
    cr_assert(mg_test_get(s.port, "/api/stats", NULL, &plain));
    cr_assert_eq(plain.status, 200);
    cr_assert_gt(plain.body_len, 100, "the body is over the threshold");
    cr_expect_not(has_header(&plain, "Content-Encoding", NULL));
    cr_expect(has_header(&plain, "Vary", "Accept-Encoding"), "%s", plain.head);

    cr_assert(mg_test_get(s.port, "/api/stats", "Accept-Encoding: gzip, deflate, br\r\n", &zipped));
    cr_assert_eq(zipped.status, 200);
    cr_expect(has_header(&zipped, "Content-Encoding", "gzip"), "%s", zipped.head);
    cr_expect(has_header(&zipped, "Vary", "Accept-Encoding"), "%s", zipped.head);
    cr_expect(has_header(&zipped, "Content-Type", "application/json"));
    char v[64];
    cr_assert(mg_test_header(&zipped, "Content-Length", v, sizeof v));
    cr_expect_eq(strtoull(v, NULL, 10), zipped.body_len);
    cr_expect_lt(zipped.body_len, plain.body_len, "compression made it smaller");
    cr_assert(zipped.body_len >= 2 && (unsigned char)zipped.body[0] == 0x1f &&
                  (unsigned char)zipped.body[1] == 0x8b,
              "a gzip member starts with 1f 8b");
    size_t len;
    char *inflated = gunzip(zipped.body, zipped.body_len, &len);
    cr_expect_eq(len, plain.body_len);
    cr_expect_str_eq(inflated, plain.body, "inflates to exactly the plain body");
    free(inflated);
    mg_test_response_free(&plain);
    mg_test_response_free(&zipped);
    mg_test_server_stop(&s, 5000);
}

Test(gzip, clients_that_refuse_gzip_get_the_plain_body)
{
    struct mg_test_server s = start("100");
    const char *headers[] = {NULL, "Accept-Encoding: gzip;q=0\r\n", "Accept-Encoding: identity\r\n",
                             "Accept-Encoding: br, GZIP; q=0.000\r\n"};
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        struct mg_test_response r;
        cr_assert(mg_test_get(s.port, "/api/stats", headers[i], &r));
        cr_expect_eq(r.status, 200);
        cr_expect_not(has_header(&r, "Content-Encoding", NULL), "%s: %s",
                      headers[i] ? headers[i] : "(none)", r.head);
        cr_expect(strncmp(r.body, "{\"totalPackets\":", 16) == 0);
        mg_test_response_free(&r);
    }
    mg_test_server_stop(&s, 5000);
}

Test(gzip, bodies_under_the_threshold_stay_plain)
{
    struct mg_test_server s = start("100000");
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/stats", "Accept-Encoding: gzip\r\n", &r));
    cr_expect_eq(r.status, 200);
    cr_expect_not(has_header(&r, "Content-Encoding", NULL), "%s", r.head);
    cr_expect(has_header(&r, "Vary", "Accept-Encoding"), "the answer depends on the header");
    mg_test_response_free(&r);
    mg_test_server_stop(&s, 5000);
}

Test(gzip, min_bytes_zero_turns_gzip_off)
{
    struct mg_test_server s = start("0");
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/perf", "Accept-Encoding: gzip\r\n", &r));
    cr_expect_eq(r.status, 200);
    cr_expect_not(has_header(&r, "Content-Encoding", NULL), "%s", r.head);
    cr_expect_not(has_header(&r, "Vary", NULL), "nothing varies when gzip is off");
    cr_expect(strncmp(r.body, "{\"uptime\":", 10) == 0);
    mg_test_response_free(&r);
    mg_test_server_stop(&s, 5000);
}

Test(gzip, perf_body_over_the_default_threshold_is_compressed)
{
    /* Four workers' slots make the body longer than the default 1024 bytes. */
    struct mg_test_server s = start_with("1024", "4");
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/perf", "Accept-Encoding: gzip\r\n", &r));
    cr_assert_eq(r.status, 200);
    cr_expect(has_header(&r, "Content-Encoding", "gzip"), "%s", r.head);
    size_t len;
    char *inflated = gunzip(r.body, r.body_len, &len);
    cr_expect_gt(len, 1024);
    cr_expect(strncmp(inflated, "{\"uptime\":", 10) == 0, "%s", inflated);
    cr_expect_eq(inflated[len - 1], '\n');
    free(inflated);
    mg_test_response_free(&r);
    mg_test_server_stop(&s, 5000);
}
