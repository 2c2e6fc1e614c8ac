/* SPDX-License-Identifier: ISC */
/*
 * tx_summary: per-transmission summaries that the whole process group shares, so that a page
 * of /api/packets does not read every observation of every transmission on it.
 *
 * What a summary holds, for transmission T, computed from one snapshot of the database:
 *   best_obs_id        the best observation (most hops, then newest timestamp, then highest
 *                      id; -1 when T has none), read by id when the page is written, so its
 *                      resolved_path and observer are always read live;
 *   observation_count  distinct (observer_idx, path_json) pairs;
 *   observer_count     distinct non-empty observer ids;
 *   last_obs_id        the highest observation id of T that the summary includes.
 *
 * Where: one shared anonymous mapping (MAP_SHARED | MAP_ANONYMOUS) that the master creates
 * before it forks the workers, so every worker inherits it; it is not in the segment, whose
 * size is fixed by the configuration, because its size comes from the database: a power of
 * two of records at least 5/4 of the transmissions' id span plus 16384, 32 bytes each (only
 * pages of records in use become resident). Records are a ring indexed by id modulo the
 * capacity and carry their turn of it (id / capacity), so the newest transmissions always have
 * a record and an old one whose slot was taken reads as absent. An id the record cannot name
 * (negative, or past 2^32 turns) has none. A reload (SIGHUP) gives the new workers a new,
 * empty mapping (the database file may have been replaced).
 *
 * Who writes: the holder of the writer lease (a pid and a deadline in the header, taken by
 * compare-and-swap when free, expired, or held by a pid that no longer runs). Writers are:
 * the first pass (a worker's helper thread, a chunk at a time under a cold-gate permit), the
 * periodic full re-validation (the same), and the incremental extension (an /api/packets request
 * that finds the high-water mark behind its snapshot: at most MG_TX_SUMMARY_EXTEND_ROWS rows).
 * Nobody waits for the lease: a request that cannot take it answers from what is there.
 *
 * Readers never lock: each record is written under a sequence number (odd while written),
 * and a reader copies it and checks that the number was even and unchanged. A writer that
 * dies mid-record leaves the number odd: readers treat the record as absent until it is
 * written again.
 *
 * The pass goes newest first, in chunks (MG_TX_SUMMARY_CHUNK_NS each, a permit and the lease
 * taken per chunk and given back between them, each chunk its own snapshot): it walks the
 * transmissions down from the newest of its first snapshot, and after each chunk the low-water
 * mark L (the lowest transmission id it has reached) says that every transmission from L up
 * has a record. A first pass that fails goes on below L when it is tried again. L only says how
 * far the pass is (the reports show it): a reader checks each record by itself, as below, and a
 * transmission below L simply has none yet.
 *
 * The high-water mark H (-1 until the first chunk is done): every observation with id <= H is
 * included in its transmission's record, and each record was computed from a snapshot that
 * holds every observation up to the H current when it was written (a writer only writes
 * from a snapshot newer than H). So a reader whose snapshot's newest observation is M, who
 * read H before the record, may use the record of T when T has no observation in (H, M]
 * (the reader lists those, at most MG_TX_SUMMARY_LAG_MAX rows, else it uses no record) and
 * last_obs_id <= M. This holds while observations are only appended; what CoreScope does
 * besides appending (updating resolved_path, which no summary holds; deleting old rows;
 * moving a merged duplicate's rows) is covered in docs/architecture.md.
 */
#ifndef MESHGATE_TX_SUMMARY_H
#define MESHGATE_TX_SUMMARY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_TX_SUMMARY_MAGIC "MGTXSUM1"
/* Observation rows an extension reads, new rows plus the rows of their transmissions. */
#define MG_TX_SUMMARY_EXTEND_ROWS 20000
/* A reader whose snapshot is further ahead of H than this uses no record. */
#define MG_TX_SUMMARY_LAG_MAX 4096
/* A lease not renewed for this long is free (a frozen worker is killed well before). */
#define MG_TX_SUMMARY_LEASE_NS (60 * 1000000000LL)
/* A full pass re-validates every record this often (deleted or moved rows). */
#define MG_TX_SUMMARY_REVALIDATE_NS (600 * 1000000000LL)
/* A chunk of a pass stops after this long (one transmission at least). */
#define MG_TX_SUMMARY_CHUNK_NS (20 * 1000000LL)
/* The first chunk of a first pass (no record yet) covers at least the newest this many
 * transmissions whatever it takes, two pages of 50: the page people ask first. A request for
 * a page among them that comes before that chunk is done parks for it (router.h:
 * mg_packets_parks_until) rather than read the same observations directly beside it, for at
 * most MG_TX_SUMMARY_FIRST_WAIT_NS. */
#define MG_TX_SUMMARY_FIRST_TX 100
#define MG_TX_SUMMARY_FIRST_WAIT_NS (30 * 1000000000LL)
/* A pass (a chunk) that failed is tried again after this long. */
#define MG_TX_SUMMARY_RETRY_NS (5 * 1000000000LL)

/* 32 bytes: the transmission's id is not stored whole, only its turn of the ring (the slot
 * gives the rest), so the 2M shape's 500,000 records are 15.2 MB of the group's PSS, not 19. */
struct mg_tx_summary_record {
    _Atomic uint32_t seq; /* 0: never written; odd: being written */
    _Atomic uint32_t observation_count;
    _Atomic uint32_t observer_count;
    _Atomic uint32_t turn; /* tx_id / capacity + 1 */
    _Atomic int64_t best_obs_id;
    _Atomic int64_t last_obs_id;
};
_Static_assert(sizeof(struct mg_tx_summary_record) == 32, "a summary record is 32 bytes");

/* A reader's copy of a record. */
struct mg_tx_summary {
    int64_t tx_id, best_obs_id, last_obs_id;
    uint32_t observation_count, observer_count;
};

struct mg_tx_summary_header {
    char magic[8];
    uint32_t record_size;
    uint32_t reserved;
    uint64_t capacity;          /* records; a power of two */
    _Atomic int64_t high_water; /* -1: no chunk done yet */
    _Atomic int32_t lease_pid;  /* 0: free */
    _Atomic int64_t lease_until_ns;
    _Atomic int64_t passed_ns;          /* CLOCK_MONOTONIC end of the last full pass, 0: none */
    _Atomic int64_t failed_ns;          /* end of the last failed pass, 0: none */
    _Atomic uint64_t passes;            /* full passes done */
    _Atomic uint64_t pass_ms_last;      /* how long the last one took */
    _Atomic uint64_t extended_rows;     /* new observation rows folded in by extensions */
    _Atomic uint64_t rows_from_summary; /* page rows answered from a record */
    _Atomic uint64_t rows_direct;       /* page rows read directly */
    /* The pass goes newest first, in chunks (see below). */
    _Atomic int64_t low_water;     /* -1: none yet; else every transmission from it up is covered */
    _Atomic int64_t cursor;        /* the pass under way goes on below this id; -1: none */
    _Atomic int64_t pass_began_ns; /* CLOCK_MONOTONIC start of the pass under way */
    _Atomic int64_t chunked_ns;    /* end of the last chunk that did not fail, 0: none */
    _Atomic uint64_t chunks;       /* chunks run */
};

/* A process's view of the mapping. */
struct mg_tx_summaries {
    struct mg_tx_summary_header *header;
    struct mg_tx_summary_record *records;
    size_t map_bytes;
};

/* The capacity for a database whose transmissions span span_ids ids (max - min + 1). */
uint64_t mg_tx_summary_capacity(int64_t span_ids);

/* Creates the shared mapping with capacity records (see above); 0, or -1 with err set. */
int mg_tx_summaries_create(struct mg_tx_summaries *s, uint64_t capacity, char *err, size_t errlen);
/* Unmaps this process's view (other processes keep theirs). */
void mg_tx_summaries_destroy(struct mg_tx_summaries *s);

/* The lease: taken when free, expired, or held by a pid that no longer runs; never by the
 * pid that holds it (a worker's threads share a pid: the lease is not re-entrant). */
bool mg_tx_summary_lease_take(struct mg_tx_summaries *s, int pid, int64_t now_ns);
void mg_tx_summary_lease_renew(struct mg_tx_summaries *s, int pid, int64_t now_ns);
void mg_tx_summary_lease_release(struct mg_tx_summaries *s, int pid);

/* Lease holder: writes T's record. */
void mg_tx_summary_write(struct mg_tx_summaries *s, int64_t tx_id, int64_t best_obs_id,
                         uint32_t observation_count, uint32_t observer_count, int64_t last_obs_id);
/* Lease holder: publishes a new high-water mark (after the records it covers). */
void mg_tx_summary_publish(struct mg_tx_summaries *s, int64_t high_water);

/* Reader: H, to be read before any record (acquire). */
int64_t mg_tx_summary_high_water(const struct mg_tx_summaries *s);

/* Reader: a consistent copy of T's record; false when T has none (never written, taken by
 * another id, or being written). */
bool mg_tx_summary_read(const struct mg_tx_summaries *s, int64_t tx_id, struct mg_tx_summary *out);

#endif
