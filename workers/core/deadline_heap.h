/* SPDX-License-Identifier: ISC */
/*
 * deadline_heap: the worker's connections in deadline order (a binary min-heap), so a turn of
 * its loop finds the next deadline and the ones that came without walking every connection.
 * Each entry is embedded in what it times (a connection); it knows its place in the heap, so
 * moving or removing it costs O(log n) and nothing is allocated but the heap's array, which
 * grows only through mg_deadline_reserve: setting a deadline never fails.
 */
#ifndef MESHGATE_DEADLINE_HEAP_H
#define MESHGATE_DEADLINE_HEAP_H

#include <stdbool.h>
#include <stdint.h>

struct mg_deadline {
    int64_t at_ns;
    uint32_t place; /* its index in the heap plus one; 0: not in it */
};

struct mg_deadline_heap {
    struct mg_deadline **items;
    uint32_t len, cap;
};

/* Room for n entries in all; false when out of memory (the heap is unchanged). */
bool mg_deadline_reserve(struct mg_deadline_heap *h, uint32_t n);
/* d's deadline becomes at_ns: d joins the heap, or moves in it. The heap has room
 * (mg_deadline_reserve) for every entry in it. */
void mg_deadline_set(struct mg_deadline_heap *h, struct mg_deadline *d, int64_t at_ns);
/* d leaves the heap (nothing when it is not in it); its at_ns stays as it was. */
void mg_deadline_remove(struct mg_deadline_heap *h, struct mg_deadline *d);
/* The earliest entry; NULL when the heap is empty. */
static inline struct mg_deadline *mg_deadline_first(const struct mg_deadline_heap *h)
{
    return h->len ? h->items[0] : 0;
}
void mg_deadline_heap_free(struct mg_deadline_heap *h);

#endif
