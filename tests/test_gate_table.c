/* SPDX-License-Identifier: ISC */
/*
 * The gate table (shm/gates.h): every section of the segment is claimed by exactly one row of
 * the gate table or of the table of other parts, every row's sections exist, every lock the
 * rows name is found again by its offset, and reclaim walks every row. A part added to the
 * segment without a row fails here.
 */
#include "admission.h"
#include "gates.h"
#include "reclaim.h"
#include "router.h"
#include "segment.h"
#include "site.h"
#include "wiring.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

TestSuite(gate_table, .timeout = 60);

static const char *const route_names[] = {"/api/healthz", "/api/nodes"};

static void create(struct mg_segment *seg, char *name, size_t cap)
{
    struct mg_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.listen_host, sizeof c.listen_host, "127.0.0.1");
    c.listen_port = 18080;
    c.workers = 2;
    c.max_header_bytes = 8192;
    c.max_uri_bytes = 4096;
    snprintf(name, cap, "/mgtest-gates-%d", (int)getpid());
    mg_segment_unlink(name);
    char err[1024];
    cr_assert_eq(mg_segment_create(seg, name, &c, 2, route_names, 2, err, sizeof err), 0, "%s",
                 err);
}

/* Whether the space-separated list holds word. */
static bool lists(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' '))
            return true;
    return false;
}

Test(gate_table, every_section_of_the_segment_is_one_row)
{
    struct mg_segment seg;
    char name[64];
    create(&seg, name, sizeof name);
    const struct mg_shm_header *h = seg.header;
    for (uint32_t s = 0; s < h->section_count; s++) {
        const char *section = h->sections[s].name;
        unsigned claimed = 0;
        for (unsigned i = 0; i < MG_GATE_ROWS; i++)
            claimed += lists(mg_gates[i].sections, section);
        for (unsigned i = 0; i < MG_PART_ROWS; i++)
            claimed += lists(mg_segment_parts[i].sections, section);
        cr_expect_eq(claimed, 1u, "section %s is claimed by %u rows of shm/gates.h", section,
                     claimed);
    }
    /* And every row's sections are the segment's. */
    for (unsigned i = 0; i < MG_GATE_ROWS + MG_PART_ROWS; i++) {
        const struct mg_gate_info *r =
            i < MG_GATE_ROWS ? &mg_gates[i] : &mg_segment_parts[i - MG_GATE_ROWS];
        char list[128];
        snprintf(list, sizeof list, "%s", r->sections);
        for (char *save = NULL, *w = strtok_r(list, " ", &save); w;
             w = strtok_r(NULL, " ", &save)) {
            bool found = false;
            for (uint32_t s = 0; s < h->section_count && !found; s++)
                found = strcmp(h->sections[s].name, w) == 0;
            cr_expect(found, "row %s names section %s, which the segment has not", r->name, w);
        }
    }
    mg_segment_detach(&seg);
    mg_segment_unlink(name);
}

struct seen {
    struct mg_segment *seg;
    unsigned locks;
};

static void check_lock(void *arg, struct mg_lock *l, const char *lock_name)
{
    struct seen *s = arg;
    char found[48];
    struct mg_lock *again = mg_segment_lock_at(s->seg, (uint64_t)((char *)l - (char *)s->seg->base),
                                               found, sizeof found);
    cr_expect_eq(again, l, "lock %s is not found by its offset", lock_name);
    cr_expect_str_eq(found, lock_name);
    s->locks++;
}

Test(gate_table, every_lock_is_named_and_found_by_its_offset)
{
    struct mg_segment seg;
    char name[64];
    create(&seg, name, sizeof name);
    struct seen s = {&seg, 0};
    mg_segment_for_each_lock(&seg, check_lock, &s);
    /* diag, cold, cache, anon, upstream, and every set of both tables */
    cr_expect_eq(s.locks, 5 + seg.client_sets + seg.conn_sets);
    const char *const parts[] = {"anon", "cold", "diag", "cache", "upstream", "clients", "conns"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const void *lo = NULL, *hi = NULL;
        cr_expect(mg_segment_lock_range(&seg, parts[i], &lo, &hi), "no lock range for %s",
                  parts[i]);
        cr_expect(lo && hi > lo);
    }
    const void *lo, *hi;
    cr_expect_not(mg_segment_lock_range(&seg, "config", &lo, &hi));
    cr_expect_not(mg_segment_lock_range(&seg, "an", &lo, &hi));
    mg_segment_detach(&seg);
    mg_segment_unlink(name);
}

Test(gate_table, every_gate_is_read_and_refuses_with_its_row)
{
    struct mg_segment seg;
    char name[64];
    create(&seg, name, sizeof name);
    struct mg_gate_snapshots snap;
    memset(&snap, 0xff, sizeof snap);
    mg_gates_read(&seg, getpid(), true, 1, &snap);
    cr_expect_eq(snap.cold.in_flight, 0u);
    cr_expect_eq(snap.anon_line.in_flight, 0u);
    cr_expect_eq(snap.upstream.in_flight, 0u);
    cr_expect_eq(snap.conn_cap.sets, seg.conn_sets);
    cr_expect_eq(snap.conn_cap.refused, 0u);
    cr_expect_eq(snap.rate_limit.allowed, 0u);
    cr_expect_eq(snap.diag.running, 0u);
    cr_expect_eq(snap.breaker.opened, 0u);
    const char *const names[] = {"conn_cap", "rate_limit", "anon_line", "cold",
                                 "diag",     "upstream",   "breaker"};
    cr_assert_eq(MG_GATE_ROWS, sizeof names / sizeof names[0]);
    for (unsigned i = 0; i < MG_GATE_ROWS; i++) {
        cr_expect_str_eq(mg_gates[i].name, names[i]);
        cr_expect(mg_gates[i].refusal[0], "%s says no refusal", names[i]);
    }
    mg_segment_detach(&seg);
    mg_segment_unlink(name);
}

/* Each route names its gates in the order its requests meet them: a heavy route meets the
 * rate limit, then the anonymous line, then the gates of its work; a light one meets none. */
Test(gate_table, every_route_names_its_gates_in_order)
{
    mg_site_wire(); /* the gates are core's lookup over the table the server hands in */
    for (unsigned r = 0; r <= MG_ROUTE_UPSTREAM; r++) {
        if (r >= mg_route_table_len && r != MG_ROUTE_UPSTREAM)
            continue;
        const enum mg_gate_row *g = mg_site_gates(r);
        const char *name = r < mg_route_table_len ? mg_routes[r].template : "(upstream)";
        cr_assert_not_null(g, "%s names no gates", name);
        unsigned n = 0;
        while (g[n] != MG_GATE_ROWS && n < MG_GATE_ROWS)
            n++;
        cr_assert_lt(n, (unsigned)MG_GATE_ROWS, "%s: its list does not end", name);
        bool heavy = r == MG_ROUTE_UPSTREAM || mg_routes[r].cost == MG_COST_HEAVY;
        if (!heavy) {
            cr_expect_eq(n, 0u, "light %s meets a gate", name);
            continue;
        }
        /* The upstream's requests meet no line: a slow local build on the anonymous helper
         * never holds one (its anonymous requests have their share at the upstream gate). */
        unsigned first = r == MG_ROUTE_UPSTREAM ? 1 : 2;
        if (r == MG_ROUTE_UPSTREAM)
            cr_expect(n >= 1 && g[0] == MG_GATE_ROW_rate_limit,
                      "the upstream does not meet the rate limit first");
        else
            cr_expect(n >= 2 && g[0] == MG_GATE_ROW_rate_limit && g[1] == MG_GATE_ROW_anon_line,
                      "heavy %s does not meet the rate limit, then the line, first", name);
        for (unsigned i = first; i < n; i++)
            cr_expect(g[i] != MG_GATE_ROW_rate_limit && g[i] != MG_GATE_ROW_anon_line &&
                          g[i] != MG_GATE_ROW_conn_cap,
                      "%s meets %s inside its work", name, mg_gates[g[i]].name);
    }
    cr_expect_eq(mg_site_gates(mg_route_by_template("/api/nodes/:pubkey/reach",
                                                    strlen("/api/nodes/:pubkey/reach"))),
                 mg_gates_cold);
    cr_expect_eq(mg_site_gates(mg_route_by_template("/api/perf", strlen("/api/perf"))),
                 mg_gates_diag);
    cr_expect_eq(mg_site_gates(MG_ROUTE_UPSTREAM), mg_gates_upstream);
}
