/* SPDX-License-Identifier: ISC */
#include "gate_fifo.h"

#include "clock.h"
#include "wake.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* How often a waiter wakes on its own to ask whether its client is still there. */
#define CANCEL_POLL_NS (20 * MG_NS_PER_MS)

void mg_fifo_gate_init(struct mg_fifo_gate *g, uint32_t cap, uint32_t queue_max, int64_t wait_ns)
{
    memset(g, 0, sizeof *g);
    g->cap = cap;
    g->queue_max = queue_max > MG_FIFO_WAITERS_MAX ? MG_FIFO_WAITERS_MAX : queue_max;
    g->wait_ns = wait_ns;
}

static void fill(struct mg_fifo_record *r, int pid, unsigned slot, uint64_t id, const char *key,
                 int64_t now)
{
    r->pid = pid;
    r->slot = slot;
    r->id = id;
    r->since_monotonic_ns = now;
    snprintf(r->key, sizeof r->key, "%s", key ? key : "");
}

/* Under lock: a free holder record for a new permit, or NULL when the table is full. The
 * permit keeps the round its place was served in; a request's permit moves the line's round
 * on to it (background work, which is in no round, passes the round it finds). */
static bool take_permit(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                        const uint8_t *owner, uint64_t round, int64_t now, uint64_t *token)
{
    for (unsigned i = 0; i < MG_FIFO_HOLDERS_MAX; i++) {
        if (g->holder[i].pid == 0) {
            *token = ++g->next_id;
            fill(&g->holder[i], pid, slot, *token, key, now);
            if (owner)
                memcpy(g->holder[i].owner, owner, MG_FIFO_OWNER_BYTES);
            g->holder[i].round = round;
            if (round > g->round)
                g->round = round;
            g->in_flight++;
            uint32_t peak = atomic_load(&g->peak);
            if (g->in_flight > peak)
                atomic_store(&g->peak, g->in_flight);
            atomic_fetch_add(&g->acquired, 1);
            return true;
        }
    }
    return false;
}

static bool permit_free(const struct mg_fifo_gate *g)
{
    return (g->cap == 0 || g->in_flight < g->cap) && g->in_flight < MG_FIFO_HOLDERS_MAX;
}

/* The line's order (gate_fifo.h, the fair hand-off): the lower round first, then the older
 * ticket. One owner's rounds grow with its tickets, so its places keep their arrival order. */
static bool served_before(const struct mg_fifo_record *a, const struct mg_fifo_record *b)
{
    return a->round != b->round ? a->round < b->round : a->id < b->id;
}

/* Under lock: the index of the next waiter for a permit whose work can run, or -1. */
static int next_ready_waiter(const struct mg_fifo_gate *g)
{
    int best = -1;
    for (int i = 0; i < MG_FIFO_WAITERS_MAX; i++)
        if (g->waiter[i].pid != 0 && !g->waiter[i].follower && !g->waiter[i].unready &&
            (best < 0 || served_before(&g->waiter[i], &g->waiter[best])))
            best = i;
    return best;
}

/* Under lock: places held by followers (they wait for a result, not for a permit). */
static uint32_t followers(const struct mg_fifo_gate *g)
{
    uint32_t n = 0;
    for (int i = 0; i < MG_FIFO_WAITERS_MAX; i++)
        n += g->waiter[i].pid != 0 && g->waiter[i].follower;
    return n;
}

/* What one owner holds (the requests without an owner count as one owner, "nobody"). */
struct owner_holds {
    uint32_t n;     /* permits and places, followers aside */
    uint64_t round; /* the round a new place of this owner is served in */
};

/* Under lock: what owner holds, and the round of its next place: the line's round, or the
 * round after the owner's latest permit or place if that is later (gate_fifo.h). */
static struct owner_holds owned_by(const struct mg_fifo_gate *g, const uint8_t *owner)
{
    struct owner_holds h = {0, g->round};
    const struct mg_fifo_record *sets[2] = {g->holder, g->waiter};
    const int counts[2] = {MG_FIFO_HOLDERS_MAX, MG_FIFO_WAITERS_MAX};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < counts[s]; i++) {
            const struct mg_fifo_record *r = &sets[s][i];
            if (r->pid == 0 || r->follower || memcmp(r->owner, owner, MG_FIFO_OWNER_BYTES))
                continue;
            h.n++;
            if (r->round + 1 > h.round)
                h.round = r->round + 1;
        }
    return h;
}

/* A record's unready: 0 (ready), else why not, as enum mg_fifo_ready says (held back: 1). */
static uint32_t unready_mark(enum mg_fifo_ready ready)
{
    return ready == MG_FIFO_READY ? 0 : ready == MG_FIFO_WORKER_BUSY ? MG_FIFO_WORKER_BUSY : 1;
}

/* Under lock: a ready call from slot shows every place of that slot unready for its worker's
 * reason ready too (gate_fifo.h: the line's order holds within a worker); true when one of
 * them (other than except) was marked. */
static bool slot_ready(struct mg_fifo_gate *g, unsigned slot, int except)
{
    bool marked = false;
    for (int i = 0; i < MG_FIFO_WAITERS_MAX; i++) {
        struct mg_fifo_record *w = &g->waiter[i];
        if (w->pid != 0 && w->slot == slot && w->unready == MG_FIFO_WORKER_BUSY) {
            w->unready = 0;
            marked = marked || i != except;
        }
    }
    return marked;
}

static void leave_line(struct mg_fifo_gate *g, int index)
{
    memset(&g->waiter[index], 0, sizeof g->waiter[index]);
    g->waiting--;
}

/* The most workers one hand-off wakes (free permits are rarely more than a few). */
#define WAKE_MAX MG_FIFO_HOLDERS_MAX

struct wake_list {
    unsigned n;
    uint32_t slot[WAKE_MAX];
};

static void wake_list_add(struct wake_list *l, uint32_t slot)
{
    for (unsigned i = 0; i < l->n; i++)
        if (l->slot[i] == slot)
            return;
    if (l->n < WAKE_MAX)
        l->slot[l->n++] = slot;
}

/*
 * Under lock: the hand-off (gate_fifo.h). Each free permit belongs to the next ready place
 * in the line's order (served_before), which no later arrival overtakes (join admits at once
 * only when no ready place waits), so it is enough to wake the workers of the next ready
 * places, one per free permit; each takes its permit when its loop asks again (poll). A
 * place that then finds its work cannot run steps aside, and that step wakes the next in
 * turn.
 */
static void pick_next(const struct mg_fifo_gate *g, struct wake_list *l)
{
    uint32_t free_permits =
        g->in_flight < MG_FIFO_HOLDERS_MAX ? MG_FIFO_HOLDERS_MAX - g->in_flight : 0;
    if (g->cap > 0)
        free_permits = g->in_flight < g->cap ? g->cap - g->in_flight : 0;
    if (free_permits > WAKE_MAX)
        free_permits = WAKE_MAX;
    /* The next ready places, and as many of the next unready ones: a place is unready
     * for its worker's reason (a busy helper, which wakes that worker itself when it frees)
     * or for the group's (the upstream's reserve for signed-in clients, which frees with a
     * release): asked again, it takes the permit if it can run now and is passed over
     * otherwise. */
    for (int want_ready = 1; want_ready >= 0; want_ready--) {
        /* the order is total: the k-th is the first after the k-1-th */
        const struct mg_fifo_record *after = NULL;
        for (uint32_t k = 0; k < free_permits; k++) {
            int best = -1;
            for (int i = 0; i < MG_FIFO_WAITERS_MAX; i++) {
                const struct mg_fifo_record *w = &g->waiter[i];
                if (w->pid != 0 && !w->follower && (bool)w->unready != (bool)want_ready &&
                    (!after || served_before(after, w)) &&
                    (best < 0 || served_before(w, &g->waiter[best])))
                    best = i;
            }
            if (best < 0)
                break;
            after = &g->waiter[best];
            wake_list_add(l, after->slot);
        }
    }
}

/* Under lock: every follower's worker (a build they wait for has ended, or its builder died). */
static void pick_followers(const struct mg_fifo_gate *g, struct wake_list *l)
{
    for (int i = 0; i < MG_FIFO_WAITERS_MAX; i++)
        if (g->waiter[i].pid != 0 && g->waiter[i].follower)
            wake_list_add(l, g->waiter[i].slot);
}

/* After the lock: the workers picked, and the in-process waiters of mg_fifo_gate_acquire. */
static void wake(struct mg_fifo_gate *g, const struct wake_list *l)
{
    for (unsigned i = 0; i < l->n; i++)
        mg_wake_slot(l->slot[i]);
    atomic_fetch_add(&g->wake_seq, 1);
    mg_futex_wake_all(&g->wake_seq);
}

int mg_fifo_gate_join(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                      uint64_t *token, int *place, uint64_t *ticket)
{
    return mg_fifo_gate_join_ready(g, pid, slot, key, true, token, place, ticket);
}

int mg_fifo_gate_join_ready(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                            enum mg_fifo_ready ready, uint64_t *token, int *place, uint64_t *ticket)
{
    return mg_fifo_gate_join_owned(g, pid, slot, key, ready, NULL, 0, token, place, ticket);
}

int mg_fifo_gate_join_owned(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                            enum mg_fifo_ready ready, const uint8_t *owner, uint32_t share,
                            uint64_t *token, int *place, uint64_t *ticket)
{
    static const uint8_t nobody[MG_FIFO_OWNER_BYTES];
    if (!owner || share == 0 || !memcmp(owner, nobody, sizeof nobody))
        owner = NULL;
    bool can_run = ready == MG_FIFO_READY;
    int64_t now = mg_monotonic_ns();
    int result;
    int at = -1;
    mg_lock_acquire(&g->lock, pid);
    /* This worker's places that waited for its helper can run now as well: they go first,
     * in the line's order (woken below), not this arrival. */
    bool marked = can_run && slot_ready(g, slot, -1);
    struct owner_holds holds = owned_by(g, owner ? owner : nobody);
    if (owner && holds.n >= share) {
        /* The owner's share is checked in the same step as the line's bound. */
        result = MG_FIFO_REFUSED_SHARE;
    } else if (can_run && next_ready_waiter(g) < 0 && permit_free(g) &&
               take_permit(g, pid, slot, key, owner, holds.round, now, token)) {
        /* Places whose workers cannot run them, and followers, wait for something else than
         * a permit: a ready arrival goes ahead of them. */
        result = MG_FIFO_ADMITTED;
    } else {
        /* Checking the bound and joining the line are one step under the lock. */
        if (g->waiting - followers(g) < g->queue_max && g->wait_ns > 0)
            for (int i = 0; i < MG_FIFO_WAITERS_MAX && at < 0; i++)
                if (g->waiter[i].pid == 0)
                    at = i;
        if (at >= 0) {
            *ticket = ++g->next_id;
            fill(&g->waiter[at], pid, slot, *ticket, key, now);
            g->waiter[at].unready = unready_mark(ready);
            g->waiter[at].round = holds.round;
            if (owner)
                memcpy(g->waiter[at].owner, owner, MG_FIFO_OWNER_BYTES);
            g->waiting++;
        }
        result = at >= 0 ? MG_FIFO_QUEUED : MG_FIFO_REFUSED_FULL;
    }
    struct wake_list next = {0};
    if (marked)
        pick_next(g, &next);
    mg_lock_release(&g->lock, pid);
    if (marked)
        wake(g, &next);
    if (result == MG_FIFO_REFUSED_SHARE)
        atomic_fetch_add(&g->refused_share, 1);
    else if (result == MG_FIFO_REFUSED_FULL)
        atomic_fetch_add(&g->refused_full, 1);
    else if (result == MG_FIFO_QUEUED) {
        atomic_fetch_add(&g->waited, 1);
        *place = at;
    }
    return result;
}

int mg_fifo_gate_poll(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key, int place,
                      uint64_t ticket, int64_t now, int64_t deadline, uint64_t *token)
{
    return mg_fifo_gate_poll_ready(g, pid, slot, key, place, ticket, true, now, deadline, token);
}

int mg_fifo_gate_poll_ready(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                            int place, uint64_t ticket, enum mg_fifo_ready ready, int64_t now,
                            int64_t deadline, uint64_t *token)
{
    int result = MG_FIFO_QUEUED;
    if (place < 0 || place >= MG_FIFO_WAITERS_MAX)
        return MG_FIFO_CANCELLED;
    bool can_run = ready == MG_FIFO_READY;
    mg_lock_acquire(&g->lock, pid);
    bool mine = g->waiter[place].pid == pid && g->waiter[place].id == ticket;
    /* A place that stops being ready lets the ready ones behind it go first: wake them. */
    bool stepped_aside = mine && !can_run && !g->waiter[place].unready;
    /* This worker's other places that waited for its helper can run now as well: the first
     * of them in the line's order goes, not this one if it is not first (woken below). */
    bool marked = mine && can_run && slot_ready(g, slot, place);
    if (mine)
        g->waiter[place].unready = unready_mark(ready);
    if (!mine) {
        result = MG_FIFO_CANCELLED; /* not in line any more (reclaimed) */
    } else if (can_run && next_ready_waiter(g) == place && permit_free(g) &&
               take_permit(g, pid, slot, key, g->waiter[place].owner, g->waiter[place].round, now,
                           token)) {
        leave_line(g, place);
        result = MG_FIFO_ADMITTED;
    } else if (now >= deadline) {
        leave_line(g, place);
        result = MG_FIFO_REFUSED_TIMEOUT;
    }
    /* The next in line may now be first, or find a permit free. */
    struct wake_list next = {0};
    bool moved = result != MG_FIFO_QUEUED || stepped_aside || marked;
    if (moved)
        pick_next(g, &next);
    mg_lock_release(&g->lock, pid);
    if (result == MG_FIFO_REFUSED_TIMEOUT)
        atomic_fetch_add(&g->refused_timeout, 1);
    if (moved)
        wake(g, &next);
    return result;
}

void mg_fifo_gate_cancel(struct mg_fifo_gate *g, int pid, int place, uint64_t ticket)
{
    if (place < 0 || place >= MG_FIFO_WAITERS_MAX)
        return;
    bool left = false;
    struct wake_list next = {0};
    mg_lock_acquire(&g->lock, pid);
    if (g->waiter[place].pid == pid && g->waiter[place].id == ticket) {
        leave_line(g, place);
        left = true;
        pick_next(g, &next);
    }
    mg_lock_release(&g->lock, pid);
    if (left) {
        atomic_fetch_add(&g->cancelled, 1);
        wake(g, &next);
    }
}

enum mg_fifo_result mg_fifo_gate_acquire(struct mg_fifo_gate *g, int pid, unsigned slot,
                                         const char *key, mg_fifo_cancel_fn cancel,
                                         void *cancel_arg, uint64_t *token, int64_t *waited_ns)
{
    int64_t start = mg_monotonic_ns();
    if (waited_ns)
        *waited_ns = 0;
    int place = -1;
    uint64_t ticket = 0;
    int r = mg_fifo_gate_join(g, pid, slot, key, token, &place, &ticket);
    int64_t deadline = start + g->wait_ns;
    while (r == MG_FIFO_QUEUED) {
        uint32_t seq = atomic_load(&g->wake_seq);
        if (cancel && cancel(cancel_arg)) {
            mg_fifo_gate_cancel(g, pid, place, ticket);
            r = MG_FIFO_CANCELLED;
            break;
        }
        int64_t now = mg_monotonic_ns();
        r = mg_fifo_gate_poll(g, pid, slot, key, place, ticket, now, deadline, token);
        if (r != MG_FIFO_QUEUED)
            break;
        int64_t until = deadline;
        if (cancel && now + CANCEL_POLL_NS < until)
            until = now + CANCEL_POLL_NS;
        mg_futex_wait(&g->wake_seq, seq, until);
    }
    if (waited_ns)
        *waited_ns = mg_monotonic_ns() - start;
    return (enum mg_fifo_result)r;
}

bool mg_fifo_gate_release(struct mg_fifo_gate *g, int pid, uint64_t token)
{
    bool released = false;
    struct wake_list next = {0};
    mg_lock_acquire(&g->lock, pid);
    for (unsigned i = 0; i < MG_FIFO_HOLDERS_MAX; i++) {
        if (g->holder[i].pid != 0 && g->holder[i].id == token) {
            memset(&g->holder[i], 0, sizeof g->holder[i]);
            g->in_flight--;
            released = true;
            pick_next(g, &next);
            break;
        }
    }
    mg_lock_release(&g->lock, pid);
    if (released)
        wake(g, &next);
    return released;
}

bool mg_fifo_gate_try_background(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key,
                                 uint64_t *token)
{
    int64_t now = mg_monotonic_ns();
    mg_lock_acquire(&g->lock, pid);
    bool taken = next_ready_waiter(g) < 0 && permit_free(g) &&
                 take_permit(g, pid, slot, key, NULL, g->round, now, token);
    mg_lock_release(&g->lock, pid);
    atomic_fetch_add(taken ? &g->background : &g->background_busy, 1);
    return taken;
}

int mg_fifo_gate_follow(struct mg_fifo_gate *g, int pid, unsigned slot, const char *key)
{
    int place = -1;
    mg_lock_acquire(&g->lock, pid);
    if (followers(g) < MG_FIFO_WAITERS_MAX - g->queue_max)
        for (int i = 0; i < MG_FIFO_WAITERS_MAX && place < 0; i++)
            if (g->waiter[i].pid == 0)
                place = i;
    if (place >= 0) {
        fill(&g->waiter[place], pid, slot, ++g->next_id, key, mg_monotonic_ns());
        g->waiter[place].follower = 1;
        g->waiting++;
    }
    mg_lock_release(&g->lock, pid);
    atomic_fetch_add(place >= 0 ? &g->waited : &g->refused_full, 1);
    return place;
}

void mg_fifo_gate_wake_followers(struct mg_fifo_gate *g, int pid)
{
    struct wake_list l = {0};
    mg_lock_acquire(&g->lock, pid);
    pick_followers(g, &l);
    mg_lock_release(&g->lock, pid);
    for (unsigned i = 0; i < l.n; i++)
        mg_wake_slot(l.slot[i]);
}

void mg_fifo_gate_unfollow(struct mg_fifo_gate *g, int pid, int place)
{
    if (place < 0 || place >= MG_FIFO_WAITERS_MAX)
        return;
    mg_lock_acquire(&g->lock, pid);
    if (g->waiter[place].pid == pid && g->waiter[place].follower)
        leave_line(g, place);
    mg_lock_release(&g->lock, pid);
}

unsigned mg_fifo_gate_reclaim(struct mg_fifo_gate *g, int pid)
{
    /* The dead worker may have died inside the critical section. */
    mg_lock_reclaim(&g->lock, pid);
    int self = getpid();
    unsigned freed = 0;
    mg_lock_acquire(&g->lock, self);
    for (unsigned i = 0; i < MG_FIFO_HOLDERS_MAX; i++) {
        if (g->holder[i].pid == pid) {
            memset(&g->holder[i], 0, sizeof g->holder[i]);
            g->in_flight--;
            freed++;
        }
    }
    for (int i = 0; i < MG_FIFO_WAITERS_MAX; i++) {
        if (g->waiter[i].pid == pid) {
            leave_line(g, i);
            freed++;
        }
    }
    /* What the dead worker held goes to the next in line; what it was building, to its
     * followers (one of them builds it now). */
    struct wake_list next = {0};
    if (freed) {
        pick_next(g, &next);
        pick_followers(g, &next);
    }
    mg_lock_release(&g->lock, self);
    if (freed) {
        atomic_fetch_add(&g->reclaimed, freed);
        wake(g, &next);
    }
    return freed;
}

void mg_fifo_gate_configure(struct mg_fifo_gate *g, int pid, uint32_t cap, uint32_t queue_max,
                            int64_t wait_ns)
{
    mg_lock_acquire(&g->lock, pid);
    __atomic_store_n(&g->cap, cap, __ATOMIC_RELAXED);
    __atomic_store_n(&g->queue_max,
                     queue_max > MG_FIFO_WAITERS_MAX ? MG_FIFO_WAITERS_MAX : queue_max,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&g->wait_ns, wait_ns, __ATOMIC_RELAXED);
    struct wake_list next = {0};
    pick_next(g, &next); /* a raised cap has permits for them now */
    mg_lock_release(&g->lock, pid);
    wake(g, &next);
}

struct mg_fifo_limits mg_fifo_gate_limits(const struct mg_fifo_gate *g)
{
    return (struct mg_fifo_limits){
        .cap = __atomic_load_n(&g->cap, __ATOMIC_RELAXED),
        .queue_max = __atomic_load_n(&g->queue_max, __ATOMIC_RELAXED),
        .wait_ns = __atomic_load_n(&g->wait_ns, __ATOMIC_RELAXED),
    };
}

void mg_fifo_gate_read(const struct mg_fifo_gate *g, int pid, bool locked,
                       struct mg_fifo_snapshot *out)
{
    /* The lock word is the only thing written here: readers get a const gate. */
    struct mg_lock *lock = (struct mg_lock *)&g->lock;
    if (locked)
        mg_lock_acquire(lock, pid);
    out->cap = g->cap;
    out->queue_max = g->queue_max;
    out->wait_ns = g->wait_ns;
    out->in_flight = g->in_flight;
    out->waiting = g->waiting;
    out->round = g->round;
    if (locked)
        mg_lock_release(lock, pid);
    out->peak = atomic_load(&g->peak);
#define READ_COUNTER(field, json, what) out->field = atomic_load(&g->field);
    MG_FIFO_COUNTER_LIST(READ_COUNTER)
#undef READ_COUNTER
}

unsigned mg_fifo_gate_records(const struct mg_fifo_gate *g, int pid, bool locked,
                              enum mg_fifo_records which, struct mg_fifo_record *out, unsigned max)
{
    const struct mg_fifo_record *r = which == MG_FIFO_HOLDERS ? g->holder : g->waiter;
    unsigned count = which == MG_FIFO_HOLDERS ? MG_FIFO_HOLDERS_MAX : MG_FIFO_WAITERS_MAX;
    bool followers = which == MG_FIFO_FOLLOWERS;
    struct mg_lock *lock = (struct mg_lock *)&g->lock;
    unsigned n = 0;
    if (locked)
        mg_lock_acquire(lock, pid);
    for (unsigned i = 0; i < count && n < max; i++)
        if (r[i].pid != 0 && (bool)r[i].follower == followers)
            out[n++] = r[i];
    if (locked)
        mg_lock_release(lock, pid);
    for (unsigned i = 0; i < n; i++)
        out[i].key[MG_FIFO_KEY_MAX - 1] = '\0';
    return n;
}
