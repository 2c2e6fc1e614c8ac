/* SPDX-License-Identifier: ISC */
/*
 * Tests for workers/core/http.c, table-driven in the manner of picohttpparser's tests. Every head
 * is parsed from a heap copy of exactly its length, so AddressSanitizer reports any read past
 * the end of what the parser was given.
 */
#include <criterion/criterion.h>

#include "http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct mg_http_limits default_limits = {.max_header_bytes = 8192,
                                                     .max_uri_bytes = 4096};

static char *copy;

static void release_copy(void)
{
    free(copy);
    copy = NULL;
}

TestSuite(http, .fini = release_copy);

static struct mg_http_request req;
static int status;
static const char *why;

/* Parses a fresh heap copy of input[0..len); req's strings stay valid until the next call. */
static enum mg_http_result parse_limited(const char *input, size_t len,
                                         const struct mg_http_limits *limits)
{
    free(copy);
    copy = malloc(len ? len : 1);
    cr_assert_not_null(copy);
    memcpy(copy, input, len);
    status = 0;
    why = NULL;
    return mg_http_parse_request(copy, len, limits, &req, &status, &why);
}

static enum mg_http_result parse(const char *input)
{
    return parse_limited(input, strlen(input), &default_limits);
}

static bool str_eq(struct mg_str s, const char *lit)
{
    return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0;
}

struct head_case {
    const char *input;
    size_t len;
    enum mg_http_result result;
    int status; /* checked only when result is MG_HTTP_ERROR */
};

#define HEAD(text, result, status)                                                                 \
    {                                                                                              \
        text, sizeof(text) - 1, result, status                                                     \
    }

/* Runs a table; each OK input is exactly one head, so head_len must equal its length. */
static void check_table(const char *table, const struct head_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct head_case *c = &cases[i];
        enum mg_http_result r = parse_limited(c->input, c->len, &default_limits);
        cr_expect_eq(r, c->result, "%s[%zu] \"%.*s\": result %d, expected %d (status %d, %s)",
                     table, i, (int)c->len, c->input, r, c->result, status, why ? why : "-");
        if (r == MG_HTTP_OK && c->result == MG_HTTP_OK)
            cr_expect_eq(req.head_len, c->len, "%s[%zu]: head_len %zu, expected %zu", table, i,
                         req.head_len, c->len);
        if (r == MG_HTTP_ERROR && c->result == MG_HTTP_ERROR) {
            cr_expect_eq(status, c->status, "%s[%zu] \"%.*s\": status %d, expected %d (%s)", table,
                         i, (int)c->len, c->input, status, c->status, why);
            cr_expect(why != NULL && why[0] != '\0', "%s[%zu]: error without a sentence", table, i);
        }
    }
}

#define CHECK_TABLE(cases) check_table(#cases, cases, sizeof cases / sizeof cases[0])

static const struct head_case accepted_heads[] = {
    HEAD("GET / HTTP/1.1\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("GET / HTTP/1.0\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("GET /api/nodes?limit=5 HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n", MG_HTTP_OK,
         0),
    HEAD("HEAD /api/healthz HTTP/1.1\r\nHost: a\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("GET / HTTP/1.1\nHost: a\n\n", MG_HTTP_OK, 0),
    HEAD("GET / HTTP/1.1\r\nHost: a\n\r\n", MG_HTTP_OK, 0),
    HEAD("\r\n\r\nGET / HTTP/1.1\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("\nGET / HTTP/1.1\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("DELETE /x HTTP/1.1\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("M-SEARCH~!#$%&'*+.^_`| * HTTP/1.1\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("OPTIONS * HTTP/1.1\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("GET http://example.org/a?b=1 HTTP/1.1\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("GET HTTPS://example.org:8443/ HTTP/1.1\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("GET /a%20b?q=%7e#frag HTTP/1.1\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("GET / HTTP/1.1\r\nX-Empty:\r\nX-Spaces:   \t \r\n\r\n", MG_HTTP_OK, 0),
    HEAD("GET / HTTP/1.1\r\nX-Tab:\tinner\tvalue\t\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("GET / HTTP/1.1\r\nX-Obs-Text: caf\xc3\xa9\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("POST /x HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 005\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n", MG_HTTP_OK, 0),
    HEAD("POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
         MG_HTTP_OK, 0),
};

Test(http, valid_heads_parse_to_their_full_length)
{
    CHECK_TABLE(accepted_heads);
}

static const struct head_case malformed_heads[] = {
    /* request line */
    HEAD(" GET / HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("G(T / HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET\t/ HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("G\xc3\x89T / HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET  / HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET a/b HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET ** HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("CONNECT example.org:443 HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET ftp://example.org/ HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET http://example.org HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET http://example.org?x=1 HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET http:///path HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET /a\x01 HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET /a\x7f HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET /a\0b HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET /a b HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET /\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / \r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / http/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.10\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1 \r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\rX\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("\rGET / HTTP/1.1\r\n\r\n", MG_HTTP_ERROR, 400),
    /* header lines */
    HEAD("GET / HTTP/1.1\r\nHost : a\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nHo(st: a\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\n: a\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nHost a\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\n Host: a\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nX-A: one\r\n two\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nX-A: one\r\n\ttwo\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nX-A: a\0b\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nX-A: a\x1b[0m\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nX-A: a\x7f\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nX-A: a\r\n\rX", MG_HTTP_ERROR, 400),
    /* body framing */
    HEAD("POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nContent-Length: 5 5\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nContent-Length: 9223372036854775808\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
         MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
         MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nTransfer-Encoding: , ,\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.1\r\nTransfer-Encoding: chu\"nked\r\n\r\n", MG_HTTP_ERROR, 400),
    HEAD("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", MG_HTTP_ERROR, 400),
};

Test(http, malformed_heads_are_400)
{
    CHECK_TABLE(malformed_heads);
}

static const struct head_case unsupported_versions[] = {
    HEAD("GET / HTTP/2.0\r\n\r\n", MG_HTTP_ERROR, 505),
    HEAD("GET / HTTP/0.9\r\n\r\n", MG_HTTP_ERROR, 505),
    HEAD("GET / HTTP/1.2\r\n\r\n", MG_HTTP_ERROR, 505),
    HEAD("GET / HTTP/3.1\nHost: a\n\n", MG_HTTP_ERROR, 505),
};

Test(http, http_versions_other_than_1_0_and_1_1_are_505)
{
    CHECK_TABLE(unsupported_versions);
}

static const struct head_case unsupported_codings[] = {
    HEAD("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", MG_HTTP_ERROR, 501),
    HEAD("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", MG_HTTP_ERROR, 501),
    HEAD("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
         MG_HTTP_ERROR, 501),
    HEAD("POST / HTTP/1.1\r\nTransfer-Encoding: chunked;ext=1\r\n\r\n", MG_HTTP_ERROR, 501),
    HEAD("POST / HTTP/1.1\r\nTransfer-Encoding: chunkedx\r\n\r\n", MG_HTTP_ERROR, 501),
};

Test(http, transfer_encoding_not_ending_in_chunked_is_501)
{
    CHECK_TABLE(unsupported_codings);
}

static const struct head_case truncated_heads[] = {
    HEAD("", MG_HTTP_INCOMPLETE, 0),
    HEAD("\r\n", MG_HTTP_INCOMPLETE, 0),
    HEAD("GET / HTTP/1.1\r", MG_HTTP_INCOMPLETE, 0),
    HEAD("GET / HTTP/1.1\r\n", MG_HTTP_INCOMPLETE, 0),
    HEAD("GET / HTTP/1.1\r\n\r", MG_HTTP_INCOMPLETE, 0),
    HEAD("GET / HTTP/1.1\r\nHost: a\r\n", MG_HTTP_INCOMPLETE, 0),
    HEAD("GET / HTTP/1.1\nHost: a\n", MG_HTTP_INCOMPLETE, 0),
    /* A bad byte already seen is refused without waiting for the rest. */
    HEAD("G(", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTQ", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\nHost :", MG_HTTP_ERROR, 400),
    HEAD("GET / HTTP/1.1\r\n folded", MG_HTTP_ERROR, 400),
    HEAD("GET a/b ", MG_HTTP_ERROR, 400),
};

Test(http, truncated_heads_are_incomplete_unless_already_bad)
{
    CHECK_TABLE(truncated_heads);
}

static const char *const valid_requests[] = {
    "GET / HTTP/1.1\r\n\r\n",
    "GET /api/packets?limit=5&expand=observations HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
    "User-Agent: curl/8.5.0\r\nAccept: */*\r\nConnection: close\r\n\r\n",
    "\r\nHEAD /x HTTP/1.0\nConnection: keep-alive\n\n",
    "POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\nX-A:\t\r\n\r\n",
    "GET http://h/p?q HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
};

Test(http, every_prefix_of_a_valid_head_is_incomplete)
{
    for (size_t k = 0; k < sizeof valid_requests / sizeof valid_requests[0]; k++) {
        const char *text = valid_requests[k];
        size_t len = strlen(text);
        cr_assert_eq(parse(text), MG_HTTP_OK, "request %zu: %s", k, why);
        for (size_t n = 0; n < len; n++) {
            enum mg_http_result r = parse_limited(text, n, &default_limits);
            cr_expect_eq(r, MG_HTTP_INCOMPLETE, "request %zu cut at %zu: result %d (%s)", k, n, r,
                         why ? why : "-");
        }
    }
}

Test(http, every_prefix_of_a_bad_head_is_incomplete_or_the_same_error)
{
    for (size_t k = 0; k < sizeof malformed_heads / sizeof malformed_heads[0]; k++) {
        const struct head_case *c = &malformed_heads[k];
        for (size_t n = 0; n < c->len; n++) {
            enum mg_http_result r = parse_limited(c->input, n, &default_limits);
            cr_expect(r == MG_HTTP_INCOMPLETE || (r == MG_HTTP_ERROR && status == c->status),
                      "malformed_heads[%zu] cut at %zu: result %d status %d", k, n, r, status);
        }
    }
}

Test(http, get_with_headers_exposes_every_part_of_the_head)
{
    const char *text = "GET /api/nodes?limit=5&x=%20 HTTP/1.1\r\n"
                       "Host: example.org\r\n"
                       "Accept:   */*  \r\n"
                       "X-Empty:\r\n"
                       "\r\n";
    cr_assert_eq(parse(text), MG_HTTP_OK, "%s", why);
    cr_expect(str_eq(req.method, "GET"));
    cr_expect_eq(req.method_id, MG_METHOD_GET);
    cr_expect(str_eq(req.target, "/api/nodes?limit=5&x=%20"));
    cr_expect(str_eq(req.path, "/api/nodes"));
    cr_expect(str_eq(req.query, "limit=5&x=%20"));
    cr_expect_eq(req.minor_version, 1);
    cr_expect_eq(req.head_len, strlen(text));
    cr_assert_eq(req.header_count, 3);
    cr_expect(str_eq(req.headers[0].name, "Host"));
    cr_expect(str_eq(req.headers[0].value, "example.org"));
    cr_expect(str_eq(req.headers[1].name, "Accept"));
    cr_expect(str_eq(req.headers[1].value, "*/*"));
    cr_expect(str_eq(req.headers[2].name, "X-Empty"));
    cr_expect_eq(req.headers[2].value.len, 0);
    cr_expect_eq(req.content_length, -1);
    cr_expect_not(req.chunked);
    cr_expect(req.keep_alive);
}

Test(http, strings_point_into_the_callers_buffer)
{
    cr_assert_eq(parse("GET /a?b HTTP/1.1\r\nHost: h\r\n\r\n"), MG_HTTP_OK);
    cr_expect_eq(req.method.ptr, copy);
    cr_expect_eq(req.target.ptr, copy + 4);
    cr_expect_eq(req.path.ptr, copy + 4);
    cr_expect_eq(req.query.ptr, copy + 7);
    cr_expect_eq(req.headers[0].name.ptr, copy + 19);
    cr_expect_eq(req.headers[0].value.ptr, copy + 25);
}

Test(http, head_and_get_are_recognised_case_sensitively)
{
    cr_assert_eq(parse("HEAD / HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect_eq(req.method_id, MG_METHOD_HEAD);
    cr_assert_eq(parse("GET / HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect_eq(req.method_id, MG_METHOD_GET);
    cr_assert_eq(parse("get / HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect_eq(req.method_id, MG_METHOD_OTHER);
    cr_assert_eq(parse("GETS / HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect_eq(req.method_id, MG_METHOD_OTHER);
    cr_assert_eq(parse("POST / HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect_eq(req.method_id, MG_METHOD_OTHER);
    cr_expect(str_eq(req.method, "POST"));
}

Test(http, lf_only_line_ends_are_accepted)
{
    const char *text = "GET /x HTTP/1.0\nHost: a\nConnection: keep-alive\n\n";
    cr_assert_eq(parse(text), MG_HTTP_OK, "%s", why);
    cr_expect_eq(req.head_len, strlen(text));
    cr_expect_eq(req.minor_version, 0);
    cr_assert_eq(req.header_count, 2);
    cr_expect(str_eq(req.headers[1].value, "keep-alive"));
    cr_expect(req.keep_alive);
}

Test(http, leading_empty_lines_are_skipped_and_counted_in_head_len)
{
    const char *text = "\r\n\nGET /x HTTP/1.1\r\n\r\n";
    cr_assert_eq(parse(text), MG_HTTP_OK, "%s", why);
    cr_expect(str_eq(req.method, "GET"));
    cr_expect(str_eq(req.path, "/x"));
    cr_expect_eq(req.head_len, strlen(text));
}

Test(http, pipelined_request_starts_at_head_len)
{
    const char *first = "GET /one HTTP/1.1\r\nHost: a\r\n\r\n";
    const char *text = "GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\n\r\n";
    cr_assert_eq(parse(text), MG_HTTP_OK, "%s", why);
    cr_expect(str_eq(req.path, "/one"));
    cr_assert_eq(req.head_len, strlen(first));

    cr_assert_eq(parse(text + strlen(first)), MG_HTTP_OK, "%s", why);
    cr_expect(str_eq(req.path, "/two"));
    cr_expect_eq(req.head_len, strlen(text) - strlen(first));
}

Test(http, head_followed_by_a_partial_request_still_parses)
{
    const char *text = "GET /one HTTP/1.1\r\n\r\nGET /tw";
    cr_assert_eq(parse(text), MG_HTTP_OK, "%s", why);
    cr_expect_eq(req.head_len, strlen(text) - strlen("GET /tw"));
}

Test(http, query_is_split_from_path_and_empty_when_absent)
{
    cr_assert_eq(parse("GET /p HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect(str_eq(req.path, "/p"));
    cr_expect_eq(req.query.len, 0);

    cr_assert_eq(parse("GET /p? HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect(str_eq(req.path, "/p"));
    cr_expect_eq(req.query.len, 0);

    cr_assert_eq(parse("GET /p?a=1?b=2 HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect(str_eq(req.path, "/p"));
    cr_expect(str_eq(req.query, "a=1?b=2"));

    cr_assert_eq(parse("GET /?x HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect(str_eq(req.path, "/"));
    cr_expect(str_eq(req.query, "x"));
}

Test(http, absolute_form_target_keeps_target_and_takes_its_path)
{
    cr_assert_eq(parse("GET http://example.org:8080/api/nodes?limit=5 HTTP/1.1\r\n\r\n"),
                 MG_HTTP_OK, "%s", why);
    cr_expect(str_eq(req.target, "http://example.org:8080/api/nodes?limit=5"));
    cr_expect(str_eq(req.path, "/api/nodes"));
    cr_expect(str_eq(req.query, "limit=5"));
}

Test(http, asterisk_target_is_its_own_path)
{
    cr_assert_eq(parse("OPTIONS * HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect(str_eq(req.target, "*"));
    cr_expect(str_eq(req.path, "*"));
    cr_expect_eq(req.query.len, 0);
    cr_expect_eq(req.method_id, MG_METHOD_OTHER);
}

struct keep_alive_case {
    const char *input;
    bool keep_alive;
};

static const struct keep_alive_case keep_alive_cases[] = {
    {"GET / HTTP/1.1\r\n\r\n", true},
    {"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false},
    {"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n", false},
    {"GET / HTTP/1.1\r\nConnection: upgrade, close\r\n\r\n", false},
    {"GET / HTTP/1.1\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", false},
    {"GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n", true},
    {"GET / HTTP/1.1\r\nConnection: closed\r\n\r\n", true},
    {"GET / HTTP/1.1\r\nX-Connection: close\r\n\r\n", true},
    {"GET / HTTP/1.0\r\n\r\n", false},
    {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
    {"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true},
    {"GET / HTTP/1.0\r\nConnection: te, keep-alive\r\n\r\n", true},
    {"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", false},
    {"GET / HTTP/1.0\r\nConnection: keep-alives\r\n\r\n", false},
};

Test(http, keep_alive_follows_version_and_connection_header)
{
    for (size_t i = 0; i < sizeof keep_alive_cases / sizeof keep_alive_cases[0]; i++) {
        const struct keep_alive_case *c = &keep_alive_cases[i];
        cr_assert_eq(parse(c->input), MG_HTTP_OK, "case %zu: %s", i, why);
        cr_expect_eq(req.keep_alive, c->keep_alive, "case %zu \"%s\"", i, c->input);
    }
}

Test(http, content_length_is_parsed_and_absent_is_minus_one)
{
    cr_assert_eq(parse("POST / HTTP/1.1\r\nContent-Length: 42\r\n\r\n"), MG_HTTP_OK);
    cr_expect_eq(req.content_length, 42);
    cr_assert_eq(parse("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), MG_HTTP_OK);
    cr_expect_eq(req.content_length, 0);
    cr_assert_eq(parse("POST / HTTP/1.1\r\nContent-Length: 9223372036854775807\r\n\r\n"),
                 MG_HTTP_OK);
    cr_expect_eq(req.content_length, INT64_MAX);
    cr_assert_eq(parse("POST / HTTP/1.1\r\nContent-Length: 7\r\nContent-Length: 007\r\n\r\n"),
                 MG_HTTP_OK);
    cr_expect_eq(req.content_length, 7);
    cr_assert_eq(parse("GET / HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect_eq(req.content_length, -1);
}

Test(http, transfer_encoding_ending_in_chunked_sets_chunked)
{
    cr_assert_eq(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), MG_HTTP_OK);
    cr_expect(req.chunked);
    cr_expect_eq(req.content_length, -1);
    cr_assert_eq(parse("POST / HTTP/1.1\r\nTransfer-Encoding: gzip ,CHUNKED \r\n\r\n"), MG_HTTP_OK);
    cr_expect(req.chunked);
    cr_assert_eq(parse("POST / HTTP/1.1\r\ntransfer-encoding: gzip\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n"),
                 MG_HTTP_OK);
    cr_expect(req.chunked);
    cr_assert_eq(parse("POST / HTTP/1.1\r\n\r\n"), MG_HTTP_OK);
    cr_expect_not(req.chunked);
}

Test(http, error_sentences_name_what_is_wrong)
{
    cr_assert_eq(parse("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), MG_HTTP_ERROR);
    cr_expect_str_eq(why, "header name is followed by whitespace before ':'");
    cr_assert_eq(parse("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"), MG_HTTP_ERROR);
    cr_expect_str_eq(why, "header line starts with whitespace (line folding is not accepted)");
    cr_assert_eq(parse("GET / HTTP/2.0\r\n\r\n"), MG_HTTP_ERROR);
    cr_expect_str_eq(why, "HTTP version is not supported; use HTTP/1.1");
    cr_assert_eq(parse("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
                 MG_HTTP_ERROR);
    cr_expect_str_eq(why, "Content-Length appears twice with different values");
}

static const struct mg_http_limits small_limits = {.max_header_bytes = 64, .max_uri_bytes = 16};

Test(http, target_longer_than_limit_is_414_before_line_ends)
{
    /* 17 target bytes, no space or CRLF yet. */
    cr_expect_eq(parse_limited("GET /234567890123456", 20, &small_limits), MG_HTTP_INCOMPLETE);
    cr_expect_eq(parse_limited("GET /2345678901234567", 21, &small_limits), MG_HTTP_ERROR);
    cr_expect_eq(status, 414);
    cr_expect_str_eq(why, "request target is too long; shorten the path or the query string");
}

Test(http, target_exactly_at_limit_is_accepted)
{
    const char *text = "GET /234567890123456 HTTP/1.1\r\n\r\n";
    cr_expect_eq(parse_limited(text, strlen(text), &small_limits), MG_HTTP_OK, "%s", why);
    cr_expect_eq(req.target.len, 16);
}

Test(http, head_longer_than_limit_without_end_is_431)
{
    char text[80];
    memset(text, 'a', sizeof text);
    memcpy(text, "GET / HTTP/1.1\r\nX-Long: ", 24);
    cr_expect_eq(parse_limited(text, 63, &small_limits), MG_HTTP_INCOMPLETE);
    cr_expect_eq(parse_limited(text, 64, &small_limits), MG_HTTP_ERROR);
    cr_expect_eq(status, 431);
    cr_expect_eq(parse_limited(text, sizeof text, &small_limits), MG_HTTP_ERROR);
    cr_expect_eq(status, 431);
}

Test(http, head_of_exactly_the_limit_is_accepted_and_one_more_byte_is_431)
{
    char text[65];
    memset(text, 'a', sizeof text);
    memcpy(text, "GET / HTTP/1.1\r\nX-Long: ", 24);
    memcpy(text + 60, "\r\n\r\n", 4);
    cr_expect_eq(parse_limited(text, 64, &small_limits), MG_HTTP_OK, "%s", why);
    cr_expect_eq(req.head_len, 64);

    memset(text, 'a', sizeof text);
    memcpy(text, "GET / HTTP/1.1\r\nX-Long: ", 24);
    memcpy(text + 61, "\r\n\r\n", 4);
    cr_expect_eq(parse_limited(text, 65, &small_limits), MG_HTTP_ERROR);
    cr_expect_eq(status, 431);
}

Test(http, leading_empty_lines_count_toward_the_head_limit)
{
    char text[64];
    memset(text, '\n', sizeof text);
    cr_expect_eq(parse_limited(text, 63, &small_limits), MG_HTTP_INCOMPLETE);
    cr_expect_eq(parse_limited(text, 64, &small_limits), MG_HTTP_ERROR);
    cr_expect_eq(status, 431);
}

/* Builds "GET / HTTP/1.1\r\n" plus count headers and the blank line; returns the length. */
static size_t build_many_headers(char *out, size_t cap, size_t count)
{
    size_t n = (size_t)snprintf(out, cap, "GET / HTTP/1.1\r\n");
    for (size_t i = 0; i < count; i++)
        n += (size_t)snprintf(out + n, cap - n, "X-%zu: v\r\n", i);
    n += (size_t)snprintf(out + n, cap - n, "\r\n");
    cr_assert_lt(n, cap);
    return n;
}

Test(http, exactly_max_headers_are_accepted)
{
    char text[2048];
    size_t n = build_many_headers(text, sizeof text, MG_HTTP_MAX_HEADERS);
    cr_assert_eq(parse_limited(text, n, &default_limits), MG_HTTP_OK, "%s", why);
    cr_expect_eq(req.header_count, MG_HTTP_MAX_HEADERS);
    cr_expect(str_eq(req.headers[MG_HTTP_MAX_HEADERS - 1].name, "X-63"));
}

Test(http, one_header_more_than_max_is_431)
{
    char text[2048];
    size_t n = build_many_headers(text, sizeof text, MG_HTTP_MAX_HEADERS + 1);
    cr_assert_eq(parse_limited(text, n, &default_limits), MG_HTTP_ERROR);
    cr_expect_eq(status, 431);
    cr_expect_str_eq(why, "request has more than 64 header fields");
    /* Refused as soon as the extra header starts, before the head is complete. */
    size_t cut = n - strlen(": v\r\n\r\n");
    cr_expect_eq(parse_limited(text, cut, &default_limits), MG_HTTP_ERROR);
    cr_expect_eq(status, 431);
}

Test(http, header_lookup_is_case_insensitive_and_takes_the_first)
{
    cr_assert_eq(parse("GET / HTTP/1.1\r\nHost: a\r\nX-Dup: one\r\nx-dup: two\r\n\r\n"),
                 MG_HTTP_OK);
    const struct mg_str *v = mg_http_header_get(&req, "host");
    cr_assert_not_null(v);
    cr_expect(str_eq(*v, "a"));
    v = mg_http_header_get(&req, "X-DUP");
    cr_assert_not_null(v);
    cr_expect(str_eq(*v, "one"));
    cr_expect_null(mg_http_header_get(&req, "X-Du"));
    cr_expect_null(mg_http_header_get(&req, "X-Dupe"));
    cr_expect_null(mg_http_header_get(&req, "Accept"));
}

struct token_case {
    const char *value;
    const char *token;
    bool listed;
};

static const struct token_case token_cases[] = {
    {"gzip", "gzip", true},
    {"GZIP", "gzip", true},
    {"deflate, gzip", "gzip", true},
    {"deflate,gzip", "gzip", true},
    {" \tdeflate \t, \tgzip \t", "gzip", true},
    {"gzip;q=0.5", "gzip", true},
    {"gzip ; q=1", "gzip", true},
    {"gzip;level=1;q=0.001", "gzip", true},
    {"gzip;q=0", "gzip", false},
    {"gzip;q=0.", "gzip", false},
    {"gzip;q=0.0", "gzip", false},
    {"gzip;q=0.00", "gzip", false},
    {"gzip ; Q=0.000", "gzip", false},
    {"gzip;q=0, deflate", "gzip", false},
    {"gzip;q=0, gzip", "gzip", true},
    {"deflate;q=0, gzip", "gzip", true},
    {"gzipx", "gzip", false},
    {"xgzip", "gzip", false},
    {"x-gzip", "gzip", false},
    {"", "gzip", false},
    {",,,", "gzip", false},
    {"deflate;x=\"a,gzip\"", "gzip", false},
    {"deflate;x=\"a\\\",gzip\", br", "br", true},
    {"deflate;x=\"a, gzip;y=1\"", "gzip", false},
    {"deflate;x=\"a\\\", gzip;y=1\"", "gzip", false},
    {"keep-alive, Upgrade", "upgrade", true},
    {"close", "keep-alive", false},
};

Test(http, has_token_matches_listed_tokens_and_skips_q_zero)
{
    for (size_t i = 0; i < sizeof token_cases / sizeof token_cases[0]; i++) {
        const struct token_case *c = &token_cases[i];
        struct mg_str value = {c->value, strlen(c->value)};
        cr_expect_eq(mg_http_has_token(&value, c->token), c->listed, "\"%s\" lists \"%s\": %d",
                     c->value, c->token, !c->listed);
    }
}

Test(http, has_token_reads_only_the_given_length)
{
    const char *text = "deflate, gzip";
    struct mg_str value = {text, 7};
    cr_expect_not(mg_http_has_token(&value, "gzip"));
    cr_expect(mg_http_has_token(&value, "deflate"));
}

struct decode_case {
    const char *src;
    bool plus_is_space;
    long result;
    const char *decoded;
};

static const struct decode_case decode_cases[] = {
    {"", false, 0, ""},
    {"abc", false, 3, "abc"},
    {"a%20b", false, 3, "a b"},
    {"%7e%7E", false, 2, "~~"},
    {"%c3%A9", false, 2, "\xc3\xa9"},
    {"a+b", false, 3, "a+b"},
    {"a+b", true, 3, "a b"},
    {"%2B", true, 1, "+"},
    {"%G1", false, -1, NULL},
    {"%1G", false, -1, NULL},
    {"abc%", false, -1, NULL},
    {"abc%4", false, -1, NULL},
    {"%%41", false, -1, NULL},
    {"%00", false, -1, NULL},
    {"a%00b", true, -1, NULL},
};

Test(http, url_decode_decodes_escapes_and_refuses_bad_ones)
{
    for (size_t i = 0; i < sizeof decode_cases / sizeof decode_cases[0]; i++) {
        const struct decode_case *c = &decode_cases[i];
        char out[32];
        memset(out, 'X', sizeof out);
        long n = mg_url_decode(c->src, strlen(c->src), out, sizeof out, c->plus_is_space);
        cr_expect_eq(n, c->result, "decode \"%s\": %ld, expected %ld", c->src, n, c->result);
        if (c->decoded && n == c->result)
            cr_expect_str_eq(out, c->decoded, "decode \"%s\"", c->src);
    }
}

Test(http, url_decode_needs_room_for_the_terminator)
{
    char out[4];
    cr_expect_eq(mg_url_decode("abc", 3, out, 4, false), 3);
    cr_expect_str_eq(out, "abc");
    cr_expect_eq(mg_url_decode("abcd", 4, out, 4, false), -1);
    cr_expect_eq(mg_url_decode("%41%42%43", 9, out, 4, false), 3);
    cr_expect_str_eq(out, "ABC");
    cr_expect_eq(mg_url_decode("", 0, out, 0, false), -1);
    cr_expect_eq(mg_url_decode("", 0, out, 1, false), 0);
    cr_expect_str_eq(out, "");
}

static int parse_query(struct mg_query *q, const char *raw, char *storage, size_t cap)
{
    why = NULL;
    return mg_query_parse(q, raw, strlen(raw), storage, cap, &why);
}

Test(http, query_parse_splits_and_decodes_parameters)
{
    struct mg_query q;
    char storage[128];
    const char *raw = "limit=5&&name=a+b%21&flag&expr=x=y&=anon&";
    cr_assert_eq(parse_query(&q, raw, storage, sizeof storage), 0, "%s", why);
    cr_assert_eq(q.count, 5);
    cr_expect_str_eq(q.param[0].name, "limit");
    cr_expect_str_eq(q.param[0].value, "5");
    cr_expect_str_eq(q.param[1].name, "name");
    cr_expect_str_eq(q.param[1].value, "a b!");
    cr_expect_str_eq(q.param[2].name, "flag");
    cr_expect_str_eq(q.param[2].value, "");
    cr_expect(q.param[2].value >= storage && q.param[2].value < storage + sizeof storage,
              "an empty value lives in the caller's storage too");
    cr_expect_str_eq(q.param[3].name, "expr");
    cr_expect_str_eq(q.param[3].value, "x=y");
    cr_expect_str_eq(q.param[4].name, "");
    cr_expect_str_eq(q.param[4].value, "anon");

    cr_expect_str_eq(mg_query_get(&q, "name"), "a b!");
    cr_expect_str_eq(mg_query_get(&q, "flag"), "");
    cr_expect_null(mg_query_get(&q, "nam"));
    cr_expect_null(mg_query_get(&q, "missing"));
}

Test(http, query_parse_of_empty_query_has_no_parameters)
{
    struct mg_query q;
    q.count = 99;
    cr_expect_eq(mg_query_parse(&q, "", 0, NULL, 0, &why), 0);
    cr_expect_eq(q.count, 0);
    cr_expect_null(mg_query_get(&q, "a"));
    char storage[8];
    cr_expect_eq(parse_query(&q, "&&&", storage, sizeof storage), 0);
    cr_expect_eq(q.count, 0);
}

Test(http, query_get_returns_the_first_of_repeated_names)
{
    struct mg_query q;
    char storage[64];
    cr_assert_eq(parse_query(&q, "a=1&b=2&a=3", storage, sizeof storage), 0);
    cr_expect_str_eq(mg_query_get(&q, "a"), "1");
}

Test(http, query_parse_refuses_bad_escapes)
{
    struct mg_query q;
    char storage[64];
    cr_expect_eq(parse_query(&q, "a=%zz", storage, sizeof storage), -1);
    cr_expect_str_eq(why, "query string has a malformed percent escape or an encoded NUL");
    cr_expect_eq(parse_query(&q, "a%=1", storage, sizeof storage), -1);
    cr_expect_eq(parse_query(&q, "a=%00", storage, sizeof storage), -1);
    cr_expect_eq(parse_query(&q, "a=%4", storage, sizeof storage), -1);
}

Test(http, query_parse_refuses_storage_that_is_too_small)
{
    struct mg_query q;
    char storage[5];
    cr_expect_eq(parse_query(&q, "abc=def", storage, sizeof storage), -1);
    cr_expect_str_eq(why, "query string does not fit in the decoding storage");
}

Test(http, query_parse_fits_in_twice_the_query_length)
{
    const char *cases[] = {"a", "a&b", "a=", "=a", "a=b", "&a", "a&", "ab&cd=e", "%41", "x=%41"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t cap = 2 * strlen(cases[i]);
        char *storage = malloc(cap);
        cr_assert_not_null(storage);
        struct mg_query q;
        cr_expect_eq(parse_query(&q, cases[i], storage, cap), 0, "\"%s\": %s", cases[i], why);
        free(storage);
    }
}

Test(http, query_parse_takes_32_parameters_and_refuses_33)
{
    char raw[256];
    char storage[512];
    struct mg_query q;
    size_t n = 0;
    for (int i = 0; i < MG_HTTP_MAX_PARAMS; i++)
        n += (size_t)snprintf(raw + n, sizeof raw - n, "%sp%d=%d", i ? "&" : "", i, i);
    cr_assert_eq(parse_query(&q, raw, storage, sizeof storage), 0, "%s", why);
    cr_expect_eq(q.count, MG_HTTP_MAX_PARAMS);
    cr_expect_str_eq(mg_query_get(&q, "p31"), "31");

    snprintf(raw + n, sizeof raw - n, "&extra");
    cr_expect_eq(parse_query(&q, raw, storage, sizeof storage), -1);
    cr_expect_str_eq(why, "too many query parameters");
}

Test(http, reason_phrases_cover_the_statuses_the_server_sends)
{
    static const struct {
        int status;
        const char *reason;
    } reasons[] = {
        {200, "OK"},
        {204, "No Content"},
        {301, "Moved Permanently"},
        {304, "Not Modified"},
        {400, "Bad Request"},
        {401, "Unauthorized"},
        {403, "Forbidden"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {408, "Request Timeout"},
        {411, "Length Required"},
        {413, "Content Too Large"},
        {414, "URI Too Long"},
        {429, "Too Many Requests"},
        {431, "Request Header Fields Too Large"},
        {500, "Internal Server Error"},
        {501, "Not Implemented"},
        {503, "Service Unavailable"},
        {505, "HTTP Version Not Supported"},
        {299, "Unknown"},
        {0, "Unknown"},
        {-1, "Unknown"},
    };
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        cr_expect_str_eq(mg_http_reason(reasons[i].status), reasons[i].reason, "status %d",
                         reasons[i].status);
}

/* xorshift64*: deterministic, so a fuzz failure reproduces on every run. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint32_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1du) >> 32);
}

static size_t rng_below(size_t n)
{
    return n ? rng() % n : 0;
}

/* Bytes that matter to the grammar are likelier than others. */
static char interesting_byte(void)
{
    static const char picks[] = "\r\n \t:/?%&=;,\"*HTP1.0GETchunkedq\x00\x01\x7f\x80\xff";
    if (rng_below(4) == 0)
        return (char)rng_below(256);
    return picks[rng_below(sizeof picks - 1)];
}

static const char *const fuzz_seeds[] = {
    "GET / HTTP/1.1\r\n\r\n",
    "GET /api/nodes?limit=5&x=%20 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    "HEAD /x HTTP/1.0\nConnection: keep-alive\n\n",
    "POST /p HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\nAccept-Encoding: br;q=0\r\n\r\n",
    "POST /p HTTP/1.1\r\nContent-Length: 12\r\ncontent-length: 12\r\n\r\n",
    "\r\nOPTIONS * HTTP/1.1\r\n\r\n",
    "GET http://h:1/p?q HTTP/1.1\r\nX:\t\r\n\r\nGET / HTTP/1.1\r\n\r\n",
};

static size_t mutate(char *out, size_t cap)
{
    const char *seed = fuzz_seeds[rng_below(sizeof fuzz_seeds / sizeof fuzz_seeds[0])];
    size_t n = strlen(seed);
    memcpy(out, seed, n);
    for (size_t k = 1 + rng_below(4); k > 0; k--) {
        size_t at = rng_below(n + 1);
        switch (rng_below(5)) {
        case 0: /* overwrite */
            if (at < n)
                out[at] = interesting_byte();
            break;
        case 1: /* insert */
            if (n < cap) {
                memmove(out + at + 1, out + at, n - at);
                out[at] = interesting_byte();
                n++;
            }
            break;
        case 2: /* delete */
            if (at < n) {
                memmove(out + at, out + at + 1, n - at - 1);
                n--;
            }
            break;
        case 3: { /* repeat a slice, growing lines and header counts */
            size_t from = rng_below(n);
            size_t len = 1 + rng_below(n - from);
            for (size_t r = rng_below(40); r > 0 && n + len <= cap; r--) {
                memmove(out + at + len, out + at, n - at);
                memmove(out + at, out + from + (from >= at ? len : 0), len);
                n += len;
            }
            break;
        }
        default: /* cut */
            n = at;
            break;
        }
    }
    return n;
}

static size_t random_bytes(char *out, size_t cap)
{
    size_t n = rng_below(cap + 1);
    for (size_t i = 0; i < n; i++)
        out[i] = interesting_byte();
    return n;
}

static bool inside(struct mg_str s, const char *buf, size_t len)
{
    return s.ptr >= buf && s.len <= len && (size_t)(s.ptr - buf) <= len - s.len;
}

struct outcome_counts {
    size_t ok, incomplete, error;
};

/* Checks the properties every outcome must have; returns the result for the counts. */
static enum mg_http_result check_one(const char *input, size_t len,
                                     const struct mg_http_limits *limits)
{
    enum mg_http_result r = parse_limited(input, len, limits);
    switch (r) {
    case MG_HTTP_OK:
        cr_assert_gt(req.head_len, 0);
        cr_assert_leq(req.head_len, len);
        cr_assert_leq(req.head_len, limits->max_header_bytes);
        cr_assert_leq(req.header_count, MG_HTTP_MAX_HEADERS);
        cr_assert_leq(req.target.len, limits->max_uri_bytes);
        cr_assert(req.minor_version == 0 || req.minor_version == 1);
        cr_assert(inside(req.method, copy, req.head_len));
        cr_assert(inside(req.target, copy, req.head_len));
        cr_assert(inside(req.path, copy, req.head_len));
        cr_assert(inside(req.query, copy, req.head_len));
        cr_assert(req.path.len > 0 && (req.path.ptr[0] == '/' || str_eq(req.path, "*")));
        for (size_t i = 0; i < req.header_count; i++) {
            cr_assert(inside(req.headers[i].name, copy, req.head_len));
            cr_assert(inside(req.headers[i].value, copy, req.head_len));
        }
        cr_assert(!(req.chunked && req.content_length >= 0));
        break;
    case MG_HTTP_INCOMPLETE:
        cr_assert_lt(len, limits->max_header_bytes);
        break;
    case MG_HTTP_ERROR:
        cr_assert(status == 400 || status == 414 || status == 431 || status == 501 || status == 505,
                  "status %d", status);
        cr_assert(why != NULL && why[0] != '\0');
        break;
    default:
        cr_assert_fail("result %d is not a mg_http_result", r);
    }
    return r;
}

Test(http, fuzzed_input_never_crashes_or_reports_a_head_past_its_end)
{
    enum { ITERATIONS = 20000, MAX_INPUT = 600 };
    static char input[MAX_INPUT];
    struct outcome_counts counts = {0, 0, 0};

    for (int i = 0; i < ITERATIONS; i++) {
        size_t n = (i % 4 == 0) ? random_bytes(input, 200) : mutate(input, sizeof input);
        struct mg_http_limits limits = default_limits;
        if (i % 3 == 0) {
            limits.max_header_bytes = 16 + rng_below(200);
            limits.max_uri_bytes = rng_below(40);
        }

        enum mg_http_result r = check_one(input, n, &limits);
        size_t head_len = req.head_len;
        int first_status = status;
        if (r == MG_HTTP_OK) {
            counts.ok++;
            /* Any shorter prefix still waits for the rest of the head. */
            cr_assert_eq(check_one(input, head_len - 1, &limits), MG_HTTP_INCOMPLETE,
                         "iteration %d", i);
            cr_assert_eq(check_one(input, rng_below(head_len), &limits), MG_HTTP_INCOMPLETE,
                         "iteration %d", i);
            /* Bytes after the head (a pipelined request) do not change it. */
            cr_assert_eq(check_one(input, n, &limits), MG_HTTP_OK);
            cr_assert_eq(req.head_len, head_len);
        } else if (r == MG_HTTP_ERROR) {
            counts.error++;
            enum mg_http_result p = check_one(input, rng_below(n + 1), &limits);
            cr_assert(p == MG_HTTP_INCOMPLETE || (p == MG_HTTP_ERROR && status == first_status),
                      "iteration %d: prefix gave %d/%d, whole input %d", i, p, status,
                      first_status);
        } else {
            counts.incomplete++;
        }

        /* The value helpers see the same bytes, in buffers of exactly the promised size. */
        struct mg_str value = {input, n};
        (void)mg_http_has_token(&value, "gzip");
        char *decoded = malloc(n + 1);
        char *storage = malloc(n ? 2 * n : 1);
        cr_assert(decoded && storage);
        long d = mg_url_decode(input, n, decoded, n + 1, i % 2 == 0);
        cr_assert(d >= -1 && d <= (long)n);
        cr_assert(d < 0 || strlen(decoded) == (size_t)d);
        struct mg_query q;
        why = NULL;
        if (mg_query_parse(&q, input, n, storage, 2 * n, &why) == 0)
            cr_assert_leq(q.count, MG_HTTP_MAX_PARAMS);
        else
            cr_assert(strcmp(why, "query string does not fit in the decoding storage") != 0,
                      "iteration %d: twice the query length was not enough", i);
        free(storage);
        free(decoded);
    }

    /* The mutations must reach every outcome, or the loop tests less than it claims. */
    cr_expect_gt(counts.ok, ITERATIONS / 50, "ok %zu", counts.ok);
    cr_expect_gt(counts.error, ITERATIONS / 50, "error %zu", counts.error);
    cr_expect_gt(counts.incomplete, ITERATIONS / 50, "incomplete %zu", counts.incomplete);
}
