/* SPDX-License-Identifier: ISC */
#include "reclaim.h"

#include "clock.h"
#include "gates.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Every row of both tables (shm/gates.h): the parts, then the gates. */
#define ROWS (MG_PART_ROWS + MG_GATE_ROWS)

static const struct mg_gate_info *row(unsigned i)
{
    return i < MG_PART_ROWS ? &mg_segment_parts[i] : &mg_gates[i - MG_PART_ROWS];
}

unsigned mg_segment_reclaim(struct mg_segment *seg, unsigned slot, int pid)
{
    /* Every walk below is bounded by the tables' sizes: a segment written over is not walked
     * (the master stops on it, server/master.c). */
    char why[256];
    if (mg_segment_check_shape(seg, why, sizeof why) < 0 || slot >= seg->slot_count)
        return 0;
    unsigned freed = 0;
    int64_t now = mg_monotonic_ns();
    for (unsigned i = 0; i < ROWS; i++)
        freed += row(i)->reclaim(seg, slot, pid, now);
    return freed;
}

/* The name of a row's lock n: its title, with the set's number for a table of sets (a title
 * that ends in " set", as shm/gates.h says), even a table of one set. */
static void lock_name(const struct mg_gate_info *r, const struct mg_segment *seg, uint32_t n,
                      char *out, size_t cap)
{
    size_t len = strlen(r->title);
    if (r->lock(seg, 1) || (len > 4 && strcmp(r->title + len - 4, " set") == 0))
        snprintf(out, cap, "%s %u", r->title, n);
    else
        snprintf(out, cap, "%s", r->title);
}

void mg_segment_for_each_lock(struct mg_segment *seg, mg_segment_lock_fn fn, void *arg)
{
    char name[48];
    for (unsigned i = 0; i < ROWS; i++) {
        struct mg_lock *l;
        for (uint32_t n = 0; (l = row(i)->lock(seg, n)) != NULL; n++) {
            lock_name(row(i), seg, n, name, sizeof name);
            fn(arg, l, name);
        }
    }
}

struct mg_lock *mg_segment_lock_at(struct mg_segment *seg, uint64_t offset, char *name, size_t cap)
{
    if (offset >= seg->size || offset % _Alignof(struct mg_lock))
        return NULL;
    const char *want = (const char *)seg->base + offset;
    char scratch[48];
    if (!name) {
        name = scratch;
        cap = sizeof scratch;
    }
    for (unsigned i = 0; i < ROWS; i++) {
        const struct mg_gate_info *r = row(i);
        const char *first = (const char *)r->lock(seg, 0);
        if (!first || want < first)
            continue;
        /* A row's locks are evenly spaced (one, or one per set): find n by arithmetic. */
        const char *second = (const char *)r->lock(seg, 1);
        size_t stride = second ? (size_t)(second - first) : 1;
        size_t n = (size_t)(want - first) / stride;
        if (n > UINT32_MAX || (const char *)r->lock(seg, (uint32_t)n) != want)
            continue;
        lock_name(r, seg, (uint32_t)n, name, cap);
        return (struct mg_lock *)want;
    }
    return NULL;
}

bool mg_segment_lock_range(struct mg_segment *seg, const char *part, const void **lo,
                           const void **hi)
{
    size_t len = strlen(part);
    for (unsigned i = 0; i < ROWS; i++) {
        const struct mg_gate_info *r = row(i);
        /* part is the row's first section */
        if (strncmp(r->sections, part, len) != 0 || (r->sections[len] && r->sections[len] != ' '))
            continue;
        struct mg_lock *first = r->lock(seg, 0), *last = first;
        for (uint32_t n = 1; first && r->lock(seg, n); n++)
            last = r->lock(seg, n);
        if (!first)
            return false;
        *lo = first;
        *hi = last + 1;
        return true;
    }
    return false;
}
