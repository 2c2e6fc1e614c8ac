/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: CoreScope's analytics time window (workers/data/corescope_window.c) as the
 * analytics routes read it from a client's window=, from= and to=. The input's first byte
 * picks window= (an index, or none); the rest is from and to, split at the first newline.
 * Checks: a bound that was taken re-reads as the same second once written back as RFC 3339
 * text; a window with a bound holds its own bounds and nothing just outside them; the cache
 * key's part is NUL-terminated within its room and empty exactly for no window.
 */
#include "corescope_window.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_bound(int64_t s)
{
    time_t t = (time_t)s;
    struct tm tm;
    if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 > 9999 || tm.tm_year + 1900 < 1000)
        return;
    char text[40];
    strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    struct mg_cs_window again;
    mg_cs_window_parse(-1, text, NULL, 0, &again);
    if (!again.has_since || again.since_s != s)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || size > 4096)
        return 0;
    int relative = data[0] < 16 ? (int)data[0] - 1 : -1;
    if (relative > 6)
        relative = -1;
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    char *to = strchr(text, '\n');
    if (to)
        *to++ = '\0';
    const char *from = text[0] ? text : NULL;
    struct mg_cs_window w;
    mg_cs_window_parse(relative, from, to && to[0] ? to : NULL, 1780000000, &w);
    if (w.has_since) {
        check_bound(w.since_s);
        if (!mg_cs_window_holds_ms(&w, w.since_s * 1000) && !(w.has_until && w.until_s < w.since_s))
            abort();
        if (mg_cs_window_holds_ms(&w, w.since_s * 1000 - 1))
            abort();
    }
    if (w.has_until) {
        check_bound(w.until_s);
        if (mg_cs_window_holds_ms(&w, w.until_s * 1000 + 1))
            abort();
    }
    (void)mg_cs_window_holds_text(&w, text);
    char key[64];
    memset(key, 'x', sizeof key);
    mg_cs_window_key(&w, key, sizeof key);
    if (!memchr(key, '\0', sizeof key) || (key[0] == '\0') != mg_cs_window_is_zero(&w))
        abort();
    free(text);
    return 0;
}
