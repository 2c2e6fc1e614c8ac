/* SPDX-License-Identifier: ISC */
/*
 * The dump tool (invariant 7): it reads a segment without changing it, renders what is in
 * it, and refuses, without crashing, what it does not understand.
 */
#include "clock.h"
#include "config.h"
#include "gate_fifo.h"
#include "harness.h"
#include "netaddr.h"
#include "result_cache.h"
#include "scoreboard.h"
#include "segment.h"
#include "shared_value.h"
#include "shmdump.h"
#include "stats.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MESHGATE_BUILD_DIR
#define MESHGATE_BUILD_DIR "build"
#endif
#define TOOL MESHGATE_BUILD_DIR "/meshgate-shm"

extern char **environ;

/* --- segment names, removed after every test whatever its outcome ------------------------- */

#define NAMES_MAX 8
static char made_names[NAMES_MAX][64];
static int made_count;

static const char *unique_name(void)
{
    cr_assert_lt(made_count, NAMES_MAX);
    char *name = made_names[made_count];
    snprintf(name, sizeof made_names[0], "/mgtest-shmdump-%d-%d", (int)getpid(), made_count);
    made_count++;
    mg_test_cleanup_shm(name); /* also when the test's process ends without .fini */
    return name;
}

static void unlink_made(void)
{
    for (int i = 0; i < made_count; i++)
        shm_unlink(made_names[i]);
    made_count = 0;
}

TestSuite(shmdump, .fini = unlink_made, .timeout = 60);

/* --- a populated segment ------------------------------------------------------------------- */

static const char *const route_names[] = {"/api/nodes", "/api/healthz", "/api/stats"};

struct env_pair {
    const char *name, *value;
};

static const char *table_lookup(const char *name, void *arg)
{
    for (const struct env_pair *e = arg; e->name; e++)
        if (strcmp(e->name, name) == 0)
            return e->value;
    return NULL;
}

/* A small cache (16 entries, a pool of 16 pages) and rate table: the segment is about 100 KiB, not
 * the 17 MB of the defaults, so the tests that copy it many times stay cheap under ASan. */
static void make_segment(struct mg_segment *seg, const char *name)
{
    const struct env_pair env[] = {
        {"MESHGATE_DB", "/srv/corescope/test.db"},
        {"MESHGATE_WORKERS", "3"},
        {"MESHGATE_LISTEN", "127.0.0.1:18080"},
        {"MESHGATE_SHM_NAME", name},
        {"MESHGATE_ACCESS_LOG", "1"},
        {"MESHGATE_REACH_CACHE_ENTRIES", "16"},
        {"MESHGATE_REACH_CACHE_BYTES", "65536"},
        {"MESHGATE_ANON_CLIENTS", "64"},
        {NULL, NULL},
    };
    struct mg_config cfg;
    char err[512];
    cr_assert_eq(mg_config_load(&cfg, table_lookup, (void *)env, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mg_segment_create(seg, name, &cfg, 3, route_names, 3, err, sizeof err), 0, "%s",
                 err);
}

/* Counters, two requests on /api/nodes (one a 5xx), two slow requests, a value and a lease,
 * and a scoreboard "_H.": slot 0 idle, slot 1 handling a request, slot 2 never used. */
static void populate(struct mg_segment *seg)
{
    mg_counter_add(seg, MG_CTR_REQUESTS, 7);
    mg_counter_add(seg, MG_CTR_RESPONSES_2XX, 6);
    mg_counter_add(seg, MG_CTR_RESPONSES_5XX, 1);
    mg_counter_add(seg, MG_CTR_BYTES_SENT, 123456);
    mg_route_record(seg, 0, 200, 1500);
    mg_route_record(seg, 0, 503, 2500);
    int64_t now_rt = mg_realtime_ns();
    mg_slow_record(seg, "/api/slow-one", 200, 150000, now_rt - 2 * MG_NS_PER_SEC);
    mg_slow_record(seg, "/api/slow-two", 504, 250000, now_rt);
    mg_shared_value_publish(&seg->values[MG_VALUE_DB_COUNTS], getpid(), "{\"nodes\":3}", 11,
                            mg_monotonic_ns());
    cr_assert(mg_shared_value_try_lease(&seg->values[MG_VALUE_STATS], getpid(), mg_monotonic_ns()));

    struct mg_slot *idle = mg_slot_get(seg, 0);
    mg_slot_prepare(idle);
    mg_slot_set_pid(idle, getpid());
    mg_slot_set_state(idle, MG_SLOT_IDLE);

    struct mg_slot *busy = mg_slot_get(seg, 1);
    mg_slot_prepare(busy);
    mg_slot_set_pid(busy, getpid());
    atomic_store(&busy->requests, 5);
    atomic_store(&busy->requests_all, 9);
    mg_slot_set_connections(busy, 1);
    atomic_store(&busy->db_connections, 2);
    mg_slot_begin_request(busy, "GET", "/api/nodes?limit=5", mg_monotonic_ns() - 12 * MG_NS_PER_MS);
}

static char *render_text(struct mg_shmdump *d)
{
    struct mg_buf b;
    mg_buf_init(&b);
    mg_shmdump_render_text(d, &b);
    cr_assert_not(b.failed);
    char *s = strdup(mg_buf_cstr(&b));
    mg_buf_free(&b);
    return s;
}

static char *render_json(struct mg_shmdump *d)
{
    struct mg_buf b;
    mg_buf_init(&b);
    mg_shmdump_render_json(d, &b);
    cr_assert_not(b.failed);
    char *s = strdup(mg_buf_cstr(&b));
    mg_buf_free(&b);
    return s;
}

/* The whole line of text that starts with prefix (after its indentation), or "" if none. */
static const char *line_starting(const char *text, const char *prefix)
{
    static char line[1024];
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *q = p;
        while (*q == ' ')
            q++;
        if (strncmp(q, prefix, strlen(prefix)) == 0 && n < sizeof line) {
            memcpy(line, p, n);
            line[n] = '\0';
            return line;
        }
        p += n + (end ? 1 : 0);
    }
    return "";
}

/* The scoreboard table's line for a slot. */
static const char *slot_line(const char *text, unsigned slot)
{
    static char line[1024];
    char prefix[16];
    snprintf(prefix, sizeof prefix, "\n  %4u ", slot);
    const char *p = strstr(text, prefix);
    if (!p)
        return "";
    p++;
    size_t n = strcspn(p, "\n");
    snprintf(line, sizeof line, "%.*s", (int)n, p);
    return line;
}

/* --- a strict JSON checker, so the tests need nothing but C ------------------------------- */

struct json_scan {
    const char *p, *end;
    int depth;
    char top_keys[16][32];
    int top_count;
};

static bool scan_value(struct json_scan *s);

static void scan_ws(struct json_scan *s)
{
    while (s->p < s->end && strchr(" \t\r\n", *s->p))
        s->p++;
}

static bool scan_string(struct json_scan *s, char *out, size_t cap)
{
    size_t n = 0;
    if (s->p >= s->end || *s->p++ != '"')
        return false;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p++;
        if (c == '"') {
            if (out)
                out[n < cap ? n : cap - 1] = '\0';
            return true;
        }
        if (c < 0x20)
            return false;
        if (c == '\\') {
            if (s->p >= s->end || !strchr("\"\\/bfnrtu", *s->p))
                return false;
            if (*s->p++ == 'u')
                for (int i = 0; i < 4; i++)
                    if (s->p >= s->end || !strchr("0123456789abcdefABCDEF", *s->p++))
                        return false;
            continue;
        }
        if (out && n + 1 < cap)
            out[n++] = (char)c;
    }
    return false;
}

static bool scan_digits(struct json_scan *s)
{
    const char *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
        s->p++;
    return s->p > start;
}

static bool scan_number(struct json_scan *s)
{
    if (*s->p == '-')
        s->p++;
    if (s->p < s->end && *s->p == '0')
        s->p++;
    else if (!scan_digits(s))
        return false;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!scan_digits(s))
            return false;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (!scan_digits(s))
            return false;
    }
    return true;
}

static bool scan_literal(struct json_scan *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || strncmp(s->p, word, n) != 0)
        return false;
    s->p += n;
    return true;
}

static bool scan_container(struct json_scan *s, char close, bool object)
{
    s->p++;
    s->depth++;
    scan_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return true;
    }
    for (;;) {
        scan_ws(s);
        if (object) {
            char key[32];
            if (!scan_string(s, key, sizeof key))
                return false;
            if (s->depth == 1 && s->top_count < 16)
                snprintf(s->top_keys[s->top_count++], sizeof s->top_keys[0], "%s", key);
            scan_ws(s);
            if (s->p >= s->end || *s->p++ != ':')
                return false;
            scan_ws(s);
        }
        if (!scan_value(s))
            return false;
        scan_ws(s);
        if (s->p >= s->end)
            return false;
        char c = *s->p++;
        if (c == close) {
            s->depth--;
            return true;
        }
        if (c != ',')
            return false;
    }
}

static bool scan_value(struct json_scan *s)
{
    if (s->p >= s->end || s->depth > 64)
        return false;
    switch (*s->p) {
    case '{':
        return scan_container(s, '}', true);
    case '[':
        return scan_container(s, ']', false);
    case '"':
        return scan_string(s, NULL, 0);
    case 't':
        return scan_literal(s, "true");
    case 'f':
        return scan_literal(s, "false");
    case 'n':
        return scan_literal(s, "null");
    default:
        return scan_number(s);
    }
}

/* True when text (up to len) is exactly one JSON value; fills the top-level keys. */
static bool json_check(const char *text, size_t len, struct json_scan *s)
{
    memset(s, 0, sizeof *s);
    s->p = text;
    s->end = text + len;
    scan_ws(s);
    if (!scan_value(s))
        return false;
    scan_ws(s);
    return s->p == s->end;
}

static void assert_documented_shape(const char *json, size_t len)
{
    static const char *const in_order[] = {"segment", "config",     "counters", "routes",
                                           "slow",    "values",     "tables",   "gates",
                                           "live",    "scoreboard", "workers"};
    struct json_scan s;
    cr_assert(json_check(json, len, &s), "not valid JSON near offset %td: %.60s", s.p - json, s.p);
    cr_assert_eq(s.top_count, 11, "%d top-level keys", s.top_count);
    for (int i = 0; i < 11; i++)
        cr_assert_str_eq(s.top_keys[i], in_order[i]);
}

/* --- running the binary ---------------------------------------------------------------------- */

struct run {
    int status; /* exit code, or 128 + signal */
    char *out, *err;
};

struct child {
    pid_t pid;
    int out_fd, err_fd;
};

static char *read_all(int fd)
{
    off_t size = lseek(fd, 0, SEEK_END);
    cr_assert_geq(size, 0);
    char *text = malloc((size_t)size + 1);
    cr_assert_not_null(text);
    cr_assert_eq(pread(fd, text, (size_t)size, 0), size);
    text[size] = '\0';
    close(fd);
    return text;
}

/* Starts the tool with args; its environment is ours without MESHGATE_* plus extra_env. */
static struct child start_tool(const char *const *args, const char *const *extra_env)
{
    struct child c;
    c.out_fd = memfd_create("tool-stdout", 0);
    c.err_fd = memfd_create("tool-stderr", 0);
    cr_assert(c.out_fd >= 0 && c.err_fd >= 0);
    char *argv[16];
    int argc = 0;
    argv[argc++] = (char *)TOOL;
    for (int i = 0; args && args[i] && argc < 15; i++)
        argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    char *envp[512];
    int envc = 0;
    for (char **e = environ; *e && envc < 480; e++)
        if (strncmp(*e, "MESHGATE_", 9) != 0)
            envp[envc++] = *e;
    for (int i = 0; extra_env && extra_env[i] && envc < 510; i++)
        envp[envc++] = (char *)extra_env[i];
    /* No environment file unless the test names one (getenv takes the first): a server's
     * /etc/meshgate/meshgate.env on this machine is not the test's. */
    envp[envc++] = (char *)"MESHGATE_ENV_FILE=";
    envp[envc] = NULL;
    c.pid = fork();
    cr_assert_geq(c.pid, 0);
    if (c.pid == 0) {
        dup2(c.out_fd, STDOUT_FILENO);
        dup2(c.err_fd, STDERR_FILENO);
        execve(TOOL, argv, envp);
        _exit(127);
    }
    return c;
}

static struct run finish_tool(struct child c, int timeout_ms)
{
    struct run r;
    int status = 0;
    for (int waited = 0;; waited += 10) {
        pid_t got = waitpid(c.pid, &status, WNOHANG);
        if (got == c.pid)
            break;
        if (waited >= timeout_ms) {
            kill(c.pid, SIGKILL);
            waitpid(c.pid, &status, 0);
            cr_assert_fail("%s did not finish within %d ms", TOOL, timeout_ms);
        }
        usleep(10000);
    }
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = read_all(c.out_fd);
    r.err = read_all(c.err_fd);
    return r;
}

/* The ceilings are for a loaded machine under ASan; a pass never waits for them. */
#define TOOL_CEILING_MS 60000

static struct run run_tool(const char *const *args, const char *const *extra_env)
{
    return finish_tool(start_tool(args, extra_env), TOOL_CEILING_MS);
}

struct output_wait {
    int fd;
    const char *needle;
    int count;
};

static int count_of(const char *text, const char *needle);

/* True when the tool's output so far holds needle count times (the tool writes each report
 * with write(2), so what it printed is in the memfd at once). */
static bool output_has(void *arg)
{
    const struct output_wait *w = arg;
    char text[1 << 16];
    ssize_t n = pread(w->fd, text, sizeof text - 1, 0);
    if (n < 0)
        return false;
    text[n] = '\0';
    return count_of(text, w->needle) >= w->count;
}

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
}

static void make_raw_segment(const char *name, const void *bytes, size_t len)
{
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0, "shm_open %s: %s", name, strerror(errno));
    cr_assert_eq(ftruncate(fd, (off_t)len), 0);
    cr_assert_eq(write(fd, bytes, len), (ssize_t)len);
    close(fd);
}

/* --- the library on a populated segment ------------------------------------------------------- */

Test(shmdump, text_report_shows_header_counters_routes_values_and_scoreboard)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    populate(&seg);

    struct mg_shmdump d;
    char err[512];
    cr_assert_eq(mg_shmdump_take(&d, name, err, sizeof err), MG_SHMDUMP_OK, "%s", err);
    char *text = render_text(&d);

    char want[128];
    snprintf(want, sizeof want, "meshgate segment %s (copied ", name);
    cr_assert(strstr(text, want), "%s", text);
    snprintf(want, sizeof want, "layout version %u,", MG_SHM_LAYOUT_VERSION);
    cr_assert(strstr(text, want), "%s", text);
    snprintf(want, sizeof want, "master       pid %d, alive", (int)getpid());
    cr_assert(strstr(text, want), "%s", text);
    cr_assert(strstr(text, "server state starting, since "), "%s", text);

    cr_assert(strstr(text, "\n  MESHGATE_WORKERS=3\n"), "%s", text);
    cr_assert(strstr(text, "\n  MESHGATE_DB=/srv/corescope/test.db\n"), "%s", text);
    cr_assert(strstr(text, "\n  MESHGATE_ACCESS_LOG=1\n"), "%s", text);

    cr_assert(strstr(line_starting(text, "requests "), " 7  requests answered"), "%s", text);
    cr_assert(strstr(line_starting(text, "bytes_sent "), " 123456  "), "%s", text);
    cr_assert(strstr(line_starting(text, "responses_5xx "), " 1  "), "%s", text);

    /* count 2, avg 2.00 ms, max 2.50 ms, one 5xx; the unused routes are not listed. */
    const char *route = line_starting(text, "/api/nodes ");
    cr_assert(strstr(route, " 2 ") && strstr(route, " 2.00 ") && strstr(route, " 2.50 "),
              "route line: %s", route);
    cr_assert(route[strlen(route) - 1] == '1', "route line: %s", route);
    cr_assert_str_eq(line_starting(text, "/api/healthz "), "", "%s", text);

    const char *two = strstr(text, "/api/slow-two"), *one = strstr(text, "/api/slow-one");
    cr_assert(two && one && two < one, "newest slow request first:\n%s", text);

    cr_assert(strstr(text, "  0 db_counts: 11 bytes, 1 refreshes, age "), "%s", text);
    snprintf(want, sizeof want,
             "  1 stats: no value yet, 0 refreshes, age -, lease holder pid %d\n", (int)getpid());
    cr_assert(strstr(text, want), "%s", text);

    cr_assert(strstr(text, "scoreboard (3 slots, 2 alive)\n  _H.\n  legend: . empty, S starting,"),
              "%s", text);
    const char *busy = slot_line(text, 1);
    cr_assert(strstr(busy, " handling ") && strstr(busy, " 5/9 ") &&
                  strstr(busy, "GET /api/nodes?limit=5 ("),
              "slot 1: %s", busy);
    cr_assert(strstr(slot_line(text, 0), " idle "), "%s", text);
    const char *empty = slot_line(text, 2);
    cr_assert(strstr(empty, "       - empty "), "slot 2: %s", empty);

    free(text);
    mg_shmdump_release(&d);
    mg_segment_detach(&seg);
}

Test(shmdump, json_report_has_the_documented_shape_and_values)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    populate(&seg);

    struct mg_shmdump d;
    char err[512];
    cr_assert_eq(mg_shmdump_take(&d, name, err, sizeof err), MG_SHMDUMP_OK, "%s", err);
    char *json = render_json(&d);
    assert_documented_shape(json, strlen(json));

    char want[160];
    snprintf(want, sizeof want,
             "{\"segment\":{\"name\":\"%s\",\"magic\":\"MESHGATE\","
             "\"layout_version\":%u,",
             name, MG_SHM_LAYOUT_VERSION);
    cr_assert(strstr(json, want), "%s", json);
    snprintf(want, sizeof want,
             "\"master_pid\":%d,\"master_alive\":true,\"generation\":0,"
             "\"state\":\"starting\"",
             (int)getpid());
    cr_assert(strstr(json, want), "%s", json);
    cr_assert(strstr(json, "\"slots\":3,\"routes\":3}"), "%s", json);
    cr_assert(strstr(json, "\"config\":{\"MESHGATE_ENV_FILE\":\"\",\"MESHGATE_LISTEN\":"
                           "\"127.0.0.1:18080\","),
              "%s", json);
    cr_assert(strstr(json, "\"MESHGATE_WORKERS\":\"3\""), "%s", json);
    cr_assert(strstr(json, "\"counters\":{\"requests\":7,\"responses_2xx\":6,"), "%s", json);
    cr_assert(strstr(json, "\"bytes_sent\":123456,"), "%s", json);
    cr_assert(strstr(json, "\"routes\":[{\"route\":\"/api/nodes\",\"count\":2,\"avg_ms\":2,"), "%s",
              json);
    cr_assert(strstr(json, "\"max_ms\":2.5,\"errors_5xx\":1}]"), "%s", json);
    cr_assert(strstr(json, "\"ms\":250,\"status\":504,\"path\":\"/api/slow-two\"}"), "%s", json);
    cr_assert(strstr(json, "{\"id\":0,\"name\":\"db_counts\",\"bytes\":11,\"refreshes\":1,"
                           "\"age_ms\":"),
              "%s", json);
    snprintf(want, sizeof want,
             "{\"id\":1,\"name\":\"stats\",\"bytes\":null,\"refreshes\":0,"
             "\"age_ms\":null,\"lease_pid\":%d}",
             (int)getpid());
    cr_assert(strstr(json, want), "%s", json);
    cr_assert(strstr(json, "\"scoreboard\":\"_H.\""), "%s", json);
    cr_assert(strstr(json, "\"connections\":1,\"db_connections\":2,\"requests\":5,"
                           "\"requests_all\":9,"),
              "%s", json);
    cr_assert(strstr(json, "\"request\":{\"method\":\"GET\",\"path\":\"/api/nodes?limit=5\","
                           "\"running_ms\":"),
              "%s", json);
    cr_assert(strstr(json, "{\"slot\":2,\"pid\":null,\"state\":\"empty\",\"spawns\":0,"
                           "\"connections\":0,\"db_connections\":0,\"requests\":0,"
                           "\"requests_all\":0,\"age_ms\":null,"
                           "\"heartbeat_age_ms\":null,\"request\":null,\"last_exit\":null}"),
              "%s", json);

    free(json);
    mg_shmdump_release(&d);
    mg_segment_detach(&seg);
}

Test(shmdump, dead_slots_show_how_their_worker_ended)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    mg_slot_prepare(mg_slot_get(&seg, 0));
    mg_slot_mark_dead(mg_slot_get(&seg, 0), 3 << 8); /* exit(3) */
    mg_slot_prepare(mg_slot_get(&seg, 1));
    mg_slot_mark_dead(mg_slot_get(&seg, 1), SIGKILL); /* killed by signal 9 */

    struct mg_shmdump d;
    char err[512];
    cr_assert_eq(mg_shmdump_take(&d, name, err, sizeof err), MG_SHMDUMP_OK, "%s", err);
    char *text = render_text(&d), *json = render_json(&d);
    cr_assert(strstr(text, "\n  DD.\n"), "%s", text);
    cr_assert(strstr(slot_line(text, 0), " exit 3 "), "%s", text);
    cr_assert(strstr(slot_line(text, 1), " signal 9 "), "%s", text);
    cr_assert(strstr(json, "\"last_exit\":\"exit 3\""), "%s", json);
    cr_assert(strstr(json, "\"last_exit\":\"signal 9\""), "%s", json);

    char text_exit[32];
    mg_shmdump_describe_exit(-1, text_exit, sizeof text_exit);
    cr_assert_str_eq(text_exit, "-");
    free(text);
    free(json);
    mg_shmdump_release(&d);
    mg_segment_detach(&seg);
}

Test(shmdump, control_bytes_in_a_request_path_never_reach_the_terminal)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    struct mg_slot *slot = mg_slot_get(&seg, 0);
    mg_slot_prepare(slot);
    mg_slot_begin_request(slot, "GET", "/x\033[2J\"<q>\x7f", mg_monotonic_ns());

    struct mg_shmdump d;
    char err[512];
    cr_assert_eq(mg_shmdump_take(&d, name, err, sizeof err), MG_SHMDUMP_OK, "%s", err);
    char *text = render_text(&d), *json = render_json(&d);
    cr_assert(strstr(text, "GET /x\\x1b[2J\"<q>\\x7f ("), "%s", text);
    cr_assert_eq(strchr(text, '\033'), NULL);
    assert_documented_shape(json, strlen(json));
    cr_assert(strstr(json, "\"path\":\"/x\\u001b[2J\\\"\\u003cq\\u003e"), "%s", json);
    free(text);
    free(json);
    mg_shmdump_release(&d);
    mg_segment_detach(&seg);
}

/* --- what a dump copies ------------------------------------------------------------------- */

Test(shmdump, a_dump_leaves_the_cache_bodies_out_unless_asked)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    populate(&seg);
    size_t pages = seg.cache.cache->pages;
    cr_assert_gt(pages, 0);
    memset(seg.cache.pages, 0x5a, pages * MG_CACHE_PAGE);

    struct mg_shmdump d;
    char err[512];
    cr_assert_eq(mg_shmdump_take(&d, name, err, sizeof err), MG_SHMDUMP_OK, "%s", err);
    cr_assert_not(d.cache_bodies_copied);
    for (size_t i = 0; i < pages * MG_CACHE_PAGE; i++)
        cr_assert_eq(d.seg.cache.pages[i], 0, "body byte %zu was copied", i);
    /* Everything around the pages is copied: the sections on both sides of them. */
    cr_assert_eq(memcmp(d.copy, seg.base, (size_t)(seg.cache.pages - (unsigned char *)seg.base)),
                 0);
    size_t after = (size_t)(seg.cache.pages - (unsigned char *)seg.base) + pages * MG_CACHE_PAGE;
    cr_assert_eq(memcmp((char *)d.copy + after, (char *)seg.base + after, seg.size - after), 0);
    char *text = render_text(&d), *json = render_json(&d);
    assert_documented_shape(json, strlen(json));
    free(text);
    free(json);
    mg_shmdump_release(&d);

    cr_assert_eq(mg_shmdump_take_with(&d, name, MG_SHMDUMP_CACHE_BODIES, err, sizeof err),
                 MG_SHMDUMP_OK, "%s", err);
    cr_assert(d.cache_bodies_copied);
    cr_assert_eq(memcmp(d.copy, seg.base, seg.size), 0, "asked for, the bodies are copied");
    mg_shmdump_release(&d);
    mg_segment_detach(&seg);
}

Test(shmdump, pages_claimed_inside_the_header_are_copied_and_refused)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    struct mg_shm_header *h = seg.header;
    for (unsigned i = 0; i < h->section_count; i++)
        if (strcmp(h->sections[i].name, "cachepages") == 0)
            h->sections[i].offset = 8;
    struct mg_shmdump d;
    char err[512];
    cr_assert_eq(mg_shmdump_take(&d, name, err, sizeof err), MG_SHMDUMP_NOT_UNDERSTOOD);
    cr_assert(strstr(err, "\"cachepages\" lies outside"), "%s", err);
    mg_segment_detach(&seg);
}

/* --- foreign and damaged copies --------------------------------------------------------------- */

/* A private copy of a fresh segment's bytes, to damage. */
static unsigned char *segment_bytes(struct mg_segment *seg, const char *name, size_t *size)
{
    make_segment(seg, name);
    populate(seg);
    unsigned char *bytes = malloc(seg->size);
    cr_assert_not_null(bytes);
    memcpy(bytes, seg->base, seg->size);
    *size = seg->size;
    return bytes;
}

static struct mg_shm_section *section_named(unsigned char *bytes, const char *name)
{
    struct mg_shm_header *h = (struct mg_shm_header *)bytes;
    for (unsigned i = 0; i < h->section_count; i++)
        if (strcmp(h->sections[i].name, name) == 0)
            return &h->sections[i];
    cr_assert_fail("no section %s", name);
    return NULL;
}

Test(shmdump, sections_outside_the_segment_are_refused_even_when_offsets_wrap)
{
    const char *name = unique_name();
    struct mg_segment seg;
    size_t size;
    unsigned char *good = segment_bytes(&seg, name, &size);
    unsigned char *bytes = malloc(size);
    struct mg_shmdump d;
    char err[512];
    static const char *const sections[] = {"config", "counters", "routes",
                                           "slow",   "values",   "slots"};
    const uint64_t offsets[] = {UINT64_MAX - 63, UINT64_MAX & ~(uint64_t)7, (uint64_t)size,
                                (uint64_t)size - 8, 1ull << 62};
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
            memcpy(bytes, good, size);
            section_named(bytes, sections[s])->offset = offsets[o];
            cr_assert_eq(mg_shmdump_from_bytes(&d, name, bytes, size, err, sizeof err),
                         MG_SHMDUMP_NOT_UNDERSTOOD, "%s at offset %llu was accepted", sections[s],
                         (unsigned long long)offsets[o]);
            cr_assert(strstr(err, "outside"), "%s", err);
        }
    }
    /* A record count that makes offset + size * count wrap. */
    memcpy(bytes, good, size);
    section_named(bytes, "slots")->record_count = UINT64_MAX / 2;
    cr_assert_eq(mg_shmdump_from_bytes(&d, name, bytes, size, err, sizeof err),
                 MG_SHMDUMP_NOT_UNDERSTOOD);
    free(bytes);
    free(good);
    mg_segment_detach(&seg);
}

Test(shmdump, a_single_record_section_without_its_record_is_refused)
{
    const char *name = unique_name();
    struct mg_segment seg;
    size_t size;
    unsigned char *bytes = segment_bytes(&seg, name, &size);
    section_named(bytes, "config")->record_count = 0;
    section_named(bytes, "config")->offset = (uint64_t)size & ~(uint64_t)7;
    struct mg_shmdump d;
    char err[512];
    cr_assert_eq(mg_shmdump_from_bytes(&d, name, bytes, size, err, sizeof err),
                 MG_SHMDUMP_NOT_UNDERSTOOD);
    cr_assert(strstr(err, "\"config\" holds 0 records, expected 1"), "%s", err);
    free(bytes);
    mg_segment_detach(&seg);
}

Test(shmdump, unterminated_strings_in_a_copy_are_bounded)
{
    const char *name = unique_name();
    struct mg_segment seg;
    size_t size;
    unsigned char *bytes = segment_bytes(&seg, name, &size);
    struct mg_shmdump d;
    char err[512];
    /* Fill every string field of the copy with non-NUL bytes, bool with 0xAA. */
    struct mg_segment view;
    cr_assert_eq(mg_segment_validate(bytes, size, &view, err, sizeof err), 0, "%s", err);
    memset(view.header->version, 'V', sizeof view.header->version);
    memset(view.config->listen_host, 'L', sizeof view.config->listen_host);
    memset(view.config->db_path, 0xff, sizeof view.config->db_path);
    memset(view.config->shm_name, 'S', sizeof view.config->shm_name);
    memset(view.config->public_dir, 'P', sizeof view.config->public_dir);
    memset(&view.config->access_log, 0xAA, sizeof view.config->access_log);
    for (unsigned i = 0; i < view.route_count; i++) {
        memset(view.routes[i].name, 'R', sizeof view.routes[i].name);
        atomic_store(&view.routes[i].count, 1);
    }
    for (unsigned i = 0; i < MG_SLOW_MAX; i++)
        memset(view.slow->entry[i].path, 'p', sizeof view.slow->entry[i].path);
    for (unsigned i = 0; i < view.slot_count; i++) {
        memset(view.slots[i].method, 'M', sizeof view.slots[i].method);
        memset(view.slots[i].path, '\033', sizeof view.slots[i].path);
        atomic_store(&view.slots[i].request_started_monotonic_ns, 1);
    }
    cr_assert_eq(mg_shmdump_from_bytes(&d, name, bytes, size, err, sizeof err), MG_SHMDUMP_OK, "%s",
                 err);
    char *text = render_text(&d), *json = render_json(&d);
    /* The route line holds the whole field and not one byte past it. */
    char route_line[MG_ROUTE_NAME_MAX + 4] = "  ";
    memset(route_line + 2, 'R', MG_ROUTE_NAME_MAX);
    route_line[MG_ROUTE_NAME_MAX + 2] = ' ';
    cr_assert(strstr(text, route_line), "%s", text);
    cr_assert(strstr(text, "MESHGATE_ACCESS_LOG=?"), "%s", text);
    cr_assert_eq(strchr(text, '\033'), NULL);
    assert_documented_shape(json, strlen(json));
    free(text);
    free(json);
    mg_shmdump_release(&d);
    free(bytes);
    mg_segment_detach(&seg);
}

static uint64_t random_state = 0x9E3779B97F4A7C15u;

static uint64_t random_u64(void)
{
    random_state ^= random_state >> 12;
    random_state ^= random_state << 25;
    random_state ^= random_state >> 27;
    return random_state * 0x2545F4914F6CDD1Du;
}

/* Each round copies the whole segment (the live feed's ring makes it some megabytes): under
 * ASan on a loaded machine that takes more than the suite's minute. */
Test(shmdump, random_damage_is_refused_or_rendered_never_a_crash, .timeout = 600)
{
    const char *name = unique_name();
    struct mg_segment seg;
    size_t size;
    unsigned char *good = segment_bytes(&seg, name, &size);
    unsigned char *bytes = malloc(size);
    memcpy(bytes, good, size);
    int accepted = 0;
    size_t flipped[16];
    int flips = 0;
    for (int round = 0; round < 1500; round++) {
        /* Undo the last round's damage only: a whole copy of a segment of some megabytes
         * each round is most of the test's time under ASan. */
        for (int f = 0; f < flips; f++)
            bytes[flipped[f]] = good[flipped[f]];
        flips = 1 + (int)(random_u64() % 16);
        for (int f = 0; f < flips; f++) {
            /* Half the damage in the header, where the layout is described. */
            size_t at = random_u64() % (round % 2 ? sizeof(struct mg_shm_header) : size);
            flipped[f] = at;
            bytes[at] = (unsigned char)random_u64();
        }
        size_t len = round % 7 == 0 ? (size_t)(random_u64() % size) : size;
        struct mg_shmdump d;
        char err[512];
        enum mg_shmdump_status st = mg_shmdump_from_bytes(&d, name, bytes, len, err, sizeof err);
        if (st != MG_SHMDUMP_OK) {
            cr_assert_eq(st, MG_SHMDUMP_NOT_UNDERSTOOD, "%s", err);
            continue;
        }
        accepted++;
        char *text = render_text(&d), *json = render_json(&d);
        assert_documented_shape(json, strlen(json));
        free(text);
        free(json);
        mg_shmdump_release(&d);
    }
    cr_assert_gt(accepted, 100, "only %d damaged copies were rendered", accepted);
    free(bytes);
    free(good);
    mg_segment_detach(&seg);
}

Test(shmdump, a_copy_from_a_mapping_that_shrank_fails_instead_of_crashing)
{
    const char *name = unique_name();
    long page = sysconf(_SC_PAGESIZE);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 2 * page), 0);
    void *map = mmap(NULL, (size_t)(2 * page), PROT_READ, MAP_SHARED, fd, 0);
    cr_assert_neq(map, MAP_FAILED);
    cr_assert_eq(ftruncate(fd, 0), 0);
    close(fd);
    struct sigaction before, after;
    sigaction(SIGBUS, NULL, &before);
    char *dst = malloc((size_t)(2 * page));
    cr_assert_eq(mg_shmdump_copy_mapping(dst, map, (size_t)(2 * page)), -1);
    sigaction(SIGBUS, NULL, &after);
    cr_assert_eq(after.sa_handler, before.sa_handler, "SIGBUS's handler was not put back");
    free(dst);
    munmap(map, (size_t)(2 * page));
}

/* --- finding the segment ------------------------------------------------------------------ */

Test(shmdump, name_comes_from_option_then_shm_name_then_listen)
{
    struct mg_shmdump_names n;
    char err[512];
    const struct env_pair both[] = {
        {"MESHGATE_SHM_NAME", "/from-env"}, {"MESHGATE_LISTEN", "10.0.0.1:81"}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names("/opt", table_lookup, (void *)both, NULL, &n, err, sizeof err), 0);
    cr_assert_eq(n.count, 1);
    cr_assert_str_eq(n.name[0], "/opt");
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)both, NULL, &n, err, sizeof err), 0);
    cr_assert_str_eq(n.name[0], "/from-env");
    cr_assert_str_eq(n.origin, "MESHGATE_SHM_NAME in the environment");

    const struct env_pair empty_name[] = {
        {"MESHGATE_SHM_NAME", ""}, {"MESHGATE_LISTEN", "10.0.0.1:81"}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)empty_name, NULL, &n, err, sizeof err),
        0);
    cr_assert_eq(n.count, 1);
    cr_assert_str_eq(n.name[0], "/meshgate-10.0.0.1-81");

    const struct env_pair nothing[] = {{NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)nothing, NULL, &n, err, sizeof err),
        0);
    cr_assert_str_eq(n.name[0], "/meshgate-127.0.0.1-8080");
    /* Never a MESHGATE_LISTEN that was not set (issue 27). */
    cr_assert(!strstr(n.origin, "MESHGATE_LISTEN="), "%s", n.origin);
    cr_assert(strstr(n.origin, "the default address 127.0.0.1:8080"), "%s", n.origin);
    cr_assert(strstr(n.origin, "looked in the environment only: MESHGATE_ENV_FILE is not set"),
              "%s", n.origin);
}

/* An environment file for the tests below, in a fresh directory; its path in path. */
static void write_env_file(char *path, size_t cap, const char *text)
{
    char dir[128];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(path, cap, "%s/meshgate.env", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

Test(shmdump, names_come_from_the_servers_environment_file_as_its_unit_reads_it)
{
    struct mg_shmdump_names n;
    char err[4096], file[256], unit_file[256], missing[300];
    write_env_file(file, sizeof file, "# the server's\nMESHGATE_LISTEN=10.0.0.7:8181\n");
    write_env_file(unit_file, sizeof unit_file, "MESHGATE_SHM_NAME=/from-unit-file\n");
    snprintf(missing, sizeof missing, "%s.missing", unit_file);

    /* MESHGATE_ENV_FILE names the file; it wins over the unit's default. */
    const struct env_pair named[] = {{"MESHGATE_ENV_FILE", file}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)named, unit_file, &n, err, sizeof err),
        0, "%s", err);
    cr_assert_str_eq(n.name[0], "/meshgate-10.0.0.7-8181");
    cr_assert(strstr(n.origin, "MESHGATE_LISTEN=10.0.0.7:8181 in "), "%s", n.origin);
    cr_assert(strstr(n.origin, file), "%s", n.origin);

    /* The environment wins over the file, as under systemd. */
    const struct env_pair both[] = {
        {"MESHGATE_ENV_FILE", file}, {"MESHGATE_LISTEN", "10.0.0.8:82"}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)both, NULL, &n, err, sizeof err), 0,
        "%s", err);
    cr_assert_str_eq(n.name[0], "/meshgate-10.0.0.8-82");
    cr_assert(strstr(n.origin, "MESHGATE_LISTEN=10.0.0.8:82 in the environment"), "%s", n.origin);

    /* Without MESHGATE_ENV_FILE: the unit's file when it exists (sudo meshgate-shm). */
    const struct env_pair nothing[] = {{NULL, NULL}};
    cr_assert_eq(mg_shmdump_resolve_names(NULL, table_lookup, (void *)nothing, unit_file, &n, err,
                                          sizeof err),
                 0, "%s", err);
    cr_assert_str_eq(n.name[0], "/from-unit-file");
    cr_assert(strstr(n.origin, unit_file), "%s", n.origin);
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)nothing, missing, &n, err, sizeof err),
        0, "%s", err);
    cr_assert_str_eq(n.name[0], "/meshgate-127.0.0.1-8080");
    cr_assert(strstr(n.origin, missing) && strstr(n.origin, "does not exist"), "%s", n.origin);
    cr_assert(!strstr(n.origin, "MESHGATE_LISTEN="), "%s", n.origin);

    /* Set and empty: no file at all. */
    const struct env_pair empty[] = {{"MESHGATE_ENV_FILE", ""}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)empty, unit_file, &n, err, sizeof err),
        0, "%s", err);
    cr_assert_str_eq(n.name[0], "/meshgate-127.0.0.1-8080");
    cr_assert(strstr(n.origin, "MESHGATE_ENV_FILE is empty"), "%s", n.origin);

    /* A file that cannot be read, or a bad value in it, is named. */
    const struct env_pair gone[] = {{"MESHGATE_ENV_FILE", missing}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)gone, NULL, &n, err, sizeof err), -1);
    cr_assert(strstr(err, missing) && strstr(err, "cannot read"), "%s", err);
    char bad[256];
    write_env_file(bad, sizeof bad, "MESHGATE_LISTEN=nonsense\n");
    const struct env_pair bad_value[] = {{"MESHGATE_ENV_FILE", bad}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)bad_value, NULL, &n, err, sizeof err),
        -1);
    cr_assert(strstr(err, "MESHGATE_LISTEN=nonsense: must be") && strstr(err, bad), "%s", err);
}

Test(shmdump, listen_forms_give_the_servers_names)
{
    struct mg_shmdump_names n;
    char err[512];
    const struct env_pair v6[] = {{"MESHGATE_LISTEN", "[::1]:9000"}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)v6, NULL, &n, err, sizeof err), 0);
    cr_assert_eq(n.count, 1);
    cr_assert_str_eq(n.name[0], "/meshgate-__1-9000");

    const struct env_pair any[] = {{"MESHGATE_LISTEN", ":9001"}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)any, NULL, &n, err, sizeof err), 0);
    cr_assert_eq(n.count, 3);
    cr_assert_str_eq(n.name[0], "/meshgate-any-9001");
    cr_assert_str_eq(n.name[1], "/meshgate-__-9001");
    cr_assert_str_eq(n.name[2], "/meshgate-0.0.0.0-9001");

    const struct env_pair long_v6[] = {{"MESHGATE_LISTEN", "[0:0::1]:9002"}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)long_v6, NULL, &n, err, sizeof err),
        0);
    cr_assert_eq(n.count, 2);
    cr_assert_str_eq(n.name[1], "/meshgate-__1-9002");

    char host[64];
    unsigned port;
    static const char *const bad[] = {"nope",      "1.2.3.4", "1.2.3.4:0", "1.2.3.4:65536",
                                      "[::1]9000", "a:b:80",  "host:80x",  "[]:80",
                                      "h/x:80",    ":"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(mg_shmdump_parse_listen(bad[i], host, sizeof host, &port), -1, "%s", bad[i]);
    const struct env_pair broken[] = {{"MESHGATE_LISTEN", "localhost"}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)broken, NULL, &n, err, sizeof err),
        -1);
    cr_assert(strstr(err, "MESHGATE_LISTEN=localhost: must be HOST:PORT"), "%s", err);
    const struct env_pair bad_name[] = {{"MESHGATE_SHM_NAME", "no-slash"}, {NULL, NULL}};
    cr_assert_eq(
        mg_shmdump_resolve_names(NULL, table_lookup, (void *)bad_name, NULL, &n, err, sizeof err),
        -1);
    cr_assert(strstr(err, "MESHGATE_SHM_NAME no-slash: must be \"/\""), "%s", err);
}

/* --- the binary --------------------------------------------------------------------------------
 */

Test(shmdump, tool_prints_the_report_and_exits_0)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    populate(&seg);
    struct run r = run_tool((const char *[]){"--name", name, NULL}, NULL);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.out, "\n  _H.\n"), "%s", r.out);
    cr_assert(strstr(r.out, "GET /api/nodes?limit=5 ("), "%s", r.out);
    cr_assert_str_eq(r.err, "");
    run_free(&r);
    mg_segment_detach(&seg);
}

Test(shmdump, tool_json_is_one_valid_object)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    populate(&seg);
    struct run r = run_tool((const char *[]){"-j", "-n", name, NULL}, NULL);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    size_t len = strlen(r.out);
    cr_assert(len > 0 && r.out[len - 1] == '\n');
    assert_documented_shape(r.out, len);
    cr_assert(strstr(r.out, "\"scoreboard\":\"_H.\""), "%s", r.out);
    run_free(&r);
    mg_segment_detach(&seg);
}

Test(shmdump, tool_finds_the_segment_from_the_servers_environment)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    char env[128];
    snprintf(env, sizeof env, "MESHGATE_SHM_NAME=%s", name);
    struct run r = run_tool(NULL, (const char *[]){env, "MESHGATE_LISTEN=garbage", NULL});
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    run_free(&r);
    mg_segment_detach(&seg);

    /* ":PORT": the server names its segment after the address it bound, "::" here. */
    unsigned port = 20000 + (unsigned)getpid() % 40000;
    char derived[64], listen[64];
    mg_config_default_shm_name("::", port, derived, sizeof derived);
    snprintf(made_names[made_count++], sizeof made_names[0], "%s", derived);
    make_segment(&seg, derived);
    snprintf(listen, sizeof listen, "MESHGATE_LISTEN=:%u", port);
    r = run_tool(NULL, (const char *[]){listen, "MESHGATE_SHM_NAME=", "MESHGATE_DB=/nope", NULL});
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.out, derived), "%s", r.out);
    run_free(&r);
    mg_segment_detach(&seg);
}

/* sudo meshgate-shm, as the man page has it: the server's environment file names the segment. */
Test(shmdump, tool_finds_the_segment_from_the_servers_environment_file)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    char file[256], text[256], setting[300];
    snprintf(text, sizeof text, "MESHGATE_DB=/nope\nMESHGATE_SHM_NAME=%s\n", name);
    write_env_file(file, sizeof file, text);
    snprintf(setting, sizeof setting, "MESHGATE_ENV_FILE=%s", file);
    struct run r = run_tool(NULL, (const char *[]){setting, NULL});
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.out, name), "%s", r.out);
    run_free(&r);
    mg_segment_detach(&seg);
}

Test(shmdump, tool_exits_1_naming_a_missing_segment)
{
    const char *name = unique_name();
    struct run r = run_tool((const char *[]){"--name", name, NULL}, NULL);
    cr_assert_eq(r.status, 1, "exit %d", r.status);
    cr_assert(strstr(r.err, name), "%s", r.err);
    cr_assert(strstr(r.err, "--name") && strstr(r.err, "MESHGATE_SHM_NAME"), "%s", r.err);
    cr_assert_str_eq(r.out, "");
    run_free(&r);

    r = run_tool(NULL, (const char *[]){"MESHGATE_LISTEN=127.0.0.1:1", NULL});
    cr_assert_eq(r.status, 1, "exit %d", r.status);
    cr_assert(strstr(r.err, "/meshgate-127.0.0.1-1 (from MESHGATE_LISTEN=127.0.0.1:1 in the "
                            "environment"),
              "%s", r.err);
    run_free(&r);

    /* Nothing set: where it looked, and no MESHGATE_LISTEN that was never set. */
    char file[256];
    write_env_file(file, sizeof file, "MESHGATE_DB=/nope\n");
    char setting[300];
    snprintf(setting, sizeof setting, "MESHGATE_ENV_FILE=%s", file);
    r = run_tool(NULL, (const char *[]){setting, NULL});
    cr_assert_eq(r.status, 1, "exit %d", r.status);
    cr_assert(strstr(r.err, "the default address 127.0.0.1:8080"), "%s", r.err);
    cr_assert(strstr(r.err, file), "%s", r.err);
    cr_assert(!strstr(r.err, "MESHGATE_LISTEN="), "%s", r.err);
    run_free(&r);
}

Test(shmdump, tool_exits_2_on_a_foreign_segment)
{
    const char *name = unique_name();
    char garbage[4096];
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (char)("not meshgate "[i % 13]);
    make_raw_segment(name, garbage, sizeof garbage);
    struct run r = run_tool((const char *[]){"--name", name, NULL}, NULL);
    cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "not a meshgate segment"), "%s", r.err);
    cr_assert(strstr(r.err, name), "%s", r.err);
    run_free(&r);
}

Test(shmdump, tool_exits_2_on_a_ten_byte_segment)
{
    const char *name = unique_name();
    make_raw_segment(name, "MESHGATE\1\0", 10);
    struct run r = run_tool((const char *[]){"--name", name, NULL}, NULL);
    cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "is 10 bytes") && strstr(r.err, "not a meshgate segment"), "%s", r.err);
    run_free(&r);

    const char *empty = unique_name();
    make_raw_segment(empty, "", 0);
    r = run_tool((const char *[]){"--name", empty, NULL}, NULL);
    cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    run_free(&r);
}

Test(shmdump, tool_exits_2_naming_both_layout_versions)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    seg.header->layout_version = 99;
    struct run r = run_tool((const char *[]){"--name", name, "--json", NULL}, NULL);
    cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    char want[96];
    snprintf(want, sizeof want, "layout version 99, this build understands %u",
             MG_SHM_LAYOUT_VERSION);
    cr_assert(strstr(r.err, want), "%s", r.err);
    cr_assert_str_eq(r.out, "");
    run_free(&r);

    seg.header->layout_version = MG_SHM_LAYOUT_VERSION;
    seg.header->total_size += 4096; /* claims more than there is */
    r = run_tool((const char *[]){"--name", name, NULL}, NULL);
    cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "does not match this build"), "%s", r.err);
    run_free(&r);
    mg_segment_detach(&seg);
}

Test(shmdump, tool_exits_3_when_the_segment_cannot_be_read)
{
    if (geteuid() == 0)
        cr_skip_test("root reads a mode-000 segment anyway");
    const char *name = unique_name();
    make_raw_segment(name, "x", 1);
    int fd = shm_open(name, O_RDONLY, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(fchmod(fd, 0), 0);
    close(fd);
    struct run r = run_tool((const char *[]){"--name", name, NULL}, NULL);
    cr_assert_eq(r.status, 3, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "Permission denied"), "%s", r.err);
    run_free(&r);
}

Test(shmdump, tool_exits_64_on_bad_usage_naming_the_option)
{
    static const struct {
        const char *args[4];
        const char *says;
    } cases[] = {
        {{"--bogus", NULL}, "unknown option --bogus"},
        {{"-x", NULL}, "unknown option -x"},
        {{"--watch", "0", NULL}, "--watch 0: must be a number of seconds from 0.1 to 3600"},
        {{"--watch", "abc", NULL}, "--watch abc: must be"},
        {{"--watch", "3601", NULL}, "--watch 3601: must be"},
        {{"--watch", "nan", NULL}, "--watch nan: must be"},
        {{"--watch", "1", "--count", "0"}, "--count 0: must be a whole number"},
        {{"--count", "2", NULL}, "--count 2: only together with --watch"},
        {{"--watch", NULL}, "--watch needs a value"},
        {{"--name", "relative", NULL}, "--name relative: must be \"/\""},
        {{"stray", NULL}, "unexpected argument stray"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct run r = run_tool(cases[i].args, NULL);
        cr_assert_eq(r.status, 64, "%s: exit %d", cases[i].args[0], r.status);
        cr_assert(strstr(r.err, cases[i].says), "expected \"%s\" in: %s", cases[i].says, r.err);
        run_free(&r);
    }
    struct run r = run_tool(NULL, (const char *[]){"MESHGATE_LISTEN=8080", NULL});
    cr_assert_eq(r.status, 64, "exit %d", r.status);
    cr_assert(strstr(r.err, "MESHGATE_LISTEN=8080"), "%s", r.err);
    run_free(&r);

    r = run_tool((const char *[]){"--help", NULL}, NULL);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "Exit codes: 0 ok; 1 no such segment; 2"), "%s", r.out);
    run_free(&r);
}

Test(shmdump, dumping_never_changes_the_segment)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    populate(&seg);
    mg_segment_set_state(&seg, MG_SERVER_RUNNING);
    unsigned char *before = malloc(seg.size);
    memcpy(before, seg.base, seg.size);
    struct stat st_before, st_after;
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    cr_assert_eq(stat(path, &st_before), 0);

    struct run r = run_tool((const char *[]){"--name", name, NULL}, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_free(&r);
    r = run_tool((const char *[]){"--name", name, "--json", NULL}, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_free(&r);
    r = run_tool((const char *[]){"--name", name, "--watch", "0.1", "--count", "2", NULL}, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_free(&r);

    cr_assert_eq(memcmp(before, seg.base, seg.size), 0, "the dump changed the segment");
    cr_assert_eq(stat(path, &st_after), 0);
    cr_assert_eq(st_after.st_size, st_before.st_size);
    cr_assert_eq(st_after.st_mode, st_before.st_mode);
    free(before);
    mg_segment_detach(&seg);
}

/* --- --watch ------------------------------------------------------------------------------------
 */

static int count_of(const char *text, const char *needle)
{
    if (!text)
        return 0;
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

Test(shmdump, watch_writes_count_reports_separated_when_not_a_terminal)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    int64_t start = mg_monotonic_ns();
    struct run r =
        run_tool((const char *[]){"--name", name, "--watch", "0.2", "--count", "3", NULL}, NULL);
    int64_t took_ms = (mg_monotonic_ns() - start) / MG_NS_PER_MS;
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_eq(count_of(r.out, "meshgate segment /"), 3, "%s", r.out);
    cr_assert_eq(count_of(r.out, "\n------------"), 2, "%s", r.out);
    cr_assert_eq(strchr(r.out, '\033'), NULL, "cleared a screen that is not a terminal");
    cr_assert(took_ms >= 380, "3 reports 0.2 s apart took %lld ms", (long long)took_ms);
    run_free(&r);

    r = run_tool((const char *[]){"--json", "--name", name, "-w", "0.1", "-c", "2", NULL}, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *second = strchr(r.out, '\n');
    cr_assert_not_null(second);
    assert_documented_shape(r.out, (size_t)(second - r.out));
    assert_documented_shape(second + 1, strlen(second + 1));
    run_free(&r);
    mg_segment_detach(&seg);
}

Test(shmdump, watch_stops_when_the_segment_is_gone_or_on_sigint)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    struct child c = start_tool((const char *[]){"--name", name, "--watch", "0.1", NULL}, NULL);
    struct output_wait two = {c.out_fd, "meshgate segment /", 2};
    cr_assert(mg_test_wait_until(output_has, &two, TOOL_CEILING_MS, 10),
              "no two reports within %d ms", TOOL_CEILING_MS);
    shm_unlink(name);
    struct run r = finish_tool(c, TOOL_CEILING_MS);
    cr_assert_eq(r.status, 1, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "is gone"), "%s", r.err);
    cr_assert_geq(count_of(r.out, "meshgate segment /"), 2, "%s", r.out);
    run_free(&r);
    mg_segment_detach(&seg);

    const char *again = unique_name();
    make_segment(&seg, again);
    c = start_tool((const char *[]){"--name", again, "--watch", "60", NULL}, NULL);
    /* Its handler is in place before the first report: SIGINT ends the 60 s sleep. */
    struct output_wait one = {c.out_fd, "meshgate segment /", 1};
    cr_assert(mg_test_wait_until(output_has, &one, TOOL_CEILING_MS, 10), "no report within %d ms",
              TOOL_CEILING_MS);
    kill(c.pid, SIGINT);
    r = finish_tool(c, TOOL_CEILING_MS);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_assert_eq(count_of(r.out, "meshgate segment /"), 1, "%s", r.out);
    run_free(&r);
    mg_segment_detach(&seg);
}

/* --- the result cache's entries ----------------------------------------------------------- */

/* Each entry that is not free is shown with its run of the pool: a stored body of three
 * pages, and a build that has no pages yet. */
Test(shmdump, the_cache_shows_each_entry_with_its_pages)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    struct mg_cache_view *v = &seg.cache;
    struct mg_cache_pin pin;
    uint64_t stored, building;
    int64_t now = mg_monotonic_ns();
    cr_assert_eq(mg_result_cache_look(v, getpid(), 0, "nodes|clock-skew", now, true, &pin, &stored),
                 MG_CACHE_CLAIMED);
    static char body[2 * MG_CACHE_PAGE + 10];
    mg_result_cache_store(v, getpid(), stored, body, sizeof body, now);
    cr_assert_eq(mg_result_cache_look(v, getpid(), 1, "paths|ab", now, true, &pin, &building),
                 MG_CACHE_CLAIMED);

    struct mg_shmdump d;
    char err[512];
    cr_assert_eq(mg_shmdump_take(&d, name, err, sizeof err), MG_SHMDUMP_OK, "%s", err);
    char *text = render_text(&d), *json = render_json(&d);
    cr_expect(strstr(text, "    cache pages: 3 of 16 used (4096 bytes each), a body of at most "
                           "16384 bytes is stored\n"),
              "%s", text);
    cr_expect(strstr(text, "      entry 0: ready, pages 0-2 (3), 8202 bytes, nodes|clock-skew, "
                           "stored "),
              "%s", text);
    char want[160];
    snprintf(want, sizeof want,
             "      entry 1: building, no pages, paths|ab, worker 1, pid %d, for ", (int)getpid());
    cr_expect(strstr(text, want), "%s", text);
    assert_documented_shape(json, strlen(json));
    cr_expect(strstr(json, "\"pages\":16,\"pages_used\":3,\"max_body_bytes\":16384,\"table\":["
                           "{\"entry\":0,\"state\":\"ready\",\"key\":\"nodes|clock-skew\","
                           "\"first_page\":0,\"pages\":3,\"bytes\":8202,\"builder_pid\":null,"),
              "%s", json);
    snprintf(want, sizeof want,
             "{\"entry\":1,\"state\":\"building\",\"key\":\"paths|ab\",\"first_page\":0,"
             "\"pages\":0,\"bytes\":0,\"builder_pid\":%d,",
             (int)getpid());
    cr_expect(strstr(json, want), "%s", json);
    cr_expect(strstr(json, "\"idle_ms\":null,\"expires_in_ms\":null,\"pins\":0}]"), "%s", json);
    free(text);
    free(json);
    mg_shmdump_release(&d);
    mg_result_cache_abandon(v, getpid(), building);
    mg_segment_detach(&seg);
}

/* The fair hand-off (shm/gate_fifo.h) seen from outside: the line's round, and each permit's and
 * place's round and owner, so an operator can tell why a later arrival is served first. */
Test(shmdump, the_anonymous_line_shows_each_places_round_and_owner)
{
    const char *name = unique_name();
    struct mg_segment seg;
    make_segment(&seg, name);
    struct mg_fifo_gate *g = seg.anon;
    mg_fifo_gate_configure(g, getpid(), 1, 8, 60 * MG_NS_PER_SEC);
    uint8_t a[MG_ADDR_BYTES], b[MG_ADDR_BYTES];
    cr_assert(mg_addr_parse("127.0.0.1", 9, a));
    cr_assert(mg_addr_parse("127.0.0.2", 9, b));
    mg_client_key(a, a);
    mg_client_key(b, b);
    uint64_t token, unused, ticket[3];
    int place[3];
    /* 127.0.0.1 takes the permit (round 0) and two places (rounds 1 and 2); 127.0.0.2 then
     * joins in the line's round, 0, ahead of both. */
    cr_assert_eq(mg_fifo_gate_join_owned(g, getpid(), 0, "a|/api/x", true, a, 6, &token, &place[0],
                                         &ticket[0]),
                 MG_FIFO_ADMITTED);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(mg_fifo_gate_join_owned(g, getpid(), 0, "a|/api/x", true, a, 6, &unused,
                                             &place[i], &ticket[i]),
                     MG_FIFO_QUEUED);
    cr_assert_eq(mg_fifo_gate_join_owned(g, getpid(), 1, "b|/api/y", false, b, 6, &unused,
                                         &place[2], &ticket[2]),
                 MG_FIFO_QUEUED);

    struct mg_shmdump d;
    char err[512];
    cr_assert_eq(mg_shmdump_take(&d, name, err, sizeof err), MG_SHMDUMP_OK, "%s", err);
    char *text = render_text(&d), *json = render_json(&d);
    cr_expect(strstr(text, " waiting of 8 places, wait 60000 ms, peak 1, round 0\n"), "%s", text);
    char want[200];
    const char *const lines[] = {"holder    worker 0, pid %d, a|/api/x, for ",
                                 "waiter    worker 0, pid %d, a|/api/x, for ",
                                 "waiter    worker 1, pid %d, b|/api/y, for "};
    const char *const tails[] = {", round 0, owner 127.0.0.1\n", ", round 1, owner 127.0.0.1\n",
                                 ", round 0, owner 127.0.0.2, unready\n"};
    for (int i = 0; i < 3; i++) {
        snprintf(want, sizeof want, lines[i], (int)getpid());
        const char *at = strstr(text, want);
        cr_assert(at, "no line %s in\n%s", want, text);
        const char *end = strchr(at, '\n');
        cr_expect(end && strstr(at, tails[i]) && strstr(at, tails[i]) < end + 1, "%s:\n%s",
                  tails[i], text);
    }
    cr_expect(strstr(text, ", round 2, owner 127.0.0.1\n"), "%s", text);
    assert_documented_shape(json, strlen(json));
    cr_expect(strstr(json, "\"peak\":1,\"round\":0,\"holders\":[{\"worker\":0,"), "%s", json);
    cr_expect(strstr(json, "\"round\":0,\"owner\":\"127.0.0.1\",\"ready\":true}],\"waiters\":"),
              "%s", json);
    cr_expect(strstr(json, "\"round\":0,\"owner\":\"127.0.0.2\",\"ready\":false}"), "%s", json);
    cr_expect(strstr(json, "\"round\":2,\"owner\":\"127.0.0.1\",\"ready\":true}"), "%s", json);
    free(text);
    free(json);
    mg_shmdump_release(&d);
    for (int i = 0; i < 3; i++)
        mg_fifo_gate_cancel(g, getpid(), place[i], ticket[i]);
    mg_fifo_gate_release(g, getpid(), token);
    mg_segment_detach(&seg);
}
