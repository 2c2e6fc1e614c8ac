/* SPDX-License-Identifier: ISC */
/*
 * admission: the one way a request passes a gate of the group (docs/architecture.md, "The
 * admission path"). A gate is a description (struct mg_gate_desc): which gate of the segment,
 * how it refuses (status, Retry-After, the messages), and which helper runs the work it
 * admits. The module joins the gate, parks the request while it waits, polls it on later
 * turns, refuses it, gives its place up when the client goes away, and releases its permit,
 * the same way for every gate; the endpoints keep only their own work.
 *
 * A request's state at a gate is a struct mg_gate_pass (handler.h) in its park, zeroed before
 * its first pass, so a parked request
 * resumes where it was. A permit is taken only when the helper that will run the work can
 * start it at once (mg_jobs_available; the gate passes over places whose work cannot); with
 * reserve_helper the permit also reserves a thread of that helper until the work is handed
 * over (the anonymous line, whose request may first wait at the cold gate).
 *
 * Adding a gate: a section of the segment with its lock and records (shm/), a description
 * here (mg_gate_*), and a call of mg_admission_pass / mg_admission_release where the request
 * meets it. Its state for the access log is an enum mg_gate_id (handler.h).
 */
#ifndef MESHGATE_ADMISSION_H
#define MESHGATE_ADMISSION_H

#include "conn_limit.h"
#include "gates.h"
#include "handler.h"
#include "summaries.h"
#include "upstream_gate.h"

#include <stdint.h>

struct mg_fifo_gate;
struct mg_jobs;

enum mg_gate_kind {
    MG_GATE_KIND_LINE, /* permits and a first-come line (shm/gate_fifo.h) */
    MG_GATE_KIND_DIAG, /* one permit and a cooldown, no line (shm/gate_diag.h) */
};

struct mg_gate_desc {
    enum mg_gate_id id; /* what the access log calls it */
    enum mg_gate_kind kind;
    /* The gate in the segment (LINE). */
    struct mg_fifo_gate *(*line)(const struct mg_env *env);
    /* The helper that runs admitted work; NULL: none, the event loop runs it. */
    struct mg_jobs *(*helper)(const struct mg_env *env);
    bool reserve_helper;
    /* Its refusal: status, Retry-After, and the message for each reason (a %s in it is the
     * name of the work the caller passes, e.g. "reach report"). */
    int refuse_status;
    int retry_after_s;
    const char *when_full;
    const char *when_timed_out;
    const char *when_cooling; /* DIAG: a walk ended moments ago */
    const char *when_share;   /* LINE: the client holds its share of it (same status) */
};

/* The gates. */
extern const struct mg_gate_desc mg_gate_anon_line; /* anonymous heavy requests */
extern const struct mg_gate_desc mg_gate_cold;      /* cold reach builds */
extern const struct mg_gate_desc mg_gate_diag;      /* /api/perf?mem=1 */
/* The upstream's gate (MESHGATE_UPSTREAM_CONCURRENCY): its permit is handed over to the engine,
 * which gives it back when the exchange ends (upstream.c). Anonymous requests for the upstream,
 * heavy ones too, meet it and not the anonymous line: a slow build on the anonymous helper never
 * holds them. */
extern const struct mg_gate_desc mg_gate_upstream;

/*
 * A route's gates, in the order its requests meet them, as nginx runs a request's phases: a
 * list of rows of shm/gates.h ended by MG_GATE_ROWS, one named list per cost class (the route
 * row points to one, router.h). mg_admission_admit runs the gates met before the handler
 * (rate_limit, anon_line) in the list's order; the ones its work meets inside the handler
 * (cold, diag, upstream, breaker: a cached answer meets none) are passed there, through this
 * file. The connection cap is met by every connection, before any route (worker.c).
 */
extern const enum mg_gate_row mg_gates_light[];    /* none */
extern const enum mg_gate_row mg_gates_heavy[];    /* rate_limit, anon_line */
extern const enum mg_gate_row mg_gates_cold[];     /* rate_limit, anon_line, cold */
extern const enum mg_gate_row mg_gates_diag[];     /* rate_limit, anon_line, diag */
extern const enum mg_gate_row mg_gates_upstream[]; /* rate_limit, breaker, upstream */

/* Where a request is in its route's gates (req->park->admission.step). */
enum {
    ADMIT_NEW = 0, /* not decided yet: the first turn */
    ADMIT_LIGHT,   /* not heavy: nothing to take */
    ADMIT_BYPASS,  /* heavy, signed in */
    ADMIT_OFF, /* heavy, anonymous, no line: disabled (MESHGATE_ANON_CONCURRENCY=0), or the upstream
                */
    ADMIT_LINE, /* at the line (admission.c): waiting, or refused */
    ADMIT_HELD, /* holds a permit */
    ADMIT_DONE, /* the permit is back */
};

enum mg_admission_result {
    MG_ADMISSION_RUN,     /* it holds a permit: run the work now */
    MG_ADMISSION_PARKED,  /* waiting in line: parked (park.wait), ask again when woken */
    MG_ADMISSION_REFUSED, /* res holds the refusal (and closes when the client left) */
};

/*
 * Takes key (what the gate's records show) through gate g: at once, after waiting, or
 * refused (what: the work's name for the refusal's message, NULL when it names none). Called on
 * every turn until it says RUN or REFUSED; after RUN, again only with mg_admission_release. Writes
 * the request's outcome for the access log.
 */
enum mg_admission_result mg_admission_pass(const struct mg_gate_desc *g, struct mg_gate_pass *p,
                                           struct mg_env *env, const struct mg_request *req,
                                           const char *key, const char *what,
                                           struct mg_response *res);

/*
 * Runs the gates of list met before the handler, for a request that is heavy (asked on its
 * first turn only): a light one meets none, a signed-in one passes them (counted bypassed),
 * an anonymous one meets each in the list's order: the rate limit, then the line (line: the
 * anonymous line as its route meets it). RUN when the handler may run now; REFUSED when res
 * holds the answer; PARKED while it waits in line (asked again only while it waits there:
 * dispatch does not come back here once it holds its admission).
 */
enum mg_admission_result mg_admission_admit(const enum mg_gate_row *list,
                                            const struct mg_gate_desc *line, struct mg_env *env,
                                            struct mg_request *req, bool heavy,
                                            struct mg_response *res);

/* Hands p's LINE permit over to whoever gives it back with mg_fifo_gate_release (the upstream
 * engine): returns its token (0 when p holds none) and p holds nothing after it. No helper is
 * reserved for it (a description that reserves one cannot hand its permit over). */
uint64_t mg_admission_hand_over(struct mg_gate_pass *p);

/* Gives p's permit back (nothing when it holds none), and the helper it reserved. For DIAG,
 * ended_ns and took_ns say when the walk ended and how long it took (the cooldown). */
void mg_admission_release(const struct mg_gate_desc *g, struct mg_gate_pass *p, struct mg_env *env,
                          const struct mg_request *req, int64_t ended_ns, int64_t took_ns);

/*
 * Background work (the summaries pass, the group's tables): a LINE permit of g when one is free
 * and no request waits for it, else false at once. It never joins the line, so the gate counts
 * it as background work (background, backgroundBusy), never as a wait or a cancel; the caller
 * tries again on a later turn. *token is given back with mg_admission_release_background.
 */
bool mg_admission_try_background(const struct mg_gate_desc *g, struct mg_env *env, const char *what,
                                 uint64_t *token);
void mg_admission_release_background(const struct mg_gate_desc *g, struct mg_env *env,
                                     uint64_t token);
/* The same for the cold gate, as the summaries' pass takes it (data/summaries.h). */
extern const struct mg_background_permit mg_background_cold;

/* Wakes the requests that follow another's build at g (shm/gate_fifo.h): a result stored or a
 * claim given up, they find it now or build it themselves. */
void mg_admission_wake_followers(const struct mg_gate_desc *g, struct mg_env *env);

/*
 * The gates' other steps. Every call of a gate's function from workers/ is here, so a gate's
 * admission is read in this one file (tests/test_gate_calls.c checks that no other file of
 * workers/ calls one). Each is the shm/ function of the gate it names, for env's worker.
 */

/* The rate limit (rate_limit row): takes one of key's (a client's) heavy requests; false, with
 * the refusal in res and the outcome decided, when it has none left. */
bool mg_admission_rate_limit(struct mg_env *env, const struct mg_request *req, const uint8_t *key,
                             struct mg_response *res);

/* A LINE gate's limits, as its line's requests see them (0: no cap, the line is off). */
uint32_t mg_admission_cap(const struct mg_gate_desc *g, const struct mg_env *env);
int64_t mg_admission_wait_ns(const struct mg_gate_desc *g, const struct mg_env *env);

/* A place in g's line for a request that waits for another's result (mg_fifo_gate_follow):
 * the place, or -1 when there is none; and giving it up. */
int mg_admission_follow(const struct mg_gate_desc *g, const struct mg_env *env, const char *key);
void mg_admission_unfollow(const struct mg_gate_desc *g, const struct mg_env *env, int place);

/* Gives back a LINE permit handed over with mg_admission_hand_over (the upstream engine). */
void mg_admission_release_token(const struct mg_gate_desc *g, const struct mg_env *env,
                                uint64_t token);

/* The diagnostic gate: whether it would admit a walk now (mg_diag_gate_open). */
bool mg_admission_diag_open(const struct mg_env *env);

/* The connection cap (conn_cap row), per client key: a connection counted in hold, given
 * back, and a client's count read without a lock; a WebSocket tunnel counted in the share of
 * its connection's client (share), and given back. */
enum mg_conn_verdict mg_admission_conn_open(const struct mg_env *env, uint32_t hold,
                                            const uint8_t *key);
void mg_admission_conn_close(const struct mg_env *env, uint32_t hold);
uint32_t mg_admission_conn_count(const struct mg_env *env, const uint8_t *key);
bool mg_admission_tunnel_share_open(const struct mg_env *env, uint32_t hold, uint32_t share);
void mg_admission_tunnel_share_close(const struct mg_env *env, uint32_t hold);

/* The upstream's tunnels and the permits anonymous requests may hold there. */
bool mg_admission_tunnel_open(const struct mg_env *env);
void mg_admission_tunnel_close(const struct mg_env *env);
bool mg_admission_upstream_anon_claim(const struct mg_env *env);
void mg_admission_upstream_anon_unclaim(const struct mg_env *env);
/* An anonymous request's place at the upstream's gate counts in its address's share
 * (MESHGATE_ANON_PER_CLIENT), as at the anonymous line: fills p's owner and share. */
void mg_admission_upstream_share(const struct mg_env *env, const struct mg_request *req,
                                 struct mg_gate_pass *p);

/* The breaker (breaker row): whether a request may go to the upstream now (*retry_ns while
 * it is open), its verdicts (probe: meshgate's own health request, never a client's), and
 * the probe. */
enum mg_breaker_verdict mg_admission_breaker_allow(const struct mg_env *env, int64_t now_ns,
                                                   int64_t *retry_ns);
void mg_admission_breaker_success(const struct mg_env *env, bool probe);
bool mg_admission_breaker_failure(const struct mg_env *env, bool probe, int64_t now_ns,
                                  const uint8_t *addr);
void mg_admission_breaker_abandon(const struct mg_env *env, int64_t now_ns);
int64_t mg_admission_breaker_probe_due(const struct mg_env *env);
bool mg_admission_breaker_take_probe(const struct mg_env *env, int64_t now_ns);

#endif
