/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes: the node list, filtered, sorted and paged, with the filtered total and
 * the count of every node by role; see ep_nodes.h for the statements.
 *
 * Why it is built this way: the endpoint is hot (the front end polls it) and nodes has no
 * secondary index that meshgate could use or create, so a page reads the whole table. On
 * 20 000 nodes that pass is most of a request's time, and the role counts, an aggregate
 * pass of their own, cost as much again; so the counts are read at most every
 * MG_NODES_COUNTS_INTERVAL_NS by each worker (node roles change on the scale of minutes),
 * and an unfiltered total comes from the primary key's index. The statements are
 * prepared once per shape and kept, so an unfiltered request costs one table pass, the
 * rows it writes, and no parsing or planning of SQL.
 *
 * Region: a node is in a region when an ADVERT (payload_type 4) whose decoded_json field
 * pubKey is the node's key was heard by an observer of the region (observers.rowid =
 * observations.observer_idx, upper(trim(iata)) one of the codes), as CoreScope defines it.
 * transmissions.from_pubkey (indexed) would spare parsing JSON, but CoreScope fills it by a
 * backfill that may not have run on a given database, so it is not the same set; and
 * parsing is not what costs: the probes of observations are (from_pubkey was no faster).
 */
#include "ep_nodes.h"

#include "answer_cache.h"
#include "clock.h"
#include "corescope_config.h"
#include "json.h"
#include "log.h"
#include "node_hash_sizes.h"
#include "node_relay.h"
#include "node_multibyte.h"
#include "node_row.h"
#include "node_usefulness.h"
#include "node_visibility.h"
#include "params.h"
#include "region_map.h"
#include "router.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* --- parameters ----------------------------------------------------------------------- */

static const char *const sort_names[] = {"lastSeen", "name", "packetCount", NULL};
static const char *const last_heard_names[] = {"1h", "6h", "24h", "7d", "30d", NULL};
static const int64_t last_heard_seconds[] = {3600, 6 * 3600, 24 * 3600, 7 * 86400, 30 * 86400};

void mg_nodes_query_init(struct mg_nodes_query *q)
{
    memset(q, 0, sizeof *q);
    q->limit = MG_NODES_LIMIT_DEFAULT;
    q->sort = MG_NODES_SORT_LAST_SEEN;
    mg_buf_init(&q->regions);
}

void mg_nodes_query_free(struct mg_nodes_query *q)
{
    mg_buf_free(&q->regions);
}

/*
 * The parameters, declared once (params.h). CoreScope's handleNodes (queryLimit, queryInt,
 * then its GetNodes), missing / empty / malformed / out of range:
 *   limit      50 / 50 / 50 / below 1: 50, above MG_NODES_LIMIT_MAX: the maximum
 *   offset     0 / 0 / 0 / negative: 0 (SQLite's OFFSET reads it so for CoreScope)
 *   sortBy     lastSeen / lastSeen / lastSeen / -
 *   lastHeard  none / none / none (an unknown window filters nothing) / -
 *   region     none / none / no code left ("ALL", ","): none / more than MG_PARAM_LIST_MAX
 *              codes: 400 (CoreScope takes any number; meshgate bounds a request's work)
 *   role, search, before, area: as given; an empty one is absent
 */
struct nodes_params {
    int64_t limit, offset;
    int sort, window;
    const char *role, *search, *before, *area;
    struct mg_param_list region;
};

static const struct mg_param nodes_param_list[] = {
    {.name = "limit",
     .kind = MG_PARAM_LIMIT,
     .offset = offsetof(struct nodes_params, limit),
     .def = MG_NODES_LIMIT_DEFAULT,
     .min = 1,
     .max = MG_NODES_LIMIT_MAX,
     .corescope = "queryLimit(r, 50, NodesMax): not a whole number, or below 1: 50; above: max"},
    {.name = "offset",
     .kind = MG_PARAM_INT,
     .offset = offsetof(struct nodes_params, offset),
     .min = 0,
     .max = INT64_MAX,
     .corescope = "queryInt(offset, 0): malformed 0; negative: SQLite's OFFSET reads 0"},
    {.name = "sortBy",
     .kind = MG_PARAM_CHOICE,
     .offset = offsetof(struct nodes_params, sort),
     .choices = sort_names,
     .def = MG_NODES_SORT_LAST_SEEN,
     .corescope = "anything but name or packetCount: lastSeen"},
    {.name = "lastHeard",
     .kind = MG_PARAM_CHOICE,
     .offset = offsetof(struct nodes_params, window),
     .choices = last_heard_names,
     .def = -1,
     .corescope = "an unknown window: no filter"},
    {.name = "role",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct nodes_params, role),
     .corescope = "as given: an unknown role matches no node"},
    {.name = "search",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct nodes_params, search),
     .corescope = "as given (LIKE %search%)"},
    {.name = "before",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct nodes_params, before),
     .corescope = "as given: compared with first_seen as text"},
    {.name = "region",
     .kind = MG_PARAM_LIST,
     .offset = offsetof(struct nodes_params, region),
     .flags = MG_LIST_SKIP_ALL,
     .corescope = "codes trimmed and uppercased; ALL and blanks: none"},
    {.name = "area",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct nodes_params, area),
     .corescope = "a key the configuration's areas lack: no filter"},
};
const struct mg_param_table mg_nodes_params = MG_PARAM_TABLE(struct nodes_params, nodes_param_list);

/*
 * region: the codes uppercased (ASCII) and kept as ",SJC,OAK," (no code can hold a comma),
 * which the SQL searches for ",<observer's code>,". Leaves q->regions empty when no code
 * remains.
 */
static void parse_regions(const struct mg_param_list *list, struct mg_nodes_query *q)
{
    mg_buf_reset(&q->regions);
    struct mg_list_item items[MG_PARAM_LIST_MAX];
    int n = mg_param_list_split(list->text, MG_LIST_SKIP_ALL, items, MG_PARAM_LIST_MAX);
    for (int k = 0; k < n && k < MG_PARAM_LIST_MAX; k++) {
        if (q->regions.len == 0)
            mg_buf_putc(&q->regions, ',');
        for (size_t i = 0; i < items[k].len; i++) {
            char c = items[k].ptr[i];
            mg_buf_putc(&q->regions, c >= 'a' && c <= 'z' ? (char)(c - 32) : c);
        }
        mg_buf_putc(&q->regions, ',');
    }
}

bool mg_nodes_parse(const struct mg_request *req, struct mg_response *res, struct mg_nodes_query *q)
{
    mg_nodes_query_init(q);
    struct nodes_params own;
    const struct nodes_params *p = mg_params_get(&mg_nodes_params, req, res, &own);
    if (!p)
        return false;
    q->limit = p->limit;
    q->offset = p->offset;
    q->sort = (enum mg_nodes_sort)p->sort;
    q->last_heard_s = p->window >= 0 ? last_heard_seconds[p->window] : 0;
    q->role = p->role;
    q->search = p->search;
    q->before = p->before;
    parse_regions(&p->region, q);
    q->area = p->area;
    if (q->area && !mg_corescope_area(mg_corescope_current(), q->area))
        q->area = NULL;
    return true;
}

/* --- SQL -------------------------------------------------------------------------------- */

/* The roles counted in "counts": its keys (sorted) and the role value each counts. */
static const struct {
    const char *key;
    const char *role;
} role_counts[] = {
    {"companions", "companion"},
    {"repeaters", "repeater"},
    {"rooms", "room"},
    {"sensors", "sensor"},
};
#define ROLE_COUNTS (sizeof role_counts / sizeof role_counts[0])

/* The sort key of each order; ties are broken by public_key (unique), so pages are stable. */
static const struct {
    const char *column;
    const char *direction;
} sort_key[] = {
    [MG_NODES_SORT_LAST_SEEN] = {"last_seen", " DESC"},
    [MG_NODES_SORT_NAME] = {"name", ""},
    [MG_NODES_SORT_PACKET_COUNT] = {"advert_count", " DESC"},
};

/*
 * A node's regions come from the process's region map (region_map.h: built by one pass over
 * the ADVERTs and their observations at most once per MG_REGION_MAP_INTERVAL_NS), so the
 * region filter reads nothing but nodes. Probing each ADVERT's observations per request
 * instead cost 0.8 s at 2M observations on a light route (issue 13). The codes come as one
 * string, ",SJC,OAK,", so that the statement's text does not depend on how many there are.
 */
static const char region_condition[] = "meshgate_in_regions(public_key, :regions)";

enum filter_bit {
    FILTER_ROLE = 1 << 0,
    FILTER_SEARCH = 1 << 1,
    FILTER_BEFORE = 1 << 2,
    FILTER_LAST_HEARD = 1 << 3,
    FILTER_REGION = 1 << 4,
    /* the configuration hides nodes from the list (node_visibility.h) */
    FILTER_LISTED = 1 << 5,
    FILTER_AREA = 1 << 6,
};

static unsigned filters_of(const struct mg_nodes_query *q)
{
    return (q->role ? FILTER_ROLE : 0) | (q->search ? FILTER_SEARCH : 0) |
           (q->before ? FILTER_BEFORE : 0) | (q->last_heard_s > 0 ? FILTER_LAST_HEARD : 0) |
           (q->regions.len > 0 ? FILTER_REGION : 0) |
           (mg_node_visibility_active() ? FILTER_LISTED : 0) | (q->area ? FILTER_AREA : 0);
}

/* Whether the page statement of these filters also counts them (see mg_nodes_sql). */
static bool total_in_page(unsigned filters)
{
    return (filters & FILTER_REGION) != 0;
}

/* The filters joined by AND (nothing when there is none). */
static void write_conditions(struct mg_buf *out, unsigned filters,
                             const struct mg_db_schema *schema)
{
    const struct {
        unsigned bit;
        const char *sql;
    } conditions[] = {
        {FILTER_ROLE, "role = :role"},
        /* lower() folds ASCII only (no ICU is loaded); instr() takes % and _ literally. */
        {FILTER_SEARCH, "instr(lower(name), lower(:search)) > 0"},
        {FILTER_BEFORE, "first_seen <= :before"},
        {FILTER_LAST_HEARD, "(last_seen > :cut OR last_seen GLOB :cut_glob)"},
        {FILTER_REGION, region_condition},
        {FILTER_LISTED, mg_node_listed_sql(schema->nodes_foreign_advert)},
        {FILTER_AREA, "meshgate_in_area(lat, lon, :area)"},
    };
    bool first = true;
    for (size_t i = 0; i < sizeof conditions / sizeof conditions[0]; i++) {
        if (!(filters & conditions[i].bit))
            continue;
        mg_buf_puts(out, first ? "" : " AND ");
        mg_buf_puts(out, conditions[i].sql);
        first = false;
    }
}

void mg_nodes_sql(const struct mg_db_schema *schema, const struct mg_nodes_query *q,
                  enum mg_nodes_statement which, struct mg_buf *out)
{
    unsigned filters = filters_of(q);
    if (which == MG_NODES_SQL_COUNTS) {
        mg_buf_puts(out, "SELECT ");
        for (size_t i = 0; i < ROLE_COUNTS; i++)
            mg_buf_printf(out, "%scount(*) FILTER (WHERE role = '%s')", i ? ", " : "",
                          role_counts[i].role);
        mg_buf_puts(out, " FROM nodes");
        return;
    }
    if (which == MG_NODES_SQL_TOTAL) {
        /* Without a filter this counts the primary key's index, the smallest b-tree. */
        mg_buf_puts(out, "SELECT count(*) FROM nodes");
        if (filters) {
            mg_buf_puts(out, " WHERE ");
            write_conditions(out, filters, schema);
        }
        return;
    }
    /*
     * The page is chosen on (sort key, public_key, rowid) alone and only its rows are then
     * read whole: a sort that keeps offset + limit whole rows costs 3.5 times as much at
     * offset 19000 of 20000 nodes, and no less at the first page. With a region, the rows
     * that match are gathered once and the total is counted from them, as the page's last
     * column, so that the region's ADVERTs are not searched twice (half the time of a
     * separate count); for the other filters a second pass over nodes is cheaper than
     * gathering (with role=repeater, 17 000 of 20 000 nodes match: 5 ms against 14 ms).
     */
    const char *column = sort_key[q->sort].column, *direction = sort_key[q->sort].direction;
    if (total_in_page(filters)) {
        mg_buf_printf(out,
                      "WITH matched AS MATERIALIZED (SELECT rowid AS r, %s AS k1, public_key AS k2"
                      " FROM nodes WHERE ",
                      column);
        write_conditions(out, filters, schema);
        mg_buf_puts(out, ") ");
    }
    mg_buf_puts(out, "SELECT ");
    mg_nodes_select_columns(schema, out);
    if (total_in_page(filters)) {
        mg_buf_puts(out, ", (SELECT count(*) FROM matched) FROM (SELECT r, k1, k2 FROM matched");
    } else {
        mg_buf_printf(out, " FROM (SELECT rowid AS r, %s AS k1, public_key AS k2 FROM nodes",
                      column);
        if (filters) {
            mg_buf_puts(out, " WHERE ");
            write_conditions(out, filters, schema);
        }
    }
    mg_buf_printf(out,
                  " ORDER BY k1%s, k2 LIMIT :limit OFFSET :offset) AS page"
                  " CROSS JOIN nodes ON nodes.rowid = page.r ORDER BY page.k1%s, page.k2",
                  direction, direction);
}

void mg_nodes_last_heard_cutoff(int64_t now_s, int64_t window_s, char *cut, char *cut_glob)
{
    time_t c = (time_t)(now_s - window_s);
    struct tm tm;
    gmtime_r(&c, &tm);
    strftime(cut, 40, "%Y-%m-%dT%H:%M:%SZ", &tm);
    strftime(cut_glob, 40, "%Y-%m-%dT%H:%M:%S.*[1-9]*", &tm);
}

static int bind_text(sqlite3_stmt *st, const char *name, const char *value, int len)
{
    int i = sqlite3_bind_parameter_index(st, name);
    return i > 0 && value ? sqlite3_bind_text(st, i, value, len, SQLITE_TRANSIENT) : SQLITE_OK;
}

static int bind_int(sqlite3_stmt *st, const char *name, int64_t value)
{
    int i = sqlite3_bind_parameter_index(st, name);
    return i > 0 ? sqlite3_bind_int64(st, i, value) : SQLITE_OK;
}

int mg_nodes_bind(sqlite3_stmt *st, const struct mg_nodes_query *q, int64_t now_s)
{
    char cut[40] = "", cut_glob[40] = "";
    if (q->last_heard_s > 0)
        mg_nodes_last_heard_cutoff(now_s, q->last_heard_s, cut, cut_glob);
    int rc = bind_text(st, ":role", q->role, -1);
    if (rc == SQLITE_OK)
        rc = bind_text(st, ":search", q->search, -1);
    if (rc == SQLITE_OK)
        rc = bind_text(st, ":before", q->before, -1);
    if (rc == SQLITE_OK && q->last_heard_s > 0)
        rc = bind_text(st, ":cut", cut, -1);
    if (rc == SQLITE_OK && q->last_heard_s > 0)
        rc = bind_text(st, ":cut_glob", cut_glob, -1);
    if (rc == SQLITE_OK && q->regions.len > 0)
        rc = bind_text(st, ":regions", q->regions.data, (int)q->regions.len);
    if (rc == SQLITE_OK)
        rc = bind_text(st, ":area", q->area, -1);
    if (rc == SQLITE_OK)
        rc = bind_int(st, ":limit", q->limit);
    if (rc == SQLITE_OK)
        rc = bind_int(st, ":offset", q->offset);
    return rc;
}

/* --- prepared statements ---------------------------------------------------------------- */

/*
 * A worker keeps one connection for its whole life, so its statements are prepared once
 * and kept: a small cache keyed by shape (statement, sort, filters present), least
 * recently used out, and the role counts with the time they were computed. The cache
 * belongs to one connection; when another one asks (a test opening databases one after
 * another) the old statements are finalized first. That is safe because sqlite3_close_v2
 * keeps a connection that still has statements alive until the last one is finalized, so
 * a new connection can never have the old one's address.
 */
#define STATEMENT_CACHE_SIZE 16

/* Per thread: an anonymous request whose region map must be built runs on the worker's
 * anonymous helper thread, with that thread's own connection (dispatch.c). */
static _Thread_local struct {
    sqlite3 *conn;
    uint64_t clock;
    struct {
        unsigned shape; /* 0: empty */
        uint64_t used;
        sqlite3_stmt *st;
    } entry[STATEMENT_CACHE_SIZE];
    sqlite3_stmt *begin, *commit, *snapshot;
    bool have_counts;
    int64_t counts_monotonic_ns; /* when counts were read */
    int64_t counts[ROLE_COUNTS];
    struct mg_answer_cache answers; /* see answer_stamps */
    uint64_t answers_rendered;
} cache;

static void cache_for(sqlite3 *conn)
{
    if (cache.conn == conn)
        return;
    for (size_t i = 0; i < STATEMENT_CACHE_SIZE; i++)
        sqlite3_finalize(cache.entry[i].st);
    sqlite3_finalize(cache.begin);
    sqlite3_finalize(cache.commit);
    sqlite3_finalize(cache.snapshot);
    mg_answer_cache_clear(&cache.answers);
    memset(&cache, 0, sizeof cache);
    cache.conn = conn;
}

static sqlite3_stmt *prepare_persistent(sqlite3 *conn, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v3(conn, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
        mg_error("/api/nodes: cannot prepare \"%.160s\": %s", sql, sqlite3_errmsg(conn));
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

/* The statement for q, prepared when it is not in the cache; NULL when it cannot be. */
static sqlite3_stmt *cached_statement(struct mg_db *db, const struct mg_nodes_query *q,
                                      enum mg_nodes_statement which)
{
    cache_for(db->conn);
    unsigned sort = which == MG_NODES_SQL_PAGE ? (unsigned)q->sort : 0;
    unsigned filters = which == MG_NODES_SQL_COUNTS ? 0 : filters_of(q);
    unsigned shape = 1u | (unsigned)which << 1 | sort << 3 | filters << 5;
    size_t victim = 0;
    cache.clock++;
    for (size_t i = 0; i < STATEMENT_CACHE_SIZE; i++) {
        if (cache.entry[i].shape == shape) {
            cache.entry[i].used = cache.clock;
            return cache.entry[i].st;
        }
        if (cache.entry[i].used < cache.entry[victim].used)
            victim = i;
    }
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_nodes_sql(&db->schema, q, which, &sql);
    sqlite3_stmt *st = sql.failed ? NULL : prepare_persistent(db->conn, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        return NULL;
    sqlite3_finalize(cache.entry[victim].st);
    cache.entry[victim].shape = shape;
    cache.entry[victim].used = cache.clock;
    cache.entry[victim].st = st;
    return st;
}

static int run_once(sqlite3 *conn, sqlite3_stmt **st, const char *sql)
{
    if (!*st && !(*st = prepare_persistent(conn, sql)))
        return sqlite3_errcode(conn) ? sqlite3_errcode(conn) : SQLITE_ERROR;
    int rc = sqlite3_step(*st);
    sqlite3_reset(*st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* --- the handler ------------------------------------------------------------------------ */

/* Reads the role counts into the cache unless they are fresh enough; an SQLite code. */
static int refresh_counts(struct mg_db *db, const struct mg_nodes_query *q, int64_t now_ns)
{
    if (cache.have_counts && now_ns - cache.counts_monotonic_ns < MG_NODES_COUNTS_INTERVAL_NS)
        return SQLITE_OK;
    sqlite3_stmt *st = cached_statement(db, q, MG_NODES_SQL_COUNTS);
    if (!st)
        return SQLITE_ERROR;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        for (size_t i = 0; i < ROLE_COUNTS; i++)
            cache.counts[i] = sqlite3_column_int64(st, (int)i);
        cache.have_counts = true;
        cache.counts_monotonic_ns = now_ns;
        rc = SQLITE_OK;
    }
    sqlite3_reset(st);
    return rc;
}

/* The filtered total into *total; an SQLite code. */
static int read_total(sqlite3_stmt *st, const struct mg_nodes_query *q, int64_t now_s,
                      int64_t *total)
{
    int rc = mg_nodes_bind(st, q, now_s);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *total = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        }
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

/*
 * Writes the answer, stepping the page statement; an SQLite code. The total comes from the
 * page's last column when it has one (total_in_page), else from total_st; so does it when
 * the page is empty past the end, since the column then has no row to arrive in (an empty
 * first page means a total of 0).
 */
static int write_answer(struct mg_response *res, sqlite3_stmt *page,
                        const struct mg_db_schema *schema, bool total_in_page,
                        sqlite3_stmt *total_st, const struct mg_nodes_query *q, int64_t now_s)
{
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j); /* a fixed record: nodes, total, counts */
    mg_json_key(&j, "nodes");
    mg_json_array_begin(&j);
    int rc;
    int64_t rows = 0, total = 0;
    int key_col = mg_nodes_column(schema, "public_key"), role_col = mg_nodes_column(schema, "role");
    struct mg_buf relay_text;
    mg_buf_init(&relay_text);
    cache.answers_rendered++;
    while ((rc = sqlite3_step(page)) == SQLITE_ROW) {
        if (rows++ == 0 && total_in_page)
            total = sqlite3_column_int64(page, sqlite3_column_count(page) - 1);
        /* hash_size and its kin from the week's ADVERTs (node_hash_sizes.h). */
        struct mg_node_hash_sizes hs;
        struct mg_node_fields fields;
        mg_node_fields_init(&fields);
        const char *key = (const char *)sqlite3_column_text(page, key_col);
        bool sized = mg_node_hash_sizes_lookup(key, &hs);
        if (sized)
            mg_node_hash_fields(&fields, &hs);
        /* multi-byte capability beyond what the week's ADVERTs confirm (node_multibyte.h) */
        mg_node_multibyte_fields(&fields, key, sized ? &hs : NULL);
        /* relay activity from this process's table (node_relay.h) */
        if (role_col >= 0 &&
            mg_node_relay_role((const char *)sqlite3_column_text(page, role_col))) {
            mg_node_relay_fields(&fields, key, false, now_s * 1000000000LL, &relay_text);
            /* and the usefulness axes (node_usefulness.h) */
            mg_node_usefulness_fields(&fields, key, mg_node_relay_traffic(key));
        }
        mg_nodes_write_node(&j, page, schema, fields.field);
    }
    mg_buf_free(&relay_text);
    mg_json_array_end(&j);
    if (rc != SQLITE_DONE)
        return rc;
    bool total_known = total_in_page && (rows > 0 || q->offset == 0);
    if (!total_known && (rc = read_total(total_st, q, now_s, &total)) != SQLITE_OK)
        return rc;
    mg_json_kv_int(&j, "total", total);
    mg_json_key(&j, "counts");
    mg_json_object_begin(&j);
    for (size_t i = 0; i < ROLE_COUNTS; i++)
        mg_json_kv_int(&j, role_counts[i].key, cache.counts[i]);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    return SQLITE_OK;
}

/*
 * The stamps of everything an answer is derived from besides its query (answer_cache.h), in
 * the read transaction: the database's data version (SQLITE_FCNTL_DATA_VERSION: it moves
 * with every commit of another connection, the ingestor's), the role counts' time, the hash sizes'
 * and relay activity's tables, the usefulness scores, the region map when the query has a region,
 * and the request's second (relay_active and the lastHeard cutoff are decided at it). A source
 * added to the node list (a per-process table, a column of another table read through the page)
 * adds its stamp here, or the answer cache would serve answers without it. An SQLite code.
 */
static int answer_stamps(sqlite3 *conn, const struct mg_nodes_query *q, int64_t now_s,
                         struct mg_answer_stamps *out)
{
    memset(out, 0, sizeof *out);
    /* The version is the one the pager saw when the read snapshot began: begin it first. */
    int rc = run_once(conn, &cache.snapshot, "SELECT 1 FROM nodes LIMIT 1");
    if (rc == SQLITE_ROW)
        rc = SQLITE_OK;
    unsigned data_version = 0;
    if (rc == SQLITE_OK)
        rc = sqlite3_file_control(conn, "main", SQLITE_FCNTL_DATA_VERSION, &data_version);
    if (rc != SQLITE_OK)
        return rc;
    out->v[0] = data_version;
    out->v[1] = (uint64_t)cache.counts_monotonic_ns;
    out->v[2] = mg_node_hash_sizes_generation();
    out->v[3] = q->regions.len > 0 ? mg_region_map_generation() : 0;
    out->v[4] = mg_node_relay_generation();
    /* relay_active is decided at the request's second, and so is the lastHeard cutoff. */
    out->v[5] = (uint64_t)now_s;
    /* what the configuration hides and its areas (fixed in a worker; tests load others) */
    out->v[6] = mg_corescope_current()->generation;
    out->v[7] = mg_node_usefulness_generation();
    out->v[8] = mg_node_multibyte_generation();
    return SQLITE_OK;
}

uint64_t mg_nodes_answers_rendered(void)
{
    return cache.answers_rendered;
}

/* The list from q (its area decided; rc: how reading it went): the group's tables, then the
 * page. MG_PARK while the helper fetches a table (q is left as it is); else q is not freed. */
static enum mg_turn nodes_answer(struct mg_env *env, const struct mg_request *req,
                                 struct mg_response *res, const struct mg_nodes_query *q, int rc)
{
    sqlite3 *conn = env->db->conn;
    int64_t now_s = req->start_realtime_ns / 1000000000LL;
    sqlite3_stmt *total_st = NULL, *page = NULL;
    /* No map made this request heavy (mg_nodes_is_heavy): the group's copy is taken, or the
     * group's pass followed or run here (on a helper); a stale one is refreshed on the helper. */
    bool regions = q->regions.len > 0;
    /* On the loop (env->jobs: a helper to hand work to), a table another thread builds now
     * is not waited for: the request parks until the helper has it (pending). */
    bool pending = false, *busy = env->jobs ? &pending : NULL;
    if (rc == SQLITE_OK && regions)
        rc = mg_region_map_keep(env, mg_monotonic_ns(), busy);
    /* The hash sizes, relay activity, usefulness scores and multi-byte capability: never
     * waited for on the loop; until the group's pass lands, the fields as CoreScope has them
     * before its own (node_hash_sizes.h, node_relay.h, node_usefulness.h, node_multibyte.h).
     * In process (no helper) they are built here (mg_nodes_is_heavy). */
    if (rc == SQLITE_OK && !pending)
        rc = mg_node_hash_sizes_keep_behind(env, mg_monotonic_ns(), now_s);
    if (rc == SQLITE_OK && !pending)
        rc = mg_node_relay_keep_list(env, mg_monotonic_ns(), req->start_realtime_ns, &pending);
    if (rc == SQLITE_OK && !pending)
        rc = mg_node_usefulness_keep(env, mg_monotonic_ns(), req->start_realtime_ns);
    if (rc == SQLITE_OK && !pending)
        rc = mg_node_multibyte_keep(env, mg_monotonic_ns(), req->start_realtime_ns);
    if (pending) /* woken when the helper's fetch is done */
        return mg_park_until(req, 0);
    if (regions)
        mg_region_map_read_begin();
    mg_node_hash_sizes_read_begin();
    mg_node_relay_read_begin();
    mg_node_usefulness_read_begin();
    mg_node_multibyte_read_begin();
    if (rc == SQLITE_OK) {
        total_st = cached_statement(env->db, q, MG_NODES_SQL_TOTAL);
        page = total_st ? cached_statement(env->db, q, MG_NODES_SQL_PAGE) : NULL;
        rc = page ? SQLITE_OK : SQLITE_ERROR;
    }
    /* One read transaction: the page, the total (and fresh counts) see one snapshot. */
    bool began = false;
    if (rc == SQLITE_OK && sqlite3_get_autocommit(conn)) {
        rc = run_once(conn, &cache.begin, "BEGIN");
        began = rc == SQLITE_OK;
    }
    if (rc == SQLITE_OK)
        rc = refresh_counts(env->db, q, req->start_monotonic_ns);
    /* The same query, nothing changed since it was answered: the answer kept is this one. */
    struct mg_answer_stamps stamps;
    const char *key = !req->http ? NULL : req->http->query.ptr ? req->http->query.ptr : "";
    size_t key_len = req->http ? req->http->query.len : 0;
    const struct mg_buf *kept = NULL;
    if (rc == SQLITE_OK)
        rc = answer_stamps(conn, q, now_s, &stamps);
    if (rc == SQLITE_OK && key)
        kept = mg_answer_cache_get(&cache.answers, key, key_len, &stamps);
    if (kept) {
        mg_response_json(res, 200);
        mg_buf_append(&res->body, kept->data, kept->len);
    } else {
        size_t body_start = res->body.len;
        if (rc == SQLITE_OK)
            rc = mg_nodes_bind(page, q, now_s);
        if (rc == SQLITE_OK)
            rc = write_answer(res, page, &env->db->schema, total_in_page(filters_of(q)), total_st,
                              q, now_s);
        if (rc == SQLITE_OK && key && !res->body.failed)
            mg_answer_cache_put(&cache.answers, key, key_len, &stamps, res->body.data + body_start,
                                res->body.len - body_start);
    }
    if (rc != SQLITE_OK)
        mg_response_db_failure_on(res, "the nodes", rc, conn);

    /* A statement left mid-step would hold its read snapshot (and the ingestor's
     * checkpoints) until the next request. */
    if (page)
        sqlite3_reset(page), sqlite3_clear_bindings(page);
    if (began && run_once(conn, &cache.commit, "COMMIT") != SQLITE_OK &&
        !sqlite3_get_autocommit(conn))
        sqlite3_exec(conn, "ROLLBACK", NULL, NULL, NULL);
    mg_node_multibyte_read_end();
    mg_node_usefulness_read_end();
    mg_node_relay_read_end();
    mg_node_hash_sizes_read_end();
    if (regions)
        mg_region_map_read_end();
    return MG_DONE;
}

/* Its text values as the request's parameters hold them now: a parked request's moved with
 * them into what dispatch kept (mg_params_rebase). */
static void nodes_query_texts(struct mg_nodes_query *q, const struct mg_request *req)
{
    struct nodes_params own;
    const struct nodes_params *p = mg_params_get(&mg_nodes_params, req, NULL, &own);
    q->role = p->role;
    q->search = p->search;
    q->before = p->before;
    q->area = q->area ? p->area : NULL; /* decided on its first turn */
}

static void nodes_query_drop(void *kept)
{
    mg_nodes_query_free(kept);
}

/* A later turn of a list parked for a table: its query as read and its area as decided on its
 * first turn (kept). */
static enum mg_turn nodes_step(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res)
{
    struct mg_nodes_query *q = req->park->kept;
    nodes_query_texts(q, req);
    enum mg_turn turn = nodes_answer(env, req, res, q, SQLITE_OK);
    return turn == MG_PARK ? mg_park_at(req, nodes_step, 0) : turn;
}

enum mg_turn mg_handle_nodes(struct mg_env *env, const struct mg_request *req,
                             struct mg_response *res)
{
    struct mg_nodes_query q;
    if (!mg_nodes_parse(req, res, &q)) {
        mg_nodes_query_free(&q);
        return MG_DONE;
    }
    int rc = q.regions.failed ? SQLITE_NOMEM : SQLITE_OK;
    /* An area with no node inside filters nothing (node_visibility.h). */
    struct mg_area_nodes area;
    if (rc == SQLITE_OK && q.area &&
        (rc = mg_area_nodes_load(env->db->conn, q.area, &area)) == SQLITE_OK) {
        if (!mg_area_nodes_filter(&area))
            q.area = NULL;
        mg_area_nodes_free(&area);
    }
    /* Parked: its later turns continue at nodes_step with q. */
    bool kept;
    enum mg_turn turn = mg_park_keep_at(req, nodes_answer(env, req, res, &q, rc), nodes_step, &q,
                                        sizeof q, nodes_query_drop, &kept);
    if (!kept)
        mg_nodes_query_free(&q);
    return turn;
}

/*
 * Whether this thread keeps the answer to req as the handler would find it: the same key,
 * and the stamps the handler will compute (role counts that it would not refresh, the data
 * version as of now). A commit between this and the handler makes the handler render it; that
 * is one answer per commit, not per request.
 */
static bool answer_kept(struct mg_env *env, const struct mg_request *req,
                        const struct mg_nodes_query *q)
{
    sqlite3 *conn = env->db->conn;
    cache_for(conn);
    if (!req->http || !cache.have_counts ||
        req->start_monotonic_ns - cache.counts_monotonic_ns >= MG_NODES_COUNTS_INTERVAL_NS)
        return false;
    struct mg_answer_stamps stamps;
    if (answer_stamps(conn, q, req->start_realtime_ns / 1000000000LL, &stamps) != SQLITE_OK)
        return false;
    return mg_answer_cache_has(&cache.answers, req->http->query.ptr ? req->http->query.ptr : "",
                               req->http->query.len, &stamps);
}

bool mg_nodes_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    /* The group's tables: the list answers without them while their passes run behind it, on
     * the helper; with no helper to run them (in process), the request would build them
     * (mg_group_table_keep_behind). */
    if (!env->jobs && (!mg_node_hash_sizes_available(env) || !mg_node_relay_list_available(env) ||
                       !mg_node_usefulness_available(env) || !mg_node_multibyte_available(env)))
        return true;
    struct mg_nodes_query q;
    mg_nodes_parse(req, NULL, &q);
    bool heavy = q.regions.len > 0 && !mg_region_map_available(env);
    /* A large page: light only as a copy of the answer this thread keeps. */
    if (!heavy && q.limit > MG_NODES_LIGHT_LIMIT)
        heavy = !answer_kept(env, req, &q);
    mg_nodes_query_free(&q);
    return heavy;
}
