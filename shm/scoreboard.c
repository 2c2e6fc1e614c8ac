/* SPDX-License-Identifier: ISC */
#include "scoreboard.h"

#include "clock.h"
#include "segment_layout.h"

#include <stdio.h>
#include <string.h>

static const char *const state_names[MG_SLOT_STATE_COUNT] = {
    "empty", "starting", "idle", "reading", "handling", "writing", "keepalive", "draining", "dead"};
/* Apache's letters where they exist: _ waiting, R reading, W writing, K keep-alive,
 * G gracefully finishing, S starting, . open slot. */
static const char state_chars[MG_SLOT_STATE_COUNT] = {'.', 'S', '_', 'R', 'H', 'W', 'K', 'G', 'D'};

const char *mg_slot_state_name(uint32_t state)
{
    return state < MG_SLOT_STATE_COUNT ? state_names[state] : "unknown";
}

char mg_slot_state_char(uint32_t state)
{
    return state < MG_SLOT_STATE_COUNT ? state_chars[state] : '?';
}

struct mg_slot *mg_slot_get(struct mg_segment *seg, unsigned index)
{
    return index < seg->slot_count ? &seg->slots[index] : NULL;
}

void mg_slot_prepare(struct mg_slot *slot)
{
    /* A worker killed between the two stores of a write left the sequence odd: the next one
     * would publish its copies with the parity reversed, torn ones as whole. Nobody writes
     * the slot now (its worker is reaped, the next not forked), so make it even and clear
     * what the half-done write may have left. */
    uint32_t seq = atomic_load(&slot->seq);
    if (seq & 1) {
        memset(slot->method, 0, sizeof slot->method);
        memset(slot->path, 0, sizeof slot->path);
        memset(slot->client, 0, sizeof slot->client);
        atomic_store(&slot->seq, seq + 1);
    }
    atomic_store(&slot->pid, 0);
    atomic_store(&slot->state, MG_SLOT_STARTING);
    atomic_fetch_add(&slot->spawns, 1);
    atomic_store(&slot->connections, 0);
    atomic_store(&slot->requests, 0);
    int64_t now = mg_monotonic_ns();
    atomic_store(&slot->started_realtime_ns, mg_realtime_ns());
    atomic_store(&slot->started_monotonic_ns, now);
    atomic_store(&slot->heartbeat_monotonic_ns, now);
    atomic_store(&slot->request_started_monotonic_ns, 0);
    atomic_store(&slot->lock_wait_holder, 0);
    atomic_store(&slot->db_connections, 0);
    atomic_store(&slot->helpers_busy, 0);
    atomic_store(&slot->db_faults, 0);
    atomic_store(&slot->db_degraded, 0);
    mg_slot_end_request(slot);
}

void mg_slot_set_pid(struct mg_slot *slot, int pid)
{
    atomic_store(&slot->pid, pid);
}

void mg_slot_mark_dead(struct mg_slot *slot, int wait_status)
{
    atomic_store(&slot->state, MG_SLOT_DEAD);
    atomic_store(&slot->last_exit, wait_status);
    atomic_store(&slot->connections, 0);
    atomic_store(&slot->request_started_monotonic_ns, 0);
}

void mg_slot_set_state(struct mg_slot *slot, enum mg_slot_state state)
{
    atomic_store_explicit(&slot->state, (uint32_t)state, memory_order_relaxed);
}

void mg_slot_heartbeat(struct mg_slot *slot, int64_t now_monotonic_ns)
{
    atomic_store_explicit(&slot->heartbeat_monotonic_ns, now_monotonic_ns, memory_order_relaxed);
}

static void copy_field(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    memset(dst + n, 0, cap - n);
}

void mg_slot_begin_request(struct mg_slot *slot, const char *method, const char *path,
                           int64_t now_monotonic_ns)
{
    uint32_t seq = atomic_load_explicit(&slot->seq, memory_order_relaxed);
    atomic_store_explicit(&slot->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    copy_field(slot->method, sizeof slot->method, method);
    copy_field(slot->path, sizeof slot->path, path);
    atomic_store_explicit(&slot->seq, seq + 2, memory_order_release);
    atomic_store_explicit(&slot->request_started_monotonic_ns, now_monotonic_ns,
                          memory_order_relaxed);
    atomic_store_explicit(&slot->state, MG_SLOT_HANDLING, memory_order_relaxed);
}

void mg_slot_set_client(struct mg_slot *slot, const char *client)
{
    uint32_t seq = atomic_load_explicit(&slot->seq, memory_order_relaxed);
    atomic_store_explicit(&slot->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    copy_field(slot->client, sizeof slot->client, client ? client : "");
    atomic_store_explicit(&slot->seq, seq + 2, memory_order_release);
}

static struct mg_slot *self_slot;

void mg_scoreboard_set_self(struct mg_slot *slot)
{
    self_slot = slot;
}

void mg_scoreboard_db_connections_add(int delta)
{
    struct mg_slot *slot = self_slot;
    if (slot)
        atomic_fetch_add(&slot->db_connections, (uint32_t)delta);
}

void mg_scoreboard_db_fault(bool healed)
{
    struct mg_slot *slot = self_slot;
    if (!slot)
        return;
    if (healed)
        atomic_fetch_add(&slot->db_faults, 1);
    else
        atomic_store(&slot->db_degraded, 1);
}

void mg_scoreboard_beat(void)
{
    struct mg_slot *slot = self_slot;
    if (!slot)
        return;
    int64_t now = mg_monotonic_ns();
    if (now - atomic_load_explicit(&slot->heartbeat_monotonic_ns, memory_order_relaxed) >
        MG_NS_PER_MS)
        mg_slot_heartbeat(slot, now);
}

void mg_slot_report_lock_wait(struct mg_slot *slot, int holder, uint64_t offset,
                              int64_t since_monotonic_ns)
{
    atomic_store(&slot->lock_wait_offset, offset);
    atomic_store(&slot->lock_wait_since_ns, since_monotonic_ns);
    atomic_store(&slot->lock_wait_holder, holder);
}

void mg_slot_clear_lock_wait(struct mg_slot *slot, uint64_t offset)
{
    if (atomic_load(&slot->lock_wait_offset) == offset)
        atomic_store(&slot->lock_wait_holder, 0);
}

void mg_slot_end_request(struct mg_slot *slot)
{
    atomic_store_explicit(&slot->request_started_monotonic_ns, 0, memory_order_relaxed);
}

void mg_slot_set_connections(struct mg_slot *slot, unsigned n)
{
    atomic_store_explicit(&slot->connections, n, memory_order_relaxed);
}

void mg_slot_snapshot(const struct mg_slot *slot, struct mg_slot *out)
{
    for (int tries = 0; tries < 8; tries++) {
        uint32_t before = atomic_load_explicit(&slot->seq, memory_order_acquire);
        memcpy(out, slot, sizeof *out);
        atomic_thread_fence(memory_order_acquire);
        if (!(before & 1) && atomic_load_explicit(&slot->seq, memory_order_relaxed) == before)
            break;
    }
    /* Whatever the copy caught, its strings end inside their fields. */
    out->method[MG_SLOT_METHOD_MAX - 1] = '\0';
    out->path[MG_SLOT_PATH_MAX - 1] = '\0';
    out->client[MG_SLOT_CLIENT_MAX - 1] = '\0';
}

unsigned mg_scoreboard_alive(const struct mg_segment *seg)
{
    unsigned n = 0;
    for (unsigned i = 0; i < seg->slot_count; i++) {
        uint32_t st = atomic_load(&seg->slots[i].state);
        if (st != MG_SLOT_EMPTY && st != MG_SLOT_DEAD && atomic_load(&seg->slots[i].pid) > 0)
            n++;
    }
    return n;
}
