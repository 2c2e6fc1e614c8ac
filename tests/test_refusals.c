/* SPDX-License-Identifier: ISC */
/*
 * Small refusals that must be exact (issue 13, point 9), against the real server: an empty
 * Bearer token is a bad credential, an encoded slash is not a path separator, and the 501
 * and 505 a client causes are counted as client errors, not server faults.
 */
#include "harness.h"
#include "segment.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(refusals, .timeout = 60);

/* One raw request on its own connection; the status, or -1. */
static int raw_status(int port, const char *request)
{
    int fd = mg_test_connect(port);
    if (fd < 0)
        return -1;
    struct mg_test_response r;
    int status = -1;
    if (mg_test_send(fd, request, strlen(request)) && mg_test_read_response(fd, &r, false, 5000)) {
        status = r.status;
        mg_test_response_free(&r);
    }
    close(fd);
    return status;
}

static int get_status(int port, const char *target, const char *headers)
{
    struct mg_test_response r;
    if (!mg_test_get(port, target, headers, &r))
        return -1;
    int status = r.status;
    mg_test_response_free(&r);
    return status;
}

Test(refusals, an_empty_bearer_token_is_401_not_anonymous)
{
    char dir[128], keys[256], setting[300];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(keys, sizeof keys, "%s/keys", dir);
    FILE *f = fopen(keys, "w");
    cr_assert(f);
    fputs("k3y-for-the-refusal-tests\n", f);
    fclose(f);
    chmod(keys, 0600);
    snprintf(setting, sizeof setting, "MESHGATE_API_KEYS_FILE=%s", keys);
    const char *env[] = {setting, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    cr_expect_eq(get_status(s.port, "/api/healthz", NULL), 200, "anonymous");
    cr_expect_eq(get_status(s.port, "/api/healthz", "Authorization: Bearer\r\n"), 401);
    cr_expect_eq(get_status(s.port, "/api/healthz", "Authorization: Bearer    \r\n"), 401);
    cr_expect_eq(get_status(s.port, "/api/healthz", "Authorization: bearer\t\r\n"), 401);
    cr_expect_eq(get_status(s.port, "/api/healthz", "X-API-Key: \r\n"), 401);
    cr_expect_eq(
        get_status(s.port, "/api/healthz", "Authorization: Bearer k3y-for-the-refusal-tests\r\n"),
        200, "a valid key");
    cr_expect_eq(get_status(s.port, "/api/healthz", "Authorization: Bearerk3y\r\n"), 200,
                 "not the Bearer scheme: not a credential");
    mg_test_server_stop(&s, 5000);
    mg_test_rmdir(dir);
}

Test(refusals, an_encoded_slash_is_not_a_path_separator)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    cr_expect_eq(get_status(s.port, "/api/healthz", NULL), 200);
    cr_expect_eq(get_status(s.port, "/api%2Fhealthz", NULL), 404);
    cr_expect_eq(get_status(s.port, "/api%2fhealthz", NULL), 404);
    cr_expect_eq(get_status(s.port, "/api/nodes%2F", NULL), 404);
    cr_expect_eq(get_status(s.port, "/%61pi/healthz", NULL), 200, "other escapes still decode");
    mg_test_server_stop(&s, 5000);
}

Test(refusals, client_caused_501_and_505_count_as_client_errors_not_server_faults)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    cr_expect_eq(raw_status(s.port, "GET /api/healthz HTTP/2.0\r\nHost: x\r\n\r\n"), 505);
    cr_expect_eq(raw_status(s.port, "GET /api/healthz HTTP/1.1\r\nHost: x\r\n"
                                    "Transfer-Encoding: gzip\r\n\r\n"),
                 501);
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_RESPONSES_5XX), 0, "counted as server errors");
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_RESPONSES_4XX), 2);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_BAD_REQUESTS), 2);
    uint64_t route_errors = 0;
    for (uint32_t i = 0; i < seg.route_count; i++)
        route_errors += atomic_load(&seg.routes[i].errors);
    cr_expect_eq(route_errors, 0, "a route histogram counts them as 5xx");
    mg_segment_detach(&seg);
    cr_expect_eq(mg_status_class(500), 5);
    cr_expect_eq(mg_status_class(503), 5);
    cr_expect_eq(mg_status_class(501), 4);
    cr_expect_eq(mg_status_class(505), 4);
    cr_expect_eq(mg_status_class(404), 4);
    mg_test_server_stop(&s, 5000);
}
