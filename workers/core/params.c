/* SPDX-License-Identifier: ISC */
#include "params.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

const char *mg_param_str(const struct mg_request *req, const char *name)
{
    const char *value = mg_query_get(&req->query, name);
    return value && *value ? value : NULL;
}

bool mg_param_list_codes(const char *list, char *out, size_t cap)
{
    struct mg_list_item items[MG_PARAM_LIST_MAX];
    int n = mg_param_list_split(list, MG_LIST_SKIP_ALL, items, MG_PARAM_LIST_MAX);
    size_t used = 0;
    for (int i = 0; i < n && i < MG_PARAM_LIST_MAX; i++) {
        if (used + items[i].len + 2 > cap)
            return false;
        if (used)
            out[used++] = ',';
        for (size_t k = 0; k < items[i].len; k++)
            out[used++] = (char)toupper((unsigned char)items[i].ptr[k]);
    }
    if (cap)
        out[used] = '\0';
    return true;
}

static bool refuse(struct mg_response *res, const struct mg_param *p, const char *value)
{
    if (res) {
        if (p->flags & MG_PARAM_REQUIRED && !value)
            mg_response_error(res, 400, "%s required", p->name); /* CoreScope's words */
        else if (p->kind == MG_PARAM_LIST)
            mg_response_error(res, 400, "invalid %s: expected at most %d comma-separated entries",
                              p->name, MG_PARAM_LIST_MAX);
        else if (p->kind == MG_PARAM_CHOICE) {
            char allowed[256];
            size_t used = 0;
            allowed[0] = '\0';
            int n = 0;
            while (p->choices[n])
                n++;
            for (int i = 0; i < n && used < sizeof allowed; i++) /* "1h, 24h, or 7d" */
                used += (size_t)snprintf(allowed + used, sizeof allowed - used, "%s%s",
                                         i == 0      ? ""
                                         : i < n - 1 ? ", "
                                         : n > 2     ? ", or "
                                                     : " or ",
                                         p->choices[i]);
            mg_response_error(res, 400, "%s must be %s", p->name, allowed);
        } else if (p->max == INT64_MAX)
            mg_response_error(res, 400, "invalid %s: expected a whole number of at least %lld",
                              p->name, (long long)p->min);
        else
            mg_response_error(res, 400, "invalid %s: expected a whole number from %lld to %lld",
                              p->name, (long long)p->min, (long long)p->max);
    }
    return false;
}

static bool parse_one(const struct mg_param *p, const struct mg_request *req,
                      struct mg_response *res, char *base)
{
    const char *value = mg_param_str(req, p->name);
    bool strict = p->flags & MG_PARAM_BAD_400;
    if (!value && (p->flags & MG_PARAM_REQUIRED))
        return refuse(res, p, NULL);
    switch (p->kind) {
    case MG_PARAM_INT:
    case MG_PARAM_LIMIT: {
        int64_t v = p->def;
        if (value && !mg_parse_atoi(value, &v)) {
            if (strict)
                return refuse(res, p, value);
            v = p->def; /* Go's Atoi refuses it: CoreScope takes the default */
        }
        if (p->kind == MG_PARAM_LIMIT && v <= 0)
            v = p->def; /* clampLimit: zero or negative is the default */
        if (value && (p->flags & MG_PARAM_RANGE_400) && (v < p->min || v > p->max))
            return refuse(res, p, value);
        v = v < p->min ? p->min : v > p->max ? p->max : v;
        memcpy(base + p->offset, &v, sizeof v);
        return true;
    }
    case MG_PARAM_CHOICE: {
        int v = (int)p->def;
        bool known = false;
        for (int i = 0; value && p->choices[i]; i++)
            if (strcmp(value, p->choices[i]) == 0)
                v = i, known = true;
        if (value && !known && strict)
            return refuse(res, p, value);
        memcpy(base + p->offset, &v, sizeof v);
        return true;
    }
    case MG_PARAM_TEXT:
        memcpy(base + p->offset, &value, sizeof value);
        return true;
    case MG_PARAM_REAL: {
        double v = p->real_def;
        if (value) {
            /* As Go's ParseFloat: no leading blank; too large (past the largest double) is an
             * error, not infinity; NaN reads as the default (CoreScope filters nothing on it) */
            char *end;
            errno = 0;
            double d = strtod(value, &end);
            bool overflow = errno == ERANGE && isinf(d);
            if (!*end && end != value && !isspace((unsigned char)value[0]) && !isnan(d) &&
                !overflow)
                v = d;
            else if (strict)
                return refuse(res, p, value);
        }
        memcpy(base + p->offset, &v, sizeof v);
        return true;
    }
    case MG_PARAM_LIST: {
        struct mg_param_list *l = (struct mg_param_list *)(void *)(base + p->offset);
        l->count = value ? mg_param_list_split(value, p->flags, NULL, 0) : 0;
        if (l->count > MG_PARAM_LIST_MAX)
            return refuse(res, p, value);
        l->text = value && (l->count > 0 || (p->flags & MG_LIST_KEEP_EMPTY)) ? value : NULL;
        return true;
    }
    }
    return true;
}

bool mg_params_parse(const struct mg_param_table *t, const struct mg_request *req,
                     struct mg_response *res, void *out)
{
    memset(out, 0, t->size);
    for (unsigned i = 0; i < t->count; i++)
        if (!parse_one(&t->params[i], req, res, out))
            return false;
    return true;
}

bool mg_params_parse_request(const struct mg_param_table *t, struct mg_request *req,
                             struct mg_response *res)
{
    req->param_table = t;
    if (!t)
        return true;
    if (t->size > sizeof req->params) {
        if (res)
            mg_response_error(res, 500, "a route's parameters do not fit the request");
        return false;
    }
    if (req->park)
        req->park->param_parses++;
    return mg_params_parse(t, req, res, req->params);
}

static void rebase_one(const char **value, const char *from, size_t len, const char *to)
{
    if (*value && *value >= from && *value < from + len)
        *value = to + (*value - from);
}

void mg_params_rebase(const struct mg_param_table *t, void *params, const char *from, size_t len,
                      const char *to)
{
    for (unsigned i = 0; t && i < t->count; i++) {
        const struct mg_param *p = &t->params[i];
        char *at = (char *)params + p->offset;
        if (p->kind == MG_PARAM_TEXT)
            rebase_one((const char **)(void *)at, from, len, to);
        else if (p->kind == MG_PARAM_LIST)
            rebase_one(&((struct mg_param_list *)(void *)at)->text, from, len, to);
    }
}

const void *mg_params_get(const struct mg_param_table *t, const struct mg_request *req,
                          struct mg_response *res, void *own)
{
    if (req->param_table == t)
        return req->params;
    if (req->park)
        req->park->param_parses++;
    return mg_params_parse(t, req, res, own) ? own : NULL;
}

void mg_params_sample_query(const struct mg_param_table *t, const struct tm *tm, char *out,
                            size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (unsigned i = 0; t && i < t->count && used < cap; i++) {
        const struct mg_param *p = &t->params[i];
        if (!p->sample)
            continue;
        char value[64];
        if (strftime(value, sizeof value, p->sample, tm) == 0)
            continue;
        int n = snprintf(out + used, cap - used, "%c%s=%s", used ? '&' : '?', p->name, value);
        if (n < 0 || (size_t)n >= cap - used) {
            out[used] = '\0';
            break;
        }
        used += (size_t)n;
    }
}
