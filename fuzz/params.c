/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: query parameters (workers/core/params.c) as every endpoint reads them. The input
 * is a raw query string; it is split and decoded as the dispatcher does, then parsed through a
 * table holding every kind of parameter. Checks: an accepted integer lies within its bounds (a
 * limit too), a refusal is a 400 whose body is valid JSON, a choice is one of the allowed
 * values, a list's entries are trimmed and never empty, and mg_parse_int64 agrees with strtoll
 * on what it accepts.
 */
#include "json_check.h"
#include "params.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_refusal(struct mg_response *res)
{
    if (res->status != 400 || !json_is_valid(mg_buf_cstr(&res->body), res->body.len))
        abort();
    mg_response_reset(res);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    char *raw = malloc(size ? size : 1);
    memcpy(raw, data, size);
    size_t cap = 2 * size + 2;
    char *storage = malloc(cap);
    struct mg_request req;
    memset(&req, 0, sizeof req);
    const char *why = NULL;
    if (mg_query_parse(&req.query, raw, size, storage, cap, &why) != 0) {
        if (!why)
            abort();
        goto done;
    }
    struct mg_response res;
    mg_response_init(&res);
    /* A table with every kind, as routes declare them. */
    struct every {
        int64_t limit, offset, days, strict;
        int order, window;
        const char *text;
        double score;
        struct mg_param_list list, kept;
    } got;
    static const char *const orders[] = {"desc", "asc", NULL};
    static const char *const windows[] = {"1h", "24h", "7d", NULL};
#define P(field) .offset = offsetof(struct every, field)
    static const struct mg_param every_param[] = {
        {.name = "limit", .kind = MG_PARAM_LIMIT, P(limit), .def = 50, .min = 1, .max = 2000},
        {.name = "offset", .kind = MG_PARAM_INT, P(offset), .min = 0, .max = INT64_MAX},
        {.name = "days", .kind = MG_PARAM_INT, P(days), .def = 7, .min = 1, .max = 30},
        {.name = "strict",
         .kind = MG_PARAM_INT,
         P(strict),
         .min = 0,
         .max = 100,
         .flags = MG_PARAM_RANGE_400},
        {.name = "order", .kind = MG_PARAM_CHOICE, P(order), .choices = orders},
        {.name = "window",
         .kind = MG_PARAM_CHOICE,
         P(window),
         .choices = windows,
         .def = 1,
         .flags = MG_PARAM_BAD_400},
        {.name = "text", .kind = MG_PARAM_TEXT, P(text)},
        {.name = "score", .kind = MG_PARAM_REAL, P(score)},
        {.name = "region", .kind = MG_PARAM_LIST, P(list), .flags = MG_LIST_SKIP_ALL},
        {.name = "nodes", .kind = MG_PARAM_LIST, P(kept), .flags = MG_LIST_KEEP_EMPTY},
    };
#undef P
    static const struct mg_param_table every = MG_PARAM_TABLE(struct every, every_param);
    if (mg_params_parse(&every, &req, &res, &got)) {
        /* CoreScope's readers never refuse these: each value stays in its bounds */
        if (got.limit < 1 || got.limit > 2000 || got.offset < 0 || got.days < 1 || got.days > 30 ||
            got.strict < 0 || got.strict > 100 || got.order < 0 || got.order > 1 ||
            got.window < 0 || got.window > 2 || (got.text && !*got.text) || got.list.count < 0 ||
            got.list.count > MG_PARAM_LIST_MAX || (got.list.text && got.list.count == 0) ||
            got.kept.count > MG_PARAM_LIST_MAX || isnan(got.score))
            abort();
        struct mg_list_item items[MG_PARAM_LIST_MAX];
        int n = mg_param_list_split(got.list.text, MG_LIST_SKIP_ALL, items, MG_PARAM_LIST_MAX);
        for (int i = 0; i < n; i++)
            if (items[i].len == 0 || items[i].ptr[0] == ' ' ||
                items[i].ptr[items[i].len - 1] == ',')
                abort();
    } else {
        check_refusal(&res);
    }
    for (size_t i = 0; i < req.query.count; i++) {
        const char *s = mg_param_str(&req, req.query.param[i].name);
        if (s && !*s)
            abort();
        int64_t v;
        const char *value = req.query.param[i].value;
        if (mg_parse_int64(value, &v)) {
            errno = 0;
            char *end;
            long long want = strtoll(value, &end, 10);
            if (*end || (errno == 0 && want != v))
                abort();
        }
    }
    mg_response_free(&res);
done:
    free(storage);
    free(raw);
    return 0;
}
