/* SPDX-License-Identifier: ISC */
/*
 * GET /server-status: the live page for people, checked as HTML and in a real headless
 * Chromium (from Debian's packages; make check installs it): it loads, shows the live
 * scoreboard, and logs no console error.
 */
#include "harness.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(status, .timeout = 90);

#define CHROMIUM "/usr/bin/chromium"

static int scoreboard_chars(const char *html)
{
    const char *p = strstr(html, "<pre id=\"scoreboard\">");
    if (!p)
        return -1;
    p += strlen("<pre id=\"scoreboard\">");
    int n = 0;
    while (*p && *p != '<') {
        if (!strchr("._SRHWKGD", *p))
            return -2;
        n++, p++;
    }
    return n;
}

/* Occurrences of needle inside the element that starts with `from` (up to its </table>). */
static int count_in(const char *hay, const char *from, const char *needle)
{
    const char *start = strstr(hay, from);
    const char *end = start ? strstr(start, "</table>") : NULL;
    int n = 0;
    for (const char *p = start ? strstr(start, needle) : NULL; p && p < end;
         p = strstr(p + 1, needle))
        n++;
    return n;
}

Test(status, page_shows_scoreboard_gates_rates_and_routes)
{
    const char *env[] = {"MESHGATE_WORKERS=3", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r));
    mg_test_response_free(&r);
    cr_assert(mg_test_get(s.port, "/server-status", NULL, &r));
    cr_expect_eq(r.status, 200);
    char v[128];
    cr_expect(mg_test_header(&r, "Content-Type", v, sizeof v) &&
                  strcmp(v, "text/html; charset=utf-8") == 0,
              "%s", v);
    cr_expect_eq(scoreboard_chars(r.body), 3, "%s", r.body);
    cr_expect(strstr(r.body, "<meta http-equiv=\"refresh\" content=\"2\">"));
    cr_expect_eq(count_in(r.body, "<table id=\"workers\">", "<tr><td>"), 3, "%s", r.body);
    cr_expect_eq(count_in(r.body, "<table id=\"gates\">", "<tr><td>"), 3, "%s", r.body);
    cr_expect(strstr(r.body, "cold reach builds</td><td>2</td>"), "%s", r.body);
    cr_expect(strstr(r.body, "anonymous heavy requests</td><td>1</td>"), "%s", r.body);
    cr_expect(strstr(r.body, "per-client limit: 300 a minute, burst 30"), "%s", r.body);
    cr_expect(strstr(r.body, "memory breakdown"), "%s", r.body);
    cr_expect(strstr(r.body, "<td>/api/healthz</td><td>1</td>"), "%s", r.body);
    mg_test_response_free(&r);
    mg_test_server_stop(&s, 5000);
}

/* Runs Chromium headless on url: its DOM into dom, its log into log; false on failure. */
static bool chromium_dump(const char *url, char *dom, size_t dom_cap, char *log, size_t log_cap)
{
    char dir[128], profile[160], dom_path[160], log_path[160];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(profile, sizeof profile, "%s/profile", dir);
    snprintf(dom_path, sizeof dom_path, "%s/dom.html", dir);
    snprintf(log_path, sizeof log_path, "%s/chromium.log", dir);
    char user_data[200];
    snprintf(user_data, sizeof user_data, "--user-data-dir=%s", profile);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int out = open(dom_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(out, 1);
        dup2(err, 2);
        execl(CHROMIUM, "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
              "--no-first-run", "--disable-background-networking", "--disable-component-update",
              "--disable-sync", user_data, "--enable-logging=stderr", "--v=0", "--dump-dom", url,
              (char *)NULL);
        _exit(127);
    }
    int status = -1;
    int64_t give_up = mg_test_now_ms() + 60000;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (mg_test_now_ms() > give_up) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        mg_test_sleep_ms(20);
    }
    FILE *f = fopen(dom_path, "r");
    size_t n = f ? fread(dom, 1, dom_cap - 1, f) : 0;
    dom[n] = '\0';
    if (f)
        fclose(f);
    f = fopen(log_path, "r");
    n = f ? fread(log, 1, log_cap - 1, f) : 0;
    log[n] = '\0';
    if (f)
        fclose(f);
    mg_test_rmdir(dir);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

Test(status, a_real_browser_renders_the_live_scoreboard_without_console_errors)
{
    if (access(CHROMIUM, X_OK) != 0)
        cr_skip_test(CHROMIUM " is not installed (make check installs Debian's chromium)");
    const char *env[] = {"MESHGATE_WORKERS=4", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/server-status", s.port);
    static char dom[1 << 20], log[1 << 20];
    bool ok = chromium_dump(url, dom, sizeof dom, log, sizeof log);
    cr_assert(ok, "chromium failed; its log:\n%s", log);
    cr_expect(strstr(dom, "<h1>meshgate status</h1>"), "%s", dom);
    cr_expect_eq(scoreboard_chars(dom), 4, "the rendered scoreboard: %s", dom);
    /* The page asked for itself: at least one worker was handling it. */
    cr_expect(strstr(dom, "<td>GET /server-status"), "%s", dom);
    cr_expect_null(strstr(log, ":CONSOLE"), "console output: %s", log);
    cr_expect_null(strstr(log, "Uncaught"), "%s", log);
    cr_expect_null(strstr(log, "Failed to load resource"), "%s", log);
    mg_test_server_stop(&s, 5000);
}

/* ---- the admin pages: private by default ------------------------------------------------- */

static char keys_dir[128], keys_setting[300];

static void make_keys(void)
{
    mg_test_tmpdir(keys_dir, sizeof keys_dir);
    char path[200];
    snprintf(path, sizeof path, "%s/keys", keys_dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("ops alpha-0123456789abcdef\n", f);
    fclose(f);
    chmod(path, 0600);
    snprintf(keys_setting, sizeof keys_setting, "MESHGATE_API_KEYS_FILE=%s", path);
}

static void remove_keys(void)
{
    mg_test_rmdir(keys_dir);
}

#define SIGNED_IN "Authorization: Bearer alpha-0123456789abcdef\r\n"

static int status_of(int port, const char *target, const char *headers, char *body, size_t cap)
{
    struct mg_test_response r;
    if (!mg_test_get(port, target, headers, &r))
        return -1;
    if (body)
        snprintf(body, cap, "%s", r.body);
    int status = r.status;
    mg_test_response_free(&r);
    return status;
}

Test(status, admin_pages_answer_loopback_by_default)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    cr_expect_eq(status_of(s.port, "/server-status", NULL, NULL, 0), 200);
    cr_expect_eq(status_of(s.port, "/metrics", NULL, NULL, 0), 200);
    mg_test_server_stop(&s, 5000);
}

Test(status, admin_pages_are_404_outside_the_admin_networks_unless_signed_in, .init = make_keys,
     .fini = remove_keys)
{
    const char *env[] = {keys_setting, "MESHGATE_ADMIN_NETWORKS=10.0.0.0/8", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    char missing[256], body[256];
    cr_expect_eq(status_of(s.port, "/no-such-page", NULL, missing, sizeof missing), 404);
    /* As if it did not exist: the same answer as a path that does not. */
    cr_expect_eq(status_of(s.port, "/server-status", NULL, body, sizeof body), 404);
    cr_expect_str_eq(body, missing);
    cr_expect_eq(status_of(s.port, "/metrics", NULL, body, sizeof body), 404);
    cr_expect_str_eq(body, missing);
    cr_expect_eq(status_of(s.port, "/metrics", "X-API-Key: alpha-0123456789abcdef\r\n", NULL, 0),
                 200);
    cr_expect_eq(status_of(s.port, "/server-status", SIGNED_IN, NULL, 0), 200);
    cr_expect_eq(status_of(s.port, "/api/perf", NULL, NULL, 0), 200, "the Perf page's source");
    cr_expect_eq(status_of(s.port, "/api/healthz", NULL, NULL, 0), 200);
    mg_test_server_stop(&s, 5000);

    /* Empty: signed-in clients only, even from loopback. */
    const char *none[] = {keys_setting, "MESHGATE_ADMIN_NETWORKS=", NULL};
    cr_assert(mg_test_server_start(&s, NULL, none));
    cr_expect_eq(status_of(s.port, "/metrics", NULL, NULL, 0), 404);
    cr_expect_eq(status_of(s.port, "/metrics", SIGNED_IN, NULL, 0), 200);
    mg_test_server_stop(&s, 5000);
}

Test(status, a_forwarded_client_is_an_admin_only_when_it_is_in_the_admin_networks)
{
    /* A proxy on loopback: the client it names decides, never the proxy's own address. */
    const char *env[] = {"MESHGATE_TRUSTED_PROXIES=127.0.0.1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    cr_expect_eq(status_of(s.port, "/metrics", NULL, NULL, 0), 200, "the proxy's own request");
    cr_expect_eq(status_of(s.port, "/metrics", "X-Forwarded-For: 198.51.100.2\r\n", NULL, 0), 404);
    cr_expect_eq(status_of(s.port, "/server-status", "X-Forwarded-For: 198.51.100.2\r\n", NULL, 0),
                 404);
    cr_expect_eq(status_of(s.port, "/metrics", "X-Forwarded-For: 127.0.0.2\r\n", NULL, 0), 200);
    mg_test_server_stop(&s, 5000);
    /* Not trusted: the header is the client's own word, and it makes no one an admin or not. */
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    cr_expect_eq(status_of(s.port, "/metrics", "X-Forwarded-For: 198.51.100.2\r\n", NULL, 0), 200);
    mg_test_server_stop(&s, 5000);
    const char *far[] = {"MESHGATE_ADMIN_NETWORKS=10.0.0.0/8", NULL};
    cr_assert(mg_test_server_start(&s, NULL, far));
    cr_expect_eq(status_of(s.port, "/metrics", "X-Forwarded-For: 10.1.2.3\r\n", NULL, 0), 404);
    mg_test_server_stop(&s, 5000);
}

Test(status, api_perf_names_the_clients_in_the_line_to_admins_only, .init = make_keys,
     .fini = remove_keys)
{
    const char *env[] = {keys_setting, "MESHGATE_ADMIN_NETWORKS=10.0.0.0/8",
                         "MESHGATE_TEST_HOOKS=park", "MESHGATE_WORKERS=3", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    /* An anonymous heavy request holds a permit of the line for a while. */
    int held = mg_test_connect(s.port);
    cr_assert_geq(held, 0);
    const char *req = "GET /api/packets?limit=1&expand=observations HTTP/1.1\r\nHost: "
                      "t\r\nX-Test-Hold-Ms: 1500\r\n"
                      "Connection: close\r\n\r\n";
    cr_assert(mg_test_send(held, req, strlen(req)));
    mg_test_sleep_ms(200);
    static char body[1 << 16];
    cr_expect_eq(status_of(s.port, "/api/perf", NULL, body, sizeof body), 200);
    cr_expect(strstr(body, "\"holders\":[{\"pid\":"), "no holder: %s", body);
    cr_expect(strstr(body, "\"key\":\"hidden\""), "%s", body);
    cr_expect_null(strstr(body, "127.0.0.1"), "a client's address: %s", body);
    cr_expect_eq(status_of(s.port, "/api/perf", SIGNED_IN, body, sizeof body), 200);
    cr_expect(strstr(body, "\"key\":\"127.0.0.1 /api/packets\""), "%s", body);
    struct mg_test_response r;
    cr_expect(mg_test_read_response(held, &r, false, 5000));
    cr_expect_eq(r.status, 200);
    mg_test_response_free(&r);
    close(held);
    mg_test_server_stop(&s, 5000);
}
