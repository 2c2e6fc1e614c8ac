/* SPDX-License-Identifier: ISC */
#include "test_hooks.h"

#include "clock.h"
#include "lock.h"
#include "reclaim.h"
#include "router.h"
#include "scoreboard.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

bool mg_test_hooks_hold(struct mg_env *env, struct mg_request *req, unsigned route,
                        bool anonymous_admitted, struct mg_response *res)
{
    struct mg_admission *a = &req->park->admission;
    const struct mg_str *h = mg_http_header_get(req->http, "X-Test-Hold-Ms");
    int ms = 0;
    for (size_t i = 0; h && i < h->len && i < 6 && h->ptr[i] >= '0' && h->ptr[i] <= '9'; i++)
        ms = ms * 10 + (h->ptr[i] - '0');
    ms = ms > 30000 ? 30000 : ms;
    req->test_hold_ms = ms;
    /* Held on a helper instead: a reach report inside its build, an anonymous request run
     * on the anonymous helper inside its job. */
    if (route >= mg_route_table_len)
        return true; /* the upstream: the test upstream is slow on its own */
    bool on_helper = mg_routes[route].handler == mg_handle_reach ||
                     (env->anon_jobs && anonymous_admitted && !mg_routes[route].own_jobs);
    if (ms == 0 || on_helper)
        return true;
    int64_t now = mg_monotonic_ns();
    if (a->hold_until_ns == 0)
        a->hold_until_ns = now + (int64_t)ms * MG_NS_PER_MS;
    if (env->test_hooks == MG_TEST_HOOKS_BLOCK) {
        while (now < a->hold_until_ns) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            now = mg_monotonic_ns();
            mg_scoreboard_beat(); /* as a long scan does, from SQLite's progress handler */
        }
        return true;
    }
    if (now < a->hold_until_ns) {
        res->parked = true;
        return false;
    }
    return true;
}

void mg_test_hooks_stop_in_lock(struct mg_env *env, struct mg_request *req)
{
    if (req->park->turns > 1)
        return;
    const struct mg_str *h = mg_http_header_get(req->http, "X-Test-Stop-In-Lock");
    char part[16];
    const void *lo, *hi;
    if (h && h->len < sizeof part) {
        memcpy(part, h->ptr, h->len);
        part[h->len] = '\0';
        if (mg_segment_lock_range(env->seg, part, &lo, &hi))
            mg_lock_test_stop_inside(lo, hi);
    }
}

int mg_test_hooks_db_break(const struct mg_request *req)
{
    const struct mg_str *h = mg_http_header_get(req->http, "X-Test-Db-Break");
    return h && h->len == 1 && h->ptr[0] >= '1' && h->ptr[0] <= '9' ? h->ptr[0] - '0' : 0;
}

void mg_test_hooks_sleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&ts, &ts) < 0)
        ;
}

int mg_test_hooks_ms(const char *name)
{
    const char *v = getenv(name);
    long ms = v ? strtol(v, NULL, 10) : 0;
    return ms < 0 ? 0 : ms > 30000 ? 30000 : (int)ms;
}
