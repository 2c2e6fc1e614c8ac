/* SPDX-License-Identifier: ISC */
/*
 * admission (workers/core/admission.c) in process, against a real segment: what the module
 * itself decides around the gates of shm/ (the gates' own rules are test_gate_fifo.c's and
 * test_gate_diag.c's). A route's list is met in order and stops at the first refusal, whose
 * status, Retry-After and message are that gate's; a light list takes nothing; a parked place
 * is asked again at its step, never joined twice; a permit goes back once; a client gone
 * while in line gives its place up; background tries never join the line; the anonymous line
 * is met with the client's owner key and share.
 */
#include "admission.h"
#include "clock.h"
#include "config.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "http.h"
#include "inproc.h"
#include "jobs.h"
#include "netaddr.h"
#include "scoreboard.h"
#include "segment.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(admission, .timeout = 60);

struct limits {
    int anon_cap, anon_queue, per_client, rate, burst, cold_cap, cold_queue;
};

/* A request of one client, with its park and response. */
struct ask {
    struct mg_http_request hr;
    struct mg_request req;
    struct mg_park park;
    struct mg_response res;
};

struct rig {
    struct mg_config cfg;
    struct mg_segment seg;
    struct mg_env env;
    struct ask *asks[8]; /* their responses are freed with the rig */
    unsigned ask_count;
};

static const char *defaults_only(const char *name, void *arg)
{
    (void)arg;
    return strcmp(name, "MESHGATE_DB") == 0 ? "unused" : NULL;
}

static void rig_open(struct rig *r, struct limits l)
{
    static int count;
    memset(r, 0, sizeof *r);
    char err[512], warning[256], name[64];
    mg_config_load(&r->cfg, defaults_only, NULL, err, sizeof err);
    snprintf(r->cfg.listen_host, sizeof r->cfg.listen_host, "127.0.0.1");
    r->cfg.listen_port = 1;
    r->cfg.workers = 1;
    r->cfg.max_uri_bytes = 4096;
    r->cfg.max_header_bytes = 8192;
    mg_config_resolve(&r->cfg, warning, sizeof warning);
    r->cfg.anon_concurrency = l.anon_cap;
    r->cfg.anon_queue = l.anon_queue;
    r->cfg.anon_wait_ms = 180000;
    r->cfg.anon_per_client = l.per_client;
    r->cfg.anon_rate = l.rate;
    r->cfg.anon_burst = l.burst;
    r->cfg.reach_cold_max = l.cold_cap;
    r->cfg.reach_cold_queue = l.cold_queue;
    r->cfg.reach_cold_wait_ms = 180000;
    r->cfg.perf_mem_cooldown_ms = 180000;
    snprintf(name, sizeof name, "/mgtest-admission-%d-%d", (int)getpid(), ++count);
    mg_segment_unlink(name);
    static const char *const routes[] = {"/api/x"};
    cr_assert_eq(mg_segment_create(&r->seg, name, &r->cfg, 1, routes, 1, err, sizeof err), 0, "%s",
                 err);
    mg_segment_unlink(name);
    struct mg_slot *slot = mg_slot_get(&r->seg, 0);
    mg_slot_prepare(slot);
    mg_slot_set_pid(slot, getpid());
    mg_slot_set_state(slot, MG_SLOT_IDLE);
    r->env.cfg = r->seg.config;
    r->env.seg = &r->seg;
    r->env.slot = 0;
    r->env.pid = getpid();
}

static void rig_close(struct rig *r)
{
    for (unsigned i = 0; i < r->ask_count; i++)
        mg_response_free(&r->asks[i]->res);
    mg_segment_detach(&r->seg);
}

/* A fresh request for /api/x from client (an address). */
static void ask_init(struct rig *r, struct ask *a, const char *client)
{
    cr_assert_lt(r->ask_count, sizeof r->asks / sizeof r->asks[0]);
    r->asks[r->ask_count++] = a;
    memset(&a->hr, 0, sizeof a->hr);
    mg_test_request_init(&a->req, &a->hr, &a->park);
    a->req.path = "/api/x";
    a->req.client_addr = client;
    cr_assert(mg_addr_parse(client, strlen(client), a->req.peer));
    mg_response_init(&a->res);
}

static enum mg_admission_result admit(struct rig *r, struct ask *a, const enum mg_gate_row *list)
{
    return mg_admission_admit(list, &mg_gate_anon_line, &r->env, &a->req, true, &a->res);
}

/* A holder from 10.0.0.1 admitted (its permit held), then a second request from 10.0.0.2:
 * what admission says to the second. */
static enum mg_admission_result after_holder(struct rig *r, struct ask *holder, struct ask *other)
{
    ask_init(r, holder, "10.0.0.1");
    cr_assert_eq(admit(r, holder, mg_gates_heavy), MG_ADMISSION_RUN);
    ask_init(r, other, "10.0.0.2");
    return admit(r, other, mg_gates_heavy);
}

static struct mg_fifo_snapshot line_now(struct rig *r, const struct mg_gate_desc *g)
{
    struct mg_fifo_snapshot s;
    mg_fifo_gate_read(g->line(&r->env), r->env.pid, true, &s);
    return s;
}

static const char *outcome(const struct ask *a, char *out, size_t cap)
{
    return mg_outcome_text(&a->park.outcome, out, cap);
}

static void assert_refusal(const struct ask *a, int status, const char *retry_after,
                           const char *message)
{
    cr_assert_eq(a->res.status, status);
    cr_assert(a->res.refused);
    cr_assert_not_null(
        memmem(a->res.headers.data, a->res.headers.len, retry_after, strlen(retry_after)), "%.*s",
        (int)a->res.headers.len, a->res.headers.data);
    cr_assert_not_null(memmem(a->res.body.data, a->res.body.len, message, strlen(message)), "%.*s",
                       (int)a->res.body.len, a->res.body.data);
}

static bool gone(void *arg)
{
    (void)arg;
    return true;
}

Test(admission, a_light_request_or_a_light_list_takes_nothing)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 1, .anon_queue = 4, .rate = 1, .burst = 1});
    struct ask light, heavy_light_list, second;
    ask_init(&r, &light, "10.0.0.1");
    cr_assert_eq(mg_admission_admit(mg_gates_heavy, &mg_gate_anon_line, &r.env, &light.req, false,
                                    &light.res),
                 MG_ADMISSION_RUN);
    cr_assert_eq(light.park.admission.step, ADMIT_LIGHT);
    /* A heavy request of a route whose list is empty meets no gate either. */
    ask_init(&r, &heavy_light_list, "10.0.0.1");
    cr_assert_eq(admit(&r, &heavy_light_list, mg_gates_light), MG_ADMISSION_RUN);
    cr_assert_eq(heavy_light_list.park.admission.step, ADMIT_OFF);
    struct mg_fifo_snapshot s = line_now(&r, &mg_gate_anon_line);
    cr_assert_eq(s.in_flight, 0);
    cr_assert_eq(s.acquired, 0);
    /* Neither took the client's one token of the rate limit: its heavy request still passes. */
    ask_init(&r, &second, "10.0.0.1");
    cr_assert_eq(admit(&r, &second, mg_gates_heavy), MG_ADMISSION_RUN);
    cr_assert_eq(mg_counter_get(&r.seg, MG_CTR_ANON_RATE_LIMITED), 0);
    rig_close(&r);
}

Test(admission, the_list_stops_at_its_first_refusal_with_that_gates_answer)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 1, .anon_queue = 4, .rate = 1, .burst = 1});
    struct ask first, again;
    ask_init(&r, &first, "10.0.0.1");
    cr_assert_eq(admit(&r, &first, mg_gates_heavy), MG_ADMISSION_RUN);
    cr_assert_eq(first.park.admission.step, ADMIT_HELD);
    ask_init(&r, &again, "10.0.0.1");
    cr_assert_eq(admit(&r, &again, mg_gates_heavy), MG_ADMISSION_REFUSED);
    /* The rate limit's row: 429, its message; the line was never met. */
    assert_refusal(&again, 429, "Retry-After: ", "too many heavy requests from this address");
    char text[32];
    cr_assert_str_eq(outcome(&again, text, sizeof text), "refused:rate-limit");
    cr_assert_eq(mg_counter_get(&r.seg, MG_CTR_ANON_RATE_LIMITED), 1);
    struct mg_fifo_snapshot s = line_now(&r, &mg_gate_anon_line);
    cr_assert_eq(s.in_flight, 1);
    cr_assert_eq(s.waited, 0);
    cr_assert_eq(s.waiting, 0);
    cr_assert_eq(s.refused_full, 0);
    rig_close(&r);
}

Test(admission, a_full_line_refuses_with_its_rows_status_and_retry_after)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 1, .anon_queue = 0});
    struct ask holder, refused;
    cr_assert_eq(after_holder(&r, &holder, &refused), MG_ADMISSION_REFUSED);
    assert_refusal(&refused, 503, "Retry-After: 1\r\n",
                   "the line for anonymous heavy requests is full");
    char text[32];
    cr_assert_str_eq(outcome(&refused, text, sizeof text), "refused:anon-line");
    cr_assert_eq(line_now(&r, &mg_gate_anon_line).refused_full, 1);
    rig_close(&r);
}

Test(admission, a_parked_place_resumes_at_its_step_and_is_not_joined_twice)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 1, .anon_queue = 4, .rate = 1, .burst = 1});
    struct ask holder, waiter;
    cr_assert_eq(after_holder(&r, &holder, &waiter), MG_ADMISSION_PARKED);
    cr_assert_eq(waiter.park.admission.step, ADMIT_LINE);
    cr_assert_gt(waiter.park.wait.until_ns, mg_monotonic_ns(), "parked until its wait's end");
    /* Asked again while the permit is held: the same place, no second join, no second token
     * of the rate limit (one a minute, burst 1: a second take would refuse it). */
    for (int turn = 0; turn < 3; turn++)
        cr_assert_eq(admit(&r, &waiter, mg_gates_heavy), MG_ADMISSION_PARKED);
    struct mg_fifo_snapshot s = line_now(&r, &mg_gate_anon_line);
    cr_assert_eq(s.waited, 1);
    cr_assert_eq(s.waiting, 1);
    cr_assert_eq(mg_counter_get(&r.seg, MG_CTR_ANON_RATE_LIMITED), 0);
    cr_assert_eq(waiter.park.admissions, 4);
    mg_admission_release(&mg_gate_anon_line, &holder.park.admission.line, &r.env, &holder.req, 0,
                         0);
    cr_assert_eq(admit(&r, &waiter, mg_gates_heavy), MG_ADMISSION_RUN);
    cr_assert_eq(waiter.park.admission.step, ADMIT_HELD);
    char text[32];
    cr_assert_str_eq(outcome(&waiter, text, sizeof text), "waited:anon-line");
    s = line_now(&r, &mg_gate_anon_line);
    cr_assert_eq(s.in_flight, 1);
    cr_assert_eq(s.waiting, 0);
    cr_assert_eq(s.acquired, 2);
    rig_close(&r);
}

Test(admission, a_permit_goes_back_once)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 2, .anon_queue = 4});
    struct ask one, two;
    cr_assert_eq(after_holder(&r, &one, &two), MG_ADMISSION_RUN);
    struct mg_gate_pass *p = &one.park.admission.line;
    mg_admission_release(&mg_gate_anon_line, p, &r.env, &one.req, 0, 0);
    cr_assert_eq(line_now(&r, &mg_gate_anon_line).in_flight, 1);
    mg_admission_release(&mg_gate_anon_line, p, &r.env, &one.req, 0, 0);
    cr_assert_eq(line_now(&r, &mg_gate_anon_line).in_flight, 1, "the other's permit stays");
    /* Given back, it holds nothing: nothing to hand over, and it does not run again. */
    cr_assert_eq(mg_admission_hand_over(p), 0);
    cr_assert_eq(mg_admission_pass(&mg_gate_anon_line, p, &r.env, &one.req, "k", NULL, &one.res),
                 MG_ADMISSION_REFUSED);
    /* A permit handed over is given back by its new owner, not by release. */
    uint64_t token = mg_admission_hand_over(&two.park.admission.line);
    cr_assert_neq(token, 0);
    mg_admission_release(&mg_gate_anon_line, &two.park.admission.line, &r.env, &two.req, 0, 0);
    cr_assert_eq(line_now(&r, &mg_gate_anon_line).in_flight, 1);
    mg_admission_release_token(&mg_gate_anon_line, &r.env, token);
    cr_assert_eq(line_now(&r, &mg_gate_anon_line).in_flight, 0);
    rig_close(&r);
}

/* The anonymous line reserves a thread of its helper with the permit (reserve_helper): a
 * permit is taken only when that helper can start the work, and the thread goes back with it. */
Test(admission, the_anonymous_helper_is_reserved_with_the_permit_and_given_back_with_it)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 2, .anon_queue = 4});
    struct mg_config pool_cfg = *r.env.cfg;
    snprintf(pool_cfg.db_path, sizeof pool_cfg.db_path, "/dev/null"); /* no job runs */
    char err[256];
    int event_fd;
    r.env.anon_jobs = mg_jobs_start(&pool_cfg, NULL, 0, 1, &event_fd, NULL, 0, err, sizeof err);
    cr_assert_not_null(r.env.anon_jobs, "%s", err);
    static const char someone_else;
    struct ask one, two;
    ask_init(&r, &one, "10.0.0.1");
    ask_init(&r, &two, "10.0.0.2");
    cr_assert_eq(admit(&r, &one, mg_gates_heavy), MG_ADMISSION_RUN);
    cr_assert_not(mg_jobs_available(r.env.anon_jobs, &someone_else), "its one thread is reserved");
    /* A permit is free, the helper is not: the second waits, holding no permit. */
    cr_assert_eq(admit(&r, &two, mg_gates_heavy), MG_ADMISSION_PARKED);
    cr_assert_eq(line_now(&r, &mg_gate_anon_line).in_flight, 1);
    mg_admission_release(&mg_gate_anon_line, &one.park.admission.line, &r.env, &one.req, 0, 0);
    cr_assert(mg_jobs_available(r.env.anon_jobs, &someone_else), "the thread is back");
    cr_assert_eq(admit(&r, &two, mg_gates_heavy), MG_ADMISSION_RUN);
    cr_assert_not(mg_jobs_available(r.env.anon_jobs, &someone_else));
    mg_admission_release(&mg_gate_anon_line, &two.park.admission.line, &r.env, &two.req, 0, 0);
    cr_assert(mg_jobs_available(r.env.anon_jobs, &someone_else));
    mg_jobs_stop(r.env.anon_jobs);
    rig_close(&r);
}

Test(admission, a_client_gone_while_in_line_gives_its_place_up)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 1, .anon_queue = 4});
    struct ask holder, waiter;
    cr_assert_eq(after_holder(&r, &holder, &waiter), MG_ADMISSION_PARKED);
    waiter.req.client_gone = gone;
    cr_assert_eq(admit(&r, &waiter, mg_gates_heavy), MG_ADMISSION_REFUSED);
    cr_assert(waiter.res.close);
    assert_refusal(&waiter, 503, "Retry-After: 1\r\n", "the client went away");
    struct mg_fifo_snapshot s = line_now(&r, &mg_gate_anon_line);
    cr_assert_eq(s.cancelled, 1);
    cr_assert_eq(s.waiting, 0);
    /* Its place is gone: the permit given back goes to no one. */
    mg_admission_release(&mg_gate_anon_line, &holder.park.admission.line, &r.env, &holder.req, 0,
                         0);
    cr_assert_eq(line_now(&r, &mg_gate_anon_line).in_flight, 0);
    rig_close(&r);
}

Test(admission, background_tries_never_join_the_line)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 1, .anon_queue = 4, .cold_cap = 1, .cold_queue = 4});
    uint64_t token = 0, busy = 0;
    cr_assert(mg_admission_try_background(&mg_gate_cold, &r.env, "summaries", &token));
    cr_assert_not(mg_admission_try_background(&mg_gate_cold, &r.env, "summaries", &busy));
    struct mg_fifo_snapshot s = line_now(&r, &mg_gate_cold);
    cr_assert_eq(s.background, 1);
    cr_assert_eq(s.background_busy, 1);
    cr_assert_eq(s.waited, 0);
    cr_assert_eq(s.waiting, 0);
    cr_assert_eq(s.in_flight, 1);
    mg_admission_release_background(&mg_gate_cold, &r.env, token);
    cr_assert_eq(line_now(&r, &mg_gate_cold).in_flight, 0);
    /* The summaries' pass takes it through mg_background_cold, the same way. */
    cr_assert(mg_background_cold.take(&r.env, "summaries", &token));
    cr_assert_eq(line_now(&r, &mg_gate_cold).background, 2);
    mg_background_cold.give(&r.env, token);
    cr_assert_eq(line_now(&r, &mg_gate_cold).in_flight, 0);
    /* The diagnostic gate has no line: no background permit there. */
    cr_assert_not(mg_admission_try_background(&mg_gate_diag, &r.env, "x", &token));
    rig_close(&r);
}

Test(admission, the_anonymous_line_is_met_with_the_clients_owner_and_share)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 1, .anon_queue = 4, .per_client = 1});
    struct ask first, same, other;
    ask_init(&r, &first, "10.0.0.1");
    cr_assert_eq(admit(&r, &first, mg_gates_heavy), MG_ADMISSION_RUN);
    uint8_t addr[MG_ADDR_BYTES], key[MG_ADDR_BYTES];
    cr_assert(mg_addr_parse("10.0.0.1", 8, addr));
    mg_client_key(addr, key);
    cr_assert_arr_eq(first.park.admission.line.owner, key, MG_ADDR_BYTES);
    cr_assert_eq(first.park.admission.line.share, 1);
    cr_assert_str_eq(first.park.admission.who, "10.0.0.1 /api/x");
    /* Its share is held: refused at once (503, the share's message), not put in line. */
    ask_init(&r, &same, "10.0.0.1");
    cr_assert_eq(admit(&r, &same, mg_gates_heavy), MG_ADMISSION_REFUSED);
    assert_refusal(&same, 503, "Retry-After: 1\r\n", "holds its share of the line");
    /* Another client waits in line. */
    ask_init(&r, &other, "10.0.0.2");
    cr_assert_eq(admit(&r, &other, mg_gates_heavy), MG_ADMISSION_PARKED);
    struct mg_fifo_snapshot s = line_now(&r, &mg_gate_anon_line);
    cr_assert_eq(s.refused_share, 1);
    cr_assert_eq(s.waiting, 1);
    rig_close(&r);
}

Test(admission, signed_in_and_lineless_requests_pass_without_a_permit)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 1, .anon_queue = 0, .rate = 1, .burst = 1});
    struct ask holder, signed_in;
    ask_init(&r, &holder, "10.0.0.1");
    cr_assert_eq(admit(&r, &holder, mg_gates_heavy), MG_ADMISSION_RUN);
    /* Same client, line full, rate limit spent: signed in, it passes both (counted). */
    ask_init(&r, &signed_in, "10.0.0.1");
    signed_in.req.signed_in = true;
    cr_assert_eq(admit(&r, &signed_in, mg_gates_heavy), MG_ADMISSION_RUN);
    cr_assert_eq(signed_in.park.admission.step, ADMIT_BYPASS);
    char text[32];
    cr_assert_str_eq(outcome(&signed_in, text, sizeof text), "bypassed");
    cr_assert_eq(mg_counter_get(&r.seg, MG_CTR_ANON_BYPASSED), 1);
    cr_assert_eq(line_now(&r, &mg_gate_anon_line).in_flight, 1);
    rig_close(&r);
    /* A line with no cap (MESHGATE_ANON_CONCURRENCY=0): admitted past the rate limit, off. */
    rig_open(&r, (struct limits){.anon_cap = 0, .anon_queue = 0});
    struct ask off;
    ask_init(&r, &off, "10.0.0.1");
    cr_assert_eq(admit(&r, &off, mg_gates_heavy), MG_ADMISSION_RUN);
    cr_assert_eq(off.park.admission.step, ADMIT_OFF);
    cr_assert_str_eq(outcome(&off, text, sizeof text), "admitted:rate-limit");
    cr_assert_eq(line_now(&r, &mg_gate_anon_line).acquired, 0);
    rig_close(&r);
}

Test(admission, a_gates_refusal_names_the_work_and_the_diag_gate_its_own_reasons)
{
    struct rig r;
    rig_open(&r, (struct limits){.anon_cap = 1, .cold_cap = 1, .cold_queue = 0});
    struct ask a, b, c;
    ask_init(&r, &a, "10.0.0.1");
    ask_init(&r, &b, "10.0.0.2");
    struct mg_gate_pass pa = {0}, pb = {0}, pc = {0};
    cr_assert_eq(
        mg_admission_pass(&mg_gate_cold, &pa, &r.env, &a.req, "k1", "reach report", &a.res),
        MG_ADMISSION_RUN);
    cr_assert_eq(
        mg_admission_pass(&mg_gate_cold, &pb, &r.env, &b.req, "k2", "reach report", &b.res),
        MG_ADMISSION_REFUSED);
    assert_refusal(&b, 429, "Retry-After: 2\r\n", "too many reach reports are being built");
    mg_admission_release(&mg_gate_cold, &pa, &r.env, &a.req, 0, 0);
    /* The diagnostic gate: one walk, then a cooldown; its Retry-After is the gate's own. */
    memset(&pa, 0, sizeof pa);
    memset(&pb, 0, sizeof pb);
    cr_assert_eq(mg_admission_pass(&mg_gate_diag, &pa, &r.env, &a.req, NULL, NULL, &a.res),
                 MG_ADMISSION_RUN);
    mg_response_reset(&b.res);
    cr_assert_eq(mg_admission_pass(&mg_gate_diag, &pb, &r.env, &b.req, NULL, NULL, &b.res),
                 MG_ADMISSION_REFUSED);
    assert_refusal(&b, 429, "Retry-After: ", "a memory breakdown is running");
    int64_t now = mg_monotonic_ns();
    mg_admission_release(&mg_gate_diag, &pa, &r.env, &a.req, now, MG_NS_PER_MS);
    ask_init(&r, &c, "10.0.0.3");
    cr_assert_eq(mg_admission_pass(&mg_gate_diag, &pc, &r.env, &c.req, NULL, NULL, &c.res),
                 MG_ADMISSION_REFUSED);
    assert_refusal(&c, 429, "Retry-After: ", "a memory breakdown ran moments ago");
    cr_assert_gt(strtol(strstr(c.res.headers.data, "Retry-After: ") + 13, NULL, 10), 1,
                 "the cooldown's own Retry-After, not the row's");
    rig_close(&r);
}
