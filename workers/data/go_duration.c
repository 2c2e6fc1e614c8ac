/* SPDX-License-Identifier: ISC */
#include "go_duration.h"

#include <string.h>

#define TOP (UINT64_C(1) << 63)

/* Digits at s[*i..]: false when the value passes 2^63. */
static bool whole_part(const char *s, size_t len, size_t *i, uint64_t *out)
{
    uint64_t x = 0;
    for (; *i < len && s[*i] >= '0' && s[*i] <= '9'; (*i)++) {
        if (x > TOP / 10)
            return false;
        x = x * 10 + (uint64_t)(s[*i] - '0');
        if (x > TOP)
            return false;
    }
    *out = x;
    return true;
}

/* Digits after the point: the digits that still fit are kept, with their scale. */
static void fraction_part(const char *s, size_t len, size_t *i, uint64_t *out, double *scale)
{
    uint64_t x = 0;
    double sc = 1;
    bool full = false;
    for (; *i < len && s[*i] >= '0' && s[*i] <= '9'; (*i)++) {
        if (full)
            continue;
        if (x > (TOP - 1) / 10) {
            full = true;
            continue;
        }
        uint64_t y = x * 10 + (uint64_t)(s[*i] - '0');
        if (y > TOP) {
            full = true;
            continue;
        }
        x = y;
        sc *= 10;
    }
    *out = x;
    *scale = sc;
}

static uint64_t unit_ns(const char *u, size_t n)
{
    static const struct {
        const char *name;
        uint64_t ns;
    } units[] = {
        {"ns", 1},
        {"us", 1000},
        {"\xc2\xb5s", 1000}, /* U+00B5 micro sign */
        {"\xce\xbcs", 1000}, /* U+03BC Greek mu */
        {"ms", 1000000},
        {"s", 1000000000},
        {"m", UINT64_C(60) * 1000000000},
        {"h", UINT64_C(3600) * 1000000000},
    };
    for (size_t k = 0; k < sizeof units / sizeof units[0]; k++)
        if (strlen(units[k].name) == n && memcmp(units[k].name, u, n) == 0)
            return units[k].ns;
    return 0;
}

bool mg_go_duration_parse(const char *s, size_t len, int64_t *ns)
{
    size_t i = 0;
    bool neg = false;
    if (len > 0 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (len - i == 1 && s[i] == '0') {
        *ns = 0;
        return true;
    }
    if (i == len)
        return false;
    uint64_t d = 0;
    while (i < len) {
        if (!(s[i] == '.' || (s[i] >= '0' && s[i] <= '9')))
            return false;
        size_t start = i;
        uint64_t v = 0, f = 0;
        double scale = 1;
        if (!whole_part(s, len, &i, &v))
            return false;
        bool pre = i != start;
        bool post = false;
        if (i < len && s[i] == '.') {
            i++;
            size_t at = i;
            fraction_part(s, len, &i, &f, &scale);
            post = i != at;
        }
        if (!pre && !post)
            return false;
        size_t u = i;
        while (i < len && s[i] != '.' && !(s[i] >= '0' && s[i] <= '9'))
            i++;
        uint64_t unit = unit_ns(s + u, i - u);
        if (unit == 0)
            return false;
        if (v > TOP / unit)
            return false;
        v *= unit;
        if (f > 0) {
            v += (uint64_t)((double)f * ((double)unit / scale));
            if (v > TOP)
                return false;
        }
        d += v;
        if (d > TOP)
            return false;
    }
    if (neg) {
        *ns = (int64_t)(UINT64_C(0) - d);
        return true;
    }
    if (d > TOP - 1)
        return false;
    *ns = (int64_t)d;
    return true;
}

/* Go's strconv.Atoi on s[0..len): an optional sign and at least one digit, within int64. */
static bool atoi64(const char *s, size_t len, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (len > 0 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == len)
        return false;
    uint64_t x = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        if (x > TOP / 10)
            return false;
        x = x * 10 + (uint64_t)(s[i] - '0');
        if (x > (neg ? TOP : TOP - 1))
            return false;
    }
    *out = neg ? (int64_t)(UINT64_C(0) - x) : (int64_t)x;
    return true;
}

bool mg_go_window_parse(const char *s, size_t len, int64_t *ns)
{
    if (len > 0 && s[len - 1] == 'd') {
        int64_t days;
        if (!atoi64(s, len - 1, &days) || days <= 0)
            return false;
        /* Go's Duration(days) * 24 * time.Hour: 64-bit products that wrap */
        uint64_t d = (uint64_t)days * 24u * (UINT64_C(3600) * 1000000000u);
        *ns = (int64_t)d;
        return true;
    }
    return mg_go_duration_parse(s, len, ns);
}
