/* SPDX-License-Identifier: ISC */
#include "time_parse.h"

#include <string.h>

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static bool parse_digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static int days_in_month(int64_t year, int month)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return month == 2 && leap ? 29 : days[month - 1];
}

bool mg_rfc3339_parse_shaped(const char *s, size_t len, int64_t *ms, struct mg_rfc3339_shape *shape)
{
    int year, month, day, hour, minute, second;
    if (len < 20 || s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':')
        return false;
    if (s[10] != 'T' && s[10] != 't' && s[10] != ' ')
        return false;
    if (!parse_digits(s, 4, &year) || !parse_digits(s + 5, 2, &month) ||
        !parse_digits(s + 8, 2, &day) || !parse_digits(s + 11, 2, &hour) ||
        !parse_digits(s + 14, 2, &minute) || !parse_digits(s + 17, 2, &second))
        return false;
    if (month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 ||
        minute > 59 || second > 59)
        return false;
    shape->separator = s[10];
    size_t i = 19;
    int millis = 0;
    shape->fraction_digits = 0;
    shape->extra[0] = '\0';
    if (i < len && s[i] == '.') {
        i++;
        int digits = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (digits < 3)
                millis = millis * 10 + (s[i] - '0');
            else if (digits < 9)
                shape->extra[digits - 3] = s[i];
            else
                return false;
            digits++;
            i++;
        }
        if (digits == 0)
            return false;
        shape->extra[digits > 3 ? digits - 3 : 0] = '\0';
        for (int k = digits; k < 3; k++)
            millis *= 10;
        shape->fraction_digits = digits;
    }
    if (i >= len)
        return false;
    int offset = 0;
    if (s[i] == 'Z' || s[i] == 'z') {
        shape->zone = s[i];
        i++;
    } else if (s[i] == '+' || s[i] == '-') {
        int oh, om;
        if (len - i < 6 || s[i + 3] != ':' || !parse_digits(s + i + 1, 2, &oh) ||
            !parse_digits(s + i + 4, 2, &om) || oh > 23 || om > 59)
            return false;
        shape->zone = s[i];
        offset = (s[i] == '-' ? -1 : 1) * (oh * 60 + om);
        i += 6;
    } else {
        return false;
    }
    if (i != len)
        return false;
    shape->offset_minutes = offset;
    int64_t days = days_from_civil(year, month, day);
    int64_t secs = days * 86400 + hour * 3600 + minute * 60 + second - (int64_t)offset * 60;
    *ms = secs * 1000 + millis;
    return true;
}

bool mg_rfc3339_parse_ms(const char *text, size_t len, int64_t *ms)
{
    struct mg_rfc3339_shape shape;
    return text != NULL && mg_rfc3339_parse_shaped(text, len, ms, &shape);
}

/* CoreScope parses to the nanosecond; its times carry milliseconds at most. */
bool mg_node_parse_time_ms(const char *text, int64_t *ms)
{
    return text && mg_rfc3339_parse_ms(text, strlen(text), ms);
}
