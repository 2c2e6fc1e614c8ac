/* SPDX-License-Identifier: ISC */
/*
 * params: reading query parameters the same way on every endpoint, as CoreScope's handlers
 * read them, so that a page whose stored filter holds an old or odd value works on meshgate
 * as it does on CoreScope:
 *   limit   (mg_param_limit) CoreScope's clampLimit: absent, empty, malformed or below 1: the
 *           default; above the maximum: the maximum.
 *   numbers (mg_param_int) CoreScope's queryInt: absent, empty or malformed (Go's Atoi
 *           refuses it): the default; then clamped into [min, max] where CoreScope clamps
 *           (or, where CoreScope would crash or misbehave, where meshgate keeps it sane:
 *           a negative offset reads as 0; CoreScope's handler panics on it).
 *   choices (mg_param_choice) CoreScope's map lookups and string compares: an unknown value
 *           is the default.
 * None of them refuses: the error path (a false return with a 400 in res) is kept for
 * readers that must refuse and for callers written against it.
 */
#ifndef MESHGATE_PARAMS_H
#define MESHGATE_PARAMS_H

#include "handler.h"

#include <stdbool.h>
#include <stdint.h>

bool mg_param_int(const struct mg_request *req, struct mg_response *res, const char *name,
                  int64_t def, int64_t min, int64_t max, int64_t *out);

/* CoreScope's clampLimit: def unless a whole number of at least 1; at most max. */
bool mg_param_limit(const struct mg_request *req, struct mg_response *res, const char *name,
                    int64_t def, int64_t max, int64_t *out);

/* One of allowed (NULL-terminated, exact match); *out is its index, def when absent or
 * anything else. */
bool mg_param_choice(const struct mg_request *req, struct mg_response *res, const char *name,
                     const char *const *allowed, int def, int *out);

/* The raw value (NULL when absent or empty). */
const char *mg_param_str(const struct mg_request *req, const char *name);

/* Parses a whole decimal integer (optional sign, no spaces); false when malformed. */
bool mg_parse_int64(const char *s, int64_t *out);
/* As Go's strconv.Atoi, which CoreScope's handlers use: mg_parse_int64, but false out of range. */
bool mg_parse_atoi(const char *s, int64_t *out);

#endif
