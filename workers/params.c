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
    int64_t v;
    if (!mg_parse_int64(value, &v)) {
        mg_response_error(res, 400, "invalid %s \"%.40s\": expected a whole number (%lld to %lld)",
                          name, value, (long long)min, (long long)max);
        return false;
    }
    *out = v < min ? min : v > max ? max : v;
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
    char list[256] = "";
    for (int i = 0; allowed[i]; i++) {
        if (strcmp(value, allowed[i]) == 0) {
            *out = i;
            return true;
        }
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", allowed[i]);
    }
    mg_response_error(res, 400, "invalid %s \"%.40s\": expected one of %s", name, value, list);
    return false;
}

const char *mg_param_str(const struct mg_request *req, const char *name)
{
    const char *value = mg_query_get(&req->query, name);
    return value && *value ? value : NULL;
}
