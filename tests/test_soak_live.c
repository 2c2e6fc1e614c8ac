/* SPDX-License-Identifier: ISC */
/*
 * tools/soak-live.sh in its short form (docs/benchmarks.md, "Soak beside a live writer"):
 * 4 workers serve every native route beside a writer shaped like CoreScope's ingestor, with
 * kill -9 and SIGHUP now and then, and not one 5xx or SQLite error may come. Twice: as is
 * (the writer's closes deleted the -wal and -shm under workers that had lost their lock:
 * thousands of "database disk image is malformed" within a minute), and with a connection
 * fault injected into every 25th request, which the heal must answer (workers/data/db.h).
 */
#include "harness.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

TestSuite(soak_live, .timeout = 300);

static char out[1 << 16];

static int soak(const char *env)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("the soak runs in the build without sanitizers");
#endif
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && { MESHGATE_BUILD='%s' WORKERS=4 THREADS=4 OBSERVATIONS=20000 "
             "KILL_EVERY=15 HUP_EVERY=30 %s timeout 250 tools/soak-live.sh 2>&1; "
             "echo \"soak-live exit $?\"; } | tail -c 60000",
             MESHGATE_SOURCE_DIR, MESHGATE_BUILD_DIR, env);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    size_t len = fread(out, 1, sizeof out - 1, p);
    out[len] = '\0';
    pclose(p);
    /* The script's own status (a pipeline's is its last command's, tail's). */
    const char *exit_line = strstr(out, "soak-live exit ");
    return exit_line ? atoi(exit_line + strlen("soak-live exit ")) : -1;
}

Test(soak_live, no_5xx_and_no_sqlite_error_beside_a_live_writer)
{
    int rc = soak("SOAK_SECONDS=70");
    cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, " 0 5xx,") && strstr(out, "SQLite errors in the log 0;"), "%s", out);
}

Test(soak_live, injected_connection_faults_are_healed)
{
    int rc = soak("SOAK_SECONDS=70 INJECT_EVERY=25");
    cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, " 0 5xx,") && strstr(out, "unhealed 0;"), "%s", out);
}
