/* SPDX-License-Identifier: ISC */
#include "deadline_heap.h"

#include <stdlib.h>

bool mg_deadline_reserve(struct mg_deadline_heap *h, uint32_t n)
{
    if (n <= h->cap)
        return true;
    uint32_t cap = h->cap ? h->cap : 64;
    while (cap < n)
        cap = cap > UINT32_MAX / 2 ? n : cap * 2;
    struct mg_deadline **items = realloc(h->items, (size_t)cap * sizeof *items);
    if (!items)
        return false;
    h->items = items;
    h->cap = cap;
    return true;
}

static void put(struct mg_deadline_heap *h, uint32_t i, struct mg_deadline *d)
{
    h->items[i] = d;
    d->place = i + 1;
}

/* The entry at i moves up while it is earlier than its parent, then down while a child is
 * earlier than it. */
static void settle(struct mg_deadline_heap *h, uint32_t i)
{
    struct mg_deadline *d = h->items[i];
    while (i > 0 && h->items[(i - 1) / 2]->at_ns > d->at_ns) {
        put(h, i, h->items[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= h->len)
            break;
        if (child + 1 < h->len && h->items[child + 1]->at_ns < h->items[child]->at_ns)
            child++;
        if (h->items[child]->at_ns >= d->at_ns)
            break;
        put(h, i, h->items[child]);
        i = child;
    }
    put(h, i, d);
}

void mg_deadline_set(struct mg_deadline_heap *h, struct mg_deadline *d, int64_t at_ns)
{
    d->at_ns = at_ns;
    if (d->place == 0) {
        if (h->len >= h->cap && !mg_deadline_reserve(h, h->len + 1))
            abort(); /* the caller reserved room for every entry: a bug */
        put(h, h->len++, d);
    }
    settle(h, d->place - 1);
}

void mg_deadline_remove(struct mg_deadline_heap *h, struct mg_deadline *d)
{
    if (d->place == 0)
        return;
    uint32_t i = d->place - 1;
    d->place = 0;
    struct mg_deadline *last = h->items[--h->len];
    if (last == d)
        return;
    put(h, i, last);
    settle(h, i);
}

void mg_deadline_heap_free(struct mg_deadline_heap *h)
{
    free(h->items);
    h->items = NULL;
    h->len = h->cap = 0;
}
