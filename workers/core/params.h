/* SPDX-License-Identifier: ISC */
/*
 * params: each native route declares its query parameters once, in a table next to its
 * handler (struct mg_param_table): name, kind, default, bounds, and what a missing, empty,
 * malformed or out-of-range value does, with CoreScope's own behaviour written beside it.
 * Dispatch parses the request's query through the route's table once per request (a parked
 * request keeps the struct), into the route's typed struct (req->params); the route's heavy check
 * and its handler both read that struct (mg_params_get). A value the table refuses is answered 400
 * by dispatch, before any gate.
 *
 * The kinds, as CoreScope's handlers read their parameters (so that a page whose stored
 * filter holds an old or odd value works on meshgate as it does on CoreScope):
 *   MG_PARAM_INT    CoreScope's queryInt: absent, empty or malformed (Go's strconv.Atoi
 *                   refuses it): the default; then clamped into [min, max] (int64_t).
 *   MG_PARAM_LIMIT  CoreScope's clampLimit: absent, empty, malformed or below 1: the default;
 *                   above max: max (int64_t).
 *   MG_PARAM_CHOICE CoreScope's map lookups and string compares: the index of the value in
 *                   choices, the default (which may be -1) for anything else (int).
 *   MG_PARAM_TEXT   the value as given; NULL when absent or empty (const char *).
 *   MG_PARAM_REAL   Go's strconv.ParseFloat: the default when malformed or NaN (double).
 *   MG_PARAM_LIST   a comma list (struct mg_param_list): the one list rule of every route.
 *                   Each entry trimmed; empty entries (and "ALL" with MG_LIST_SKIP_ALL)
 *                   dropped; more than MG_PARAM_LIST_MAX entries: 400 (CoreScope takes any
 *                   number; meshgate bounds a request's work: a deliberate difference).
 * With MG_PARAM_BAD_400 a malformed value, with MG_PARAM_RANGE_400 an out-of-range one, is
 * answered 400 instead: where CoreScope does so too (scope-stats' window), or where CoreScope
 * crashes or answers something other than asked (a negative offset on /api/packets panics its
 * handler); the table says which beside the parameter.
 */
#ifndef MESHGATE_PARAMS_H
#define MESHGATE_PARAMS_H

#include "comma_list.h"
#include "handler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

enum mg_param_kind {
    MG_PARAM_INT,
    MG_PARAM_LIMIT,
    MG_PARAM_CHOICE,
    MG_PARAM_TEXT,
    MG_PARAM_REAL,
    MG_PARAM_LIST,
};

/* flags */
#define MG_PARAM_BAD_400 1u    /* malformed (or, for a choice, unknown): 400, not the default */
#define MG_PARAM_RANGE_400 16u /* INT: out of [min, max]: 400, not clamped */
#define MG_PARAM_REQUIRED 2u   /* absent or empty: 400; `sample` is a value that answers */
/* MG_LIST_SKIP_ALL (4u, comma_list.h): LIST: "ALL" (any case) is no entry */
#define MG_LIST_KEEP_EMPTY 8u /* LIST: a list with no entry left stays (count 0), not absent */

/* The most entries a list parameter may hold. */
#define MG_PARAM_LIST_MAX 64

/* A list parameter: its entries are read again with mg_param_list_split(text, ...). */
struct mg_param_list {
    const char *text; /* the raw value; NULL when absent, or when no entry is left */
    int count;        /* entries, at most MG_PARAM_LIST_MAX */
};

struct mg_param {
    const char *name;
    enum mg_param_kind kind;
    size_t offset; /* of the value in the route's struct (offsetof) */
    int64_t def;   /* INT, LIMIT: the default; CHOICE: the default index (-1: none) */
    int64_t min, max;
    const char *const *choices; /* CHOICE: NULL-terminated, exact match */
    unsigned flags;
    /* A value the home page's link sets (strftime(3) format, of the time an hour ago): for a
     * required parameter, or one without which the answer is empty. NULL: not linked. */
    const char *sample;
    const char *corescope; /* what CoreScope does with it: missing / empty / malformed / out of
                              range, and where meshgate differs, why */
    double real_def;       /* REAL: the default */
};

struct mg_param_table {
    const struct mg_param *params;
    unsigned count;
    size_t size; /* of the route's struct: at most MG_PARAMS_BYTES */
};

/* A route's table of array for its struct type (which must fit MG_PARAMS_BYTES: checked when
 * it is compiled). */
#define MG_PARAM_TABLE(type, array)                                                                \
    {                                                                                              \
        (array), sizeof(array) / sizeof((array)[0]),                                               \
            sizeof(type) + 0 * sizeof(char[sizeof(type) <= MG_PARAMS_BYTES ? 1 : -1])              \
    }

/* The route's struct for req: the one dispatch parsed through t (req->params), or, for a
 * request that did not come through dispatch with t, own (t->size bytes) parsed now. NULL
 * with a 400 in res (when not NULL) for a value t refuses. */
const void *mg_params_get(const struct mg_param_table *t, const struct mg_request *req,
                          struct mg_response *res, void *own);

/* Parses req's query through t into out (t->size bytes, zeroed first). False with a 400 in
 * res (when res is not NULL) for a value the table refuses. */
bool mg_params_parse(const struct mg_param_table *t, const struct mg_request *req,
                     struct mg_response *res, void *out);
/* The same into req->params, remembering t (a copy of the request parses again with it). */
bool mg_params_parse_request(const struct mg_param_table *t, struct mg_request *req,
                             struct mg_response *res);

/* Moves the text and list values of params (parsed through t) that point into the query
 * buffer from (len bytes) to the same places in its copy to: a copy of the request keeps its
 * parameters without parsing them again. */
void mg_params_rebase(const struct mg_param_table *t, void *params, const char *from, size_t len,
                      const char *to);

/* "?name=sample&..." of t's parameters that have a sample (each formatted by strftime(3) with
 * tm), or "" when none has: a query that answers, for the home page. */
void mg_params_sample_query(const struct mg_param_table *t, const struct tm *tm, char *out,
                            size_t cap);

/* A region list's codes (split as MG_LIST_SKIP_ALL), uppercased, comma-separated into out
 * (cap bytes); false when they do not fit. */
bool mg_param_list_codes(const char *list, char *out, size_t cap);

/* The raw value (NULL when absent or empty). */
const char *mg_param_str(const struct mg_request *req, const char *name);

/* Parses a whole decimal integer (optional sign, no spaces); false when malformed. A
 * well-formed but huge one is clamped to INT64_MIN or INT64_MAX. */
bool mg_parse_int64(const char *s, int64_t *out);
/* As Go's strconv.Atoi, which CoreScope's handlers use: mg_parse_int64, but false out of range. */
bool mg_parse_atoi(const char *s, int64_t *out);

#endif
