/* SPDX-License-Identifier: ISC */
/*
 * GET /api/packets: one row per transmission (with a hash and a first_seen), a page at a
 * time, with the fields of its best observation. This file is the route's own part: its
 * parameters, its heavy check and its wait for the first summaries chunk, and the answer's
 * envelope; the page itself is read and written by the data room's page scan
 * (workers/data/packet_scan.h, which describes the statements).
 */
#include "ep_packets.h"

#include "clock.h"
#include "corescope_config.h"
#include "dispatch.h"
#include "json.h"
#include "params.h"
#include "router.h"

#include <string.h>

/* --- parameters ----------------------------------------------------------------------- */

static const char *const orders[] = {"desc", "asc", NULL};
static const char *const expands[] = {"observations", NULL};
static const char *const booleans[] = {"false", "true", NULL};

/*
 * The parameters, declared once (params.h). CoreScope's handlePackets, missing / empty /
 * malformed / out of range:
 *   limit        50 / 50 / 50 / below 1: 50, above MG_PACKETS_LIMIT_MAX: the maximum
 *   offset       0 / 0 / 0 / negative: 400 (CoreScope's handler panics on it and closes the
 *                connection with no answer)
 *   order        desc / desc / anything but asc: desc
 *   expand       none / none / anything but observations: none
 *   groupByHash  false / false / anything but true: false
 *   type, route  none / none / Go's Atoi fails: CoreScope filters on 0, and so does meshgate
 *   nodes        none / none / no key left (",,"): no packet, total 0
 *   observer     a list (params.h); no id left (",,"): no packet, as CoreScope (no observer
 *                has the id "")
 *   region       a list; no code left ("ALL", ",,"): no filter, as CoreScope's nodes and
 *                channels take it (its packets answer no packet: a deliberate difference)
 *   lists        more than MG_PARAM_LIST_MAX entries: 400 (CoreScope takes any number)
 *   hash, since, until, node, channel, area: as given
 * Refused with 400 in mg_packets_parse (CoreScope answers something other than asked):
 * groupByHash=true with order=asc or expand=observations (CoreScope ignores them).
 */
struct packets_params {
    int64_t limit, offset;
    int order, expand, group;
    const char *type, *route;
    struct mg_param_list observer, region, nodes;
    const char *hash, *since, *until, *node, *channel, *area;
};

#define P(field) .offset = offsetof(struct packets_params, field)
static const struct mg_param packets_param_list[] = {
    {.name = "limit",
     .kind = MG_PARAM_LIMIT,
     P(limit),
     .def = MG_PACKETS_LIMIT_DEFAULT,
     .min = 1,
     .max = MG_PACKETS_LIMIT_MAX,
     .corescope = "queryLimit(r, 50, PacketsMax)"},
    {.name = "offset",
     .kind = MG_PARAM_INT,
     P(offset),
     .min = 0,
     .max = INT64_MAX,
     .flags = MG_PARAM_RANGE_400,
     .corescope = "queryInt(offset, 0); negative: its handler panics (slice bounds) and the "
                  "connection closes with no answer; meshgate answers 400"},
    {.name = "order",
     .kind = MG_PARAM_CHOICE,
     P(order),
     .choices = orders,
     .corescope = "== \"asc\", else desc"},
    {.name = "expand",
     .kind = MG_PARAM_CHOICE,
     P(expand),
     .choices = expands,
     .def = -1,
     .corescope = "== \"observations\", else none"},
    {.name = "groupByHash",
     .kind = MG_PARAM_CHOICE,
     P(group),
     .choices = booleans,
     .corescope = "== \"true\", else false"},
    {.name = "type",
     .kind = MG_PARAM_TEXT,
     P(type),
     .corescope = "t, _ := strconv.Atoi(v): a malformed one filters on 0"},
    {.name = "route",
     .kind = MG_PARAM_TEXT,
     P(route),
     .corescope = "t, _ := strconv.Atoi(v): a malformed one filters on 0"},
    {.name = "observer",
     .kind = MG_PARAM_LIST,
     P(observer),
     .flags = MG_LIST_KEEP_EMPTY,
     .corescope = "ids, trimmed; no id left (\",,\"): no observer matches, no packet"},
    {.name = "region",
     .kind = MG_PARAM_LIST,
     P(region),
     .flags = MG_LIST_SKIP_ALL,
     .corescope = "IATA codes trimmed and uppercased; no code left (\"ALL\", \",,\"): no "
                  "packet, where its nodes and channels take it as no filter; meshgate takes "
                  "it as no filter here too"},
    {.name = "nodes",
     .kind = MG_PARAM_LIST,
     P(nodes),
     .flags = MG_LIST_KEEP_EMPTY,
     .corescope = "keys or names; no entry left: the listing of no node (total 0)"},
    {.name = "hash",
     .kind = MG_PARAM_TEXT,
     P(hash),
     .corescope = "as given: one transmission's hash"},
    {.name = "since",
     .kind = MG_PARAM_TEXT,
     P(since),
     .corescope = "as given: compared with first_seen as text"},
    {.name = "until",
     .kind = MG_PARAM_TEXT,
     P(until),
     .corescope = "as given: compared with first_seen as text"},
    {.name = "node",
     .kind = MG_PARAM_TEXT,
     P(node),
     .corescope = "as given: a key or an exact name"},
    {.name = "channel",
     .kind = MG_PARAM_TEXT,
     P(channel),
     .corescope = "as given: a channel name or enc_ + its hash"},
    {.name = "area",
     .kind = MG_PARAM_TEXT,
     P(area),
     .corescope = "a key the configuration's areas lack: no filter"},
};
#undef P
_Static_assert(MG_PACKETS_LIST_MAX == MG_PARAM_LIST_MAX, "a packets list is a parameter list");
const struct mg_param_table mg_packets_params =
    MG_PARAM_TABLE(struct packets_params, packets_param_list);

/* CoreScope's t, _ := strconv.Atoi(v): a malformed value filters on 0. */
static void whole_number(const char *value, bool *has, int64_t *out)
{
    *has = value != NULL;
    if (value && !mg_parse_atoi(value, out))
        *out = 0;
}

bool mg_packets_parse(const struct mg_request *req, struct mg_response *res,
                      struct mg_packets_filter *f)
{
    memset(f, 0, sizeof *f);
    struct packets_params own;
    const struct packets_params *p = mg_params_get(&mg_packets_params, req, res, &own);
    if (!p)
        return false;
    f->limit = p->limit;
    f->offset = p->offset;
    whole_number(p->type, &f->has_type, &f->payload_type);
    whole_number(p->route, &f->has_route, &f->route_type);
    f->observer = p->observer.text;
    f->region = p->region.text;
    f->nodes = p->nodes.text;
    /* A key the configuration's areas lack filters nothing, as in CoreScope. */
    f->area = p->area;
    if (f->area && !mg_corescope_area(mg_corescope_current(), f->area))
        f->area = NULL;
    /* CoreScope ignores order and expand when grouping; meshgate refuses rather than
     * answer something other than what was asked. */
    if (p->group == 1 && p->order == 1) {
        mg_response_error(res, 400,
                          "order=asc is not supported with groupByHash=true: grouped "
                          "packets are listed by their latest sighting, newest first");
        return false;
    }
    if (p->group == 1 && p->expand == 0) {
        mg_response_error(res, 400,
                          "expand=observations is not supported with groupByHash=true: ask "
                          "/api/packets?hash=H&expand=observations for one group's observations");
        return false;
    }
    f->group_by_hash = p->group == 1;
    f->ascending = p->order == 1;
    f->expand_observations = p->expand == 0;
    f->hash = p->hash;
    f->since = p->since;
    f->until = p->until;
    f->node = p->node;
    f->channel = p->channel;
    return true;
}

/* How often a request parked for the first chunk looks again (it is also woken at least once
 * a second, and by its worker's helper when the chunk ran there). */
#define FIRST_CHUNK_POLL_NS (20 * 1000000LL)

/* The request's parameters when they name a page of no filter, neither expanded nor grouped;
 * NULL otherwise (or when a value is refused: the handler answers it). */
static const struct packets_params *plain_page(const struct mg_request *req,
                                               struct packets_params *own)
{
    const struct packets_params *p = mg_params_get(&mg_packets_params, req, NULL, own);
    if (!p || p->expand == 0 || p->group == 1 || p->type || p->route || p->observer.text ||
        p->region.text || p->nodes.text || p->hash || p->since || p->until || p->node ||
        p->channel || p->area)
        return NULL;
    return p;
}

bool mg_packets_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct packets_params own;
    const struct packets_params *p = plain_page(req, &own);
    return !p || p->limit > MG_PACKETS_LIGHT_LIMIT || p->offset > MG_PACKETS_LIGHT_OFFSET ||
           !env->summaries || mg_tx_summary_high_water(env->summaries) < 0;
}

int64_t mg_packets_parks_until(struct mg_env *env, const struct mg_request *req, int64_t since_ns)
{
    struct mg_tx_summaries *s = env->summaries;
    /* Only while the first chunk runs: one not yet begun may be queued behind the group's other
     * start passes on a busy helper, and a page would wait for all of them. */
    if (!s || mg_tx_summary_high_water(s) >= 0 || atomic_load(&s->header->failed_ns) != 0 ||
        atomic_load(&s->header->cursor) < 0 || atomic_load(&s->header->lease_pid) == 0)
        return 0;
    int64_t now_ns = mg_monotonic_ns();
    if (now_ns - since_ns >= MG_TX_SUMMARY_FIRST_WAIT_NS)
        return 0;
    struct packets_params own;
    const struct packets_params *p = plain_page(req, &own);
    /* A refused value is answered by the handler; a page that may lie below the first chunk
     * (any filter, oldest first, further down) or reads every observation does not wait. */
    if (!p || p->order == 1 || p->offset > MG_TX_SUMMARY_FIRST_TX - p->limit)
        return 0;
    int64_t until = since_ns + MG_TX_SUMMARY_FIRST_WAIT_NS;
    return now_ns + FIRST_CHUNK_POLL_NS < until ? now_ns + FIRST_CHUNK_POLL_NS : until;
}

enum mg_turn mg_handle_packets(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res)
{
    struct mg_packets_filter f;
    if (!mg_packets_parse(req, res, &f))
        return MG_DONE;
    bool light = req->park && mg_dispatch_was_light(req->park);

    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j); /* a fixed record: packets, total, limit, offset */
    mg_json_key(&j, "packets");
    struct mg_packets_page page;
    mg_packets_page(env, &f, light, &j, &page);
    mg_json_kv_int(&j, "total", page.total);
    mg_json_kv_int(&j, "limit", f.limit);
    mg_json_kv_int(&j, "offset", f.offset);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    if (page.readmit) {
        /* Admitted light, and the page needs what a light one may not read. */
        mg_response_reset(res);
        return MG_READMIT_HEAVY;
    }
    if (page.error)
        mg_response_db_failure(res, "the packets", page.error);
    return MG_DONE;
}
