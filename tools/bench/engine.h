/* SPDX-License-Identifier: ISC */
/*
 * bench/engine.h: the engine of a run, streams of HTTP GET requests at one local meshgate
 * (see bench.h for the rules that make the numbers trustworthy).
 *
 * How a run works. mg_bench_run starts --threads workers; each owns an epoll instance, a share
 * of every stream and a min-heap of deadlines (a request's timeout, or the end of a closed
 * connection's pause). Streams are shared out so their sum is exactly what was asked:
 * closed connection i and once request i go to thread i % T, and tick k of an open stream's
 * schedule (at start + k / RATE) goes to thread k % T. Workers share nothing but a few atomic
 * counters per stream (requests counted against --max-requests, next key, open requests in
 * flight against --max-outstanding); each keeps its own tallies and latency samples, merged
 * and sorted once every thread has ended.
 *
 * A connection's life: IDLE -> CONNECTING -> SENDING -> RECEIVING, then by mode: closed goes
 * to WAITING (its pause, or a back-off after an error) and sends again, open goes back to a
 * pool of kept-alive connections (POOLED), once ends (DONE). An epoll event carries the
 * connection's id and the generation of its socket, so an event for a socket already closed
 * is recognised and ignored even when the kernel hands the same descriptor number out again.
 */
#ifndef MESHGATE_BENCH_ENGINE_H
#define MESHGATE_BENCH_ENGINE_H

#include "clock.h"
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>

#define NOT_IN_HEAP ((size_t)-1)
#define STOP_POLL_NS (50 * MG_NS_PER_MS) /* how often a worker looks at the stop flag */
#define EVENTS_PER_WAIT 256
#define SCRATCH_BYTES 65536

/* One stream as every thread sees it. Only the atomics change during a run. */
struct plan {
    const struct mg_bench_stream *spec;
    char *fixed_request; /* the request when the path holds no {key} */
    size_t fixed_len;
    size_t request_cap; /* room for the longest keyed request */
    double period_ns;   /* open: time between two ticks of the schedule */
    atomic_uint_fast64_t next_key;
    atomic_uint_fast64_t counted;     /* requests counted, against --max-requests */
    atomic_uint_fast64_t outstanding; /* open: requests in flight, against --max-outstanding */
    atomic_int_fast64_t stopped_ns;   /* when --max-requests stopped it; 0: it did not */
};

struct run {
    const struct mg_bench_config *cfg;
    struct plan plans[MG_BENCH_MAX_STREAMS];
    int64_t start_ns;      /* the first tick of every schedule; warm-up begins */
    int64_t measure_ns;    /* the window opens */
    int64_t window_end_ns; /* the window closes: nothing is sent from here on */
    int64_t timeout_ns;
    atomic_int_fast64_t interrupted_ns; /* when a worker first saw the stop flag; 0: never */
    atomic_bool failed;                 /* a worker hit a system error: all stop */
};

/* --- the engine: one thread's state ---------------------------------------------------------- */

enum conn_state {
    CONN_IDLE,       /* no request; for open streams: on the free list */
    CONN_CONNECTING, /* a request is out from here to RECEIVING */
    CONN_SENDING,
    CONN_RECEIVING,
    CONN_WAITING, /* closed: pause (or back-off) before the next request */
    CONN_POOLED,  /* open: kept alive, waiting for a tick */
    CONN_DONE,    /* closed and once: nothing more to send */
};

enum chunk_step {
    CHUNK_NONE = 0,
    CHUNK_SIZE,
    CHUNK_EXTENSION,
    CHUNK_DATA,
    CHUNK_DATA_END,
    CHUNK_TRAILER
};

struct shard;

struct conn {
    struct shard *shard;
    uint32_t id;  /* index in the worker's table */
    uint32_t gen; /* bumps with every new socket */
    int fd;
    uint32_t events; /* registered with epoll; 0: not registered */
    enum conn_state state;
    int64_t start_ns;    /* the request's scheduled start */
    int64_t deadline_ns; /* timeout, or end of the pause */
    size_t heap_pos;
    bool counted;   /* the request is in the window */
    bool reused;    /* the socket already carried a whole exchange */
    bool retried;   /* the request was sent again once */
    bool got_bytes; /* some of the response came */
    bool head_done; /* the head is parsed; body_left bytes to go */
    bool close_after;
    /* A chunked body (--chunked): where its reading is (enum chunk_step), the chunk size
     * being read, the length of the trailer line being read. */
    int chunk_step;
    uint64_t chunk_size;
    size_t trailer_line;
    int status;
    uint64_t body_left;
    unsigned once_index;
    const char *req;
    size_t req_len, req_sent;
    char *req_buf;  /* this connection's keyed request */
    char *head_buf; /* a head that came in pieces */
    size_t head_len;
    struct conn *prev, *next; /* the pool, or the free list */
};

struct samples {
    int64_t *v;
    size_t n, cap;
};

struct tally {
    uint64_t sent, responses, dropped, retried, overlong;
    uint64_t status_counts[600];
    uint64_t errors[MG_BENCH_ERR_KINDS];
    int64_t max_send_lag_ns;
    int64_t last_outcome_ns;
    struct samples ok, other; /* latencies of 200s and of every other response */
    uint64_t per_second_200[MG_BENCH_SECONDS_MAX]; /* see mg_bench_stream_report */
    uint64_t per_second_not_200[MG_BENCH_SECONDS_MAX];
    char first_error[160];
};

struct shard {
    struct plan *plan;
    enum mg_bench_mode mode;
    struct tally t;
    unsigned inflight;
    struct conn **own; /* closed and once: this thread's connections */
    unsigned nown, done;
    uint64_t next_tick; /* open: the next tick of the schedule this thread sends */
    bool schedule_over; /* open: no tick left in the window */
    struct conn *pool;  /* open: kept-alive idle connections */
    struct conn *free_list;
    bool fired; /* once: the burst went out */
};

struct worker {
    struct run *run;
    unsigned index;
    int epfd;
    bool stopping;
    struct shard shards[MG_BENCH_MAX_STREAMS];
    struct conn **table;
    uint32_t ntable, table_cap;
    struct conn **heap;
    size_t heap_len, heap_cap;
    char err[256]; /* a system error, when there was one */
    pthread_t thread;
    char scratch[SCRATCH_BYTES];
};

/* conn.c */
void mg_bench_worker_fail(struct worker *w, const char *what);
void mg_bench_heap_remove(struct worker *w, struct conn *c);
bool mg_bench_heap_set(struct worker *w, struct conn *c, int64_t deadline_ns);
struct conn *mg_bench_conn_new(struct worker *w, struct shard *sh);
void mg_bench_conn_close(struct conn *c);
void mg_bench_list_push(struct conn **head, struct conn *c);
void mg_bench_list_remove(struct conn **head, struct conn *c);
void mg_bench_conn_finish(struct worker *w, struct conn *c, int status,
                          enum mg_bench_error_kind kind, int errnum, int64_t now);
void mg_bench_conn_fail_or_retry(struct worker *w, struct conn *c, enum mg_bench_error_kind kind,
                                 int errnum, int64_t now);
void mg_bench_conn_try_send(struct worker *w, struct conn *c, int64_t now);
bool mg_bench_conn_issue(struct worker *w, struct conn *c, int64_t start_ns, int64_t now);

/* response.c */
void mg_bench_conn_on_event(struct worker *w, struct conn *c, uint32_t events);

/* worker.c */
void *mg_bench_worker_main(void *arg);
int mg_bench_worker_init(struct worker *w, struct run *r, unsigned index, char *err, size_t errlen);
void mg_bench_worker_free(struct worker *w);

#endif
