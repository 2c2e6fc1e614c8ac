/* SPDX-License-Identifier: ISC */
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mg_buf_init(struct mg_buf *b)
{
    memset(b, 0, sizeof *b);
}

void mg_buf_free(struct mg_buf *b)
{
    free(b->data);
    mg_buf_init(b);
}

void mg_buf_reset(struct mg_buf *b)
{
    b->len = 0;
    b->failed = false;
}

void mg_buf_shrink(struct mg_buf *b, size_t keep)
{
    if (b->cap > keep)
        mg_buf_free(b);
    else
        mg_buf_reset(b);
}

bool mg_buf_reserve(struct mg_buf *b, size_t n)
{
    if (b->failed)
        return false;
    /* Keep one spare byte so mg_buf_cstr can always terminate. */
    if (b->len + n + 1 <= b->cap)
        return true;
    size_t want = b->cap ? b->cap : 256;
    while (want < b->len + n + 1) {
        if (want > ((size_t)-1) / 2) {
            b->failed = true;
            return false;
        }
        want *= 2;
    }
    char *p = realloc(b->data, want);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = want;
    return true;
}

void mg_buf_append(struct mg_buf *b, const void *data, size_t n)
{
    if (n == 0 || !mg_buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, data, n);
    b->len += n;
}

void mg_buf_puts(struct mg_buf *b, const char *s)
{
    mg_buf_append(b, s, strlen(s));
}

void mg_buf_putc(struct mg_buf *b, char c)
{
    if (!mg_buf_reserve(b, 1))
        return;
    b->data[b->len++] = c;
}

void mg_buf_vprintf(struct mg_buf *b, const char *fmt, va_list ap)
{
    char small[256];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) {
        va_end(ap2);
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        mg_buf_append(b, small, (size_t)n);
    } else if (mg_buf_reserve(b, (size_t)n)) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

void mg_buf_printf(struct mg_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mg_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void mg_buf_consume(struct mg_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

const char *mg_buf_cstr(struct mg_buf *b)
{
    if (!mg_buf_reserve(b, 0))
        return "";
    b->data[b->len] = '\0';
    return b->data;
}
