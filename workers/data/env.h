/* SPDX-License-Identifier: ISC */
/*
 * env: the worker's environment (configuration, segment, database, the group's summaries, its
 * helper pools), as every room of workers/ takes it. It is declared here, in data/, the lowest
 * room, so the tables and values that take it need nothing from core/; handler.h, what an
 * endpoint sees, includes it.
 */
#ifndef MESHGATE_ENV_H
#define MESHGATE_ENV_H

#include "config_values.h"
#include "segment.h"

/* The largest path parameter (the {pubkey} of a templated route, handler.h), decoded, with its
 * NUL; the tables that look a node up by it (node_relay.h) copy it into as much. Here, not in
 * handler.h, so they need nothing of core/. */
#define MG_PATH_PARAM_MAX 128

struct mg_db;
struct mg_jobs;
struct mg_tx_summaries;

struct mg_env {
    const struct mg_config *cfg;
    struct mg_segment *seg;
    struct mg_db *db;
    /* The group's per-transmission summaries (shm/tx_summary.h); NULL: none, read directly. */
    struct mg_tx_summaries *summaries;
    struct mg_jobs *jobs;      /* the worker's helper thread; NULL: run heavy work inline */
    struct mg_jobs *anon_jobs; /* its helper for anonymous heavy work (lower priority) */
    unsigned slot;
    int pid;
    /* The test build only (MESHGATE_TEST_HOOKS, workers/test_hooks.h; always off in
     * production): how a heavy request that asks with X-Test-Hold-Ms is held after admission. */
    enum mg_test_hooks {
        MG_TEST_HOOKS_OFF = 0,
        MG_TEST_HOOKS_PARK,
        MG_TEST_HOOKS_BLOCK
    } test_hooks;
};

#endif
