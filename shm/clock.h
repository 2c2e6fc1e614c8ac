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

#endif
