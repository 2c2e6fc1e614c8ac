/* SPDX-License-Identifier: ISC */
/*
 * time_parse: RFC 3339 text as CoreScope writes it ("2026-05-17T18:13:27.123Z", with a
 * fraction or an offset, a space for the T) to Unix milliseconds. The parse keeps the text's
 * shape, so that the fixture generator (tools/fixture) can write a shifted value back the
 * same way.
 */
#ifndef MESHGATE_TIME_PARSE_H
#define MESHGATE_TIME_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The shape of one RFC 3339 value, so a shifted value can be written back the same way. */
struct mg_rfc3339_shape {
    char separator;      /* 'T', 't' or ' ' */
    int fraction_digits; /* 0..9 */
    char extra[8];       /* fraction digits beyond milliseconds, kept verbatim */
    char zone;           /* 'Z', 'z', or '+' / '-' with offset_minutes */
    int offset_minutes;
};

/* Parses "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)" (a space may replace the T) into
 * milliseconds since the epoch, and its shape. Returns false for anything else. */
bool mg_rfc3339_parse_shaped(const char *s, size_t len, int64_t *ms,
                             struct mg_rfc3339_shape *shape);
/* The same without the shape; false for NULL. */
bool mg_rfc3339_parse_ms(const char *text, size_t len, int64_t *ms);

/* RFC 3339 text ("2026-05-17T18:13:27Z", with a fraction or an offset) to Unix ms; false for
 * NULL (the node endpoints, the relay table and the hash sizes read stored times with it). */
bool mg_node_parse_time_ms(const char *text, int64_t *ms);

#endif
