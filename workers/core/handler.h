/* SPDX-License-Identifier: ISC */
/*
 * handler: what an endpoint sees. A handler gets the worker's environment (configuration,
 * segment, database), the request (decoded path, query, headers) and fills a response
 * (status, body, extra headers). It never touches the socket: the worker reads the whole
 * request before calling it and writes the response after it returns, so no handler (and no
 * gate it takes) ever waits on a slow client.
 */
#ifndef MESHGATE_HANDLER_H
#define MESHGATE_HANDLER_H

#include "buf.h"
#include "config_values.h"
#include "db.h"
#include "env.h"
#include "http.h"
#include "segment.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Room for the largest route's parameter struct (params.h; checked when it is parsed). */
#define MG_PARAMS_BYTES 320

struct mg_param_table;
/* Room for what a handler keeps between its calls (mg_park.state): the largest is a cold
 * report's (cold_report.c); each user asserts that its state fits. */
#define MG_PARK_BYTES 192

struct mg_jobs;
struct mg_tx_summaries;
struct mg_handler_job;
struct mg_prepared;

/*
 * What the admission gates did with a request, and who it was, for the access log. Written by
 * dispatch (the per-client rate limit, the anonymous line, the signed-in key) and by the
 * handlers that have a gate of their own (the cold gate of reach reports, the diagnostic gate
 * of /api/perf?mem=1), in the park, so that it lasts over the turns of a parked request. A
 * request may pass two gates (an anonymous cold reach report: the line, then the cold gate):
 * the outcome is the last gate's verdict, and the wait is the sum of both waits.
 */
enum mg_gate_id {
    MG_GATE_NONE = 0,   /* no gate asked (a light request, or one signed in) */
    MG_GATE_RATE_LIMIT, /* the per-client rate limit of anonymous heavy requests */
    MG_GATE_ANON_LINE,  /* the line of anonymous heavy requests */
    MG_GATE_COLD,       /* the cold gate of reach reports */
    MG_GATE_DIAG,       /* the diagnostic gate of /api/perf?mem=1 */
    MG_GATE_UPSTREAM,   /* the upstream's gate (requests passed to MESHGATE_UPSTREAM) */
    MG_GATE_BREAKER,    /* the upstream's breaker, while it fails fast */
};
enum mg_gate_verdict {
    MG_VERDICT_NONE = 0, /* light: no gate */
    MG_VERDICT_BYPASSED, /* heavy, signed in: the rate limit and the line were skipped */
    MG_VERDICT_ADMITTED, /* at once */
    MG_VERDICT_WAITED,   /* after waiting in line */
    MG_VERDICT_REFUSED,
};
struct mg_outcome {
    uint8_t gate;          /* enum mg_gate_id */
    uint8_t verdict;       /* enum mg_gate_verdict */
    uint16_t key_number;   /* the signed-in key's index in mg_api_keys + 1; 0: anonymous */
    int64_t wait_since_ns; /* monotonic, while waiting in a line; 0 otherwise */
    int64_t waited_ns;     /* time spent waiting in lines, all gates */
};

/* The request is waiting in gate's line (from now, unless it was already). */
void mg_outcome_wait(struct mg_outcome *o, enum mg_gate_id gate, int64_t now_ns);
/* gate decided: admitted (WAITED when it had waited in that line) or refused; a wait in
 * progress ends. */
void mg_outcome_decide(struct mg_outcome *o, enum mg_gate_id gate, enum mg_gate_verdict verdict,
                       int64_t now_ns);
/* "none", "bypassed", "admitted:anon-line", "waited:cold-gate", "refused:rate-limit", ...
 * (at most 32 bytes with the NUL). */
const char *mg_outcome_text(const struct mg_outcome *o, char *out, size_t outlen);

/* A request at one gate of the group (workers/core/admission.h), kept in its park. */
struct mg_gate_pass {
    int step; /* enum in admission.c */
    int place;
    uint64_t ticket;
    uint64_t token;
    int64_t deadline_ns;
    /* The caller's own reason the work may not start now (the upstream gate's reserve for
     * signed-in clients): the place is passed over in line, like work whose helper is busy. */
    bool held_back;
    /* Whose share of the line the place counts against (the client's address key), and that
     * share (0: none; shm/gate_fifo.h, mg_fifo_gate_join_owned). */
    uint8_t owner[16];
    uint32_t share;
};

/*
 * What a handler did with the request on this call (the one state machine of a request: the
 * handler says, dispatch acts; docs/architecture.md, "A request's walk"):
 *   MG_DONE            res holds the answer (an error or a refusal too);
 *   MG_PARK            no answer yet: called again when the worker is woken or at the time
 *                      mg_park_until gave, with the same park (its state, its admission);
 *   MG_READMIT_HEAVY   it was admitted light and its work has turned heavy (a cold report it
 *                      found warm or being built must now be built here): dispatch admits
 *                      it again, heavy, through the route's gates, and calls it again once
 *                      admitted (its state zeroed);
 *   MG_UPSTREAM        admitted for the upstream (upstream.h): the worker hands the
 *                      connection to its proxy engine instead of writing res.
 */
enum mg_turn {
    MG_DONE = 0,
    MG_PARK,
    MG_READMIT_HEAVY,
    MG_UPSTREAM,
};

struct mg_request;
struct mg_response;
typedef enum mg_turn (*mg_handler_fn)(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res);

/*
 * A request a handler cannot finish now (it waits in a gate's line, for another request's
 * build, or for its own build on the worker's helper thread) is parked: the handler returns
 * MG_PARK (mg_park_until, or mg_park_at to say where it continues); the worker keeps the
 * connection and, when it is woken, dispatch continues the request where it stopped
 * (mg_dispatch_resume): its route, credentials and parsed parameters as kept, its admission
 * held (the route's gates not passed again), at the handler's `resume` step when it named one
 * (else at the handler's top). The handler keeps what it needs between its calls in `state`
 * (zeroed before the first call) and, for a larger copy, in `kept` (mg_park_keep). Parking
 * holds no worker: the loop serves other connections meanwhile.
 */
struct mg_park {
    unsigned turns;        /* calls so far for this request */
    unsigned head_parses;  /* times its head was parsed: 1, kept while it is parked */
    unsigned preparations; /* times dispatch prepared it: 1, resumed while it is parked */
    unsigned dispatches;   /* times it entered dispatch from the top (mg_dispatch): 1 */
    unsigned admissions;   /* times admission ran its route's gates (mg_admission_admit) */
    unsigned param_parses; /* times its route's parameters were parsed (params.h): 1 */
    unsigned handler_tops; /* times its handler was entered at its top: 1 once it named a step */
    unsigned route;        /* the route it is counted under (router.h), set by dispatch */
    /* The route's gates, kept by dispatch (the handler's state is its own): */
    struct mg_admission {
        int step;                   /* ADMIT_* (admission.h) */
        int at;                     /* where its walk is (dispatch.c: table, gates, hold, work) */
        int64_t table_since_ns;     /* when it first waited for its route's table (parks_until) */
        bool readmitted;            /* admitted light, then again heavy (MG_READMIT_HEAVY) */
        struct mg_gate_pass line;   /* at the anonymous line */
        char who[80];               /* "client path", as the line's records show it */
        int64_t hold_until_ns;      /* tests only: see mg_env.test_hooks */
        int hold_ms;                /* tests only: req->test_hold_ms on each of its turns */
        struct mg_handler_job *job; /* a handler run on the anonymous helper thread */
        bool submitted;
    } admission;
    struct mg_outcome outcome; /* for the access log */
    /* When it is asked again, said by whoever parks it on each turn (mg_park_until); the
     * worker zeroes it before each call. A parked request is asked only when its worker is
     * woken (its slot's eventfd, shm/wake.h: a gate's hand-off, the end of a build it
     * follows, another worker's value published; its helper's eventfd: a job done, such as
     * the fetch of a group table, or a thread free), its client leaves, at until_ns (0:
     * none), and at least once a second (a wake the code forgot; none is lost to a race). */
    struct mg_park_wait {
        int64_t until_ns;
    } wait;
    /* The request as dispatch prepared it on its first turn (decoded path and query, route,
     * credentials), kept while it is parked so a later turn resumes without preparing it
     * again; freed when it is answered (mg_dispatch_forget). */
    struct mg_prepared *prepared;
    /* Where its handler continues on its next call (mg_park_at; NULL: at its top), and what it
     * keeps there beyond `state` (mg_park_keep, dispatch.c): freed with `prepared`, after
     * kept_drop (NULL: none) has freed what it owns. */
    mg_handler_fn resume;
    void *kept;
    void (*kept_drop)(void *kept);
    _Alignas(16) unsigned char state[MG_PARK_BYTES];
};

struct mg_request {
    const struct mg_http_request *http;
    /* The request's body, read whole by the worker (Content-Length bytes) for a route that
     * reads one (router.h: body_max); len 0 otherwise. It stays in the connection's buffer
     * until the request is answered. */
    struct mg_str body;
    const char *path; /* percent-decoded */
    struct mg_query query;
    char path_param[MG_PATH_PARAM_MAX]; /* the {pubkey} of a templated route, decoded */
    int64_t start_monotonic_ns;
    int64_t start_realtime_ns;
    bool accepts_gzip;
    const char *client_addr; /* the peer, as text */
    uint8_t peer[16];        /* the peer's address (netaddr.h form); all zero when unknown */
    /* Asks, without reading, whether the client has gone away (for a handler that waits in
     * a gate's line); NULL when there is no socket to ask (in-process tests). */
    bool (*client_gone)(void *arg);
    void *client_gone_arg;
    struct mg_park *park; /* never NULL when a handler runs */
    /* The connection's hold record in the per-client connection table (shm/conn_limit.h),
     * plus one; 0: the connection is not counted there. */
    uint32_t conn_hold_plus_one;
    bool signed_in; /* it presented a valid API key */
    /* Signed in, or its client (the peer, or behind a trusted proxy what X-Forwarded-For
     * names) is in MESHGATE_ADMIN_NETWORKS: it may see the admin pages and client addresses. */
    bool admin;
    int test_hold_ms; /* tests only: X-Test-Hold-Ms, when test hooks are on */
    /* The route's query parameters, parsed by dispatch through the route's table (params.h:
     * read them with mg_params_get); param_table NULL: the route declares none. */
    const struct mg_param_table *param_table;
    _Alignas(max_align_t) unsigned char params[MG_PARAMS_BYTES];
};

struct mg_response {
    int status;
    const char *content_type;
    struct mg_buf body;
    struct mg_buf headers; /* extra header lines, each ending in CRLF */
    bool no_store;         /* Cache-Control: no-store */
    bool close;            /* close the connection after this response */
    bool refused;          /* a refusal (mg_response_refuse): its client's paced (pacing.h) */
    /* A body streamed from a file rather than held in `body` (static files): the response
     * owns file_fd until the worker takes it over to send file_length bytes from
     * file_offset; -1: none. Reset, an error or free closes it. */
    int file_fd;
    uint64_t file_offset;
    uint64_t file_length;
    /* The body (or the file) is gzip already: sent with Content-Encoding: gzip, never
     * compressed again (static files' stored or precompressed bodies). */
    bool gzipped;
    /* A live feed handshake accepted (live.h): the worker answers 101 with live_accept as
     * Sec-WebSocket-Accept and keeps the connection as a WebSocket client; live_shared: it
     * took one of its address's MESHGATE_LIVE_PER_CLIENT. */
    bool live;
    bool live_shared;
    char live_accept[32];
};

/* Parks the request until its worker is woken or until_ns (0: no deadline of its own); see
 * mg_park.wait. Returns MG_PARK, for the handler to return. */
static inline enum mg_turn mg_park_until(const struct mg_request *req, int64_t until_ns)
{
    req->park->wait.until_ns = until_ns;
    return MG_PARK;
}

/* The same, its handler continuing at step (a function of the handler's, called in its place
 * on the request's later turns, with the same park) instead of at its top. */
static inline enum mg_turn mg_park_at(const struct mg_request *req, mg_handler_fn step,
                                      int64_t until_ns)
{
    req->park->resume = step;
    return mg_park_until(req, until_ns);
}

/* len zeroed bytes that last as long as the request (freed when it is answered or its
 * connection closes: mg_dispatch_forget, which calls drop on them first when drop is not
 * NULL, for what they own), for a handler that parks to keep what its step (mg_park_at)
 * needs beyond its park's state: park->kept; NULL when out of memory (the handler then parks
 * with mg_park_until and is entered at its top again). */
void *mg_park_keep(const struct mg_request *req, size_t len, void (*drop)(void *kept));
/* What a handler returns after its first turn gave turn with what (len bytes, owning what
 * drop frees) in hand: parked, what is moved into the park (mg_park_keep, *kept true) and its
 * later turns run step (mg_park_at, with the wait it gave); else (answered, or no memory: it
 * is entered at its top again) *kept false and what stays the handler's to free. */
enum mg_turn mg_park_keep_at(const struct mg_request *req, enum mg_turn turn, mg_handler_fn step,
                             const void *what, size_t len, void (*drop)(void *kept), bool *kept);

void mg_response_init(struct mg_response *res);
void mg_response_reset(struct mg_response *res);
void mg_response_free(struct mg_response *res);

/* Makes the body file_length bytes of fd from file_offset, sent by the worker as the client
 * reads them; the response owns fd from now on. */
void mg_response_file(struct mg_response *res, int fd, uint64_t file_offset, uint64_t file_length);
/* Closes the response's file, if any. */
void mg_response_drop_file(struct mg_response *res);

/* True for a Content-Type that gzip makes smaller (JSON, text, JavaScript, SVG). */
bool mg_response_compressible(const char *content_type);
/* Appends gzip (RFC 1952) of in to out; false when zlib fails or memory runs out. */
bool mg_gzip(const struct mg_buf *in, struct mg_buf *out);

/* Adds a header line ("Name: value"); the CRLF is added. */
void mg_response_header(struct mg_response *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Starts a JSON body: status, Content-Type: application/json, no-store. */
void mg_response_json(struct mg_response *res, int status);

/* {"error":"<message>"} with the status, as every /api error is. */
void mg_response_error(struct mg_response *res, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A failed read of the database by the endpoint that reads `what` ("the observers"): 503 with
 * Retry-After: 1 while a writer holds the lock, otherwise 500 naming it (and a warning in the
 * log). rc is the SQLite result code. */
void mg_response_db_failure(struct mg_response *res, const char *what, int rc);
/* The same, the 500 naming the connection's own message (sqlite3_errmsg: which table or
 * column) when conn is not NULL. The one answer of every endpoint to a failed read. */
void mg_response_db_failure_on(struct mg_response *res, const char *what, int rc, sqlite3 *conn);

/*
 * An admission refusal (invariant 6): status 429 or 503, Retry-After: seconds (>= 1),
 * Cache-Control: no-store, {"error":"<message>","retryAfter":seconds}.
 */
void mg_response_refuse(struct mg_response *res, int status, int retry_after_s,
                        const char *message);

/* Replaces the body with its gzip when the client takes it (gzip_ok), its type compresses
 * and it has gzip_min_bytes or more (0: never); true when it did. A heavy answer is
 * compressed on the helper that built it, not on the worker's loop (issue 23). */
bool mg_response_gzip(struct mg_response *res, bool gzip_ok, int gzip_min_bytes);

/* Writes status line, headers and (unless head_only) body into out; the body compressed first
 * as mg_response_gzip says. */
void mg_response_serialize(struct mg_response *res, struct mg_buf *out, bool head_only,
                           bool keep_alive, bool gzip_ok, int gzip_min_bytes);

#endif
