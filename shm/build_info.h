/* SPDX-License-Identifier: ISC */
/*
 * build_info: what this binary was built from. The build system passes MESHGATE_COMMIT (12
 * hex digits of `git rev-parse`, or "unknown" outside git) and MESHGATE_BUILD_TIME to
 * build_info.o alone, so a new commit recompiles one small file. `meshgate --version`, the
 * start-up log, /api/stats and /metrics (meshgate_build_info) all read them here.
 */
#ifndef MESHGATE_BUILD_INFO_H
#define MESHGATE_BUILD_INFO_H

/* "0123456789ab" or "unknown". */
const char *mg_build_commit(void);
/* "2026-05-17T18:13:27Z" from the build system, else the compiler's local time without a zone. */
const char *mg_build_time(void);

#endif
