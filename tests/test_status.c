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
