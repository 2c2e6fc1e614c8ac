/* SPDX-License-Identifier: ISC */
/*
 * json_check: a strict JSON checker for the fuzz targets, so a target can fail when a writer
 * emits something a client's parser would refuse: one value, RFC 8259 grammar, no control
 * bytes in strings, valid escapes, and valid UTF-8 (no overlong forms, no surrogates).
 */
#ifndef MESHGATE_FUZZ_JSON_CHECK_H
#define MESHGATE_FUZZ_JSON_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

struct json_check {
    const unsigned char *p, *end;
    int depth;
};

static bool json_check_value(struct json_check *s);

static void json_check_ws(struct json_check *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\r' || *s->p == '\n'))
        s->p++;
}

/* One UTF-8 sequence starting at s->p (its lead byte >= 0x80). */
static bool json_check_utf8(struct json_check *s)
{
    unsigned c = *s->p++;
    unsigned need, min;
    if (c >= 0xc2 && c <= 0xdf)
        need = 1, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        need = 2, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        need = 3, min = 0x10000;
    else
        return false;
    unsigned cp = c & (0x3f >> need);
    for (unsigned i = 0; i < need; i++) {
        if (s->p >= s->end || (*s->p & 0xc0) != 0x80)
            return false;
        cp = cp << 6 | (*s->p++ & 0x3f);
    }
    return cp >= min && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
}

static bool json_check_string(struct json_check *s)
{
    if (s->p >= s->end || *s->p++ != '"')
        return false;
    while (s->p < s->end) {
        unsigned char c = *s->p;
        if (c == '"') {
            s->p++;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c >= 0x80) {
            if (!json_check_utf8(s))
                return false;
            continue;
        }
        s->p++;
        if (c != '\\')
            continue;
        if (s->p >= s->end || !strchr("\"\\/bfnrtu", *s->p))
            return false;
        if (*s->p++ == 'u')
            for (int i = 0; i < 4; i++)
                if (s->p >= s->end || !strchr("0123456789abcdefABCDEF", *s->p++))
                    return false;
    }
    return false;
}

static bool json_check_digits(struct json_check *s)
{
    const unsigned char *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
        s->p++;
    return s->p > start;
}

static bool json_check_number(struct json_check *s)
{
    if (s->p < s->end && *s->p == '-')
        s->p++;
    if (s->p < s->end && *s->p == '0')
        s->p++;
    else if (!json_check_digits(s))
        return false;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!json_check_digits(s))
            return false;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (!json_check_digits(s))
            return false;
    }
    return true;
}

static bool json_check_literal(struct json_check *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return false;
    s->p += n;
    return true;
}

static bool json_check_container(struct json_check *s, unsigned char close, bool object)
{
    s->p++;
    if (++s->depth > 256)
        return false;
    json_check_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return true;
    }
    for (;;) {
        json_check_ws(s);
        if (object) {
            if (!json_check_string(s))
                return false;
            json_check_ws(s);
            if (s->p >= s->end || *s->p++ != ':')
                return false;
            json_check_ws(s);
        }
        if (!json_check_value(s))
            return false;
        json_check_ws(s);
        if (s->p >= s->end)
            return false;
        unsigned char c = *s->p++;
        if (c == close) {
            s->depth--;
            return true;
        }
        if (c != ',')
            return false;
    }
}

static bool json_check_value(struct json_check *s)
{
    if (s->p >= s->end)
        return false;
    switch (*s->p) {
    case '{':
        return json_check_container(s, '}', true);
    case '[':
        return json_check_container(s, ']', false);
    case '"':
        return json_check_string(s);
    case 't':
        return json_check_literal(s, "true");
    case 'f':
        return json_check_literal(s, "false");
    case 'n':
        return json_check_literal(s, "null");
    default:
        return json_check_number(s);
    }
}

/* True when text[0..len) is exactly one JSON value (blanks around it allowed). */
static inline bool json_is_valid(const char *text, size_t len)
{
    struct json_check s = {(const unsigned char *)text, (const unsigned char *)text + len, 0};
    json_check_ws(&s);
    if (!json_check_value(&s))
        return false;
    json_check_ws(&s);
    return s.p == s.end;
}

#endif
