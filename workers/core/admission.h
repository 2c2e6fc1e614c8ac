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

#include "handler.h"

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
};

/* The gates. */
extern const struct mg_gate_desc mg_gate_anon_line; /* anonymous heavy requests */
extern const struct mg_gate_desc mg_gate_cold;      /* cold reach builds */
extern const struct mg_gate_desc mg_gate_diag;      /* /api/perf?mem=1 */
/* The anonymous line for a heavy route of the upstream (no helper), and the upstream's own
 * gate (MESHGATE_UPSTREAM_CONCURRENCY): their permits are handed over to the engine, which
 * gives them back when the exchange ends (upstream.c). */
extern const struct mg_gate_desc mg_gate_anon_upstream;
extern const struct mg_gate_desc mg_gate_upstream;

enum mg_admission_result {
    MG_ADMISSION_RUN,     /* it holds a permit: run the work now */
    MG_ADMISSION_PARKED,  /* waiting in line: res is parked, ask again next turn */
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

/* True while p holds g's permit. */
bool mg_admission_held(const struct mg_gate_pass *p);

/* Hands p's LINE permit over to whoever gives it back with mg_fifo_gate_release (the upstream
 * engine): returns its token (0 when p holds none) and p holds nothing after it. No helper is
 * reserved for it (a description that reserves one cannot hand its permit over). */
uint64_t mg_admission_hand_over(struct mg_gate_pass *p);

/* Gives p's permit back (nothing when it holds none), and the helper it reserved. For DIAG,
 * ended_ns and took_ns say when the walk ended and how long it took (the cooldown). */
void mg_admission_release(const struct mg_gate_desc *g, struct mg_gate_pass *p, struct mg_env *env,
                          const struct mg_request *req, int64_t ended_ns, int64_t took_ns);

#endif
