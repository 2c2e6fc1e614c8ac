/* SPDX-License-Identifier: ISC */
/*
 * tools/include-check.sh, the include graph between folders that make check prints: it passes
 * on this tree, and on small made-up trees it fails on an upward include, on an endpoint
 * including another endpoint, on a circle and on a stale line of its list of known includes.
 */
#include "harness.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

TestSuite(include_check, .timeout = 60);

static char out[1 << 16];

/* Runs the check on root; its exit status, its output in out. */
static int check(const char *root)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "sh '%s/tools/include-check.sh' '%s' 2>&1", MESHGATE_SOURCE_DIR,
             root);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t len = 0, n;
    while (len + 1 < sizeof out && (n = fread(out + len, 1, sizeof out - 1 - len, p)) > 0)
        len += n;
    out[len] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Writes root/path (its folders made) with text. */
static void put(const char *root, const char *path, const char *text)
{
    char full[512];
    snprintf(full, sizeof full, "%s/%s", root, path);
    for (char *s = strchr(full + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(full, 0700);
        *s = '/';
    }
    FILE *f = fopen(full, "w");
    cr_assert(f, "%s", full);
    fputs(text, f);
    fclose(f);
}

/* A tree in the order: server above the rooms above shm, tools above all. */
static void clean_tree(char *root, size_t cap)
{
    mg_test_tmpdir(root, cap);
    cr_assert(root[0]);
    put(root, "server/main.c", "#include \"dispatch.h\"\n#include \"segment.h\"\n");
    put(root, "workers/api/ep_nodes.c", "#include \"ep_nodes.h\"\n#include \"dispatch.h\"\n");
    put(root, "workers/api/ep_nodes.h", "#include \"buf.h\"\n");
    put(root, "workers/api/routes.c", "#include \"ep_nodes.h\"\n");
    put(root, "workers/core/dispatch.h", "#include \"buf.h\"\n");
    put(root, "workers/core/dispatch.c", "#include \"dispatch.h\"\n#include \"db.h\"\n");
    put(root, "workers/core/buf.h", "#include <stddef.h>\n");
    put(root, "workers/data/db.h", "#include \"segment.h\"\n");
    put(root, "workers/data/db.c", "#include \"db.h\"\n");
    put(root, "shm/segment.h", "#include <stdint.h>\n");
    put(root, "tools/fixture.c", "#include \"db.h\"\n#include \"main.c\"\n");
    put(root, "tests/test_db.c", "#include \"db.h\"\n#include \"fixture.h\"\n");
}

Test(include_check, this_tree_has_no_upward_include_and_no_circle)
{
    cr_assert_eq(check(MESHGATE_SOURCE_DIR), 0, "%s", out);
    cr_assert(strstr(out, "folder graph"), "%s", out);
}

Test(include_check, a_tree_in_the_order_passes_and_its_graph_is_printed)
{
    char root[128];
    clean_tree(root, sizeof root);
    cr_assert_eq(check(root), 0, "%s", out);
    cr_assert(strstr(out, "workers/core       -> workers/data          1"), "%s", out);
    cr_assert(strstr(out, "server             -> shm                   1"), "%s", out);
}

Test(include_check, an_upward_include_fails_and_is_named)
{
    char root[128];
    clean_tree(root, sizeof root);
    put(root, "workers/data/db.c", "#include \"db.h\"\n#include \"dispatch.h\"\n");
    put(root, "shm/segment.c", "#include \"segment.h\"\n#include \"main.c\"\n");
    put(root, "workers/core/buf.c", "#include \"buf.h\"\n#include \"fixture.c\"\n");
    cr_assert_eq(check(root), 1, "%s", out);
    cr_assert(strstr(out, "upward include: workers/data/db.c:2 includes workers/core/dispatch.h"),
              "%s", out);
    cr_assert(strstr(out, "upward include: shm/segment.c:2 includes server/main.c"), "%s", out);
    cr_assert(strstr(out, "upward include: workers/core/buf.c:2 includes tools/fixture.c"), "%s",
              out);
}

Test(include_check, an_endpoint_including_another_endpoint_fails)
{
    char root[128];
    clean_tree(root, sizeof root);
    put(root, "workers/api/ep_packets.c", "#include \"ep_nodes.h\"\n");
    cr_assert_eq(check(root), 1, "%s", out);
    cr_assert(strstr(out, "endpoint includes another endpoint: workers/api/ep_packets.c:1 "
                          "includes workers/api/ep_nodes.h"),
              "%s", out);
}

Test(include_check, modules_that_include_each_other_fail_as_a_circle)
{
    char root[128];
    clean_tree(root, sizeof root);
    /* db.c uses region_map.h, region_map.c uses process_table.h, process_table.c uses db.h:
     * no header includes another in a loop, yet the three modules do. */
    put(root, "workers/data/db.c", "#include \"db.h\"\n#include \"region_map.h\"\n");
    put(root, "workers/data/region_map.h", "");
    put(root, "workers/data/region_map.c", "#include \"process_table.h\"\n");
    put(root, "workers/data/process_table.h", "");
    put(root, "workers/data/process_table.c", "#include \"db.h\"\n");
    cr_assert_eq(check(root), 1, "%s", out);
    cr_assert(strstr(out, "circle: "), "%s", out);
    const char *c = strstr(out, "circle: ");
    cr_assert(c && strstr(c, "workers/data/db") && strstr(c, "workers/data/region_map") &&
                  strstr(c, "workers/data/process_table"),
              "%s", out);
}

Test(include_check, a_listed_include_is_counted_and_a_stale_line_fails)
{
    char root[128];
    clean_tree(root, sizeof root);
    put(root, "workers/data/db.c", "#include \"db.h\"\n#include \"dispatch.h\"\n");
    put(root, "tools/include-check.allow",
        "# known\nworkers/data/db.c workers/core/dispatch.h  # data calls dispatch\n");
    cr_assert_eq(check(root), 0, "%s", out);
    cr_assert(strstr(out, "1 include(s) still to untangle"), "%s", out);
    put(root, "workers/data/db.c", "#include \"db.h\"\n");
    cr_assert_eq(check(root), 1, "%s", out);
    cr_assert(strstr(out, "workers/data/db.c no longer includes workers/core/dispatch.h"), "%s",
              out);
}

Test(include_check, two_headers_of_one_name_on_the_include_path_fail)
{
    char root[128];
    clean_tree(root, sizeof root);
    put(root, "workers/data/buf.h", "");
    cr_assert_eq(check(root), 1, "%s", out);
    cr_assert(strstr(out, "two headers named buf.h"), "%s", out);
}
