/* SPDX-License-Identifier: ISC */
#include "recorded.h"

#include "corescope_config.h"
#include "fixture.h"
#include "harness.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

void mg_recorded_cleanup(struct mg_recorded *fx)
{
    if (fx->open)
        mg_test_ctx_close(&fx->t);
    fx->open = false;
    mg_corescope_free(&mg_corescope);
    json_decref(fx->expected);
    fx->expected = NULL;
    if (fx->dir[0])
        mg_test_rmdir(fx->dir);
    fx->dir[0] = '\0';
}

void mg_recorded_start(struct mg_recorded *fx, const char *expected_path)
{
    const char *example = MG_RECORDED_EXAMPLE_CONFIG;
    if (access(MG_RECORDED_FIXTURE_DB, R_OK) != 0 || access(example, R_OK) != 0)
        cr_skip_test("%s or %s not present: these tests compare with CoreScope's answers on its "
                     "real database and example configuration (../shared, see "
                     "../shared/data/README.md)",
                     MG_RECORDED_FIXTURE_DB, example);
    mg_test_tmpdir(fx->dir, sizeof fx->dir);
    snprintf(fx->db, sizeof fx->db, "%s/fresh.db", fx->dir);
    fx->now = (int64_t)time(NULL) / 3600 * 3600;
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(MG_RECORDED_FIXTURE_DB, fx->db, fx->now, err, sizeof err), 0,
                 "freshening: %s", err);
    json_error_t jerr;
    fx->expected = json_load_file(expected_path, 0, &jerr);
    cr_assert_not_null(fx->expected, "%s: %s", expected_path, jerr.text);
    snprintf(fx->config, sizeof fx->config, "%s/config.json", fx->dir);
    json_t *root = json_load_file(example, 0, &jerr);
    cr_assert_not_null(root, "%s: %s", example, jerr.text);
    cr_assert_eq(json_dump_file(root, fx->config, 0), 0);
    json_decref(root);
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, fx->config, err, sizeof err), 0, "%s", err);
    cr_assert(mg_test_ctx_open(&fx->t, fx->db));
    fx->open = true;
}

void mg_recorded_exec(struct mg_recorded *fx, const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(fx->db, &db), SQLITE_OK);
    char *err = NULL;
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &err), SQLITE_OK, "%s: %s", sql, err);
    sqlite3_close(db);
}

double mg_recorded_number(struct mg_recorded *fx, const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(fx->db, &db), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
    double v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

json_t *mg_recorded_get(struct mg_recorded *fx, const char *target, int want_status)
{
    int status = mg_test_ctx_get(&fx->t, target);
    const char *body = (const char *)fx->t.res.body.data;
    cr_assert_eq(status, want_status, "GET %s: status %d, want %d: %.300s", target, status,
                 want_status, body);
    json_error_t jerr;
    json_t *v = json_loadb(body, fx->t.res.body.len, 0, &jerr);
    cr_assert_not_null(v, "GET %s: not JSON (%s): %.300s", target, jerr.text, body);
    return v;
}
