/* SPDX-License-Identifier: ISC */
/*
 * jsoncheck: a strict JSON reader for tests (RFC 8259, with UTF-8 checked), shared by the
 * suites that read JSON answers or files. See jsoncheck.h.
 */
#include "jsoncheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *json_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* The length of the well-formed UTF-8 sequence at s (not ASCII), or 0. */
static size_t utf8_sequence_len(const unsigned char *s)
{
    size_t n;
    unsigned cp, min;
    if (s[0] >= 0xC2 && s[0] <= 0xDF)
        n = 2, cp = s[0] & 0x1Fu, min = 0x80;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF)
        n = 3, cp = s[0] & 0x0Fu, min = 0x800;
    else if (s[0] >= 0xF0 && s[0] <= 0xF4)
        n = 4, cp = s[0] & 0x07u, min = 0x10000;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Each skip_* returns the end of the token at p, or NULL when it is not strict JSON. */
const char *json_skip_string(const char *p)
{
    if (*p != '"')
        return NULL;
    p++;
    for (;;) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c < 0x20) /* control characters, and the end of the text */
            return NULL;
        if (c == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!is_hex(p[i]))
                        return NULL;
                p += 5;
            } else if (*p && strchr("\"\\/bfnrt", *p)) {
                p++;
            } else {
                return NULL;
            }
        } else if (c < 0x80) {
            p++;
        } else {
            size_t n = utf8_sequence_len((const unsigned char *)p);
            if (n == 0)
                return NULL;
            p += n;
        }
    }
}

const char *json_skip_number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (is_digit(*p))
            p++;
    else
        return NULL;
    if (*p == '.') {
        if (!is_digit(*++p))
            return NULL;
        while (is_digit(*p))
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!is_digit(*p))
            return NULL;
        while (is_digit(*p))
            p++;
    }
    return p;
}

const char *json_skip_value(const char *p, int depth)
{
    if (p == NULL || depth > 64)
        return NULL;
    char close = *p == '{' ? '}' : ']';
    switch (*p) {
    case '{':
    case '[':
        p = json_ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                p = json_skip_string(p);
                if (p == NULL || *(p = json_ws(p)) != ':')
                    return NULL;
                p = json_ws(p + 1);
            }
            p = json_skip_value(p, depth + 1);
            if (p == NULL)
                return NULL;
            p = json_ws(p);
            if (*p == close)
                return p + 1;
            if (*p != ',')
                return NULL;
            p = json_ws(p + 1);
        }
    case '"':
        return json_skip_string(p);
    case 't':
        return strncmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return strncmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        return strncmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default:
        return json_skip_number(p);
    }
}

/* One JSON value that starts the body, then exactly one "\n", and nothing else. */
bool json_body_is_strict(const char *body, size_t len)
{
    if (body == NULL || strlen(body) != len)
        return false;
    const char *end = json_skip_value(body, 0);
    return end != NULL && end[0] == '\n' && end + 1 == body + len;
}

static unsigned hex4(const char *p)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v * 16 + (unsigned)(is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

static char *utf8_put(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | cp >> 6);
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | cp >> 12);
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | cp >> 18);
        *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* The decoded text of the JSON string at v (malloc'ed), or NULL when v is not a string.
 * Bodies are validated before they are read, so every reader below assumes valid JSON. */
char *json_string_dup(const char *v)
{
    const char *end = v && *v == '"' ? json_skip_string(v) : NULL;
    if (end == NULL)
        return NULL;
    char *out = malloc((size_t)(end - v)); /* decoding never lengthens; the quotes make room */
    char *o = out;
    for (const char *p = v + 1; p < end - 1;) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        p++;
        char c = *p++;
        switch (c) {
        case 'b':
            *o++ = '\b';
            break;
        case 'f':
            *o++ = '\f';
            break;
        case 'n':
            *o++ = '\n';
            break;
        case 'r':
            *o++ = '\r';
            break;
        case 't':
            *o++ = '\t';
            break;
        case 'u': {
            unsigned cp = hex4(p);
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && p[0] == '\\' && p[1] == 'u') {
                unsigned low = hex4(p + 2);
                if (low >= 0xDC00 && low <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    p += 6;
                }
            }
            o = utf8_put(o, cp);
            break;
        }
        default:
            *o++ = c;
            break;
        }
    }
    *o = '\0';
    return out;
}

void json_members(const char *obj, struct json_member *m)
{
    m->key = NULL;
    m->value = NULL;
    m->rest = obj && *obj == '{' ? json_ws(obj + 1) : NULL;
}

bool json_member_next(struct json_member *m)
{
    free(m->key);
    m->key = NULL;
    if (m->rest == NULL || *m->rest != '"')
        return false;
    m->key = json_string_dup(m->rest);
    const char *p = json_ws(json_skip_string(m->rest)); /* at ':' */
    m->value = json_ws(p + 1);
    p = json_ws(json_skip_value(m->value, 0));
    m->rest = *p == ',' ? json_ws(p + 1) : p;
    return true;
}

const char *json_get(const char *obj, const char *key)
{
    struct json_member m;
    json_members(obj, &m);
    while (json_member_next(&m))
        if (strcmp(m.key, key) == 0) {
            free(m.key);
            return m.value;
        }
    return NULL;
}

/* The value at a dotted path of object keys ("workers.alive"), or NULL. */
const char *json_at(const char *v, const char *path)
{
    char part[64];
    while (v && *path) {
        size_t n = strcspn(path, ".");
        snprintf(part, sizeof part, "%.*s", (int)n, path);
        v = json_get(v, part);
        path += n + (path[n] == '.');
    }
    return v;
}

long long json_int_at(const char *v, const char *path)
{
    v = json_at(v, path);
    if (v == NULL || !(is_digit(*v) || *v == '-'))
        return JSONCHECK_MISSING;
    char *end;
    long long x = strtoll(v, &end, 10);
    return *end == '.' || *end == 'e' || *end == 'E' ? JSONCHECK_MISSING : x;
}

double json_double_at(const char *v, const char *path)
{
    v = json_at(v, path);
    return v && (is_digit(*v) || *v == '-') ? strtod(v, NULL) : -1e300;
}

/* Whether the value at path is the literal lit (true, false, null). */
bool json_is_at(const char *v, const char *path, const char *lit)
{
    v = json_at(v, path);
    size_t n = strlen(lit);
    return v && strncmp(v, lit, n) == 0 && !is_digit(v[n]) && !(v[n] >= 'a' && v[n] <= 'z');
}

/* The decoded string at path, malloc'ed; NULL when absent or not a string. */
char *json_str_at(const char *v, const char *path)
{
    return json_string_dup(json_at(v, path));
}

bool json_str_at_eq(const char *v, const char *path, const char *want)
{
    char *s = json_str_at(v, path);
    bool eq = s && want && strcmp(s, want) == 0;
    free(s);
    return eq;
}

/* The object's keys, comma-separated, leaving out those listed in skip (",a,b,"). */
void json_keys(const char *obj, const char *skip, char *out, size_t cap)
{
    struct json_member m;
    size_t n = 0;
    char probe[80];
    out[0] = '\0';
    json_members(obj, &m);
    while (json_member_next(&m)) {
        snprintf(probe, sizeof probe, ",%s,", m.key);
        if (skip && strstr(skip, probe))
            continue;
        int w = snprintf(out + n, cap - n, "%s%s", n ? "," : "", m.key);
        if (w > 0 && (size_t)w < cap - n)
            n += (size_t)w;
    }
}

/* Keys in strictly increasing bytewise order (strcmp compares as unsigned char). */
bool json_keys_sorted(const char *obj)
{
    struct json_member m;
    char *prev = NULL;
    bool sorted = true;
    json_members(obj, &m);
    while (json_member_next(&m)) {
        if (prev && strcmp(prev, m.key) >= 0)
            sorted = false;
        free(prev);
        prev = strdup(m.key);
    }
    free(prev);
    return sorted;
}

const char *json_first(const char *arr)
{
    if (arr == NULL || *arr != '[')
        return NULL;
    const char *p = json_ws(arr + 1);
    return *p == ']' ? NULL : p;
}

const char *json_next(const char *v)
{
    const char *p = json_ws(json_skip_value(v, 0));
    return *p == ',' ? json_ws(p + 1) : NULL;
}

long json_length(const char *arr)
{
    if (arr == NULL || *arr != '[')
        return -1;
    long n = 0;
    for (const char *v = json_first(arr); v; v = json_next(v))
        n++;
    return n;
}
