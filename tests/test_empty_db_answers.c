/* SPDX-License-Identifier: ISC */
/*
 * A database with no observers or observations: routes that sort what they found must still
 * answer (found while the proxy's browser check ran under UBSan: qsort of a NULL array with
 * no element is undefined behaviour, and the sanitizer build stopped the worker, taking the
 * WebSocket tunnels it held with it).
 */
#include "harness.h"
#include "inproc.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

TestSuite(empty_db_answers);

Test(empty_db_answers, observer_clock_skew_of_no_observers_is_an_empty_list)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/empty.db", dir);
    cr_assert_eq(mg_test_make_db(db, true, NULL), 0);
    struct mg_test_ctx ctx;
    cr_assert(mg_test_ctx_open(&ctx, db));
    cr_expect_eq(mg_test_ctx_get(&ctx, "/api/observers/clock-skew"), 200, "%s", ctx.res.body.data);
    cr_expect_str_eq(ctx.res.body.data, "[]\n");
    mg_test_ctx_close(&ctx);
}
