/* SPDX-License-Identifier: ISC */
/*
 * stored_array: a JSON array of strings as the database stores it (observations' path_json and
 * resolved_path), read without a JSON library and written again into an answer: the endpoints
 * that list packets, their detail and the observers' pages write it alike.
 */
#include "stored_array.h"

#include "text.h"

#include <string.h>

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static const char *skip_blanks(const char *p, const char *end)
{
    while (p < end && is_blank(*p))
        p++;
    return p;
}

static bool read_u16(const char *p, const char *end, unsigned *out)
{
    if (end - p < 4)
        return false;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = mg_hex_digit((unsigned char)p[i]);
        if (h < 0)
            return false;
        v = v << 4 | (unsigned)h;
    }
    *out = v;
    return true;
}

static void put_utf8(struct mg_buf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18);
        u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    mg_buf_append(b, u, n);
}

/*
 * Reads one JSON string starting after its opening quote; with out, appends the decoded
 * bytes (a lone surrogate escape becomes U+FFFD). Returns the position after the closing
 * quote, or NULL when the string is malformed.
 */
static const char *read_string(const char *p, const char *end, struct mg_buf *out)
{
    while (p < end) {
        const char *run = p;
        while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
            p++;
        if (out && p > run)
            mg_buf_append(out, run, (size_t)(p - run));
        if (p >= end)
            break;
        unsigned char c = (unsigned char)*p++;
        if (c == '"')
            return p;
        if (c < 0x20)
            return NULL;
        if (p >= end)
            return NULL;
        char e = *p++;
        unsigned cp;
        switch (e) {
        case '"':
        case '\\':
        case '/':
            cp = (unsigned char)e;
            break;
        case 'b':
            cp = '\b';
            break;
        case 'f':
            cp = '\f';
            break;
        case 'n':
            cp = '\n';
            break;
        case 'r':
            cp = '\r';
            break;
        case 't':
            cp = '\t';
            break;
        case 'u':
            if (!read_u16(p, end, &cp))
                return NULL;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned low;
                if (end - p >= 6 && p[0] == '\\' && p[1] == 'u' && read_u16(p + 2, end, &low) &&
                    low >= 0xDC00 && low <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    p += 6;
                } else {
                    cp = 0xFFFD;
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                cp = 0xFFFD;
            }
            break;
        default:
            return NULL;
        }
        if (out)
            put_utf8(out, cp);
    }
    return NULL;
}

/*
 * Walks text as a flat JSON array of strings and nulls. With j, writes it as a JSON array
 * (tmp holds each decoded string). Returns the number of elements, or -1 when text is not
 * such an array (then nothing has been written).
 */
long mg_stored_array_walk(const char *text, size_t len, struct mg_json *j, struct mg_buf *tmp)
{
    const char *p = text, *end = text + len;
    p = skip_blanks(p, end);
    if (p >= end || *p++ != '[')
        return -1;
    if (j)
        mg_json_array_begin(j);
    long count = 0;
    p = skip_blanks(p, end);
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            p = skip_blanks(p, end);
            if (p < end && *p == '"') {
                if (tmp)
                    mg_buf_reset(tmp);
                p = read_string(p + 1, end, j ? tmp : NULL);
                if (!p)
                    return -1;
                if (j)
                    mg_json_string_n(j, tmp->data ? tmp->data : "", tmp->len);
            } else if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
                p += 4;
                if (j)
                    mg_json_null(j);
            } else {
                return -1;
            }
            count++;
            p = skip_blanks(p, end);
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            if (p < end && *p == ']') {
                p++;
                break;
            }
            return -1;
        }
    }
    if (skip_blanks(p, end) != end)
        return -1;
    if (j)
        mg_json_array_end(j);
    return count;
}

/* Writes a stored array when it is one: false (nothing written) when absent or malformed,
 * or empty and null_when_empty. */
bool mg_stored_array_write(struct mg_json *j, const char *key, const char *text, size_t len,
                           bool null_when_empty, struct mg_buf *tmp)
{
    long n = text ? mg_stored_array_walk(text, len, NULL, NULL) : -1;
    if (n < 0 || (n == 0 && null_when_empty))
        return false;
    mg_json_key(j, key);
    mg_stored_array_walk(text, len, j, tmp);
    return true;
}
