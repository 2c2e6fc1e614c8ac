/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: query parameters (workers/core/params.c) as every endpoint reads them. The input
 * is a raw query string; it is split and decoded as the dispatcher does, then read with each
 * reader. Checks: an accepted integer lies within its bounds (a limit too), a refusal is a 400
 * whose body is valid JSON, a choice is one of the allowed values, and mg_parse_int64 agrees with
 * strtoll on what it accepts.
 */
#include "json_check.h"
#include "params.h"

#include <errno.h>
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
    static const struct {
        const char *name;
        int64_t def, min, max;
    } ints[] = {
        {"limit", 50, 1, 2000},       {"offset", 0, 0, INT64_MAX},
        {"days", 7, 1, 30},           {"since", 0, INT64_MIN, INT64_MAX},
        {"lastHeard", 0, 0, 1000000},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t v;
        if (mg_param_int(&req, &res, ints[i].name, ints[i].def, ints[i].min, ints[i].max, &v)) {
            if (v < ints[i].min || v > ints[i].max)
                abort();
        } else {
            check_refusal(&res);
        }
    }
    int64_t limit;
    if (!mg_param_limit(&req, &res, "limit", 50, 2000, &limit) || limit < 1 || limit > 2000)
        abort(); /* CoreScope's clampLimit never refuses and stays in [1, max] */
    static const char *const orders[] = {"asc", "desc", NULL};
    static const char *const sorts[] = {"lastSeen", "name", "packetCount", NULL};
    int choice;
    if (mg_param_choice(&req, &res, "order", orders, 1, &choice)) {
        if (choice < 0 || choice > 1)
            abort();
    } else {
        check_refusal(&res);
    }
    if (mg_param_choice(&req, &res, "sortBy", sorts, 0, &choice)) {
        if (choice < 0 || choice > 2)
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
