/* SPDX-License-Identifier: ISC */
/*
 * meshgate-bench (tools/bench/): exact percentiles, strict parsing of what it is told, a
 * refusal of any target but this machine's loopback, honest counts against the real server
 * (sent = 200 + 429 + 503 + other + err; the open-loop schedule; once bursts; 404s; a server
 * that stops or never answers), and runs that end by themselves.
 */
#include "bench.h"
#include "clock.h"
#include "harness.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOOL MESHGATE_BUILD_DIR "/meshgate-bench"

TestSuite(bench, .timeout = 30);

/* Big enough to keep off the stack. */
static struct mg_bench_config cfg;
static struct mg_bench_report rep;
static char err[1024];

/* Parses a NULL-terminated argument list into cfg (after a fresh init). */
static enum mg_bench_args parse(const char *const *args)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = "meshgate-bench";
    for (int i = 0; args[i] && argc < 63; i++)
        argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    mg_bench_config_free(&cfg);
    mg_bench_config_init(&cfg);
    err[0] = '\0';
    return mg_bench_parse_args(&cfg, argc, argv, err, sizeof err);
}

static const struct mg_bench_stream_report *stream_report(const char *name)
{
    for (unsigned i = 0; i < cfg.nstreams; i++)
        if (strcmp(cfg.streams[i].name, name) == 0)
            return &rep.streams[i];
    cr_assert_fail("no stream %s", name);
    return NULL;
}

/* The accounting every stream must satisfy, and ordered percentiles. */
static void expect_honest(const char *name)
{
    const struct mg_bench_stream_report *s = stream_report(name);
    cr_expect_eq(s->sent,
                 s->status_200 + s->status_429 + s->status_503 + s->status_other + s->errors_total,
                 "%s: sent %llu != 200 %llu + 429 %llu + 503 %llu + other %llu + err %llu", name,
                 (unsigned long long)s->sent, (unsigned long long)s->status_200,
                 (unsigned long long)s->status_429, (unsigned long long)s->status_503,
                 (unsigned long long)s->status_other, (unsigned long long)s->errors_total);
    cr_expect_eq(s->responses, s->latency.samples, "%s: every response has its latency", name);
    cr_expect_eq(s->nlatencies, s->latency.samples);
    for (size_t i = 1; i < s->nlatencies; i++)
        if (s->latencies_ns[i - 1] > s->latencies_ns[i])
            cr_assert_fail("%s: latencies not sorted at %zu", name, i);
    if (s->latency.samples) {
        cr_expect_leq(s->latency.min_ns, s->latency.p50_ns, "%s", name);
        cr_expect_leq(s->latency.p50_ns, s->latency.p95_ns, "%s", name);
        cr_expect_leq(s->latency.p95_ns, s->latency.p99_ns, "%s", name);
        cr_expect_leq(s->latency.p99_ns, s->latency.max_ns, "%s", name);
        cr_expect_gt(s->latency.min_ns, 0, "%s", name);
    }
}

static void cleanup_run(void)
{
    mg_bench_report_free(&rep);
    mg_bench_config_free(&cfg);
}

/* --- percentiles ----------------------------------------------------------------------------- */

Test(bench, percentile_is_nearest_rank_on_known_samples)
{
    int64_t hundred[100];
    for (int i = 0; i < 100; i++)
        hundred[i] = i + 1;
    cr_expect_eq(mg_bench_percentile(hundred, 100, 500), 50);
    cr_expect_eq(mg_bench_percentile(hundred, 100, 950), 95);
    cr_expect_eq(mg_bench_percentile(hundred, 100, 990), 99);
    cr_expect_eq(mg_bench_percentile(hundred, 100, 1000), 100);
    cr_expect_eq(mg_bench_percentile(hundred, 100, 1), 1);

    /* 0.07 * 100 is 7.000000000000001 in doubles: a floating ceil would pick the 8th. */
    cr_expect_eq(mg_bench_percentile(hundred, 100, 70), 7);

    int64_t twenty[20];
    for (int i = 0; i < 20; i++)
        twenty[i] = (i + 1) * 10;
    cr_expect_eq(mg_bench_percentile(twenty, 20, 950), 190);
    cr_expect_eq(mg_bench_percentile(twenty, 20, 500), 100);
    cr_expect_eq(mg_bench_percentile(twenty, 20, 990), 200);

    /* Ten samples: p50 is the 5th, p95 and p99 the 10th (ceil), p90 the 9th. */
    int64_t ten[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1000};
    cr_expect_eq(mg_bench_percentile(ten, 10, 500), 5);
    cr_expect_eq(mg_bench_percentile(ten, 10, 900), 9);
    cr_expect_eq(mg_bench_percentile(ten, 10, 950), 1000);

    int64_t one = 42;
    cr_expect_eq(mg_bench_percentile(&one, 1, 1), 42);
    cr_expect_eq(mg_bench_percentile(&one, 1, 1000), 42);
    cr_expect_eq(mg_bench_percentile(hundred, 0, 500), -1, "no samples: no percentile");
}

/* --- stream specs ---------------------------------------------------------------------------- */

Test(bench, good_stream_specs_parse)
{
    struct mg_bench_stream s;
    cr_assert_eq(mg_bench_parse_stream("h:/api/healthz:closed:16", &s, err, sizeof err), 0, "%s",
                 err);
    cr_expect_str_eq(s.name, "h");
    cr_expect_str_eq(s.path, "/api/healthz");
    cr_expect_eq(s.mode, MG_BENCH_CLOSED);
    cr_expect_eq(s.connections, 16);
    cr_expect_eq(s.pause_ms, 0);

    cr_assert_eq(mg_bench_parse_stream("poll:/api/nodes?limit=5:closed:4:50", &s, err, sizeof err),
                 0, "%s", err);
    cr_expect_str_eq(s.path, "/api/nodes?limit=5");
    cr_expect_eq(s.connections, 4);
    cr_expect_eq(s.pause_ms, 50);

    cr_assert_eq(mg_bench_parse_stream("anon:/api/packets:open:0.5", &s, err, sizeof err), 0);
    cr_expect_eq(s.mode, MG_BENCH_OPEN);
    cr_expect_float_eq(s.rate_per_s, 0.5, 1e-12);

    cr_assert_eq(
        mg_bench_parse_stream("cold:/api/nodes/{key}/reach?days=7:once:48", &s, err, sizeof err), 0,
        "%s", err);
    cr_expect_eq(s.mode, MG_BENCH_ONCE);
    cr_expect_eq(s.count, 48);
    cr_expect_eq(s.key_slots, 1);
    cr_expect_str_eq(s.path, "/api/nodes/{key}/reach?days=7");

    /* Colons inside the path stay in the path: the mode is found from the right. */
    cr_assert_eq(
        mg_bench_parse_stream("t:/api/packets?since=12:00:00:open:200", &s, err, sizeof err), 0,
        "%s", err);
    cr_expect_str_eq(s.path, "/api/packets?since=12:00:00");
    cr_expect_float_eq(s.rate_per_s, 200, 1e-12);
}

Test(bench, bad_stream_specs_are_refused_naming_the_spec)
{
    static const struct {
        const char *spec;
        const char *says; /* a part of the message besides the spec */
    } cases[] = {
        {"nocolon", "must be"},
        {"h:/x:closed", "no mode"},
        {"h:/x:fast:3", "no mode"},
        {":/x:closed:1", "NAME"},
        {"h h:/x:closed:1", "NAME"},
        {"h:x:closed:1", "start with '/'"},
        {"h:/a b:closed:1", "visible ASCII"},
        {"h:/a/{id}:closed:1", "{key}"},
        {"h:/x:closed:0", "CONNS \"0\""},
        {"h:/x:closed:10001", "CONNS"},
        {"h:/x:closed:-1", "CONNS"},
        {"h:/x:closed:abc", "CONNS"},
        {"h:/x:closed:4:", "PAUSE_MS"},
        {"h:/x:closed:4:600001", "PAUSE_MS"},
        {"h:/x:open:0", "RATE \"0\""},
        {"h:/x:open:1e3", "RATE"},
        {"h:/x:open:inf", "RATE"},
        {"h:/x:open:2000000", "RATE"},
        {"h:/x:open:200:50", "only closed streams take a PAUSE_MS"},
        {"h:/x:once:0", "N \"0\""},
        {"h:/x:once:8:1", "only closed streams take a PAUSE_MS"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct mg_bench_stream s;
        err[0] = '\0';
        cr_expect_eq(mg_bench_parse_stream(cases[i].spec, &s, err, sizeof err), -1,
                     "%s was accepted", cases[i].spec);
        cr_expect(strstr(err, cases[i].spec) != NULL, "%s: message does not quote it: %s",
                  cases[i].spec, err);
        cr_expect(strstr(err, cases[i].says) != NULL, "%s: message lacks \"%s\": %s", cases[i].spec,
                  cases[i].says, err);
    }
}

/* --- targets --------------------------------------------------------------------------------- */

Test(bench, only_loopback_targets_are_accepted)
{
    struct mg_bench_target t;
    cr_assert_eq(mg_bench_parse_target("127.0.0.1:8080", &t, err, sizeof err), 0, "%s", err);
    cr_expect_eq(t.port, 8080);
    cr_expect(mg_bench_target_is_loopback(&t));
    cr_assert_eq(mg_bench_parse_target("[::1]:18090", &t, err, sizeof err), 0, "%s", err);
    cr_expect_eq(t.addr.ss_family, AF_INET6);
    cr_expect(mg_bench_target_is_loopback(&t));

    static const char *const refused[] = {
        "10.0.0.1:80",      "example.com:80",
        "localhost:80",     "127.0.0.2:80",
        "0.0.0.0:80",       "[::2]:80",
        "[::]:80",          "::1:80",
        "127.0.0.1",        "127.0.0.1:0",
        "127.0.0.1:70000",  "127.0.0.1:http",
        "[::1]80",          "",
        "192.168.1.1:8080",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        err[0] = '\0';
        cr_expect_eq(mg_bench_parse_target(refused[i], &t, err, sizeof err), -1, "%s accepted",
                     refused[i]);
        cr_expect(strstr(err, "--target") && strstr(err, refused[i]),
                  "message names neither option nor value: %s", err);
        cr_expect(!mg_bench_target_is_loopback(&t), "%s left a usable target", refused[i]);
    }
}

Test(bench, run_refuses_a_non_loopback_target_without_connecting, .fini = cleanup_run)
{
    /* A configuration built by hand, not through the parser: the run checks again. */
    cr_assert_eq(parse((const char *[]){"--stream", "h:/api/healthz:closed:1", NULL}),
                 MG_BENCH_ARGS_OK, "%s", err);
    struct sockaddr_in *sin = (struct sockaddr_in *)&cfg.target.addr;
    inet_pton(AF_INET, "10.0.0.1", &sin->sin_addr);
    sin->sin_port = htons(80);
    snprintf(cfg.target.text, sizeof cfg.target.text, "10.0.0.1:80");
    int64_t began = mg_test_now_ms();
    cr_expect_eq(mg_bench_run(&cfg, &rep, err, sizeof err), MG_BENCH_REFUSED);
    /* A connect to an unroutable address would take the 2 s probe timeout, or fail. */
    cr_expect_lt(mg_test_now_ms() - began, 100);
    cr_expect(strstr(err, "10.0.0.1:80") != NULL, "%s", err);
}

/* --- the command line ------------------------------------------------------------------------ */

Test(bench, command_line_is_parsed_and_quoted_back, .fini = cleanup_run)
{
    cr_assert_eq(parse((const char *[]){"--target",
                                        "[::1]:9999",
                                        "--stream",
                                        "user:/api/nodes:closed:2:50",
                                        "--stream=anon:/x:open:10",
                                        "--header",
                                        "user:Authorization: Bearer x",
                                        "--duration",
                                        "2.5",
                                        "--warmup=1",
                                        "--timeout-ms",
                                        "750",
                                        "--threads",
                                        "3",
                                        "--max-requests",
                                        "1000",
                                        "--max-outstanding",
                                        "64",
                                        "--label",
                                        "gate on",
                                        "--json",
                                        NULL}),
                 MG_BENCH_ARGS_OK, "%s", err);
    cr_expect_eq(cfg.target.port, 9999);
    cr_expect_eq(cfg.nstreams, 2);
    cr_expect_eq(cfg.streams[0].nheaders, 1);
    cr_expect_str_eq(cfg.streams[0].headers[0], "Authorization: Bearer x");
    cr_expect_eq(cfg.streams[1].nheaders, 0, "a header applies to the named stream only");
    cr_expect_float_eq(cfg.duration_s, 2.5, 1e-12);
    cr_expect_float_eq(cfg.warmup_s, 1, 1e-12);
    cr_expect_eq(cfg.timeout_ms, 750);
    cr_expect_eq(cfg.threads, 3);
    cr_expect_eq(cfg.max_requests, 1000);
    cr_expect_eq(cfg.max_outstanding, 64);
    cr_expect_str_eq(cfg.label, "gate on");
    cr_expect(cfg.json);
    cr_expect_str_eq(cfg.command_line,
                     "meshgate-bench --target '[::1]:9999' --stream user:/api/nodes:closed:2:50 "
                     "--stream=anon:/x:open:10 --header 'user:Authorization: Bearer x' "
                     "--duration 2.5 --warmup=1 --timeout-ms 750 --threads 3 --max-requests 1000 "
                     "--max-outstanding 64 --label 'gate on' --json");

    cr_expect_eq(parse((const char *[]){"--stream", "h:/:closed:1", "--help", NULL}),
                 MG_BENCH_ARGS_HELP);
    cr_expect_eq(parse((const char *[]){"-h", NULL}), MG_BENCH_ARGS_HELP);
}

Test(bench, bad_arguments_name_the_option_and_its_value, .fini = cleanup_run)
{
    char keys_path[] = "/tmp/meshgate-bench-keys-XXXXXX";
    int fd = mkstemp(keys_path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "# two keys\nk1\n\nk2\n", 18), 18);
    close(fd);
    const struct {
        const char *args[8];
        const char *says[2];
    } cases[] = {
        {{"--stream", "h:/:closed:1", "--duration", "601"}, {"--duration 601", "0.1 to 600"}},
        {{"--stream", "h:/:closed:1", "--duration", "0"}, {"--duration 0", "seconds"}},
        {{"--stream", "h:/:closed:1", "--duration", "abc"}, {"--duration abc", "seconds"}},
        {{"--stream", "h:/:closed:1", "--warmup", "-1"}, {"--warmup -1", "0 to 600"}},
        {{"--stream", "h:/:closed:1", "--timeout-ms", "0"}, {"--timeout-ms 0", "1 to 600000"}},
        {{"--stream", "h:/:closed:1", "--threads", "65"}, {"--threads 65", "1 to 64"}},
        {{"--stream", "h:/:closed:1", "--max-requests", "0"}, {"--max-requests 0", "1 to"}},
        {{"--stream", "h:/:closed:1", "--max-outstanding", "x"}, {"--max-outstanding x", "1 to"}},
        {{"--stream", "h:/:closed:1", "--target", "10.0.0.1:80"},
         {"--target 10.0.0.1:80", "127.0.0.1"}},
        {{"--stream", "h:/:closed:1", "--bogus"}, {"unknown option --bogus", "--stream"}},
        {{"--stream", "h:/:closed:1", "stray"}, {"unexpected argument stray", "option"}},
        {{"--stream", "h:/:closed:1", "--duration"}, {"--duration needs a value", "seconds"}},
        {{"--stream", "h:/:closed:1", "--json=yes"}, {"--json takes no value", "yes"}},
        {{"--stream", "h:/:closed:1", "--duration", "1", "--duration", "2"},
         {"--duration 2", "already"}},
        {{"--duration", "1"}, {"no --stream given", "--stream"}},
        {{"--stream", "h:/:closed:1", "--stream", "h:/x:open:1"},
         {"--stream h:/x:open:1", "already called h"}},
        {{"--stream", "h:/:closed:1", "--header", "x:A: b"},
         {"--header x:A: b", "no --stream is called \"x\""}},
        {{"--stream", "h:/:closed:1", "--header", "h:Host: evil"},
         {"--header h:Host: evil", "sets Host"}},
        {{"--stream", "h:/:closed:1", "--header", "h:no colon"},
         {"--header h:no colon", "Name: value"}},
        {{"--stream", "c:/n/{key}:once:2"}, {"c:/n/{key}:once:2", "--keys"}},
        {{"--stream", "c:/n/{key}:once:3", "--keys", keys_path},
         {"needs 3 distinct keys", "has 2"}},
        {{"--stream", "h:/:closed:1", "--keys", keys_path},
         {"--keys", "no --stream path holds {key}"}},
        {{"--stream", "c:/n/{key}:once:1", "--keys", "/nonexistent/keys"},
         {"--keys /nonexistent/keys", "cannot open"}},
        {{"--stream", "h:/:closed:1", "--label", "a\nb"}, {"--label", "control"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_expect_eq(parse(cases[i].args), MG_BENCH_ARGS_BAD, "case %zu (%s %s) was accepted", i,
                     cases[i].says[0], cases[i].says[1]);
        for (int k = 0; k < 2; k++)
            cr_expect(strstr(err, cases[i].says[k]) != NULL, "case %zu: \"%s\" not in: %s", i,
                      cases[i].says[k], err);
    }
    cr_expect_eq(
        parse((const char *[]){"--stream", "c:/n/{key}:once:2", "--keys", keys_path, NULL}),
        MG_BENCH_ARGS_OK, "%s", err);
    cr_expect_eq(cfg.nkeys, 2, "empty lines and comments are skipped");
    cr_expect_str_eq(cfg.keys[1], "k2");
    unlink(keys_path);
}

/* --- the response head ----------------------------------------------------------------------- */

Test(bench, response_heads_parse_like_meshgate_sends_them)
{
    static const struct {
        const char *text;
        enum mg_bench_parse result;
        int status;
        uint64_t content_length;
        bool close;
    } cases[] = {
        {"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\n",
         MG_BENCH_PARSE_DONE, 200, 12, false},
        {"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\ncontent-length:0\r\nConnection: "
         "close\r\n\r\n",
         MG_BENCH_PARSE_DONE, 429, 0, true},
        {"HTTP/1.0 503 Busy\r\nContent-Length: 3\r\n\r\n", MG_BENCH_PARSE_DONE, 503, 3, true},
        {"HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: Keep-Alive\r\n\r\n",
         MG_BENCH_PARSE_DONE, 200, 3, false},
        {"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n", MG_BENCH_PARSE_DONE, 304, 0, false},
        {"HTTP/1.1 200\r\nContent-Length: 5\r\n\r\n", MG_BENCH_PARSE_DONE, 200, 5, false},
        {"HTTP/1.1 200 OK\r\nConnection: upgrade, close\r\nContent-Length: 1\r\n\r\n",
         MG_BENCH_PARSE_DONE, 200, 1, true},
        {"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n", MG_BENCH_PARSE_MORE, 0, 0, false},
        {"HTTP/1.", MG_BENCH_PARSE_MORE, 0, 0, false},
        {"HTTP/1.1 200 OK\r\n\r\n", MG_BENCH_PARSE_BAD, 0, 0, false},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", MG_BENCH_PARSE_BAD, 0, 0, false},
        {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", MG_BENCH_PARSE_BAD, 0,
         0, false},
        {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", MG_BENCH_PARSE_BAD, 0, 0, false},
        {"HTTP/1.1 100 Continue\r\n\r\n", MG_BENCH_PARSE_BAD, 0, 0, false},
        {"HTTP/2 200\r\n\r\n", MG_BENCH_PARSE_BAD, 0, 0, false},
        {"SSH-2.0-OpenSSH\r\n", MG_BENCH_PARSE_BAD, 0, 0, false},
        {"HTTP/1.1 2x0 OK\r\nContent-Length: 1\r\n\r\n", MG_BENCH_PARSE_BAD, 0, 0, false},
        {"HTTP/1.1 200 OK\r\n: nameless\r\nContent-Length: 1\r\n\r\n", MG_BENCH_PARSE_BAD, 0, 0,
         false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* An exact-length heap copy, so AddressSanitizer sees any read past the end. */
        size_t len = strlen(cases[i].text);
        char *copy = malloc(len);
        memcpy(copy, cases[i].text, len);
        struct mg_bench_response_head h;
        const char *why = NULL;
        enum mg_bench_parse r = mg_bench_parse_response_head(copy, len, &h, &why);
        cr_expect_eq(r, cases[i].result, "case %zu: %d, expected %d (%s)", i, r, cases[i].result,
                     why ? why : "-");
        if (r == MG_BENCH_PARSE_DONE && cases[i].result == MG_BENCH_PARSE_DONE) {
            cr_expect_eq(h.status, cases[i].status, "case %zu", i);
            cr_expect_eq(h.content_length, cases[i].content_length, "case %zu", i);
            cr_expect_eq(h.connection_close, cases[i].close, "case %zu", i);
            cr_expect_eq(h.head_len, len, "case %zu", i);
        }
        if (r == MG_BENCH_PARSE_BAD)
            cr_expect_not_null(why, "case %zu: a refusal says why", i);
        free(copy);
    }
    /* The head ends at the first blank line; the body is not the parser's business. */
    const char *with_body = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n\r\n\r\n";
    struct mg_bench_response_head h;
    const char *why;
    cr_assert_eq(mg_bench_parse_response_head(with_body, strlen(with_body), &h, &why),
                 MG_BENCH_PARSE_DONE);
    cr_expect_eq(h.head_len, strlen(with_body) - 4);
}

/* --- runs against the real server ------------------------------------------------------------ */

static struct mg_test_server server;
static char keys_file[64];

static void stop_server(void)
{
    cleanup_run();
    if (server.pid)
        mg_test_server_stop(&server, 5000);
    if (keys_file[0])
        unlink(keys_file);
}

/* The node list answers 200 (the group's tables it needs exist: until then it parks, and a
 * burst of it at a loaded start can be refused by the gates, which is not what these tests
 * count). */
static bool node_list_answers(void *arg)
{
    struct mg_test_response r;
    if (!mg_test_get(*(const int *)arg, "/api/nodes?limit=1", NULL, &r))
        return false;
    bool ok = r.status == 200;
    mg_test_response_free(&r);
    return ok;
}

static void start_server(void)
{
    cr_assert(mg_test_server_start(&server, NULL, NULL), "the server did not start");
    cr_assert(mg_test_wait_until(node_list_answers, &server.port, 180000, 100),
              "the node list never answered 200");
}

static char *target_of(int port)
{
    static char text[32];
    snprintf(text, sizeof text, "127.0.0.1:%d", port);
    return text;
}

Test(bench, streams_against_the_server_are_counted_honestly, .fini = stop_server)
{
    start_server();
    snprintf(keys_file, sizeof keys_file, "/tmp/meshgate-bench-keys-XXXXXX");
    int fd = mkstemp(keys_file);
    cr_assert_geq(fd, 0);
    for (int i = 1; i <= 8; i++)
        dprintf(fd, "node%d\n", i);
    close(fd);
    cr_assert_eq(
        parse((const char *[]){"--target", target_of(server.port), "--duration", "1", "--threads",
                               "2", "--stream", "health:/api/healthz:closed:2", "--stream",
                               "sched:/api/healthz:open:200", "--stream",
                               "burst:/api/nodes?search={key}:once:8", "--keys", keys_file,
                               "--stream", "missing:/api/no-such-endpoint:closed:1:20", NULL}),
        MG_BENCH_ARGS_OK, "%s", err);
    int64_t began = mg_test_now_ms();
    cr_assert_eq(mg_bench_run(&cfg, &rep, err, sizeof err), MG_BENCH_OK, "%s", err);
    int64_t took = mg_test_now_ms() - began;
    cr_expect_geq(took, 1000, "the window is 1 s");
    cr_expect_lt(took, 3000, "and the run ends by itself soon after");
    cr_expect(!rep.interrupted);

    const struct mg_bench_stream_report *h = stream_report("health");
    expect_honest("health");
    cr_expect_gt(h->sent, 0);
    cr_expect_eq(h->status_200, h->sent, "closed on healthz: all 200 (%llu errors: %s)",
                 (unsigned long long)h->errors_total, h->first_error);
    cr_expect_eq(h->latency_200.samples, h->status_200);
    cr_expect_gt(h->rps, 0);

    /* Ticks at 0, 5, ..., 995 ms: exactly 200 due in the window, sent or dropped. */
    const struct mg_bench_stream_report *o = stream_report("sched");
    expect_honest("sched");
    cr_expect_eq(o->sent + o->dropped, 200);
    cr_expect(o->sent >= 180 && o->sent <= 220, "open 200/s for 1 s sent %llu",
              (unsigned long long)o->sent);
    cr_expect_eq(o->status_200, o->sent, "%s", o->first_error);
    cr_expect(o->rps >= 180 && o->rps <= 220, "rps %.1f", o->rps);
    cr_expect_lt(o->max_send_lag_ns, 500 * MG_NS_PER_MS,
                 "the schedule was honoured (late by %.1f ms)", (double)o->max_send_lag_ns / 1e6);

    const struct mg_bench_stream_report *b = stream_report("burst");
    expect_honest("burst");
    cr_expect_eq(b->sent, 8, "once:8 sends exactly 8");
    cr_expect_eq(b->status_200, 8, "%s", b->first_error);
    cr_expect_gt(b->elapsed_ns, 0);

    const struct mg_bench_stream_report *m = stream_report("missing");
    expect_honest("missing");
    cr_expect_gt(m->sent, 0);
    cr_expect_eq(m->status_other, m->sent, "a 404 counts under other");
    cr_expect_eq(m->status_counts[404], m->sent);
    cr_expect_eq(m->status_200 + m->errors_total, 0);

    struct mg_buf text, json;
    mg_buf_init(&text);
    mg_buf_init(&json);
    mg_bench_render_text(&cfg, &rep, &text);
    mg_bench_render_json(&cfg, &rep, &json);
    cr_expect(strstr(mg_buf_cstr(&text), "stream ") && strstr(text.data, "p99_ms") &&
                  strstr(text.data, "404"),
              "%s", text.data);
    cr_expect(strstr(text.data, cfg.command_line) != NULL, "the command line heads the report");
    cr_expect(strstr(mg_buf_cstr(&json), "\"name\":\"burst\"") &&
                  strstr(json.data, "\"sent\":8,") && strstr(json.data, "\"404\":"),
              "%s", json.data);
    mg_buf_free(&text);
    mg_buf_free(&json);
}

Test(bench, max_requests_and_warmup_bound_what_is_counted, .fini = stop_server)
{
    start_server();
    cr_assert_eq(
        parse((const char *[]){"--target", target_of(server.port), "--duration", "0.3", "--warmup",
                               "0.1", "--max-requests", "50", "--stream", "h:/api/healthz:closed:2",
                               "--stream", "o:/api/healthz:open:100", NULL}),
        MG_BENCH_ARGS_OK, "%s", err);
    cr_assert_eq(mg_bench_run(&cfg, &rep, err, sizeof err), MG_BENCH_OK, "%s", err);
    const struct mg_bench_stream_report *h = stream_report("h");
    expect_honest("h");
    cr_expect_eq(h->sent, 50, "stopped at --max-requests exactly");
    cr_expect(h->max_requests_reached);
    cr_expect_eq(h->status_200, 50);
    cr_expect_lt(h->elapsed_ns, 300 * MG_NS_PER_MS, "rps divides by the time it really ran");
    /* 10 ticks in the warm-up are sent and not counted; 30 in the window are. */
    const struct mg_bench_stream_report *o = stream_report("o");
    expect_honest("o");
    cr_expect_eq(o->sent + o->dropped, 30);
    cr_expect(!o->max_requests_reached);
}

struct stopper {
    struct mg_test_server *server;
    int after_ms;
};

static void *stop_later(void *arg)
{
    struct stopper *s = arg;
    mg_test_sleep_ms(s->after_ms);
    mg_test_server_stop(s->server, 5000);
    return NULL;
}

Test(bench, a_server_stopped_mid_run_counts_as_errors_and_the_run_still_ends, .fini = stop_server)
{
    start_server();
    cr_assert_eq(
        parse((const char *[]){"--target", target_of(server.port), "--duration", "0.8",
                               "--timeout-ms", "2000", "--stream", "h:/api/healthz:closed:2",
                               "--stream", "o:/api/healthz:open:100", NULL}),
        MG_BENCH_ARGS_OK, "%s", err);
    struct stopper stopper = {&server, 300};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, stop_later, &stopper), 0);
    int64_t began = mg_test_now_ms();
    enum mg_bench_status st = mg_bench_run(&cfg, &rep, err, sizeof err);
    int64_t took = mg_test_now_ms() - began;
    pthread_join(thread, NULL);
    cr_assert_eq(st, MG_BENCH_OK, "%s", err);
    cr_expect_lt(took, 800 + 2000 + 500, "bounded by window + timeout");
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "o" : "h";
        const struct mg_bench_stream_report *s = stream_report(name);
        expect_honest(name);
        cr_expect_gt(s->status_200, 0, "%s: answered before the stop", name);
        cr_expect_gt(s->errors_total, 0, "%s: errors after it", name);
        cr_expect_gt(s->errors[MG_BENCH_ERR_CONNECT], 0, "%s: refused once it was gone", name);
        cr_expect_neq(s->first_error[0], '\0');
    }
}

/* A listener that never accepts: connections complete in the kernel's queue, nothing answers. */
static int silent_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = 0};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sin;
    cr_assert_eq(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    cr_assert_eq(listen(fd, 64), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    *port = ntohs(sin.sin_port);
    return fd;
}

Test(bench, unanswered_requests_time_out_and_the_outstanding_cap_drops, .fini = cleanup_run)
{
    int port;
    int listener = silent_listener(&port);
    cr_assert_eq(parse((const char *[]){"--target", target_of(port), "--duration", "0.5",
                                        "--timeout-ms", "200", "--max-outstanding", "2", "--stream",
                                        "c:/api/healthz:closed:2", "--stream",
                                        "o:/api/healthz:open:100", NULL}),
                 MG_BENCH_ARGS_OK, "%s", err);
    int64_t began = mg_test_now_ms();
    cr_assert_eq(mg_bench_run(&cfg, &rep, err, sizeof err), MG_BENCH_OK, "%s", err);
    int64_t took = mg_test_now_ms() - began;
    close(listener);
    cr_expect_lt(took, 500 + 200 + 400, "window + timeout, then it ends");
    const struct mg_bench_stream_report *c = stream_report("c");
    expect_honest("c");
    cr_expect_geq(c->errors[MG_BENCH_ERR_TIMEOUT], 2);
    cr_expect_eq(c->responses, 0);
    cr_expect_eq(c->latency.samples, 0, "a timeout is not a latency");
    const struct mg_bench_stream_report *o = stream_report("o");
    expect_honest("o");
    cr_expect_eq(o->sent + o->dropped, 50);
    cr_expect_gt(o->dropped, 0, "2 outstanding, each held 200 ms: most ticks are dropped");
    cr_expect_leq(o->sent, 10);
    cr_expect_eq(o->errors[MG_BENCH_ERR_TIMEOUT], o->sent);
}

/* A fake server, one thread a connection, answering by path: /drip sends a 3 kB head in 7-byte
 * pieces, /short closes in mid-body, /extra sends more than Content-Length, /chunked sends what
 * meshgate never does, /flaky keeps the connection alive after a first answer and then closes
 * it when the second request comes (a server closing an idle connection as the request
 * arrives). */
static void *fake_connection(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[4096];
    size_t have = 0;
    int served = 0;
    for (;;) {
        char *end;
        while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
            ssize_t n = have < sizeof buf ? recv(fd, buf + have, sizeof buf - have, 0) : -1;
            if (n <= 0) {
                close(fd);
                return NULL;
            }
            have += (size_t)n;
        }
        bool drip = strncmp(buf, "GET /drip ", 10) == 0;
        bool shorter = strncmp(buf, "GET /short ", 11) == 0;
        bool extra = strncmp(buf, "GET /extra ", 11) == 0;
        bool flaky = strncmp(buf, "GET /flaky ", 11) == 0;
        size_t used = (size_t)(end + 4 - buf);
        memmove(buf, buf + used, have - used);
        have -= used;
        char resp[4096];
        int len;
        if (drip) {
            char pad[3001];
            memset(pad, 'a', 3000);
            pad[3000] = '\0';
            len = snprintf(resp, sizeof resp,
                           "HTTP/1.1 200 OK\r\nX-Pad: %s\r\nContent-Length: 5\r\n\r\nhello", pad);
            for (int at = 0; at < len; at += 7) {
                send(fd, resp + at, (size_t)(len - at < 7 ? len - at : 7), MSG_NOSIGNAL);
                usleep(100);
            }
            continue;
        }
        if (flaky && ++served == 2) {
            close(fd);
            return NULL;
        }
        if (flaky) {
            send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 40, MSG_NOSIGNAL);
            continue;
        }
        if (shorter) {
            len = snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nhi");
            send(fd, resp, (size_t)len, MSG_NOSIGNAL);
            close(fd);
            return NULL;
        }
        len = snprintf(resp, sizeof resp, "%s",
                       extra ? "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiEXTRA"
                             : "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        send(fd, resp, (size_t)len, MSG_NOSIGNAL);
    }
}

static void *fake_server(void *arg)
{
    int listener = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(listener, NULL, NULL);
        if (fd < 0)
            return NULL; /* the listener was shut down */
        pthread_t t;
        if (pthread_create(&t, NULL, fake_connection, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
}

Test(bench, responses_in_pieces_cut_short_overlong_or_chunked_are_told_apart, .fini = cleanup_run)
{
    int port;
    int listener = silent_listener(&port);
    pthread_t server_thread;
    cr_assert_eq(pthread_create(&server_thread, NULL, fake_server, (void *)(intptr_t)listener), 0);
    cr_assert_eq(parse((const char *[]){
                     "--target", target_of(port), "--duration", "0.4", "--timeout-ms", "1000",
                     "--stream", "drip:/drip:closed:1", "--stream", "short:/short:closed:1",
                     "--stream", "extra:/extra:closed:1", "--stream", "chunked:/chunked:closed:1",
                     "--stream", "flaky:/flaky:closed:1", NULL}),
                 MG_BENCH_ARGS_OK, "%s", err);
    enum mg_bench_status st = mg_bench_run(&cfg, &rep, err, sizeof err);
    shutdown(listener, SHUT_RDWR);
    pthread_join(server_thread, NULL);
    close(listener);
    cr_assert_eq(st, MG_BENCH_OK, "%s", err);

    const struct mg_bench_stream_report *drip = stream_report("drip");
    expect_honest("drip");
    cr_expect_gt(drip->status_200, 0, "a head in 7-byte pieces is gathered");
    cr_expect_eq(drip->errors_total, 0, "%s", drip->first_error);

    const struct mg_bench_stream_report *cut = stream_report("short");
    expect_honest("short");
    cr_expect_gt(cut->sent, 0);
    cr_expect_eq(cut->errors[MG_BENCH_ERR_CLOSED], cut->sent, "a body cut short is an error");
    cr_expect_eq(cut->responses, 0);

    const struct mg_bench_stream_report *extra = stream_report("extra");
    expect_honest("extra");
    cr_expect_gt(extra->status_200, 0);
    cr_expect_eq(extra->overlong, extra->status_200, "bytes past Content-Length are reported");

    const struct mg_bench_stream_report *chunked = stream_report("chunked");
    expect_honest("chunked");
    cr_expect_gt(chunked->sent, 0);
    cr_expect_eq(chunked->errors[MG_BENCH_ERR_PROTOCOL], chunked->sent);
    cr_expect(strstr(chunked->first_error, "Transfer-Encoding") != NULL, "%s",
              chunked->first_error);

    const struct mg_bench_stream_report *flaky = stream_report("flaky");
    expect_honest("flaky");
    cr_expect_gt(flaky->retried, 0, "a kept-alive connection closed before answering");
    cr_expect_eq(flaky->errors_total, 0, "is sent again, not counted as an error: %s",
                 flaky->first_error);
    cr_expect_eq(flaky->status_200, flaky->sent, "nor as a second request");
}

static atomic_int stop_flag;

static void *raise_stop_later(void *arg)
{
    (void)arg;
    mg_test_sleep_ms(300);
    atomic_store(&stop_flag, 1);
    return NULL;
}

Test(bench, a_stop_request_ends_the_run_early_and_aborts_what_is_out, .fini = cleanup_run)
{
    int port;
    int listener = silent_listener(&port);
    cr_assert_eq(parse((const char *[]){"--target", target_of(port), "--duration", "10", "--stream",
                                        "c:/api/healthz:closed:2", "--stream",
                                        "p:/api/healthz:closed:1:5000", NULL}),
                 MG_BENCH_ARGS_OK, "%s", err);
    atomic_store(&stop_flag, 0);
    cfg.stop = &stop_flag;
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, raise_stop_later, NULL), 0);
    int64_t began = mg_test_now_ms();
    cr_assert_eq(mg_bench_run(&cfg, &rep, err, sizeof err), MG_BENCH_OK, "%s", err);
    int64_t took = mg_test_now_ms() - began;
    pthread_join(thread, NULL);
    close(listener);
    cr_expect_lt(took, 1000, "stopped at once, not after the window or a timeout");
    cr_expect(rep.interrupted);
    const struct mg_bench_stream_report *c = stream_report("c");
    expect_honest("c");
    cr_expect_eq(c->errors[MG_BENCH_ERR_ABORTED], 2, "the two requests out were aborted");
    cr_expect_lt(c->elapsed_ns, 1000 * MG_NS_PER_MS);
    expect_honest("p");
}

Test(bench, an_unreachable_target_is_reported_before_anything_is_sent, .fini = cleanup_run)
{
    int port = mg_test_free_port();
    cr_assert_eq(parse((const char *[]){"--target", target_of(port), "--stream",
                                        "h:/api/healthz:closed:1", NULL}),
                 MG_BENCH_ARGS_OK, "%s", err);
    cr_expect_eq(mg_bench_run(&cfg, &rep, err, sizeof err), MG_BENCH_CANNOT_CONNECT);
    cr_expect(strstr(err, target_of(port)) && strstr(err, "Connection refused"), "%s", err);
}

/* --- the binary ------------------------------------------------------------------------------ */

struct tool_run {
    int status;
    char out[65536];
    char err[8192];
};

static struct tool_run tool;

static void read_memfd(int fd, char *out, size_t cap)
{
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
}

static void run_tool(const char *const *args)
{
    int out_fd = memfd_create("bench-out", 0), err_fd = memfd_create("bench-err", 0);
    cr_assert(out_fd >= 0 && err_fd >= 0);
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)TOOL;
    for (int i = 0; args[i] && argc < 31; i++)
        argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(out_fd, STDOUT_FILENO);
        dup2(err_fd, STDERR_FILENO);
        execv(TOOL, argv);
        _exit(127);
    }
    int status = 0;
    for (int waited = 0; waitpid(pid, &status, WNOHANG) != pid; waited += 10) {
        if (waited > 10000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            cr_assert_fail("%s did not end within 10 s", TOOL);
        }
        mg_test_sleep_ms(10);
    }
    tool.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    read_memfd(out_fd, tool.out, sizeof tool.out);
    read_memfd(err_fd, tool.err, sizeof tool.err);
    cr_assert_neq(tool.status, 127, "%s is missing: build it with make all", TOOL);
}

Test(bench, the_binary_exits_with_documented_codes)
{
    run_tool((const char *[]){"--help", NULL});
    cr_expect_eq(tool.status, 0);
    cr_expect(strstr(tool.out, "usage: meshgate-bench") != NULL, "%s", tool.out);

    run_tool((const char *[]){"--stream", "h:/:closed:1", "--duration", "601", NULL});
    cr_expect_eq(tool.status, 64);
    cr_expect(strstr(tool.err, "--duration 601") != NULL, "%s", tool.err);

    run_tool((const char *[]){"--target", "example.com:80", "--stream", "h:/:closed:1", NULL});
    cr_expect_eq(tool.status, 64);
    cr_expect(strstr(tool.err, "example.com:80") != NULL, "%s", tool.err);

    int port = mg_test_free_port();
    run_tool((const char *[]){"--target", target_of(port), "--stream", "h:/:closed:1", NULL});
    cr_expect_eq(tool.status, 1, "connection refused at the start");
    cr_expect(strstr(tool.err, "cannot connect") != NULL, "%s", tool.err);
    cr_expect_eq(tool.out[0], '\0', "no report when nothing was measured");
}

Test(bench, the_binary_prints_one_json_object, .fini = stop_server)
{
    start_server();
    run_tool((const char *[]){"--target", target_of(server.port), "--duration", "0.3", "--json",
                              "--label", "A/B: a", "--stream", "h:/api/healthz:closed:1", NULL});
    cr_expect_eq(tool.status, 0, "%s", tool.err);
    cr_expect_eq(tool.out[0], '{', "%s", tool.out);
    cr_expect(strstr(tool.out, "\"label\":\"A/B: a\"") && strstr(tool.out, "\"streams\":[") &&
                  strstr(tool.out, "\"latency_ms\":{\"samples\":"),
              "%s", tool.out);
    size_t len = strlen(tool.out);
    cr_expect(len > 2 && tool.out[len - 1] == '\n' && tool.out[len - 2] == '}', "one object");
}

/* --- what a scenario expects ------------------------------------------------------------------ */

Test(bench, expect_lists_parse_and_default_to_2xx, .fini = cleanup_run)
{
    cr_assert_eq(
        parse((const char *[]){"--stream", "a:/:closed:1", "--stream", "b:/:once:2", "--expect",
                               "b:200,429,5xx,err", "--max-unexpected-pct", "1.5", NULL}),
        MG_BENCH_ARGS_OK, "%s", err);
    cr_expect(cfg.streams[0].expect_status[204] && !cfg.streams[0].expect_status[429]);
    cr_expect_not(cfg.streams[0].expect_errors);
    cr_expect_str_eq(cfg.streams[0].expect_text, "2xx");
    cr_expect(cfg.streams[1].expect_status[200] && cfg.streams[1].expect_status[429] &&
              cfg.streams[1].expect_status[503] && cfg.streams[1].expect_errors);
    cr_expect_not(cfg.streams[1].expect_status[204], "a list replaces the default");
    cr_expect_float_eq(cfg.max_unexpected_pct, 1.5, 1e-12);

    const char *bad[][2] = {{"c:200", "no --stream is called \"c\""},
                            {"a:200,42", "\"42\" is not a status"},
                            {"a:6xx", "\"6xx\" is not a status"},
                            {"a:", "\"\" is not a status"},
                            {"a", "must be STREAM:LIST"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(
            parse((const char *[]){"--stream", "a:/:closed:1", "--expect", bad[i][0], NULL}),
            MG_BENCH_ARGS_BAD, "%s", bad[i][0]);
        cr_expect(strstr(err, bad[i][1]), "--expect %s: %s", bad[i][0], err);
    }
    cr_expect_eq(
        parse((const char *[]){"--stream", "a:/:closed:1", "--max-unexpected-pct", "101", NULL}),
        MG_BENCH_ARGS_BAD);
}

Test(bench, more_unexpected_answers_than_the_limit_fail_the_check, .fini = cleanup_run)
{
    cr_assert_eq(parse((const char *[]){"--stream", "a:/:closed:1", "--stream", "b:/:closed:1",
                                        "--expect", "b:200,429", NULL}),
                 MG_BENCH_ARGS_OK, "%s", err);
    memset(&rep, 0, sizeof rep);
    rep.nstreams = 2;
    /* a: 1000 sent, 990 200s, 10 429s: exactly 1 %. b: 429s asked for, 11 timeouts. */
    rep.streams[0].sent = 1000;
    rep.streams[0].status_counts[200] = 990;
    rep.streams[0].status_counts[429] = 10;
    rep.streams[1].sent = 1000;
    rep.streams[1].status_counts[200] = 489;
    rep.streams[1].status_counts[429] = 500;
    rep.streams[1].errors_total = 11;
    snprintf(rep.streams[1].first_error, sizeof rep.streams[1].first_error, "timed out");
    cr_expect_eq(mg_bench_unexpected(&cfg.streams[0], &rep.streams[0]), 10);
    cr_expect_eq(mg_bench_unexpected(&cfg.streams[1], &rep.streams[1]), 11);

    cr_expect(mg_bench_check_unexpected(&cfg, &rep, err, sizeof err), "not checked by default");
    cfg.max_unexpected_pct = 1;
    cr_expect_not(mg_bench_check_unexpected(&cfg, &rep, err, sizeof err));
    cr_expect(strstr(err, "stream b: 11 of 1000 requests (1.10 %)") &&
                  strstr(err, "errors x 11 (timed out)") && strstr(err, "--expect b:200,429"),
              "%s", err);
    rep.streams[1].errors_total = 10;
    cr_expect(mg_bench_check_unexpected(&cfg, &rep, err, sizeof err), "1 %% is not more than 1 %%");
    rep.streams[0].status_counts[404] = 1;
    cr_expect_not(mg_bench_check_unexpected(&cfg, &rep, err, sizeof err));
    cr_expect(strstr(err, "stream a: 11 of 1000") && strstr(err, "404 x 1, 429 x 10"), "%s", err);
    memset(&rep, 0, sizeof rep);
}

Test(bench, the_binary_exits_2_when_answers_nobody_asked_for_pass_the_limit, .fini = stop_server)
{
    start_server();
    run_tool((const char *[]){"--target", target_of(server.port), "--duration", "0.3",
                              "--max-unexpected-pct", "1", "--stream",
                              "missing:/api/no-such-thing:closed:1", NULL});
    cr_expect_eq(tool.status, 2, "%s", tool.err);
    cr_expect(strstr(tool.err, "FAILED: stream missing:") && strstr(tool.err, "404 x"), "%s",
              tool.err);
    cr_expect(strstr(tool.out, "missing"), "the report is still printed: %s", tool.out);

    run_tool((const char *[]){"--target", target_of(server.port), "--duration", "0.3",
                              "--max-unexpected-pct", "1", "--expect", "missing:404", "--stream",
                              "missing:/api/no-such-thing:closed:1", NULL});
    cr_expect_eq(tool.status, 0, "a 404 the scenario asks for: %s", tool.err);
}

/* --- --per-second ----------------------------------------------------------------------------- */

Test(bench, per_second_counts_each_second_of_the_window_by_outcome, .fini = stop_server)
{
    start_server();
    cr_assert_eq(
        parse((const char *[]){"--target", target_of(server.port), "--duration", "3",
                               "--per-second", "--stream", "ok:/api/healthz:open:50", "--stream",
                               "missing:/api/no-such-thing:closed:1:50", NULL}),
        MG_BENCH_ARGS_OK, "%s", err);
    cr_expect(cfg.per_second);
    cr_assert_eq(mg_bench_run(&cfg, &rep, err, sizeof err), MG_BENCH_OK, "%s", err);
    const struct mg_bench_stream_report *ok = stream_report("ok");
    const struct mg_bench_stream_report *missing = stream_report("missing");
    expect_honest("ok");
    expect_honest("missing");
    cr_expect_eq(ok->nseconds, 3, "a 3 s window has 3 seconds");
    uint64_t sum_ok = 0, sum_missing = 0;
    for (unsigned sec = 0; sec < ok->nseconds; sec++) {
        /* 50 ticks a second: every second has answers, on any machine. */
        cr_expect_gt(ok->per_second_200[sec], 0, "second %u has its 200s", sec);
        cr_expect_eq(ok->per_second_not_200[sec], 0, "second %u: %s", sec, ok->first_error);
        cr_expect_eq(missing->per_second_200[sec], 0);
        sum_ok += ok->per_second_200[sec];
        sum_missing += missing->per_second_not_200[sec];
    }
    /* Answers that came after the window are in no second; the rest are in exactly one. */
    cr_expect_leq(sum_ok, ok->status_200);
    cr_expect_geq(sum_ok + 10, ok->status_200, "at most a few answers after the window");
    cr_expect_leq(sum_missing, missing->status_counts[404]);
    cr_expect_gt(sum_missing, 0, "a 404 is counted as not 200");
}

Test(bench, per_second_is_rendered_only_when_asked_for, .fini = cleanup_run)
{
    cr_assert_eq(parse((const char *[]){"--stream", "a:/:closed:1", "--per-second", NULL}),
                 MG_BENCH_ARGS_OK, "%s", err);
    memset(&rep, 0, sizeof rep);
    rep.nstreams = 1;
    rep.streams[0].nseconds = 2;
    rep.streams[0].per_second_200[0] = 1234;
    rep.streams[0].per_second_200[1] = 5678;
    rep.streams[0].per_second_not_200[1] = 9;
    struct mg_buf text, json;
    mg_buf_init(&text);
    mg_buf_init(&json);
    mg_bench_render_text(&cfg, &rep, &text);
    mg_bench_render_json(&cfg, &rep, &json);
    cr_expect(strstr(mg_buf_cstr(&text), "per second") &&
                  strstr(text.data, "     0             1234         0\n") &&
                  strstr(text.data, "     1             5678         9\n"),
              "%s", text.data);
    cr_expect(strstr(mg_buf_cstr(&json), "\"per_second\":{\"200\":[1234,5678],\"not_200\":[0,9]}"),
              "%s", json.data);
    cfg.per_second = false;
    mg_buf_reset(&text);
    mg_buf_reset(&json);
    mg_bench_render_text(&cfg, &rep, &text);
    mg_bench_render_json(&cfg, &rep, &json);
    cr_expect_not(strstr(mg_buf_cstr(&text), "per second"), "%s", text.data);
    cr_expect_not(strstr(mg_buf_cstr(&json), "per_second"), "%s", json.data);
    mg_buf_free(&text);
    mg_buf_free(&json);
    memset(&rep, 0, sizeof rep);
}
