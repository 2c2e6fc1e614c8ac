/* SPDX-License-Identifier: ISC */
/*
 * The router's matching (workers/api/router.c), in process: every row is found by a path
 * built from its template and by its method; HEAD is GET's; a path another method has gives
 * the allow list for a 405, one no row has gives none; the ":name" segment is copied out
 * within its bound; the path is matched as given (decoded, without its query: dispatch's
 * work). Where CoreScope's server (gorilla/mux, /work/shared/corescope) answers a case
 * otherwise, the test says so and holds meshgate's behaviour.
 */
#include "env.h"
#include "router.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

TestSuite(router, .timeout = 60);

#define SAMPLE "0123abcd" /* a key, id or hash: no literal segment of any template */

/* The path of route i with its ":name" segment (if any) filled with SAMPLE. */
static void path_of(unsigned i, char *out, size_t cap)
{
    const char *t = mg_route_path(i);
    const char *colon = strchr(t, ':');
    if (!colon) {
        snprintf(out, cap, "%s", t);
        return;
    }
    const char *rest = strchr(colon, '/');
    snprintf(out, cap, "%.*s%s%s", (int)(colon - t), t, SAMPLE, rest ? rest : "");
}

static unsigned match_method(const char *method, const char *path, char *param, size_t cap,
                             const char **allow)
{
    return mg_route_match_method(method, strlen(method), path, param, cap, allow);
}

Test(router, every_row_is_found_by_a_path_built_from_it)
{
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        char path[256], param[MG_PATH_PARAM_MAX];
        const char *method = mg_route_method(i);
        bool templated = strchr(mg_route_path(i), ':') != NULL;
        path_of(i, path, sizeof path);
        const char *allow = "unset";
        /* Its own method finds it first: no row before it takes the path. */
        cr_assert_eq(match_method(method, path, param, sizeof param, &allow), i, "%s %s: %s",
                     method, path, mg_routes[i].template);
        cr_assert_null(allow);
        /* A literal row's param is not cleared of an earlier templated row's try (e.g.
         * /api/observers/clock-skew after /api/observers/:id/...): only a templated row's is
         * read (dispatch hands it to the handler as req->path_param). */
        if (templated)
            cr_assert_str_eq(param, SAMPLE, "%s", mg_routes[i].template);
        /* Its template is its own: no other row has it. */
        cr_assert_eq(mg_route_by_template(mg_routes[i].template, strlen(mg_routes[i].template)), i);
        if (strcmp(method, "GET") == 0) {
            cr_assert_eq(match_method("HEAD", path, param, sizeof param, NULL), i, "HEAD %s", path);
            cr_assert_eq(mg_route_match(path, param, sizeof param), i, "%s", path);
        } else {
            /* GET and HEAD never find a row of another method. */
            unsigned get = mg_route_match(path, param, sizeof param);
            cr_assert(get == MG_ROUTE_NOT_FOUND || strcmp(mg_route_method(get), "GET") == 0, "%s",
                      path);
            cr_assert_neq(match_method("HEAD", path, param, sizeof param, NULL), i);
        }
    }
}

Test(router, a_literal_row_before_a_templated_one_takes_its_word)
{
    char param[MG_PATH_PARAM_MAX];
    unsigned search = mg_route_by_template("/api/nodes/search", 17);
    unsigned node = mg_route_by_template("/api/nodes/:pubkey", 18);
    cr_assert_neq(search, MG_ROUTE_NOT_FOUND);
    cr_assert_lt(search, node);
    cr_assert_eq(mg_route_match("/api/nodes/search", param, sizeof param), search);
    cr_assert_str_eq(param, "");
    cr_assert_eq(mg_route_match("/api/nodes/searching", param, sizeof param), node);
    cr_assert_str_eq(param, "searching");
    /* CoreScope's own literals at the parameter's place are never a key (router.c): its
     * network-status row, and no node route for "resolve" as a key. */
    cr_assert_eq(mg_route_match("/api/nodes/network-status", param, sizeof param),
                 mg_route_by_template("/api/nodes/network-status", 25));
    cr_assert_eq(mg_route_match("/api/nodes/resolve/health", param, sizeof param),
                 MG_ROUTE_NOT_FOUND);
    cr_assert_eq(mg_route_match("/api/nodes/network-status/health", param, sizeof param),
                 MG_ROUTE_NOT_FOUND);
    /* Not found, mg_route_match_method clears param (mg_route_match leaves a try's). */
    cr_assert_eq(match_method("GET", "/api/nodes/network-status/health", param, sizeof param, NULL),
                 MG_ROUTE_NOT_FOUND);
    cr_assert_str_eq(param, "");
}

Test(router, another_methods_path_gives_its_allow_list_and_an_unknown_one_none)
{
    char param[MG_PATH_PARAM_MAX];
    const char *allow = NULL;
    struct {
        const char *method, *path, *allow;
    } cases[] = {
        {"GET", "/api/decode", "POST"},
        {"HEAD", "/api/decode", "POST"},
        {"POST", "/api/healthz", "GET, HEAD"},
        {"PUT", "/api/packets", "GET, HEAD, POST"},
        {"DELETE", "/api/config/geo-filter", "GET, HEAD, PUT"},
        {"POST", "/api/nodes/" SAMPLE, "GET, HEAD"},
        {"GET", "/api/nope", NULL},
        {"POST", "/api/nope", NULL},
        {"get", "/api/healthz", "GET, HEAD"}, /* a method is matched as sent: case counts */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        allow = "unset";
        cr_assert_eq(match_method(cases[c].method, cases[c].path, param, sizeof param, &allow),
                     MG_ROUTE_NOT_FOUND, "%s %s", cases[c].method, cases[c].path);
        if (cases[c].allow)
            cr_assert_str_eq(allow, cases[c].allow, "%s %s", cases[c].method, cases[c].path);
        else
            cr_assert_null(allow, "%s %s", cases[c].method, cases[c].path);
        cr_assert_str_eq(param, "", "no parameter is left from a row of another method");
    }
    /* The methods a path has are each found. */
    cr_assert_eq(match_method("PUT", "/api/config/geo-filter", param, sizeof param, &allow),
                 mg_route_by_template("PUT /api/config/geo-filter", 26));
    cr_assert_eq(match_method("GET", "/api/config/geo-filter", param, sizeof param, &allow),
                 mg_route_by_template("/api/config/geo-filter", 22));
}

Test(router, the_parameter_segment_is_copied_within_its_bound)
{
    char param[MG_PATH_PARAM_MAX], path[MG_PATH_PARAM_MAX + 64];
    unsigned health = mg_route_by_template("/api/nodes/:pubkey/health", 25);
    cr_assert_eq(mg_route_match("/api/nodes/AbC-1.2_x/health", param, sizeof param), health);
    cr_assert_str_eq(param, "AbC-1.2_x", "copied as it is, case kept");
    /* The longest segment that fits with its NUL, and one byte more: refused, not cut. */
    char segment[MG_PATH_PARAM_MAX + 1];
    memset(segment, 'a', sizeof segment);
    segment[MG_PATH_PARAM_MAX - 1] = '\0';
    snprintf(path, sizeof path, "/api/nodes/%s/health", segment);
    cr_assert_eq(mg_route_match(path, param, sizeof param), health);
    cr_assert_eq(strlen(param), MG_PATH_PARAM_MAX - 1);
    memset(segment, 'a', sizeof segment);
    segment[MG_PATH_PARAM_MAX] = '\0';
    snprintf(path, sizeof path, "/api/nodes/%s/health", segment);
    cr_assert_eq(mg_route_match(path, param, sizeof param), MG_ROUTE_NOT_FOUND);
    const char *allow = "unset";
    cr_assert_eq(match_method("GET", path, param, sizeof param, &allow), MG_ROUTE_NOT_FOUND);
    cr_assert_null(allow);
    /* The bound is the caller's. */
    char small[4];
    cr_assert_eq(mg_route_match("/api/nodes/abc/health", small, sizeof small), health);
    cr_assert_str_eq(small, "abc");
    cr_assert_eq(mg_route_match("/api/nodes/abcd/health", small, sizeof small), MG_ROUTE_NOT_FOUND);
    /* An empty segment is no parameter. */
    cr_assert_eq(mg_route_match("/api/nodes//health", param, sizeof param), MG_ROUTE_NOT_FOUND);
}

/*
 * The path is matched byte for byte as dispatch hands it over: decoded, without its query.
 * CoreScope's server (gorilla/mux, no StrictSlash, path cleaning on) differs in one case: it
 * answers a path with "//" or "/./" with a 301 to the cleaned path; meshgate's router finds
 * no row for it (404, or the upstream when there is one). A trailing slash is 404 on both.
 */
Test(router, paths_are_matched_as_given)
{
    char param[MG_PATH_PARAM_MAX];
    const char *not_found[] = {
        "/api/healthz/",    /* a trailing slash: 404 in CoreScope too */
        "/api/nodes/",      /* not /api/nodes, nor a node with an empty key */
        "/api//healthz",    /* CoreScope: 301 to /api/healthz */
        "//api/healthz",    /* CoreScope: 301 to /api/healthz */
        "/api/./healthz",   /* CoreScope: 301 to /api/healthz */
        "/api/healthz?x=1", /* a query is dispatch's to split off, never the router's */
        "/api/%68ealthz",   /* decoding is dispatch's: the router sees bytes */
        "/API/healthz",     /* case counts, as in CoreScope */
        "/api/healthzz",    /* a template is not a prefix */
        "/api/healt",       /* nor a path a prefix of one */
        "",
        "/",
    };
    for (size_t i = 0; i < sizeof not_found / sizeof not_found[0]; i++)
        cr_assert_eq(mg_route_match(not_found[i], param, sizeof param), MG_ROUTE_NOT_FOUND, "%s",
                     not_found[i]);
    cr_assert_eq(mg_route_match("/api/health", param, sizeof param),
                 mg_route_by_template("/api/health", 11));
    /* A parameter holds what its segment holds, encoded or not (dispatch refuses "%2F"
     * before the router: an encoded slash is part of a segment). */
    cr_assert_eq(mg_route_match("/api/nodes/ab%20cd", param, sizeof param),
                 mg_route_by_template("/api/nodes/:pubkey", 18));
    cr_assert_str_eq(param, "ab%20cd");
    cr_assert_eq(mg_route_match("/api/nodes/a b?c", param, sizeof param),
                 mg_route_by_template("/api/nodes/:pubkey", 18));
    cr_assert_str_eq(param, "a b?c");
}

Test(router, templates_and_names)
{
    cr_assert_eq(mg_route_by_template("/api/nodes", 10), mg_route_by_template("/api/nodes!", 10));
    cr_assert_neq(mg_route_by_template("/api/nodes", 10), MG_ROUTE_NOT_FOUND);
    cr_assert_eq(mg_route_by_template("/api/nodes", 9), MG_ROUTE_NOT_FOUND, "a prefix is none");
    cr_assert_eq(mg_route_by_template("/api/nodes/x", 12), MG_ROUTE_NOT_FOUND);
    unsigned decode = mg_route_by_template("POST /api/decode", 16);
    cr_assert_str_eq(mg_route_method(decode), "POST");
    cr_assert_str_eq(mg_route_path(decode), "/api/decode");
    unsigned put = mg_route_by_template("PUT /api/config/geo-filter", 26);
    cr_assert_str_eq(mg_route_method(put), "PUT");
    cr_assert_str_eq(mg_route_path(put), "/api/config/geo-filter");
    cr_assert_str_eq(mg_route_method(MG_ROUTE_NOT_FOUND), "GET");
    cr_assert_str_eq(mg_route_path(MG_ROUTE_UPSTREAM), "");
    /* The names the segment counts: the table's templates in id order, then the five ids
     * past it, each at its id. */
    const char *names[256];
    unsigned n = mg_route_names(names, 256);
    cr_assert_eq(n, mg_route_table_len + 5);
    for (unsigned i = 0; i < mg_route_table_len; i++)
        cr_assert_eq(names[i], mg_routes[i].template);
    cr_assert_str_eq(names[MG_ROUTE_NOT_FOUND], "(not found)");
    cr_assert_str_eq(names[MG_ROUTE_BAD_REQUEST], "(bad request)");
    cr_assert_str_eq(names[MG_ROUTE_STATIC], "(static)");
    cr_assert_str_eq(names[MG_ROUTE_UPSTREAM], "(upstream)");
    cr_assert_str_eq(names[MG_ROUTE_TUNNEL], "(tunnel)");
    cr_assert_eq(mg_route_names(names, 3), 3, "at most cap");
    cr_assert_eq(mg_route_names(names, mg_route_table_len + 1), mg_route_table_len + 1);
    cr_assert_str_eq(names[mg_route_table_len], "(not found)");
}
