/* SPDX-License-Identifier: ISC */
/*
 * buf: a growable byte buffer, the one place response bodies and JSON are written into.
 *
 * Appends never fail from the caller's point of view: on allocation failure the buffer
 * remembers it (failed = true) and ignores further appends, and whoever sends the buffer
 * answers 500 instead. That keeps every writer free of error plumbing.
 */
#ifndef MESHGATE_BUF_H
#define MESHGATE_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

struct mg_buf {
    char *data;
    size_t len;
    size_t cap;
    bool failed;
};

void mg_buf_init(struct mg_buf *b);
void mg_buf_free(struct mg_buf *b);
void mg_buf_reset(struct mg_buf *b);
/* Gives the storage back when more than keep bytes are allocated (the contents are dropped):
 * a buffer that once held a large response does not hold its memory for the life of the
 * process (see "Memory" in docs/architecture.md). */
void mg_buf_shrink(struct mg_buf *b, size_t keep);
/* Makes room for n more bytes; false when out of memory. */
bool mg_buf_reserve(struct mg_buf *b, size_t n);
void mg_buf_append(struct mg_buf *b, const void *data, size_t n);
void mg_buf_puts(struct mg_buf *b, const char *s);
void mg_buf_putc(struct mg_buf *b, char c);
void mg_buf_printf(struct mg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mg_buf_vprintf(struct mg_buf *b, const char *fmt, va_list ap);
/* Drops the first n bytes (n <= len). */
void mg_buf_consume(struct mg_buf *b, size_t n);
/* A NUL-terminated view of the contents (the NUL is not counted in len). */
const char *mg_buf_cstr(struct mg_buf *b);

#endif
