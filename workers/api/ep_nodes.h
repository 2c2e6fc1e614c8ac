/* SPDX-License-Identifier: ISC */
/*
 * ep_nodes: GET /api/nodes (the handler, mg_handle_nodes, is declared in router.h).
 *
 * A request is answered in one read transaction with these statements on nodes:
 *   page    the filtered nodes in the requested order: (sort key, public_key, rowid) of
 *           every row is sorted, top offset + limit kept, and only those rows read whole;
 *           with a region, the matching rows are gathered once (a materialized CTE) and
 *           their count comes as the page's last column;
 *   total   count(*) with the same filter (no filter: the primary key's index); with a
 *           region, only when the page is empty past its end;
 *   counts  every node by role, ignoring the filters: one aggregate pass, run at most once
 *           per MG_NODES_COUNTS_INTERVAL_NS by each worker (the answer in between reuses it).
 * nodes has no index but its primary key, so a page and a filtered total read the whole
 * table. The region filter is the one that reaches other tables, and it does so only
 * through their indexes: ADVERT transmissions by idx_transmissions_payload_type, each
 * probed for an observation of the region through idx_observations_transmission_id.
 *
 * Statements are prepared once per connection and shape (which filters are present, the
 * sort) and kept in a small cache; values are bound by name. The last few answers are kept too
 * (answer_cache.h), keyed by the query string and stamped with the database's data_version,
 * the counts' time and the process tables' generations: a request that finds its query kept
 * with the same stamps copies that answer and steps no statement of nodes. This header exposes the
 * parsed parameters, the SQL and the binding so that tests can run and EXPLAIN exactly what
 * the handler runs.
 */
#ifndef MESHGATE_EP_NODES_H
#define MESHGATE_EP_NODES_H

#include "buf.h"
#include "db.h"
#include "handler.h"

#include <stdbool.h>
#include <stdint.h>

#define MG_NODES_LIMIT_DEFAULT 50
#define MG_NODES_LIMIT_MAX 2000
/* A page of more nodes than this (each some 400 to 520 bytes written) is heavy unless this
 * thread keeps its answer (mg_nodes_is_heavy): the Nodes page's limit=500 is 260 KB. */
#define MG_NODES_LIGHT_LIMIT 100

enum mg_nodes_sort {
    MG_NODES_SORT_LAST_SEEN = 0, /* last_seen desc (the default) */
    MG_NODES_SORT_NAME,          /* name asc */
    MG_NODES_SORT_PACKET_COUNT,  /* advert_count desc */
};

/* How old the role counts of an answer may be. */
#define MG_NODES_COUNTS_INTERVAL_NS (2 * 1000000000LL)

enum mg_nodes_statement {
    MG_NODES_SQL_PAGE,
    MG_NODES_SQL_TOTAL,
    MG_NODES_SQL_COUNTS,
};

struct mg_nodes_query {
    int64_t limit;  /* clamped to 1..MG_NODES_LIMIT_MAX */
    int64_t offset; /* clamped to >= 0 */
    /* Raw values from the query (NULL when absent or empty); they point into the request. */
    const char *role;
    const char *search;
    const char *before;
    int64_t last_heard_s; /* the lastHeard window in seconds; 0: no such filter */
    enum mg_nodes_sort sort;
    /* The region codes, trimmed and uppercased, as ",SJC,OAK,"; empty (len 0) when there
     * is no region filter. */
    struct mg_buf regions;
    /* area=: a key of the configuration's areas (NULL: none, or a key it does not have); the
     * handler drops it too when no node is inside, as CoreScope does (node_visibility.h). */
    const char *area;
};

/*
 * Reads the parameters into q (call mg_nodes_query_free afterwards, whatever it returns).
 * Returns true, or false after filling res with a 400 that names the parameter and what it
 * accepts.
 */
bool mg_nodes_parse(const struct mg_request *req, struct mg_response *res,
                    struct mg_nodes_query *q);
void mg_nodes_query_init(struct mg_nodes_query *q); /* defaults, no filter */
void mg_nodes_query_free(struct mg_nodes_query *q);

/*
 * Writes the SQL of one statement for q and the schema into out. Values appear as named
 * parameters (:role, :search, :before, :cut, :cut_glob, :regions, :limit, :offset) that
 * mg_nodes_bind fills. The page's columns are in the order the node's keys are written;
 * the counts' are companions, repeaters, rooms, sensors.
 */
void mg_nodes_sql(const struct mg_db_schema *schema, const struct mg_nodes_query *q,
                  enum mg_nodes_statement which, struct mg_buf *out);

/* Binds q's values to st (a statement from mg_nodes_sql); now_s is the current Unix time,
 * from which the lastHeard cutoff is computed. Returns an SQLite result code. */
int mg_nodes_bind(sqlite3_stmt *st, const struct mg_nodes_query *q, int64_t now_s);

/*
 * The lastHeard bound for a window ending at now_s: last_seen must be strictly newer than
 * the whole second C = now_s - window_s. Text values compare as strings, and in string
 * order "…:58.081Z" sorts before "…:58Z", so one comparison cannot say it; the condition
 * is `last_seen > cut OR last_seen GLOB cut_glob` with cut = "YYYY-MM-DDTHH:MM:SSZ" (every
 * later second, in either form) and cut_glob = "YYYY-MM-DDTHH:MM:SS.*[1-9]*" (C itself
 * with a fraction that is not zero). Both buffers must hold 40 bytes.
 */
void mg_nodes_last_heard_cutoff(int64_t now_s, int64_t window_s, char *cut, char *cut_glob);

/* How many answers this thread has rendered from the database, not from its answer cache
 * (tests). */
uint64_t mg_nodes_answers_rendered(void);

#endif
