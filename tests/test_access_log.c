/* SPDX-License-Identifier: ISC */
/*
 * Logs: the journal's priority prefix or a timestamp on every line, and the access log in each
 * of its formats (meshgate's, Apache's combined, JSON): formatted from a struct (every escape,
 * the bound on a line), and written by the real binary, with the gate's outcome and the
 * signed-in key's label, never the key.
 */
#include "harness.h"
#include "jsoncheck.h"

#include "access_log.h"
#include "config.h"
#include "log.h"
#include "scoreboard.h"
#include "segment.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(access_log, .timeout = 60);

/* ---- the formats, from a struct ------------------------------------------------------- */

static struct mg_access_entry sample(void)
{
    struct mg_access_entry e;
    memset(&e, 0, sizeof e);
    e.start_realtime_ns = 1796137445123000000LL; /* 2026-12-01T15:04:05.123Z */
    e.client = "198.51.100.7";
    e.has_request = true;
    e.method = (struct mg_str){"GET", 3};
    e.target = (struct mg_str){"/api/nodes?limit=5", 18};
    e.minor_version = 1;
    e.status = 200;
    e.bytes = 1300;
    e.body_bytes = 1234;
    e.duration_us = 812;
    e.user_agent = (struct mg_str){"curl/8.5.0", 10};
    e.worker = 3;
    return e;
}

static char *format(int fmt, const struct mg_access_entry *e)
{
    struct mg_buf b;
    mg_buf_init(&b);
    mg_access_log_format(fmt, e, &b);
    char *out = strdup(mg_buf_cstr(&b));
    mg_buf_free(&b);
    return out;
}

Test(access_log, time_is_rfc3339_utc_with_milliseconds)
{
    char t[MG_LOG_TIME_MAX];
    mg_log_format_time(0, t, sizeof t);
    cr_expect_str_eq(t, "1970-01-01T00:00:00.000Z");
    mg_log_format_time(1796137445123999999LL, t, sizeof t);
    cr_expect_str_eq(t, "2026-12-01T15:04:05.123Z");
    mg_log_format_time(951782400000000000LL, t, sizeof t); /* a leap day */
    cr_expect_str_eq(t, "2000-02-29T00:00:00.000Z");
    mg_log_format_time(4102444799999000000LL, t, sizeof t);
    cr_expect_str_eq(t, "2099-12-31T23:59:59.999Z");
}

Test(access_log, journal_stream_must_name_the_device_and_inode)
{
    cr_expect(mg_log_journal_stream_is("8:12345", 8, 12345));
    cr_expect_not(mg_log_journal_stream_is("8:12345", 8, 12346));
    cr_expect_not(mg_log_journal_stream_is("9:12345", 8, 12345));
    cr_expect_not(mg_log_journal_stream_is("8:12345x", 8, 12345));
    cr_expect_not(mg_log_journal_stream_is("8:", 8, 0));
    cr_expect_not(mg_log_journal_stream_is(":5", 0, 5));
    cr_expect_not(mg_log_journal_stream_is("", 0, 0));
    cr_expect_not(mg_log_journal_stream_is(NULL, 0, 0));
}

Test(access_log, the_one_format_names_outcome_wait_and_key_label)
{
    struct mg_access_entry e = sample();
    char *line = format(MG_ACCESS_LOG_ON, &e);
    cr_expect_str_eq(line, "access 198.51.100.7 \"GET /api/nodes?limit=5 HTTP/1.1\" 200 1300 "
                           "0.812ms worker=3 gate=none waited_ms=0 key=-");
    free(line);
    e.via = "127.0.0.1";
    e.outcome.gate = MG_GATE_ANON_LINE;
    e.outcome.verdict = MG_VERDICT_WAITED;
    e.outcome.waited_ns = 12 * 1000000LL + 999;
    e.key_label = "ops";
    line = format(MG_ACCESS_LOG_ON, &e);
    cr_expect(strstr(line, "access 198.51.100.7 (via 127.0.0.1) \"GET "), "%s", line);
    cr_expect(strstr(line, " gate=waited:anon-line waited_ms=12 key=ops"), "%s", line);
    free(line);
}

Test(access_log, combined_is_apaches_with_the_duration_in_microseconds)
{
    struct mg_access_entry e = sample();
    e.key_label = "ops";
    e.outcome.verdict = MG_VERDICT_BYPASSED;
    char *line = format(MG_ACCESS_LOG_COMBINED, &e);
    cr_expect_str_eq(line, "198.51.100.7 - ops [01/Dec/2026:15:04:05 +0000] \"GET "
                           "/api/nodes?limit=5 HTTP/1.1\" 200 1234 \"-\" \"curl/8.5.0\" 812 "
                           "gate=bypassed waited_ms=0 worker=3 via=-");
    free(line);
    /* No body: "-"; a refusal names its gate; a head that did not parse: "-" as request. */
    e = sample();
    e.body_bytes = 0;
    e.status = 429;
    e.outcome.gate = MG_GATE_RATE_LIMIT;
    e.outcome.verdict = MG_VERDICT_REFUSED;
    e.via = "10.0.0.1";
    line = format(MG_ACCESS_LOG_COMBINED, &e);
    cr_expect(strstr(line, "198.51.100.7 - - [01/Dec/2026:15:04:05 +0000] \"GET"), "%s", line);
    cr_expect(strstr(line, "HTTP/1.1\" 429 - \"-\" \"curl/8.5.0\" 812 gate=refused:rate-limit "
                           "waited_ms=0 worker=3 via=10.0.0.1"),
              "%s", line);
    free(line);
    e.has_request = false;
    e.status = 400;
    line = format(MG_ACCESS_LOG_COMBINED, &e);
    cr_expect(strstr(line, "] \"-\" 400 - "), "%s", line);
    free(line);
}

Test(access_log, combined_escapes_quotes_backslashes_and_control_bytes_as_apache_does)
{
    struct mg_access_entry e = sample();
    e.user_agent = (struct mg_str){"a\"b\\c\n\x1b[31m\xff", 12};
    e.referer = (struct mg_str){"x\" \"forged", 10};
    e.target = (struct mg_str){"/p\"q", 4};
    char *line = format(MG_ACCESS_LOG_COMBINED, &e);
    cr_expect(strstr(line, "\"a\\\"b\\\\c\\x0a\\x1b[31m\\xff\""), "%s", line);
    cr_expect(strstr(line, "\"x\\\" \\\"forged\""), "%s", line);
    cr_expect(strstr(line, "\"GET /p\\\"q HTTP/1.1\""), "%s", line);
    for (const char *p = line; *p; p++)
        cr_expect((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f, "byte %02x in %s",
                  (unsigned char)*p, line);
    free(line);
}

Test(access_log, json_is_one_strict_object_with_every_key)
{
    struct mg_access_entry e = sample();
    e.via = "127.0.0.1";
    e.key_label = "key-3";
    e.outcome.gate = MG_GATE_COLD;
    e.outcome.verdict = MG_VERDICT_REFUSED;
    e.outcome.waited_ns = 3000 * 1000000LL;
    e.status = 429;
    e.user_agent = (struct mg_str){"ua \"quoted\" \\ \n\t<script>\xc3\x28", 26};
    e.referer = (struct mg_str){"https://example.org/a?b=\"c\"", 27};
    char *line = format(MG_ACCESS_LOG_JSON, &e);
    size_t n = strlen(line);
    char *body = malloc(n + 2);
    memcpy(body, line, n);
    memcpy(body + n, "\n", 2);
    cr_assert(json_body_is_strict(body, n + 1), "%s", line);
    cr_expect(strchr(line, '\n') == NULL);
    char keys[512];
    json_keys(line, "", keys, sizeof keys);
    cr_expect_str_eq(keys, "time,client,via,method,target,status,bytes,duration_ms,referer,"
                           "user_agent,worker,gate,waited_ms,key");
    cr_expect(json_str_at_eq(line, "time", "2026-12-01T15:04:05.123Z"));
    cr_expect(json_str_at_eq(line, "client", "198.51.100.7"));
    cr_expect(json_str_at_eq(line, "via", "127.0.0.1"));
    cr_expect(json_str_at_eq(line, "target", "/api/nodes?limit=5"));
    cr_expect_eq(json_int_at(line, "status"), 429);
    cr_expect_eq(json_int_at(line, "bytes"), 1234);
    cr_expect_eq(json_double_at(line, "duration_ms"), 0.812);
    cr_expect(json_str_at_eq(line, "referer", "https://example.org/a?b=\"c\""));
    cr_expect(json_str_at_eq(line, "user_agent", "ua \"quoted\" \\ \n\t<script>\xef\xbf\xbd("),
              "%s", line);
    cr_expect_eq(json_int_at(line, "worker"), 3);
    cr_expect(json_str_at_eq(line, "gate", "refused:cold-gate"));
    cr_expect_eq(json_int_at(line, "waited_ms"), 3000);
    cr_expect(json_str_at_eq(line, "key", "key-3"));
    free(line);
    /* Anonymous, no proxy, no headers: no via, nulls. */
    e = sample();
    e.user_agent = (struct mg_str){NULL, 0};
    line = format(MG_ACCESS_LOG_JSON, &e);
    json_keys(line, "", keys, sizeof keys);
    cr_expect_str_eq(keys, "time,client,method,target,status,bytes,duration_ms,referer,"
                           "user_agent,worker,gate,waited_ms,key");
    cr_expect(json_is_at(line, "referer", "null") && json_is_at(line, "user_agent", "null") &&
                  json_is_at(line, "key", "null"),
              "%s", line);
    cr_expect(json_str_at_eq(line, "gate", "none"));
    free(body);
    free(line);
}

Test(access_log, a_hostile_client_cannot_make_a_line_longer_than_a_pipe_writes_whole)
{
    static char huge[8000];
    for (size_t i = 0; i < sizeof huge; i++)
        huge[i] = (char)(i % 3 == 0 ? '\x01' : i % 3 == 1 ? '"' : 0xff);
    struct mg_access_entry e = sample();
    e.target = (struct mg_str){huge, sizeof huge};
    e.referer = (struct mg_str){huge, sizeof huge};
    e.user_agent = (struct mg_str){huge, sizeof huge};
    e.method = (struct mg_str){huge, 200};
    e.via = "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff";
    e.client = "2001:db8:ffff:ffff:ffff:ffff:ffff:fffe";
    e.key_label = "a-label-of-sixty-four-characters-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for (int fmt = MG_ACCESS_LOG_ON; fmt <= MG_ACCESS_LOG_JSON; fmt++) {
        char *line = format(fmt, &e);
        size_t n = strlen(line);
        /* With the journal's prefix or a timestamp and the newline. */
        cr_expect_lt(n + MG_LOG_TIME_MAX + 1, (size_t)MG_LOG_LINE_MAX, "format %d: %zu", fmt, n);
        cr_expect_gt(n, fmt == MG_ACCESS_LOG_ON ? 1500u : 2500u, "format %d cut too much: %zu", fmt,
                     n);
        if (fmt == MG_ACCESS_LOG_JSON) {
            char *body = malloc(n + 2);
            memcpy(body, line, n);
            memcpy(body + n, "\n", 2);
            cr_expect(json_body_is_strict(body, n + 1), "a cut broke the JSON: %s", line);
            free(body);
        }
        free(line);
    }
}

/* ---- the real binary ------------------------------------------------------------------ */

static char dir[128], keys_path[256];

static void make_dir(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(keys_path, sizeof keys_path, "%s/keys", dir);
}

static void remove_dir(void)
{
    mg_test_rmdir(dir);
}

static int get(int port, const char *target, const char *headers)
{
    struct mg_test_response r;
    if (!mg_test_get(port, target, headers, &r))
        return -1;
    int status = r.status;
    mg_test_response_free(&r);
    return status;
}

/* The log's lines that contain needle, newline-separated, malloc'ed ("" when none). */
static char *lines_with(const char *log, const char *needle)
{
    size_t cap = strlen(log) + 1, n = 0;
    char *out = calloc(1, cap);
    for (const char *p = log; *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (memmem(p, len, needle, strlen(needle))) {
            memcpy(out + n, p, len);
            n += len;
            out[n++] = '\n';
        }
        p += len + (end ? 1 : 0);
    }
    return out;
}

/* Starts with 2026-12-01T15:04:05.123Z and a blank. */
static bool starts_with_time(const char *p)
{
    const char *shape = "dddd-dd-ddTdd:dd:dd.dddZ ";
    for (size_t i = 0; shape[i]; i++)
        if (shape[i] == 'd' ? !isdigit((unsigned char)p[i]) : p[i] != shape[i])
            return false;
    return true;
}

Test(access_log, outside_the_journal_every_line_starts_with_its_time)
{
    const char *env[] = {"MESHGATE_ACCESS_LOG=1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    cr_expect_eq(get(s.port, "/api/healthz", NULL), 200);
    mg_test_sleep_ms(100);
    char *log = mg_test_server_log(&s);
    unsigned lines = 0;
    for (const char *p = log; *p;) {
        cr_expect(starts_with_time(p), "line %u: %.120s", lines, p);
        lines++;
        const char *end = strchr(p, '\n');
        if (!end)
            break;
        p = end + 1;
    }
    cr_expect_gt(lines, 3u);
    cr_expect(strstr(log, "Z access 127.0.0.1 \"GET /api/healthz HTTP/1.1\" 200 "), "%s", log);
    cr_expect(strstr(log, " gate=none waited_ms=0 key=-\n"), "%s", log);
    free(log);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(access_log, under_the_journal_every_line_carries_its_priority)
{
    /* A setting the server warns about gives a warning line; the rest of the test reads a
     * running server's lines. */
    const char *env[] = {"MG_TEST_JOURNAL_STREAM=1", "MESHGATE_ACCESS_LOG=json",
                         "MESHGATE_LOG_LEVEL=debug", "MESHGATE_ANON_CONCURRENCY=0", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    cr_expect_eq(get(s.port, "/api/healthz", NULL), 200);
    mg_test_sleep_ms(100);
    char *log = mg_test_server_log(&s);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
    unsigned lines = 0, info = 0, warning = 0, debug = 0, access = 0;
    for (const char *p = log; *p;) {
        cr_expect(p[0] == '<' && strchr("3467", p[1]) && p[2] == '>', "line %u: %.120s", lines, p);
        info += strncmp(p, "<6>meshgate[", 12) == 0;
        warning += strncmp(p, "<4>meshgate[", 12) == 0 &&
                   strstr(p, " warning: MESHGATE_ANON_CONCURRENCY=0");
        debug += strncmp(p, "<7>meshgate[", 12) == 0;
        access += strncmp(p, "<6>{\"time\":\"", 12) == 0;
        lines++;
        const char *end = strchr(p, '\n');
        if (!end)
            break;
        p = end + 1;
    }
    cr_expect_gt(info, 2u, "%s", log);
    cr_expect_eq(warning, 1u, "%s", log);
    cr_expect_gt(debug, 0u, "%s", log);
    cr_expect_eq(access, 1u, "%s", log);
    free(log);

    /* A start that fails logs its error at <3>. */
    char out[4096];
    const char *bad[] = {"MG_TEST_JOURNAL_STREAM=1", "MESHGATE_DB=/nonexistent/x.db",
                         "MESHGATE_WORKERS=0", NULL};
    int status = mg_test_run_expect_exit(bad, out, sizeof out, 5000);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 78, "%d: %s", status, out);
    cr_expect(strncmp(out, "<3>meshgate[", 12) == 0 && strstr(out, "MESHGATE_WORKERS=0"), "%s",
              out);
}

Test(access_log, json_lines_name_the_refusing_gate_and_the_waits)
{
    /* One permit in the anonymous line, a burst of 4 a client: a held request keeps the
     * permit, the next waits for it; a second memory walk is refused by the diagnostic
     * gate's cooldown (at once, so as a light request: no token); the fifth heavy request
     * is refused by the rate limit. */
    const char *env[] = {"MESHGATE_ACCESS_LOG=json",   "MESHGATE_ANON_CONCURRENCY=1",
                         "MESHGATE_ANON_RATE=1",       "MESHGATE_ANON_BURST=4",
                         "MESHGATE_ANON_WAIT_MS=5000", "MESHGATE_WORKERS=3",
                         "MESHGATE_TEST_HOOKS=park",   NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    int held = mg_test_connect(s.port);
    cr_assert_geq(held, 0);
    const char *req = "GET /api/packets?expand=observations&limit=1 HTTP/1.1\r\nHost: "
                      "t\r\nX-Test-Hold-Ms: 400\r\n"
                      "User-Agent: held/1\r\nConnection: close\r\n\r\n";
    cr_assert(mg_test_send(held, req, strlen(req)));
    mg_test_sleep_ms(100);
    cr_expect_eq(
        get(s.port, "/api/packets?expand=observations&limit=2", "User-Agent: waiter/1\r\n"), 200);
    struct mg_test_response r;
    cr_expect(mg_test_read_response(held, &r, false, 5000));
    mg_test_response_free(&r);
    close(held);
    cr_expect_eq(get(s.port, "/api/perf?mem=1", NULL), 200);
    cr_expect_eq(get(s.port, "/api/perf?mem=1", NULL), 429);
    cr_expect_eq(get(s.port, "/api/packets?expand=observations&limit=3", NULL), 200);
    cr_expect_eq(
        get(s.port, "/api/packets?expand=observations&limit=4", "Referer: https://x.example/\r\n"),
        429);
    mg_test_sleep_ms(100);
    char *log = mg_test_server_log(&s);
    char *access = lines_with(log, "{\"time\":");
    unsigned count = 0;
    for (char *p = access; *p; count++) {
        char *end = strchr(p, '\n'), keep = end[1];
        end[1] = '\0';
        cr_assert(json_body_is_strict(p, (size_t)(end - p) + 1), "%s", p);
        end[1] = keep;
        p = end + 1;
    }
    cr_expect_eq(count, 6u, "%s", access);
    char *line =
        lines_with(access, "\"target\":\"/api/packets?expand=observations\\u0026limit=1\"");
    cr_expect(json_str_at_eq(line, "gate", "admitted:anon-line"), "%s", line);
    cr_expect(json_str_at_eq(line, "user_agent", "held/1"), "%s", line);
    free(line);
    line = lines_with(access, "\"target\":\"/api/packets?expand=observations\\u0026limit=2\"");
    cr_expect(json_str_at_eq(line, "gate", "waited:anon-line"), "%s", line);
    cr_expect_geq(json_int_at(line, "waited_ms"), 150, "%s", line);
    free(line);
    line = lines_with(access, "\"target\":\"/api/packets?expand=observations\\u0026limit=4\"");
    cr_expect(json_str_at_eq(line, "gate", "refused:rate-limit"), "%s", line);
    cr_expect_eq(json_int_at(line, "status"), 429);
    cr_expect(json_str_at_eq(line, "referer", "https://x.example/"), "%s", line);
    free(line);
    line = lines_with(access, "\"target\":\"/api/perf?mem=1\"");
    cr_expect(strstr(line, "\"gate\":\"admitted:diag-gate\""), "%s", line);
    cr_expect(strstr(line, "\"status\":429") && strstr(line, "\"gate\":\"refused:diag-gate\""),
              "%s", line);
    free(line);
    free(access);
    free(log);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(access_log, combined_names_a_signed_in_client_by_its_label_never_its_key, .init = make_dir,
     .fini = remove_dir)
{
    FILE *f = fopen(keys_path, "w");
    cr_assert(f);
    fputs("# operators\nops alpha-0123456789abcdef\nbeta-0123456789abcdef\n", f);
    fclose(f);
    chmod(keys_path, 0600);
    char setting[300];
    snprintf(setting, sizeof setting, "MESHGATE_API_KEYS_FILE=%s", keys_path);
    const char *env[] = {setting, "MESHGATE_ACCESS_LOG=combined", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    cr_expect_eq(get(s.port, "/api/packets?expand=observations&limit=1",
                     "Authorization: Bearer alpha-0123456789abcdef\r\nUser-Agent: ops-tool\r\n"),
                 200);
    cr_expect_eq(get(s.port, "/api/healthz", "X-API-Key: beta-0123456789abcdef\r\n"), 200);
    cr_expect_eq(get(s.port, "/api/healthz", "X-API-Key: gamma-0123456789abcdef\r\n"), 401);
    cr_expect_eq(get(s.port, "/api/packets?expand=observations&limit=1", NULL), 200);
    mg_test_sleep_ms(100);
    char *log = mg_test_server_log(&s);
    cr_expect_null(strstr(log, "0123456789abcdef"), "a key reached the log: %s", log);
    cr_expect_null(strstr(log, "alpha"), "a part of a key reached the log: %s", log);
    cr_expect(strstr(log, "127.0.0.1 - ops ["), "%s", log);
    cr_expect(strstr(log, "\"GET /api/packets?expand=observations&limit=1 HTTP/1.1\" 200 "), "%s",
              log);
    cr_expect(strstr(log, "\"-\" \"ops-tool\" "), "%s", log);
    cr_expect(strstr(log, "gate=bypassed waited_ms=0 worker="), "%s", log);
    cr_expect(strstr(log, "127.0.0.1 - key-3 ["), "a bare key is named by its line: %s", log);
    cr_expect(strstr(log, "127.0.0.1 - - [") && strstr(log, "\"GET /api/healthz HTTP/1.1\" 401 "),
              "%s", log);
    cr_expect(strstr(log, "gate=admitted:anon-line"), "%s", log);
    /* Outside the journal a combined line is as log tools expect it: no prefix. */
    char *combined = lines_with(log, " - ops [");
    cr_expect(strncmp(combined, "127.0.0.1 - ops [", 17) == 0, "%s", combined);
    free(combined);
    free(log);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

struct slot_busy {
    struct mg_segment *seg;
};

static bool slot_busy(void *arg)
{
    const struct slot_busy *b = arg;
    return atomic_load(&b->seg->slots[0].request_started_monotonic_ns) != 0;
}

/* A request still parked when the worker stops past its drain is closed unanswered, and the
 * log says so: its line, status 503, no bytes. Its work runs on a helper (signed-in heavy
 * work, held 30 s there) that outlasts the drain: the line is written before the worker
 * waits for its helpers, which the master's kill past the deadline cuts short. */
Test(access_log, a_request_cut_at_the_drain_deadline_has_its_line, .init = make_dir,
     .fini = remove_dir)
{
    char setting[300];
    mg_test_write_keys_file(dir, "drain-cut-0123456789abcdef", setting, sizeof setting);
    const char *env[] = {setting,
                         "MESHGATE_WORKERS=1",
                         "MESHGATE_TEST_HOOKS=park",
                         "MESHGATE_DRAIN_TIMEOUT_MS=300",
                         "MESHGATE_ACCESS_LOG=json",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    int fd = mg_test_connect(s.port);
    cr_assert_geq(fd, 0);
    const char *req = "GET /api/packets?expand=observations&limit=7 HTTP/1.1\r\nHost: "
                      "t\r\nX-Test-Hold-Ms: 30000\r\n"
                      "Authorization: Bearer drain-cut-0123456789abcdef\r\n"
                      "User-Agent: cut/1\r\n\r\n";
    cr_assert(mg_test_send(fd, req, strlen(req)));
    struct slot_busy b = {&seg};
    cr_assert(mg_test_wait_until(slot_busy, &b, 30000, 5), "the request was never taken up");
    mg_segment_detach(&seg);
    cr_assert_eq(kill(s.pid, SIGTERM), 0);
    cr_expect(mg_test_wait_closed(fd, 30000), "the connection was not closed");
    close(fd);
    char *log = mg_test_wait_log(
        &s, "\"target\":\"/api/packets?expand=observations\\u0026limit=7\"", 1, 30000);
    char *line = lines_with(log, "\"target\":\"/api/packets?expand=observations\\u0026limit=7\"");
    cr_expect(strstr(line, "\"status\":503,\"bytes\":0,"), "%s", log);
    cr_expect(strstr(line, "\"user_agent\":\"cut/1\""), "%s", line);
    free(line);
    free(log);
    mg_test_server_stop(&s, 10000);
}
