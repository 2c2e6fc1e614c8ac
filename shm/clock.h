/* SPDX-License-Identifier: ISC */
/*
 * clock: every deadline and duration in meshgate is on CLOCK_MONOTONIC, in nanoseconds.
 * Wall-clock time (CLOCK_REALTIME) is only for what people read: timestamps in logs,
 * the segment header and JSON bodies.
 */
#ifndef MESHGATE_CLOCK_H
#define MESHGATE_CLOCK_H

#include <stdint.h>
#include <time.h>

#define MG_NS_PER_MS 1000000LL
#define MG_NS_PER_SEC 1000000000LL

static inline int64_t mg_clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * MG_NS_PER_SEC + ts.tv_nsec;
}

static inline int64_t mg_monotonic_ns(void)
{
    return mg_clock_ns(CLOCK_MONOTONIC);
}

static inline int64_t mg_realtime_ns(void)
{
    return mg_clock_ns(CLOCK_REALTIME);
}

/* Days since 1970-01-01 to a civil (proleptic Gregorian) date, as H. Hinnant's days_from_civil
 * inverted: no gmtime, no locale, no lock, so a signal handler may use it. */
static inline void mg_civil_from_days(int64_t z, int64_t *year, int *month, int *day)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *day = (int)(doy - (153 * mp + 2) / 5 + 1);
    *month = (int)(mp < 10 ? mp + 3 : mp - 9);
    *year = yoe + era * 400 + (*month <= 2);
}

#endif
