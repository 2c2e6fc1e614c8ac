/* SPDX-License-Identifier: ISC */
/*
 * home_page: what `/` answers when meshgate serves no front end (MESHGATE_PUBLIC_DIR and
 * MESHGATE_UPSTREAM both empty, as under `make run`): a small page of meshgate's own that
 * says what is served here, links to the read API, /api/healthz, /metrics and
 * /server-status, and says how to serve CoreScope's front end. It names no path, address
 * or setting of this server: anyone may read it.
 */
#ifndef MESHGATE_HOME_PAGE_H
#define MESHGATE_HOME_PAGE_H

#include "handler.h"

#include <stdbool.h>

/* True when path (decoded) is "/" and no public directory is set. */
bool mg_home_applies(const struct mg_config *cfg, const char *path);

/* Answers GET or HEAD of "/" with the page (text/html, Cache-Control: no-cache). */
enum mg_turn mg_home_serve(struct mg_env *env, const struct mg_request *req,
                           struct mg_response *res);

#endif
