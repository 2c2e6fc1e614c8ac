/* SPDX-License-Identifier: ISC */
/*
 * packet_scan: /api/packets' page scan, the data room's unit that reads and writes packets.
 * GET /api/packets (workers/api/ep_packets.c: its parameters, its heavy check, its envelope)
 * answers a page with mg_packets_page; /api/packets/{id} and POST /api/packets/observations
 * (ep_packet_detail.c) write one transmission with mg_packets_detail and
 * mg_packets_observations; the summaries pass (summaries.c) computes each transmission's
 * record with the same scan (mg_packets_summaries_chunk).
 *
 * A request is answered inside one read transaction with these statements:
 *   count         how many transmissions pass the filter (cached per worker, see below);
 *   page          one page of them in id order: the primary key, or an index that keeps
 *                 rowid order, so nothing is sorted;
 *   observations  per page row: its observations through idx_observations_transmission_id;
 *                 the best one (most hops, then newest timestamp, then highest id) and the
 *                 number of distinct (observer, path) pairs are found in C from this one
 *                 pass. Only with expand=observations (listed newest first) are a row's few
 *                 observations sorted;
 *   best          per page row with observations: the best one with its observer, by
 *                 primary key.
 *
 * groupByHash=true lists the same transmissions by their latest sighting, newest first
 * (latest = the greater string of first_seen and the newest observation's time as
 * YYYY-MM-DDTHH:MM:SS.sssZ). Its page is found one of two ways, chosen from the total:
 *   merge         two index walks, transmissions by first_seen desc (LATEST_FIRST_SEEN) and
 *                 observations by timestamp desc (LATEST_OBSERVED), merged; a transmission's
 *                 first appearance in the merged walk carries its latest, so the walk stops
 *                 after offset + limit distinct transmissions (cheap when matches are dense);
 *   sorted        every matching transmission with its latest, sorted (GROUPED_SORTED;
 *                 cheap when matches are few, and needed when the page takes all of them).
 * Each row of the page is then read by id (ROW) and scanned like a listing row.
 *
 * Filters on observations (observer, region, node) take one of two forms: a probe per
 * transmission (EXISTS through idx_observations_transmission_id; cheap when matches are
 * dense and the page ends early) or a list (t.id IN the matching transmission ids, built
 * once; cheap when matches are rare, and always used to count). mg_packets_page picks
 * the form of the page from the count.
 *
 * Totals are cached per worker process, keyed by the count's SQL and values: exact while
 * the database has not changed (SQLite's data version), and a count that took at least
 * MG_PACKETS_TOTAL_SLOW_NS may be served for MG_PACKETS_TOTAL_STALE_NS after a change.
 *
 * This header exposes the filter and the SQL built from it so that tests can pin the query
 * plans.
 */
#ifndef MESHGATE_PACKET_SCAN_H
#define MESHGATE_PACKET_SCAN_H

#include "buf.h"
#include "db.h"
#include "env.h"
#include "json.h"
#include "tx_summary.h"

#include <stdbool.h>
#include <stdint.h>

/* Entries of the observer and region lists (each one is a bound SQL parameter). */
#define MG_PACKETS_LIST_MAX 64
#define MG_PACKETS_TOTAL_SLOW_NS (10 * 1000000LL)
#define MG_PACKETS_TOTAL_STALE_NS (2 * 1000000000LL)
/* A light page (admitted light: ep_packets.h, MG_PACKETS_LIGHT_LIMIT) reads each row from its
 * summary and its best observation by primary key, and the total its process last counted for
 * the same snapshot (packet_scan.c, shared_total). Found otherwise at run time (a row with no
 * summary, the summaries more than MG_PACKETS_LIGHT_LAG observations behind, no total kept for
 * this snapshot, more than MG_PACKETS_LIGHT_BYTES written: long paths), it is admitted again,
 * heavy (MG_READMIT_HEAVY). */
#define MG_PACKETS_LIGHT_LAG 512
/* A light page's body at most: 50 rows of the e2e fixture are 67 KB, of the cost test's heavy
 * shape (long paths) 80 KB, some 0.3 ms of rendering; past it, heavy. */
#define MG_PACKETS_LIGHT_BYTES (128 * 1024)

/* How a filter on observations is written (see above). */
enum mg_packets_form {
    MG_PACKETS_PROBE = 0,  /* EXISTS per transmission */
    MG_PACKETS_LIST_INDEX, /* t.id IN (...), observations found through an index */
    MG_PACKETS_LIST_SCAN,  /* t.id IN (...), observations read in one sequential scan */
};

struct mg_packets_filter {
    int64_t limit;  /* clamped to 1..MG_PACKETS_LIMIT_MAX */
    int64_t offset; /* clamped to >= 0 */
    bool ascending; /* order=asc; the default is descending by id */
    bool expand_observations;
    bool has_type;
    int64_t payload_type;
    bool has_route;
    int64_t route_type;
    /* Raw values from the query (NULL when absent or empty); they point into the request. */
    const char *hash;
    const char *since;
    const char *until;
    const char *observer; /* comma list, entries trimmed, compared case-insensitively */
    const char *region;   /* comma list of IATA codes, trimmed, uppercased, ALL ignored */
    const char *node;     /* a 64-hex public key or an exact node name */
    const char *channel;  /* a decoded channel name, or enc_ + channelHashHex */
    const char *nodes;    /* comma list of public keys or exact node names */
    /* a key of the configuration's areas: the transmissions whose decoded public_key (else
     * pubKey) is a node in it (node_visibility.h); mg_packets_page drops it when no node is
     * inside, and with nodes (CoreScope's nodes= listing takes no area) */
    const char *area;
    bool group_by_hash; /* groupByHash=true */
    /* Filled by mg_packets_page: the node's public key (lowercase), the keys nodes names (those
     * that resolve), and the forms. */
    char node_pubkey[65];
    int nodes_count;
    char nodes_pubkeys[MG_PACKETS_LIST_MAX][65];
    enum mg_packets_form observer_form, region_form, node_form;
};

enum mg_packets_statement {
    MG_PACKETS_SQL_PAGE,
    MG_PACKETS_SQL_COUNT,
    MG_PACKETS_SQL_OBSERVATIONS,
    MG_PACKETS_SQL_BEST,
    MG_PACKETS_SQL_ROW,               /* one transmission by id, the PAGE columns */
    MG_PACKETS_SQL_LATEST_FIRST_SEEN, /* id, first_seen; by first_seen desc, id desc */
    MG_PACKETS_SQL_LATEST_OBSERVED,   /* id, observation time; by timestamp desc, id desc */
    MG_PACKETS_SQL_GROUPED_SORTED,    /* id; by latest desc, id desc; LIMIT ? OFFSET ? */
    /* OBSERVATIONS with expand, in CoreScope's store order: timestamp desc, then id asc */
    MG_PACKETS_SQL_DETAIL_OBSERVATIONS,
};

/*
 * Writes the SQL of one statement for f into out. PAGE and COUNT bind the filter's values
 * in order (PAGE then LIMIT and OFFSET); so do LATEST_FIRST_SEEN, LATEST_OBSERVED and
 * GROUPED_SORTED (with LIMIT and OFFSET); OBSERVATIONS binds a transmission id (with
 * f->expand_observations or f->group_by_hash it also reads the observer and times); BEST
 * binds an observation id, ROW a transmission id. db gives the schema (optional columns, NOT NULL
 * declarations).
 */
void mg_packets_sql(struct mg_db *db, const struct mg_packets_filter *f,
                    enum mg_packets_statement which, struct mg_buf *out);

/*
 * Binds f's values to a PAGE or COUNT statement from parameter 1. Returns how many were
 * bound (PAGE takes LIMIT and OFFSET after them), or -1 when a bind failed.
 */
int mg_packets_bind(struct mg_db *db, const struct mg_packets_filter *f, sqlite3_stmt *st);

/*
 * Per-transmission summaries (shm/tx_summary.h). A pass computes every transmission's record
 * with the very code that answers a page directly, newest first, in chunks: a chunk goes on
 * from the pass under way (or begins one) below its cursor in one snapshot of db, for at most
 * budget_ns (one transmission at least, and min_tx when more are left; 0: no bound) and max_tx
 * transmissions (0: no bound),
 * then publishes how far it got (the low-water mark; the first chunk ever also publishes its
 * snapshot's newest observation id as the high-water mark). each, when not NULL, is called
 * with arg after each transmission (the test build's hook). pid must hold the writer lease
 * (it is renewed as the chunk goes, and the chunk stops when it is lost). Returns 0 with
 * *finished set when the chunk ended the pass, or -1 with err set (the pass ends, failed; a
 * first pass is taken up again below its low-water mark).
 */
struct mg_summaries_chunk {
    int64_t budget_ns;
    int64_t min_tx;
    int64_t max_tx;
    void (*each)(const void *arg);
    const void *arg;
};
int mg_packets_summaries_chunk(struct mg_db *db, struct mg_tx_summaries *s, int pid,
                               const struct mg_summaries_chunk *c, bool *finished, char *err,
                               size_t errlen);
/* A whole pass (or the rest of the one under way) at once, unbounded chunks: 0, or -1. */
int mg_packets_summaries_pass(struct mg_db *db, struct mg_tx_summaries *s, int pid, char *err,
                              size_t errlen);

/* What a page came to (mg_packets_page). */
struct mg_packets_page {
    int64_t total; /* the transmissions passing the filter; 0 when none, or on failure */
    int error;     /* SQLite result code of the first failure, 0 when none */
    /* Admitted light and found it must read what a light page may not: nothing counts, the
     * request is admitted again, heavy (MG_READMIT_HEAVY). */
    bool readmit;
};

/*
 * One page of /api/packets for f (its node keys and forms are filled here) in one read
 * transaction of env's database: the page's packets written into j as an array value, the
 * total and the outcome into *out. light: the request was admitted light (mg_packets_is_heavy);
 * then it reads no row directly, counts nothing and extends no summary. Unless it is to be
 * readmitted, the rows it read from summaries and directly are counted.
 */
void mg_packets_page(struct mg_env *env, struct mg_packets_filter *f, bool light, struct mg_json *j,
                     struct mg_packets_page *out);

/*
 * The keys of /api/packets/{id}'s body (CoreScope's PacketDetailResponse) for transmission
 * tx_id, written into the open object j: "packet" as /api/packets?expand=observations lists
 * it, "path" (its best observation's hops), "observation_count" (its observations, 1 when
 * none) and "observations" (newest first, in CoreScope's observation record). Call it inside
 * a read transaction. As CoreScope's store, "observations" and "observation_count" keep one
 * observation per observer and path: the newest, then the lowest id. SQLITE_OK; SQLITE_NOTFOUND
 * when there is no such transmission (nothing written); otherwise the SQLite code of the failure.
 */
int mg_packets_detail(struct mg_env *env, int64_t tx_id, struct mg_json *j);

/* The "observations" array of that detail alone (POST /api/packets/observations), as a value
 * written into j. Same codes. */
int mg_packets_observations(struct mg_env *env, int64_t tx_id, struct mg_json *j);

/* Tests: whether the last request of this thread answered every page row from a summary
 * (true), or read at least one directly. */
bool mg_packets_last_used_summaries(void);

/* Tests: forgets this thread's cached totals, so that the next count is read now. A slow
 * count may otherwise be served stale for MG_PACKETS_TOTAL_STALE_NS (by design), and on a
 * loaded machine every count is slow. */
void mg_packets_totals_forget(void);

#endif
