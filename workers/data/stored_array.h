/* SPDX-License-Identifier: ISC */
/*
 * stored_array: a JSON array of strings as the database stores it (observations' path_json and
 * resolved_path), read without a JSON library and written again into an answer.
 */
#ifndef MESHGATE_STORED_ARRAY_H
#define MESHGATE_STORED_ARRAY_H

#include "buf.h"
#include "json.h"

#include <stdbool.h>
#include <stddef.h>

/*
 * Walks text as a flat JSON array of strings and nulls. With j, writes it as a JSON array
 * (tmp holds each decoded string; a lone surrogate escape becomes U+FFFD). Returns the number
 * of elements, or -1 when text is not such an array (then nothing has been written).
 */
long mg_stored_array_walk(const char *text, size_t len, struct mg_json *j, struct mg_buf *tmp);

/* Writes key and the stored array text when it is one, as /api/packets writes resolved_path:
 * false (nothing written) when text is NULL or not such an array, or empty and
 * null_when_empty. tmp is scratch space. */
bool mg_stored_array_write(struct mg_json *j, const char *key, const char *text, size_t len,
                           bool null_when_empty, struct mg_buf *tmp);

#endif
