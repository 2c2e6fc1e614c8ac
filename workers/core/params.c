/* SPDX-License-Identifier: ISC */
#include "params.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool mg_parse_int64(const char *s, int64_t *out)
{
    if (!s || !*s || !(*s == '-' || *s == '+' || (*s >= '0' && *s <= '9')))
        return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end)
        return false;
    if (errno == ERANGE)
        v = v < 0 ? INT64_MIN : INT64_MAX; /* well-formed but huge: clamped by the caller */
    *out = v;
    return true;
}

bool mg_parse_atoi(const char *s, int64_t *out)
{
    errno = 0;
    return mg_parse_int64(s, out) && errno != ERANGE;
}

bool mg_param_int(const struct mg_request *req, struct mg_response *res, const char *name,
                  int64_t def, int64_t min, int64_t max, int64_t *out)
{
    const char *value = mg_query_get(&req->query, name);
    if (!value || !*value) {
        *out = def;
        return true;
    }
    (void)res;
    int64_t v;
    if (!mg_parse_atoi(value, &v))
        v = def; /* Go's Atoi refuses it: CoreScope's queryInt takes the default */
    *out = v < min ? min : v > max ? max : v;
    return true;
}

bool mg_param_limit(const struct mg_request *req, struct mg_response *res, const char *name,
                    int64_t def, int64_t max, int64_t *out)
{
    (void)res;
    const char *value = mg_query_get(&req->query, name);
    int64_t v;
    if (!value || !mg_parse_atoi(value, &v) || v <= 0)
        v = def;
    *out = v > max ? max : v;
    return true;
}

bool mg_param_choice(const struct mg_request *req, struct mg_response *res, const char *name,
                     const char *const *allowed, int def, int *out)
{
    const char *value = mg_query_get(&req->query, name);
    if (!value || !*value) {
        *out = def;
        return true;
    }
    (void)res;
    *out = def;
    for (int i = 0; allowed[i]; i++)
        if (strcmp(value, allowed[i]) == 0)
            *out = i;
    return true;
}

const char *mg_param_str(const struct mg_request *req, const char *name)
{
    const char *value = mg_query_get(&req->query, name);
    return value && *value ? value : NULL;
}
