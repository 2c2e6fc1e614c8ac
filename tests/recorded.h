/* SPDX-License-Identifier: ISC */
/*
 * recorded: the set-up of the tests that compare meshgate's answers with CoreScope's own,
 * recorded on its real migrated database: a private copy freshened so that its newest times
 * are the top of the current hour, CoreScope's config.example.json as this process's
 * configuration, an in-process server on the copy, and the recorded answers. Without
 * ../shared the test is skipped and says why.
 */
#ifndef MESHGATE_TESTS_RECORDED_H
#define MESHGATE_TESTS_RECORDED_H

#include "inproc.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define MG_RECORDED_FIXTURE_DB                                                                     \
    MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define MG_RECORDED_EXAMPLE_CONFIG                                                                 \
    MESHGATE_SOURCE_DIR "/../shared/corescope/server/config.example.json"

struct mg_recorded {
    char dir[128];
    char db[256];
    char config[256];
    struct mg_test_ctx t;
    bool open;
    json_t *expected;
    int64_t now; /* the copy's newest time: the top of the hour */
};

/* Skips the test when the fixture or the example configuration is not there. */
void mg_recorded_start(struct mg_recorded *fx, const char *expected_path);
/* For the suite's .fini: closes the server, frees the configuration, removes the copy. */
void mg_recorded_cleanup(struct mg_recorded *fx);
/* Runs sql on the copy through a connection of the test's own. */
void mg_recorded_exec(struct mg_recorded *fx, const char *sql);
/* The first column of sql's first row. */
double mg_recorded_number(struct mg_recorded *fx, const char *sql);
/* GET target in process, asserting its status and that its body is JSON (the caller frees). */
json_t *mg_recorded_get(struct mg_recorded *fx, const char *target, int want_status);

#endif
