/* SPDX-License-Identifier: ISC */
/*
 * params: reading query parameters the same way on every endpoint. An absent parameter
 * takes its default; a well-formed value out of range is clamped (as CoreScope does); a
 * malformed value is refused with a 400 that names the parameter and what it accepts
 * (CoreScope silently falls back to the default; meshgate tells the caller).
 *
 * Each reader returns true with *out set, or false after filling res with the 400.
 */
#ifndef MESHGATE_PARAMS_H
#define MESHGATE_PARAMS_H

#include "handler.h"

#include <stdbool.h>
#include <stdint.h>

bool mg_param_int(const struct mg_request *req, struct mg_response *res, const char *name,
                  int64_t def, int64_t min, int64_t max, int64_t *out);

/* One of allowed (NULL-terminated, exact match); *out is its index, def when absent. */
bool mg_param_choice(const struct mg_request *req, struct mg_response *res, const char *name,
                     const char *const *allowed, int def, int *out);

/* The raw value (NULL when absent or empty). */
const char *mg_param_str(const struct mg_request *req, const char *name);

/* Parses a whole decimal integer (optional sign, no spaces); false when malformed. */
bool mg_parse_int64(const char *s, int64_t *out);
/* As Go's strconv.Atoi, which CoreScope's handlers use: mg_parse_int64, but false out of range. */
bool mg_parse_atoi(const char *s, int64_t *out);

#endif
