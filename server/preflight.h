/* SPDX-License-Identifier: ISC */
/*
 * preflight: what the configuration names, checked before anything is created. A start runs
 * these steps before it binds the socket and creates the segment; `meshgate --check` (-t)
 * runs them all and stops, so systemd's ExecStartPre= and ExecReload= can refuse a bad edit
 * with the same message and exit code a start would give, while the running server, its
 * socket and its segment are left alone.
 *
 * Each step is a row: what it checks, and a function that returns 0 or the exit code
 * (sysexits.h) with the message in err. A check for something new the configuration names
 * (an upstream address, CoreScope's own configuration file) is one more row.
 */
#ifndef MESHGATE_PREFLIGHT_H
#define MESHGATE_PREFLIGHT_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>

enum mg_preflight_mode {
    MG_PREFLIGHT_START, /* a start: the socket is checked by binding it, later */
    MG_PREFLIGHT_CHECK, /* --check: everything, binding nothing */
};

struct mg_preflight_step {
    const char *what;
    int (*run)(const struct mg_config *cfg, char *err, size_t errlen);
    bool check_only; /* a start checks this itself, by doing it */
};

extern const struct mg_preflight_step mg_preflight_steps[];

/*
 * Runs the steps in order and stops at the first that fails. Returns 0, or its exit code
 * with the message in err. Loads the API keys into mg_api_keys (keys.h) on the way.
 */
int mg_preflight(const struct mg_config *cfg, enum mg_preflight_mode mode, char *err,
                 size_t errlen);

#endif
