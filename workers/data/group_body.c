/* SPDX-License-Identifier: ISC */
#include "group_body.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NO_TEXT UINT32_MAX

void mg_group_put_text(struct mg_buf *b, const char *s)
{
    uint32_t n = s ? (uint32_t)strlen(s) : NO_TEXT;
    mg_buf_append(b, &n, sizeof n);
    if (s)
        mg_buf_append(b, s, n);
}

void mg_group_get(struct mg_group_reader *r, void *p, size_t n)
{
    if (r->bad || (size_t)(r->end - r->at) < n) {
        r->bad = true;
        memset(p, 0, n);
        return;
    }
    memcpy(p, r->at, n);
    r->at += n;
}

char *mg_group_get_text(struct mg_group_reader *r)
{
    uint32_t n;
    mg_group_get(r, &n, sizeof n);
    if (r->bad || n == NO_TEXT)
        return NULL;
    char *s = (size_t)(r->end - r->at) >= n ? malloc((size_t)n + 1) : NULL;
    if (!s) {
        r->bad = true;
        return NULL;
    }
    memcpy(s, r->at, n);
    s[n] = '\0';
    r->at += n;
    return s;
}
