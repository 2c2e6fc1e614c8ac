/* SPDX-License-Identifier: ISC */
/*
 * What an operator meets on the first day, outside the server's behaviour: the man pages
 * name every route of the route table and describe every gate the segment holds (the gates
 * are read from a real meshgate-shm --json, so a new gate without its pages fails here),
 * `meshgate --version` names the commit, and meshgate-fixture shows progress on a terminal
 * and nothing else when its output is not one.
 */
#include "build_info.h"
#include "harness.h"
#include "jsoncheck.h"
#include "router.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(operator, .timeout = 60);

#define MESHGATE_8 MESHGATE_SOURCE_DIR "/etc/meshgate.8"
#define MESHGATE_SHM_8 MESHGATE_SOURCE_DIR "/etc/meshgate-shm.8"

/* A line of the page that starts with start and, after it, holds also (when not NULL). */
static bool has_line(const char *page, const char *start, const char *also, const char *next)
{
    size_t n = strlen(start);
    for (const char *line = page; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        if (len >= n && strncmp(line, start, n) == 0 && (!next || strchr(next, line[n])) &&
            (!also || (memmem(line + n, len - n, also, strlen(also)) != NULL)))
            return true;
        line = eol ? eol + 1 : NULL;
    }
    return false;
}

Test(operator, meshgate_8_lists_every_route_of_the_route_table)
{
    char *page = mg_test_read_file(MESHGATE_8);
    cr_assert(page, "cannot read %s", MESHGATE_8);
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        /* A route of another method: ".It Li POST /api/decode" */
        const char *tmpl = mg_route_path(i), *method = mg_route_method(i);
        char start[128], suffix[128] = "";
        const char *param = strchr(tmpl, ':');
        if (param) {
            /* "/api/nodes/:pubkey/reach": ".It Li GET /api/nodes/ Ns Ar PUBKEY Ns Li /reach" */
            snprintf(start, sizeof start, ".It Li %s %.*s", method, (int)(param - tmpl), tmpl);
            const char *rest = strchr(param, '/');
            snprintf(suffix, sizeof suffix, "%s", rest ? rest : "");
            cr_expect(has_line(page, start, suffix[0] ? suffix : NULL, " "),
                      "meshgate.8 has no \".It Li GET\" entry for %s", tmpl);
        } else {
            snprintf(start, sizeof start, ".It Li %s %s", method, tmpl);
            cr_expect(has_line(page, start, NULL, "?\n"),
                      "meshgate.8 has no \"%s\" entry in ENDPOINTS", start);
        }
    }
    cr_expect(strstr(page, ".It Li GET /metrics\n") && strstr(page, ".It Li GET /server-status\n"));
    free(page);
}

/* Each gate key of meshgate-shm --json, and the section of meshgate(8) that describes it. */
static const struct {
    const char *key;
    const char *section;
} gate_sections[] = {
    {"perf_mem", ".Ss The diagnostic gate\n"}, {"reach_cold", ".Ss The cold-scan gate\n"},
    {"anon_line", ".Ss The anonymous line\n"}, {"anon_rate", ".Ss The per-client rate limit\n"},
    {"upstream", ".Ss The upstream gate\n"},   {"conn_cap", ".Ss The connection cap\n"},
};

Test(operator, both_man_pages_describe_every_gate_the_segment_holds)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    char cmd[512];
    static char out[1 << 17];
    snprintf(cmd, sizeof cmd, "'%s/meshgate-shm' --json --name '%s' 2>&1", MESHGATE_BUILD_DIR,
             s.shm_name);
    int rc = mg_test_shell(cmd, out, sizeof out);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
    cr_assert_eq(rc, 0, "meshgate-shm: %s", out);
    const char *gates = json_at(json_ws(out), "gates");
    cr_assert(gates && *gates == '{', "no gates in %s", out);

    char *page = mg_test_read_file(MESHGATE_8), *shm_page = mg_test_read_file(MESHGATE_SHM_8);
    cr_assert(page && shm_page);
    const char *gates_section = strstr(page, ".Sh GATES\n");
    cr_assert(gates_section, "meshgate.8 has no GATES section");
    unsigned seen = 0;
    struct json_member m;
    json_members(gates, &m);
    while (json_member_next(&m)) {
        seen++;
        const char *section = NULL;
        for (size_t i = 0; i < sizeof gate_sections / sizeof gate_sections[0]; i++)
            if (strcmp(gate_sections[i].key, m.key) == 0)
                section = gate_sections[i].section;
        cr_expect(section,
                  "a gate \"%s\" this test does not know: describe it in meshgate(8) "
                  "GATES and meshgate-shm(8), and add it to gate_sections",
                  m.key);
        if (section)
            cr_expect(strstr(gates_section, section), "meshgate.8 GATES has no %s", section);
        char shape[64], item[64];
        snprintf(shape, sizeof shape, "\"%s\": {", m.key);
        snprintf(item, sizeof item, ".It Li %s ,", m.key);
        cr_expect(strstr(shm_page, shape), "meshgate-shm.8: the JSON shape has no %s", shape);
        cr_expect(strstr(shm_page, item), "meshgate-shm.8: \"The gates\" has no %s", item);
    }
    cr_expect_eq(seen, sizeof gate_sections / sizeof gate_sections[0], "%u gates", seen);
    free(page);
    free(shm_page);
}

Test(operator, version_names_the_commit)
{
    char cmd[512], out[512];
    snprintf(cmd, sizeof cmd, "'%s/meshgate' --version", MESHGATE_BUILD_DIR);
    cr_assert_eq(mg_test_shell(cmd, out, sizeof out), 0);
    char want[128];
    snprintf(want, sizeof want, "(commit %s, built ", mg_build_commit());
    cr_expect(strncmp(out, "meshgate ", 9) == 0 && strstr(out, want), "%s", out);
    const char *c = mg_build_commit();
    cr_expect(strcmp(c, "unknown") == 0 || (strlen(c) == 12 && strspn(c, "0123456789abcdef") == 12),
              "commit %s", c);
}

Test(operator, fixture_shows_progress_on_a_terminal_and_stays_quiet_otherwise)
{
    char dir[128], cmd[2048];
    static char out[1 << 16];
    mg_test_tmpdir(dir, sizeof dir);
    /* Not a terminal: stderr holds nothing, stdout the one summary line. */
    snprintf(cmd, sizeof cmd,
             "'%s/meshgate-fixture' --out '%s/a.db' --observations 20000 2>'%s/err' >'%s/out'; "
             "cat '%s/err'; echo ===; cat '%s/out'",
             MESHGATE_BUILD_DIR, dir, dir, dir, dir, dir);
    cr_assert_eq(mg_test_shell(cmd, out, sizeof out), 0);
    cr_expect(strncmp(out, "===\nmeshgate-fixture: wrote ", 28) == 0, "%s", out);
    cr_expect_null(strchr(out, '\r'), "%s", out);

    if (access("/usr/bin/script", X_OK) != 0) {
        mg_test_rmdir(dir);
        cr_skip_test("script(1) is missing (bsdutils): the terminal half was not checked");
    }
    /* On a terminal (script(1) gives it one): the progress line, redrawn, then cleared. */
    snprintf(cmd, sizeof cmd,
             "script -qec \"'%s/meshgate-fixture' --out '%s/b.db' --observations 20000\" /dev/null",
             MESHGATE_BUILD_DIR, dir);
    cr_assert_eq(mg_test_shell(cmd, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "\rmeshgate-fixture: ") == NULL || strstr(out, "\r\033[K"), "%s", out);
    cr_expect(strstr(out, "observations written, building indexes"), "%s", out);
    cr_expect(strstr(out, "meshgate-fixture: wrote "), "%s", out);
    mg_test_rmdir(dir);
}

/* The licence is ISC (LICENSE), and every source file says so in an SPDX line at its top. */
static int unlicensed_files(const char *dir, char *list, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && for f in $(find server shm workers tools tests fuzz -path fuzz/corpus "
             "-prune -o \\( -name '*.[ch]' -o -name '*.sh' \\) -print) GNUmakefile; do "
             "head -3 \"$f\" | grep -q 'SPDX-License-Identifier: ISC' || echo \"$f\"; done",
             dir);
    return mg_test_shell(cmd, list, cap);
}

Test(operator, every_source_file_names_the_isc_licence)
{
    char *licence = mg_test_read_file(MESHGATE_SOURCE_DIR "/LICENSE");
    cr_assert(licence, "no LICENSE file");
    cr_expect(strncmp(licence, "ISC License", 11) == 0, "LICENSE is not the ISC licence");
    free(licence);
    char missing[4096];
    cr_assert_eq(unlicensed_files(MESHGATE_SOURCE_DIR, missing, sizeof missing), 0);
    cr_expect_str_empty(missing, "files without an SPDX-License-Identifier: ISC line:\n%s",
                        missing);
}
