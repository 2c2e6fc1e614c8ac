/* SPDX-License-Identifier: ISC */
/*
 * The proxy's HTTP as functions of bytes (workers/upstream/upstream_http.h), the breaker as a
 * function of time (shm/breaker.h), and which upstream routes are heavy: no socket, no clock.
 */
#include "breaker.h"
#include "config.h"
#include "harness.h"
#include "upstream.h"
#include "upstream_http.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(upstream_http);

static void parse_request(const char *text, struct mg_http_request *hr)
{
    struct mg_http_limits limits = {.max_header_bytes = 8192, .max_uri_bytes = 4096};
    int status = 0;
    const char *why = NULL;
    cr_assert_eq(mg_http_parse_request(text, strlen(text), &limits, hr, &status, &why), MG_HTTP_OK,
                 "%s: %s", text, why ? why : "");
}

Test(upstream_http, a_chunked_body_is_found_and_decoded_whatever_the_split)
{
    const char body[] = "4;name=value\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n"
                        "0\r\nTrailer-One: 1\r\n\r\nNEXT";
    size_t total = strlen(body), end = total - 4;
    /* Every split in two must give the same decoded text and stop at the same byte. */
    for (size_t cut = 0; cut <= total; cut++) {
        struct mg_chunked c = {0};
        char out[128];
        size_t out_len = 0, consumed = 0;
        bool done = false;
        long n = mg_chunked_feed(&c, body, cut, out, &out_len, &done);
        cr_assert_geq(n, 0, "cut %zu", cut);
        consumed += (size_t)n;
        if (!done) {
            n = mg_chunked_feed(&c, body + cut, total - cut, out, &out_len, &done);
            cr_assert_geq(n, 0, "cut %zu", cut);
            consumed += (size_t)n;
        }
        cr_assert(done, "cut %zu", cut);
        cr_expect_eq(consumed, end, "cut %zu: the body ends before NEXT", cut);
        out[out_len] = '\0';
        cr_expect_str_eq(out, "Wikipedia in\r\n\r\nchunks.", "cut %zu", cut);
    }
}

Test(upstream_http, malformed_chunks_are_refused)
{
    const char *bad[] = {"x\r\n", "4\r\nWikiX\r\n",        "4\nWiki\r\n",
                         "\r\n",  "1234567890abcdef0\r\n", "0\r\nNo-CRLF\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct mg_chunked c = {0};
        bool done = false;
        cr_expect_eq(mg_chunked_feed(&c, bad[i], strlen(bad[i]), NULL, NULL, &done), -1, "%s",
                     bad[i]);
    }
}

Test(upstream_http, the_response_head_says_how_its_body_is_framed)
{
    static const struct {
        const char *head;
        bool head_request;
        int framing; /* -1: refused */
        bool keep_alive;
    } cases[] = {
        {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false, MG_BODY_LENGTH, true},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, MG_BODY_CHUNKED, true},
        {"HTTP/1.1 200 OK\r\n\r\n", false, MG_BODY_CLOSE, false},
        {"HTTP/1.1 204 No Content\r\n\r\n", false, MG_BODY_NONE, true},
        {"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", false, MG_BODY_NONE, true},
        {"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true, MG_BODY_NONE, true},
        {"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", false, MG_BODY_LENGTH, false},
        {"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\n", false, MG_BODY_LENGTH,
         false},
        {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", false, -1, false},
        {"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", false, -1, false},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false, -1, false},
        {"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", false, -1, false},
        {"HTTP/2 200 OK\r\n\r\n", false, -1, false},
        {"HTTP/1.1 20 OK\r\n\r\n", false, -1, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct mg_upstream_response r;
        enum mg_http_result pr = mg_upstream_parse_response(cases[i].head, strlen(cases[i].head),
                                                            cases[i].head_request, &r);
        if (cases[i].framing < 0) {
            cr_expect_eq(pr, MG_HTTP_ERROR, "%s", cases[i].head);
            continue;
        }
        cr_assert_eq(pr, MG_HTTP_OK, "%s", cases[i].head);
        cr_expect_eq((int)r.framing, cases[i].framing, "%s", cases[i].head);
        cr_expect_eq(r.keep_alive, cases[i].keep_alive, "%s", cases[i].head);
        cr_expect_eq(r.head_len, strlen(cases[i].head));
        /* Every shorter prefix is incomplete, never an error. */
        for (size_t cut = 0; cut < strlen(cases[i].head); cut++)
            cr_expect_eq(mg_upstream_parse_response(cases[i].head, cut, false, &r),
                         MG_HTTP_INCOMPLETE, "%s cut at %zu", cases[i].head, cut);
    }
}

Test(upstream_http, the_client_gets_chunks_on_http11_and_a_decoded_body_on_http10)
{
    const char *head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n"
                       "Keep-Alive: timeout=5\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
                       "Trailer: X-Sum\r\nX-Kept: yes\r\n\r\n";
    struct mg_upstream_response r;
    cr_assert_eq(mg_upstream_parse_response(head, strlen(head), false, &r), MG_HTTP_OK);
    struct mg_buf out;
    mg_buf_init(&out);
    bool dechunk, close_after;
    mg_upstream_response_head(&r, 1, true, &out, &dechunk, &close_after);
    const char *text = mg_buf_cstr(&out);
    cr_expect(!dechunk && !close_after);
    cr_expect(strstr(text, "Transfer-Encoding: chunked\r\n"), "%s", text);
    cr_expect(strstr(text, "X-Kept: yes\r\n") && strstr(text, "Via: 1.1 meshgate\r\n"), "%s", text);
    const char *gone[] = {"Content-Length", "Keep-Alive", "X-Hop", "Trailer", "Connection"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        cr_expect(!strstr(text, gone[i]), "%s in %s", gone[i], text);
    mg_buf_reset(&out);
    mg_upstream_response_head(&r, 0, true, &out, &dechunk, &close_after);
    text = mg_buf_cstr(&out);
    cr_expect(dechunk && close_after);
    cr_expect(!strstr(text, "Transfer-Encoding"), "%s", text);
    cr_expect(strstr(text, "Connection: close\r\n"), "%s", text);
    mg_buf_free(&out);
}

Test(upstream_http, the_forwarded_head_drops_hop_by_hop_headers)
{
    struct mg_http_request hr;
    parse_request("POST /api/decode?x=1 HTTP/1.1\r\nHost: h\r\nConnection: X-A, close\r\n"
                  "X-A: 1\r\nTE: trailers\r\nUpgrade: h2c\r\nX-Forwarded-For: 9.9.9.9\r\n"
                  "Forwarded: for=9.9.9.9\r\nContent-Length: 2\r\nX-B: 2\r\n\r\n{}",
                  &hr);
    struct mg_buf out;
    mg_buf_init(&out);
    mg_upstream_request_head(&hr, "192.0.2.1", NULL, false, &out);
    cr_expect_str_eq(mg_buf_cstr(&out), "POST /api/decode?x=1 HTTP/1.1\r\nHost: h\r\n"
                                        "X-B: 2\r\nContent-Length: 2\r\n"
                                        "X-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\n"
                                        "Via: 1.1 meshgate\r\n\r\n");
    mg_buf_free(&out);
    cr_expect(!mg_upstream_is_websocket(&hr));
    parse_request("GET /ws HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\n"
                  "Upgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
                  &hr);
    cr_expect(mg_upstream_is_websocket(&hr));
    mg_buf_init(&out);
    mg_upstream_request_head(&hr, "192.0.2.1", "https", true, &out);
    cr_expect(strstr(mg_buf_cstr(&out), "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"));
    cr_expect(strstr(mg_buf_cstr(&out), "Sec-WebSocket-Key: k\r\n"));
    cr_expect(strstr(mg_buf_cstr(&out), "X-Forwarded-Proto: https\r\n"));
    mg_buf_free(&out);
}

Test(upstream_http, request_bodies_need_one_valid_length_within_the_limit)
{
    struct mg_http_request hr;
    const char *why;
    parse_request("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n", &hr);
    cr_expect_eq(mg_upstream_request_check(&hr, 10, &why), 0);
    cr_expect_eq(mg_upstream_request_check(&hr, 9, &why), 413);
    parse_request("POST / HTTP/1.1\r\nContent-Length: 10\r\nContent-Length: 10\r\n\r\n", &hr);
    cr_expect_eq(mg_upstream_request_check(&hr, 100, &why), 400);
    parse_request("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &hr);
    cr_expect_eq(mg_upstream_request_check(&hr, 100, &why), 411);
    parse_request("GET / HTTP/1.1\r\n\r\n", &hr);
    cr_expect_eq(mg_upstream_request_check(&hr, 0, &why), 0);
}

/* Issue 23: "Connection: Content-Length" had the length dropped on the way up while the body
 * still went, and the upstream read the body as more requests. */
Test(upstream_http, a_connection_header_naming_what_frames_the_request_is_refused)
{
    static const char *const refused[] = {
        "POST / HTTP/1.1\r\nConnection: Content-Length\r\nContent-Length: 3\r\n\r\n",
        "POST / HTTP/1.1\r\nConnection: keep-alive, content-length\r\nContent-Length: 3\r\n\r\n",
        "POST / HTTP/1.1\r\nConnection: x\r\nConnection: Transfer-Encoding\r\n"
        "Content-Length: 3\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nConnection: Host\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection: X-Forwarded-For\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection: Authorization\r\nAuthorization: Bearer k\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection: x-api-key\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection: Via, Forwarded\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: "
        "5\r\n\r\n",
    };
    struct mg_http_request hr;
    const char *why = NULL;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        parse_request(refused[i], &hr);
        cr_expect_eq(mg_upstream_request_check(&hr, 1000, &why), 400, "%s", refused[i]);
    }
    parse_request("POST / HTTP/1.1\r\nConnection: Content-Length\r\nContent-Length: 3\r\n\r\n",
                  &hr);
    mg_upstream_request_check(&hr, 1000, &why);
    cr_expect(strstr(why, "Connection") && strstr(why, "Content-Length"), "%s", why);
    /* What a client may name: hop-by-hop headers, and its own end-to-end ones (dropped). */
    parse_request("POST / HTTP/1.1\r\nConnection: keep-alive, TE, X-Mine, Upgrade\r\n"
                  "Content-Length: 3\r\n\r\n",
                  &hr);
    cr_expect_eq(mg_upstream_request_check(&hr, 1000, &why), 0);
}

/* Whatever the client's lines, the head carries one Content-Length: the one meshgate reads the
 * body by. */
Test(upstream_http, the_forwarded_head_carries_exactly_the_length_meshgate_frames_by)
{
    struct mg_http_request hr;
    struct mg_buf out;
    mg_buf_init(&out);
    parse_request("POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\nX-A: 1\r\n"
                  "Connection: X-A\r\n\r\n",
                  &hr);
    mg_upstream_request_head(&hr, "192.0.2.1", NULL, false, &out);
    const char *text = mg_buf_cstr(&out);
    cr_expect_eq(mg_test_count(text, "Content-Length"), 1, "%s", text);
    cr_expect(strstr(text, "Content-Length: 7\r\n"), "%s", text);
    cr_expect(!strstr(text, "X-A"), "%s", text);
    mg_buf_reset(&out);
    /* Without a length, none is invented; a HTTP/1.0 body keeps its length. */
    parse_request("GET /x HTTP/1.0\r\nHost: h\r\n\r\n", &hr);
    mg_upstream_request_head(&hr, "192.0.2.1", NULL, false, &out);
    cr_expect(!strstr(mg_buf_cstr(&out), "Content-Length"), "%s", mg_buf_cstr(&out));
    mg_buf_free(&out);
}

/* The response's framing is meshgate's too: an upstream's Connection header cannot take the
 * length away from the client; values with a CR or another control are refused. */
Test(upstream_http, the_client_always_gets_the_framing_meshgate_relays_by)
{
    const char *head = "HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 5\r\n"
                       "X-Kept: 1\r\n\r\n";
    struct mg_upstream_response r;
    cr_assert_eq(mg_upstream_parse_response(head, strlen(head), false, &r), MG_HTTP_OK);
    cr_expect_eq(r.framing, MG_BODY_LENGTH);
    struct mg_buf out;
    mg_buf_init(&out);
    bool dechunk, close_after;
    mg_upstream_response_head(&r, 1, true, &out, &dechunk, &close_after);
    cr_expect(strstr(mg_buf_cstr(&out), "Content-Length: 5\r\n"), "%s", mg_buf_cstr(&out));
    mg_buf_reset(&out);
    /* A HEAD's answer keeps the length it describes; a 204 never has one. */
    head = "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n";
    cr_assert_eq(mg_upstream_parse_response(head, strlen(head), true, &r), MG_HTTP_OK);
    mg_upstream_response_head(&r, 1, true, &out, &dechunk, &close_after);
    cr_expect(strstr(mg_buf_cstr(&out), "Content-Length: 99\r\n"), "%s", mg_buf_cstr(&out));
    mg_buf_reset(&out);
    head = "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n";
    cr_assert_eq(mg_upstream_parse_response(head, strlen(head), false, &r), MG_HTTP_OK);
    cr_expect(r.keep_alive);
    mg_upstream_response_head(&r, 1, true, &out, &dechunk, &close_after);
    cr_expect(!strstr(mg_buf_cstr(&out), "Content-Length"), "%s", mg_buf_cstr(&out));
    mg_buf_free(&out);
    static const char *const bad[] = {
        "HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 O\rK\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A: a\x01\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX(A): a\r\nContent-Length: 0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(mg_upstream_parse_response(bad[i], strlen(bad[i]), false, &r), MG_HTTP_ERROR,
                     "%s", bad[i]);
    /* Framing in doubt: answered, and the connection is not used again. */
    static const char *const unclear[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof unclear / sizeof unclear[0]; i++) {
        cr_assert_eq(mg_upstream_parse_response(unclear[i], strlen(unclear[i]), false, &r),
                     MG_HTTP_OK, "%s", unclear[i]);
        cr_expect(!r.keep_alive, "%s", unclear[i]);
    }
}

/* Item 7 of issue 23: a head that does not end within 64 KiB is an error at once. */
Test(upstream_http, a_response_head_over_64_kib_is_an_error_not_a_wait)
{
    size_t n = MG_UPSTREAM_HEAD_MAX + 100;
    char *head = malloc(n);
    memcpy(head, "HTTP/1.1 200 OK\r\n", 17);
    for (size_t i = 17; i < n; i += 20)
        memcpy(head + i, "X-Pad: 0123456789ab\r\n", n - i < 21 ? n - i : 21);
    struct mg_upstream_response r;
    cr_expect_eq(mg_upstream_parse_response(head, MG_UPSTREAM_HEAD_MAX - 1, false, &r),
                 MG_HTTP_INCOMPLETE);
    cr_expect_eq(mg_upstream_parse_response(head, MG_UPSTREAM_HEAD_MAX, false, &r), MG_HTTP_ERROR);
    /* One long line without its end too. */
    memset(head + 17, 'a', n - 17);
    cr_expect_eq(mg_upstream_parse_response(head, MG_UPSTREAM_HEAD_MAX, false, &r), MG_HTTP_ERROR);
    free(head);
}

Test(upstream_http, the_breaker_opens_fails_fast_and_probes_on_its_own)
{
    struct mg_breaker b;
    const int64_t s = 1000000000;
    mg_breaker_init(&b, 3, 5 * s);
    const uint8_t a[16] = {[15] = 1}, other[16] = {[15] = 2};
    int64_t retry = 0;
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(mg_breaker_allow(&b, 10, 0, &retry), MG_BREAKER_PASS);
        cr_expect(!mg_breaker_failure(&b, 10, false, 0, a));
    }
    /* An answer in between starts the count again. */
    mg_breaker_success(&b, 10, false);
    cr_expect_eq(mg_breaker_probe_due(&b), INT64_MAX);
    cr_expect(!mg_breaker_failure(&b, 10, false, 1 * s, other));
    cr_expect(!mg_breaker_failure(&b, 10, false, 1 * s, a));
    cr_expect(mg_breaker_failure(&b, 10, false, 1 * s, a), "the third opens it");
    cr_expect_eq(atomic_load(&b.state), MG_BREAKER_OPEN);
    /* Attributed: the last failure's address; not all of them were its. */
    cr_expect_eq(memcmp((const void *)b.opened_by, a, 16), 0);
    cr_expect_eq(atomic_load(&b.opened_by_one_address), 0);
    cr_expect_eq(mg_breaker_allow(&b, 11, 2 * s, &retry), MG_BREAKER_REFUSE);
    cr_expect_eq(retry, 4 * s);
    cr_expect_eq(mg_breaker_probe_due(&b), 6 * s);
    /* Not before the open time; after it, clients still fail fast: the probe is meshgate's,
     * taken by one worker. */
    cr_expect(!mg_breaker_take_probe(&b, 11, 5 * s));
    cr_expect_eq(mg_breaker_allow(&b, 12, 6 * s, &retry), MG_BREAKER_REFUSE);
    cr_expect(mg_breaker_take_probe(&b, 11, 6 * s));
    cr_expect(!mg_breaker_take_probe(&b, 12, 6 * s));
    cr_expect_eq(mg_breaker_probe_due(&b), INT64_MAX, "half-open: no other probe is due");
    /* The probe fails: open again for the whole time. */
    mg_breaker_failure(&b, 11, true, 7 * s, NULL);
    cr_expect_eq(mg_breaker_allow(&b, 12, 8 * s, &retry), MG_BREAKER_REFUSE);
    cr_expect_eq(retry, 4 * s);
    cr_expect(mg_breaker_take_probe(&b, 12, 12 * s));
    /* Its worker dies: the master gives the probe back and another worker probes. */
    cr_expect(mg_breaker_reclaim(&b, 12, 13 * s));
    cr_expect(mg_breaker_take_probe(&b, 13, 13 * s));
    mg_breaker_success(&b, 13, true);
    cr_expect_eq(atomic_load(&b.state), MG_BREAKER_CLOSED);
    cr_expect_eq(mg_breaker_allow(&b, 14, 13 * s, &retry), MG_BREAKER_PASS);
    /* Three failures of one address: counted as opened by one address. */
    for (int i = 0; i < 3; i++)
        mg_breaker_failure(&b, 14, false, 14 * s, other);
    cr_expect_eq(atomic_load(&b.opened_by_one_address), 1);
    cr_expect_eq(memcmp((const void *)b.opened_by, other, 16), 0);
    cr_expect_eq(atomic_load(&b.opened), 3);
    cr_expect_eq(atomic_load(&b.probes), 3);
}

Test(upstream_http, heavy_upstream_routes_follow_the_configured_prefixes)
{
    struct mg_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.upstream_heavy, sizeof cfg.upstream_heavy,
             "/api/analytics/, /api/nodes/*/analytics,/api/observers/*/analytics");
    cr_expect(mg_upstream_is_heavy(&cfg, "/api/analytics/rf"));
    cr_expect(mg_upstream_is_heavy(&cfg, "/api/nodes/ABCDEF/analytics"));
    cr_expect(mg_upstream_is_heavy(&cfg, "/api/observers/obs-1/analytics"));
    cr_expect(!mg_upstream_is_heavy(&cfg, "/api/nodes/ABCDEF/health"));
    cr_expect(!mg_upstream_is_heavy(&cfg, "/api/analytics"));
    cr_expect(!mg_upstream_is_heavy(&cfg, "/api/observers"));
    cfg.upstream_heavy[0] = '\0';
    cr_expect(!mg_upstream_is_heavy(&cfg, "/api/analytics/rf"));
}

Test(upstream_http, websocket_frames_are_followed_to_their_boundaries)
{
    /* A masked text frame of 5 bytes, then an unmasked one of 300 (16-bit length). */
    unsigned char stream[2 + 4 + 5 + 4 + 300];
    size_t n = 0;
    stream[n++] = 0x81;
    stream[n++] = 0x85;
    n += 4 + 5;
    stream[n++] = 0x82;
    stream[n++] = 126;
    stream[n++] = 300 >> 8;
    stream[n++] = 300 & 0xff;
    n += 300;
    for (size_t cut = 0; cut <= n; cut++) {
        struct mg_ws_frames f = {0};
        size_t a = mg_ws_frames_feed(&f, stream, cut, false);
        cr_assert_eq(a, cut);
        bool boundary = cut == 0 || cut == 11 || cut == n;
        cr_expect_eq(mg_ws_frames_at_boundary(&f), boundary, "cut %zu", cut);
        /* Stopping at the boundary takes the rest of the frame in progress, no more. */
        size_t b = mg_ws_frames_feed(&f, stream + cut, n - cut, true);
        size_t want = cut < 11 ? 11 - cut : cut == 11 ? n - cut : n - cut;
        if (cut == 0)
            want = 11;
        cr_expect_eq(b, want, "cut %zu", cut);
        cr_expect(mg_ws_frames_at_boundary(&f), "cut %zu", cut);
    }
}
