/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: Go durations and CoreScope's windows (workers/data/go_duration.c), the text of
 * /api/observers/metrics/summary's window. Checks: a refused text is refused by both readers
 * unless it is a window of days; a duration that parses, written back as whole nanoseconds
 * ("<n>ns"), parses to the same value; a sign in front negates it; "<N>d" is N days (the
 * product wrapping in 64 bits, as Go's).
 */
#include "go_duration.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 256)
        return 0;
    const char *s = (const char *)data;
    int64_t d, w, again;
    bool ok = mg_go_duration_parse(s, size, &d);
    bool window = mg_go_window_parse(s, size, &w);
    if (size > 0 && s[size - 1] != 'd' && window != ok)
        abort();
    if (ok && size > 0 && s[size - 1] != 'd' && w != d)
        abort();
    if (ok && d != INT64_MIN) {
        char text[48];
        int n = snprintf(text, sizeof text, "%lldns", (long long)d);
        if (!mg_go_duration_parse(text, (size_t)n, &again) || again != d)
            abort();
        if (s[0] != '-' && s[0] != '+') {
            char *neg = malloc(size + 1);
            neg[0] = '-';
            memcpy(neg + 1, s, size);
            if (!mg_go_duration_parse(neg, size + 1, &again) || again != -d)
                abort();
            free(neg);
        }
    }
    if (window && s[size - 1] == 'd') {
        /* N days: N itself parses as a whole number (Go's Atoi) */
        char *n = malloc(size);
        memcpy(n, s, size - 1);
        n[size - 1] = '\0';
        char *end;
        long long days = strtoll(n[0] == '+' ? n + 1 : n, &end, 10);
        if (*end || days <= 0 || (int64_t)((uint64_t)days * UINT64_C(86400000000000)) != w)
            abort();
        free(n);
    }
    return 0;
}
