/* SPDX-License-Identifier: ISC */
/*
 * group_body: how a group table's body is written and read (group_table.h: the table stored,
 * serialized, in the shared result cache). Native byte order (one machine reads them). A text
 * is its length (UINT32_MAX: none) and its bytes. Apart from group_table.h, so that a table's
 * own module (region_table.h) encodes and decodes its body without the group's machinery.
 */
#ifndef MESHGATE_GROUP_BODY_H
#define MESHGATE_GROUP_BODY_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>

void mg_group_put_text(struct mg_buf *b, const char *s);

struct mg_group_reader {
    const unsigned char *at, *end;
    bool bad; /* set by a read past the end, or a text that cannot be allocated */
};

void mg_group_get(struct mg_group_reader *r, void *p, size_t n);
/* A text (NULL: none, or bad input, which sets r->bad). */
char *mg_group_get_text(struct mg_group_reader *r);

#endif
