/* SPDX-License-Identifier: ISC */
/* CoreScope's analytics time window: see corescope_window.h. */
#include "corescope_window.h"

#include "time_parse.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

const char *const mg_cs_window_names[] = {"1h", "24h", "1d", "3d", "7d", "1w", "30d", NULL};
static const int64_t window_seconds[] = {3600,      86400,     86400,     3 * 86400,
                                         7 * 86400, 7 * 86400, 30 * 86400};

/* A bound as Go's time.Parse(time.RFC3339, ...) takes it: an upper-case T and Z, cut to the
 * second (its Format(time.RFC3339) drops the fraction). */
static bool parse_bound(const char *text, int64_t *s)
{
    struct mg_rfc3339_shape shape;
    int64_t ms;
    if (!text || !mg_rfc3339_parse_shaped(text, strlen(text), &ms, &shape))
        return false;
    if (shape.separator != 'T' || shape.zone == 'z')
        return false;
    *s = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
    return true;
}

void mg_cs_window_parse(int relative, const char *from, const char *to, int64_t now_s,
                        struct mg_cs_window *w)
{
    memset(w, 0, sizeof *w);
    w->relative = -1;
    if (from || to) {
        w->has_since = parse_bound(from, &w->since_s);
        w->has_until = parse_bound(to, &w->until_s);
        return;
    }
    if (relative >= 0 && relative < (int)(sizeof window_seconds / sizeof window_seconds[0])) {
        w->relative = relative;
        w->has_since = true;
        w->since_s = now_s - window_seconds[relative];
    }
}

bool mg_cs_window_holds_ms(const struct mg_cs_window *w, int64_t ms)
{
    if (w->has_since && ms < w->since_s * 1000)
        return false;
    if (w->has_until && ms > w->until_s * 1000)
        return false;
    return true;
}

static void bound_text(int64_t s, char out[32])
{
    time_t t = (time_t)s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

bool mg_cs_window_holds_text(const struct mg_cs_window *w, const char *text)
{
    if (!text || !text[0] || mg_cs_window_is_zero(w))
        return true;
    int64_t ms;
    if (mg_rfc3339_parse_ms(text, strlen(text), &ms))
        return mg_cs_window_holds_ms(w, ms);
    char bound[32];
    if (w->has_since) {
        bound_text(w->since_s, bound);
        if (strcmp(text, bound) < 0)
            return false;
    }
    if (w->has_until) {
        bound_text(w->until_s, bound);
        if (strcmp(text, bound) > 0)
            return false;
    }
    return true;
}

void mg_cs_window_key(const struct mg_cs_window *w, char *out, size_t cap)
{
    if (mg_cs_window_is_zero(w))
        snprintf(out, cap, "%s", "");
    else if (w->relative >= 0)
        snprintf(out, cap, "rel:%s", mg_cs_window_names[w->relative]);
    else {
        char since[24] = "-", until[24] = "-";
        if (w->has_since)
            snprintf(since, sizeof since, "%lld", (long long)w->since_s);
        if (w->has_until)
            snprintf(until, sizeof until, "%lld", (long long)w->until_s);
        snprintf(out, cap, "abs:%s:%s", since, until);
    }
}
