/* SPDX-License-Identifier: ISC */
/*
 * json: the JSON writer. Output is byte-for-byte what Go's encoding/json (Go 1.22 and later,
 * the toolchain CoreScope builds with) writes for the same values, with two deliberate
 * differences: -0 prints as 0 (Go prints -0), and NaN or an infinity prints as null (Go
 * refuses to encode them).
 *
 * Strings, as Go's appendString with HTML escaping on:
 *   - '"' and '\\' get a backslash; \b \f \n \r \t use their short forms (Go 1.22 added \b
 *     and \f); every other byte below 0x20 and '<', '>', '&' become \u00XX with lowercase hex;
 *   - U+2028 and U+2029 become \u2028 and \u2029;
 *   - each byte that does not start a valid UTF-8 sequence becomes the six characters \ufffd
 *     and decoding resumes at the next byte, as Go's utf8.DecodeRune consumes one byte on
 *     error. A JSON reader sees U+FFFD either way; the escape keeps us identical to Go.
 *
 * Doubles: the shortest digit string that reads back to the same double (the closest one
 * when several of that length do), laid out like strconv.FormatFloat(v, 'f', -1, 64), or
 * 'e' when |v| < 1e-6 or |v| >= 1e21 with the exponent unpadded ("1e-7", "1e+21").
 *
 * Nesting: need_comma[d] says whether level d already holds a value; level 0 is the top.
 * Misuse that would write invalid JSON (too deep, unbalanced end, a key with no value, an
 * empty raw fragment) marks the buffer failed, so its sender answers 500.
 */
#include "json.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 for bytes copied as they are: printable ASCII and DEL except '"', '\\', '<', '>', '&'. */
/* clang-format off */
static const unsigned char ascii_plain[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 00 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 10 */
    1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 20 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, /* 30 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 40 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 50 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 60 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 70 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 80 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 90 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* a0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* b0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* c0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* d0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* e0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* f0 */
};
/* clang-format on */

static const char hex_digits[] = "0123456789abcdef";

/*
 * Length of the valid UTF-8 sequence starting at p (a byte >= 0x80), or 0 when it is not
 * one. The second-byte ranges are those of Go's utf8 "accept ranges": they exclude
 * overlong forms (E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and code points above
 * U+10FFFF (F4 90..BF); C0, C1 and F5..FF never start a sequence.
 */
static size_t utf8_sequence_len(const unsigned char *p, size_t avail)
{
    unsigned char lead = p[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;

    if (lead >= 0xC2 && lead <= 0xDF) {
        need = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        need = 3;
        if (lead == 0xE0)
            lo = 0xA0;
        else if (lead == 0xED)
            hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        need = 4;
        if (lead == 0xF0)
            lo = 0x90;
        else if (lead == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (avail < need || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return need;
}

void mg_json_escape(struct mg_buf *out, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *end = p + len;
    const unsigned char *run = p; /* start of the bytes not yet copied */

    while (p < end) {
        while (p < end && ascii_plain[*p])
            p++;
        if (p == end)
            break;

        unsigned char c = *p;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t esc_len = 2;
        size_t consumed = 1;

        if (c >= 0x80) {
            size_t n = utf8_sequence_len(p, (size_t)(end - p));
            if (n == 3 && c == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9)) {
                memcpy(esc, p[2] == 0xA8 ? "\\u2028" : "\\u2029", 6);
                esc_len = 6;
                consumed = 3;
            } else if (n > 0) {
                /* Valid multi-byte sequences stay in the current run. */
                p += n;
                continue;
            } else {
                memcpy(esc, "\\ufffd", 6);
                esc_len = 6;
            }
        } else {
            switch (c) {
            case '"':
            case '\\':
                esc[1] = (char)c;
                break;
            case '\b':
                esc[1] = 'b';
                break;
            case '\f':
                esc[1] = 'f';
                break;
            case '\n':
                esc[1] = 'n';
                break;
            case '\r':
                esc[1] = 'r';
                break;
            case '\t':
                esc[1] = 't';
                break;
            default:
                memcpy(esc, "\\u00", 4);
                esc[4] = hex_digits[c >> 4];
                esc[5] = hex_digits[c & 0xF];
                esc_len = 6;
                break;
            }
        }
        if (p > run)
            mg_buf_append(out, run, (size_t)(p - run));
        mg_buf_append(out, esc, esc_len);
        p += consumed;
        run = p;
    }
    if (p > run)
        mg_buf_append(out, run, (size_t)(p - run));
}

/* Writes the decimal digits of v ending just before end; returns where they start. */
static char *format_u64_backwards(uint64_t v, char *end)
{
    char *p = end;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    return p;
}

/* Every power of ten a double holds exactly. */
static const double powers_of_ten[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};
#define POWERS_OF_TEN ((int)(sizeof powers_of_ten / sizeof powers_of_ten[0]))

/*
 * Shortest digits, the facts both paths below rest on. A normal double a reads back from
 * every decimal within 2^-52 * a of it, less than half a unit of a's 15th significant digit.
 * So at most one number of 15 significant digits or fewer reads back to a, and when one
 * does, the correctly rounded 15-digit form of a is that number padded with zeros.
 *
 * Fast path, for 1e-6 <= a < 1e15: find the integer m < 10^15 with m / 10^k reading back
 * to a. Both are exact doubles, so the division rounds the exact quotient just as strtod
 * rounds the decimal. If m * 10^-k reads back, the exact a * 10^k is within
 * 2^-52 * 10^15 < 0.23 of m and the computed one within 0.3, so round() gives m; trying
 * every k up to 22 therefore misses no such m, and when none is found the answer has 16 or
 * 17 digits. Returns the digit count, or 0.
 */
static int short_decimal_digits(double a, char digits[20], int *point)
{
    for (int k = 0; k < POWERS_OF_TEN; k++) {
        double m = round(a * powers_of_ten[k]);
        if (m >= 1e15)
            return 0;
        if (m / powers_of_ten[k] != a)
            continue;
        uint64_t mantissa = (uint64_t)m;
        while (mantissa % 10 == 0) {
            mantissa /= 10;
            k--;
        }
        char *end = digits + 20;
        char *start = format_u64_backwards(mantissa, end);
        int n = (int)(end - start);
        memmove(digits, start, (size_t)n);
        *point = n - k;
        return n;
    }
    return 0;
}

/*
 * Slow path, from `precision` significant digits up: digits[0..n) without trailing zeros,
 * a = 0.digits * 10^*point; returns n. For each length the correctly rounded form (from
 * printf) is the closest candidate; when it does not read back, its neighbour on the far
 * side of a still may, because at a power of two the doubles below are twice as close as
 * those above (2^-24 is 5.960464477539063e-08, not ...062). Normal doubles can start at 15
 * digits (see above); subnormals have fewer bits (5e-324 is the shortest form of 2^-1074)
 * and start at one.
 */
static int shortest_digits(double a, int precision, char digits[20], int *point)
{
    char text[40];

    /* 17 correctly rounded digits always read back, so that pass always returns. */
    for (;; precision++) {
        snprintf(text, sizeof text, "%.*e", precision - 1, a);
        /* text is "d.ddd...e[+-]xx"; gather the digits and the exponent. */
        int n = 0;
        const char *t = text;
        for (; *t != 'e'; t++)
            if (*t != '.')
                digits[n++] = *t;
        int exponent = atoi(t + 1);

        double back = precision < 17 ? strtod(text, NULL) : a;
        if (back != a) {
            /* Step the last digit one unit towards a and try again. */
            char stepped[40];
            int i = n - 1;
            if (back < a) {
                while (i >= 0 && digits[i] == '9')
                    digits[i--] = '0';
                if (i < 0) {
                    memmove(digits + 1, digits, (size_t)n);
                    digits[0] = '1';
                    exponent++;
                } else {
                    digits[i]++;
                }
            } else {
                while (i >= 0 && digits[i] == '0')
                    digits[i--] = '9';
                digits[i]--; /* the lead digit is 1..9, so i >= 0 here */
            }
            snprintf(stepped, sizeof stepped, "0.%.*se%d", n, digits, exponent + 1);
            if (strtod(stepped, NULL) != a)
                continue;
        }

        int lead = 0;
        while (lead < n - 1 && digits[lead] == '0') {
            lead++;
            exponent--;
        }
        if (lead > 0) {
            memmove(digits, digits + lead, (size_t)(n - lead));
            n -= lead;
        }
        while (n > 1 && digits[n - 1] == '0')
            n--;
        *point = exponent + 1;
        return n;
    }
}

int mg_json_format_double(double v, char *out, size_t outlen)
{
    char text[40];
    char *p = text;

    if (isnan(v) || isinf(v)) {
        memcpy(text, "null", 4);
        p += 4;
    } else if (v == trunc(v) && fabs(v) < 9007199254740992.0) {
        /* Integral below 2^53, so exact as an int64: the 'f' form is just its digits. -0
         * converts to 0. */
        int64_t i = (int64_t)v;
        char digits[24];
        char *end = digits + sizeof digits;
        char *start = format_u64_backwards(i < 0 ? (uint64_t)0 - (uint64_t)i : (uint64_t)i, end);
        if (i < 0)
            *p++ = '-';
        memcpy(p, start, (size_t)(end - start));
        p += end - start;
    } else {
        double a = fabs(v);
        char digits[20];
        int point;
        int n = 0;
        int precision = 15;
        if (a < DBL_MIN) {
            precision = 1;
        } else if (a >= 1e-6 && a < 1e15) {
            n = short_decimal_digits(a, digits, &point);
            precision = 16;
        }
        if (n == 0)
            n = shortest_digits(a, precision, digits, &point);

        if (v < 0)
            *p++ = '-';
        if (a < 1e-6 || a >= 1e21) {
            *p++ = digits[0];
            if (n > 1) {
                *p++ = '.';
                memcpy(p, digits + 1, (size_t)(n - 1));
                p += n - 1;
            }
            p += sprintf(p, "e%c%d", point - 1 < 0 ? '-' : '+', abs(point - 1));
        } else if (point <= 0) {
            *p++ = '0';
            *p++ = '.';
            memset(p, '0', (size_t)-point);
            p += -point;
            memcpy(p, digits, (size_t)n);
            p += n;
        } else if (point >= n) {
            memcpy(p, digits, (size_t)n);
            p += n;
            memset(p, '0', (size_t)(point - n));
            p += point - n;
        } else {
            memcpy(p, digits, (size_t)point);
            p += point;
            *p++ = '.';
            memcpy(p, digits + point, (size_t)(n - point));
            p += n - point;
        }
    }

    size_t len = (size_t)(p - text);
    if (outlen <= len) {
        if (outlen > 0)
            out[0] = '\0';
        return 0;
    }
    memcpy(out, text, len);
    out[len] = '\0';
    return (int)len;
}

void mg_json_init(struct mg_json *j, struct mg_buf *out)
{
    memset(j, 0, sizeof *j);
    j->out = out;
}

/* Whether the key or value about to be written needs a comma before it. */
static bool json_comma_due(struct mg_json *j)
{
    if (j->after_key) {
        j->after_key = false;
        return false;
    }
    bool due = j->need_comma[j->depth];
    j->need_comma[j->depth] = true;
    return due;
}

/* Appends text, which starts with a comma, with or without that comma: one append. */
static void json_put(struct mg_json *j, const char *comma_text, size_t len)
{
    size_t skip = json_comma_due(j) ? 0 : 1;
    mg_buf_append(j->out, comma_text + skip, len - skip);
}

static void json_begin(struct mg_json *j, const char *comma_open)
{
    if (j->depth >= MG_JSON_MAX_DEPTH) {
        j->out->failed = true;
        return;
    }
    json_put(j, comma_open, 2);
    j->depth++;
    j->need_comma[j->depth] = false;
}

static void json_end(struct mg_json *j, char close)
{
    if (j->depth <= 0 || j->after_key) {
        j->out->failed = true;
        return;
    }
    j->depth--;
    mg_buf_putc(j->out, close);
}

void mg_json_object_begin(struct mg_json *j)
{
    json_begin(j, ",{");
}

void mg_json_object_end(struct mg_json *j)
{
    json_end(j, '}');
}

void mg_json_array_begin(struct mg_json *j)
{
    json_begin(j, ",[");
}

void mg_json_array_end(struct mg_json *j)
{
    json_end(j, ']');
}

void mg_json_key(struct mg_json *j, const char *key)
{
    if (key == NULL || j->after_key) {
        j->out->failed = true;
        return;
    }
    json_put(j, ",\"", 2);
    mg_json_escape(j->out, key, strlen(key));
    mg_buf_append(j->out, "\":", 2);
    j->after_key = true;
}

void mg_json_string_n(struct mg_json *j, const char *s, size_t len)
{
    if (s == NULL) {
        mg_json_null(j);
        return;
    }
    json_put(j, ",\"", 2);
    mg_json_escape(j->out, s, len);
    mg_buf_putc(j->out, '"');
}

void mg_json_string(struct mg_json *j, const char *s)
{
    mg_json_string_n(j, s, s ? strlen(s) : 0);
}

void mg_json_int(struct mg_json *j, int64_t v)
{
    char text[24];
    char *end = text + sizeof text;
    char *p = format_u64_backwards(v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, end);
    if (v < 0)
        *--p = '-';
    *--p = ',';
    json_put(j, p, (size_t)(end - p));
}

void mg_json_uint(struct mg_json *j, uint64_t v)
{
    char text[24];
    char *end = text + sizeof text;
    char *p = format_u64_backwards(v, end);
    *--p = ',';
    json_put(j, p, (size_t)(end - p));
}

void mg_json_double(struct mg_json *j, double v)
{
    char text[48];
    int n = mg_json_format_double(v, text + 1, sizeof text - 1);
    text[0] = ',';
    json_put(j, text, (size_t)n + 1);
}

/*
 * Rounds half away from zero the way CoreScope does, math.Round(v*10^d)/10^d, so the
 * result is the same double Go computes (10^d is exact for d <= 22). decimals below 0 count
 * as 0; above 22, or when v*10^d is no longer finite, v is printed as it is.
 */
void mg_json_double_rounded(struct mg_json *j, double v, int decimals)
{
    if (decimals < 0)
        decimals = 0;
    if (decimals < POWERS_OF_TEN) {
        double scale = powers_of_ten[decimals];
        double scaled = v * scale;
        if (isfinite(scaled))
            v = round(scaled) / scale;
    }
    mg_json_double(j, v);
}

void mg_json_bool(struct mg_json *j, bool v)
{
    if (v)
        json_put(j, ",true", 5);
    else
        json_put(j, ",false", 6);
}

void mg_json_null(struct mg_json *j)
{
    json_put(j, ",null", 5);
}

void mg_json_raw(struct mg_json *j, const char *json, size_t len)
{
    if (json == NULL) {
        mg_json_null(j);
        return;
    }
    if (len == 0) {
        j->out->failed = true;
        return;
    }
    if (json_comma_due(j))
        mg_buf_putc(j->out, ',');
    mg_buf_append(j->out, json, len);
}

void mg_json_kv_string(struct mg_json *j, const char *key, const char *s)
{
    mg_json_key(j, key);
    mg_json_string(j, s);
}

void mg_json_kv_int(struct mg_json *j, const char *key, int64_t v)
{
    mg_json_key(j, key);
    mg_json_int(j, v);
}

void mg_json_kv_uint(struct mg_json *j, const char *key, uint64_t v)
{
    mg_json_key(j, key);
    mg_json_uint(j, v);
}

void mg_json_kv_double(struct mg_json *j, const char *key, double v)
{
    mg_json_key(j, key);
    mg_json_double(j, v);
}

void mg_json_kv_bool(struct mg_json *j, const char *key, bool v)
{
    mg_json_key(j, key);
    mg_json_bool(j, v);
}

void mg_json_kv_null(struct mg_json *j, const char *key)
{
    mg_json_key(j, key);
    mg_json_null(j);
}
