/* SPDX-License-Identifier: ISC */
#include "build_info.h"

#include <stdio.h>
#include <string.h>

#ifndef MESHGATE_COMMIT
#define MESHGATE_COMMIT "unknown"
#endif

const char *mg_build_commit(void)
{
    return MESHGATE_COMMIT;
}

#ifdef MESHGATE_BUILD_TIME
const char *mg_build_time(void)
{
    return MESHGATE_BUILD_TIME;
}
#else
/*
 * __DATE__ ("May 17 2026") and __TIME__ ("18:13:27") as "2026-05-17T18:13:27". They are
 * the compiler's local time, which is why no zone is claimed; and they date this file's
 * compilation, not the link.
 */
const char *mg_build_time(void)
{
    static char text[32];
    if (text[0])
        return text;
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    const char *date = __DATE__;
    int month = 0;
    for (int m = 0; m < 12; m++)
        if (memcmp(date, months + 3 * m, 3) == 0)
            month = m + 1;
    int day = (date[4] == ' ' ? 0 : date[4] - '0') * 10 + (date[5] - '0');
    snprintf(text, sizeof text, "%.4s-%02d-%02dT%.8s", date + 7, month, day, __TIME__);
    return text;
}
#endif
