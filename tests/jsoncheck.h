/* SPDX-License-Identifier: ISC */
/*
 * jsoncheck: a strict JSON reader for tests (RFC 8259, with UTF-8 checked). It validates
 * without building a tree, then reads values in place by dotted paths. Used by the real-data
 * suite (test_fixture_e2e.c) and the dashboard checks (test_dashboards.c).
 */
#ifndef MESHGATE_TEST_JSONCHECK_H
#define MESHGATE_TEST_JSONCHECK_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define JSONCHECK_MISSING LLONG_MIN

struct json_member {
    char *key;         /* decoded; freed by the next call */
    const char *value; /* where the member's value starts */
    const char *rest;  /* where the following member starts, or the closing brace */
};

/* Past JSON white space. */
const char *json_ws(const char *p);
/* Each skip_* returns the end of the token at p, or NULL when it is not strict JSON. */
const char *json_skip_string(const char *p);
const char *json_skip_number(const char *p);
/* The end of the value at p (objects and arrays nested at most 64 deep), or NULL. */
const char *json_skip_value(const char *p, int depth);
/* One JSON value that starts the body, then exactly one "\n", and nothing else. */
bool json_body_is_strict(const char *body, size_t len);
/* The decoded text of the JSON string at v (malloc'ed), or NULL when v is not a string.
 * The readers below assume text that passed json_skip_value. */
char *json_string_dup(const char *v);
/* Walks an object's members: json_members, then json_member_next until false. */
void json_members(const char *obj, struct json_member *m);
bool json_member_next(struct json_member *m);
const char *json_get(const char *obj, const char *key);
/* The value at a dotted path of object keys ("workers.alive"), or NULL. */
const char *json_at(const char *v, const char *path);
/* The integer at path, or JSONCHECK_MISSING. */
long long json_int_at(const char *v, const char *path);
double json_double_at(const char *v, const char *path);
/* Whether the value at path is the literal lit (true, false, null). */
bool json_is_at(const char *v, const char *path, const char *lit);
/* The decoded string at path, malloc'ed; NULL when absent or not a string. */
char *json_str_at(const char *v, const char *path);
bool json_str_at_eq(const char *v, const char *path, const char *want);
/* The object's keys, comma-separated, leaving out those listed in skip (",a,b,"). */
void json_keys(const char *obj, const char *skip, char *out, size_t cap);
/* Keys in strictly increasing bytewise order. */
bool json_keys_sorted(const char *obj);
/* Array elements: json_first, then json_next until NULL. */
const char *json_first(const char *arr);
const char *json_next(const char *v);
/* Elements of the array at arr, or -1 when it is not an array. */
long json_length(const char *arr);

#endif
