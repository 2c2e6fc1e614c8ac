/* SPDX-License-Identifier: ISC */
/*
 * corescope_window: the time window CoreScope's analytics routes take (window=, from=, to=),
 * read as its ParseTimeWindow reads it, so a page's stored choice means the same on both.
 *
 *   from / to   an absolute range; either one given (non-empty) makes the window absolute,
 *               and a bound that is not RFC 3339 ("2026-05-17T12:00:00Z", a fraction or an
 *               offset allowed) is no bound. Each bound is cut to its whole second (UTC).
 *   window      without from and to: 1h, 24h or 1d, 3d, 7d or 1w, 30d, ending now; any other
 *               value is no window.
 * A window with neither bound is "no window": every row, as without the parameters.
 *
 * Since and until are inclusive: a time t is in the window when since <= t <= until, as
 * CoreScope's TimeWindow.Includes compares parsed times.
 */
#ifndef MESHGATE_CORESCOPE_WINDOW_H
#define MESHGATE_CORESCOPE_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The relative windows, in the order of their names (mg_cs_window_names). */
extern const char *const mg_cs_window_names[];

struct mg_cs_window {
    bool has_since, has_until;
    int64_t since_s, until_s; /* Unix seconds */
    int relative;             /* index into mg_cs_window_names, or -1 */
};

/*
 * The window of the request's parameters: relative, the index of window= in
 * mg_cs_window_names (-1: absent or unknown); from and to as given (NULL: absent or empty).
 * now_s ends a relative window.
 */
void mg_cs_window_parse(int relative, const char *from, const char *to, int64_t now_s,
                        struct mg_cs_window *w);

static inline bool mg_cs_window_is_zero(const struct mg_cs_window *w)
{
    return !w->has_since && !w->has_until;
}

/* Whether Unix milliseconds ms are inside the window. */
bool mg_cs_window_holds_ms(const struct mg_cs_window *w, int64_t ms);

/*
 * Whether stored time text is inside the window: parsed as RFC 3339 and compared; text that
 * does not parse is compared as text with the bounds' own text ("2026-05-17T12:00:00Z"), as
 * CoreScope falls back to. NULL or empty text is inside (CoreScope: a row without a time).
 */
bool mg_cs_window_holds_text(const struct mg_cs_window *w, const char *text);

/* The window's part of a cache key: "" (none), "rel:24h", or "abs:SINCE:UNTIL" (seconds or
 * "-"); CoreScope keys a relative window by its name too, so one entry serves it. */
void mg_cs_window_key(const struct mg_cs_window *w, char *out, size_t cap);

#endif
