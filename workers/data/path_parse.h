/* SPDX-License-Identifier: ISC */
/*
 * path_parse: a transmission's stored path (observations.path_json, resolved_path), a JSON
 * array of hop prefixes, split into its hops; used by the node paths, the relay table and the
 * neighbour graph.
 */
#ifndef MESHGATE_PATH_PARSE_H
#define MESHGATE_PATH_PARSE_H

#include <stddef.h>

/* A JSON array of strings and nulls (a path or a resolved path): each element's text
 * (NULL for null) into out, at most max; -1 when it is not such an array (or a string has an
 * escape). Copies into buf, cap bytes. */
int mg_path_split(const char *s, char *buf, size_t cap, char **out, int max);

#endif
