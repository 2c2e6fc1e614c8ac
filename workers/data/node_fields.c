/* SPDX-License-Identifier: ISC */
#include "node_fields.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void mg_node_fields_init(struct mg_node_fields *f)
{
    f->n = 0;
    f->field[0] = (struct mg_node_field){NULL, NULL};
}

/* Puts key at its place in key order. */
static void fields_insert(struct mg_node_fields *f, const char *key, const char *json)
{
    size_t at = f->n;
    while (at > 0 && strcmp(f->field[at - 1].key, key) > 0) {
        f->field[at] = f->field[at - 1];
        at--;
    }
    f->field[at] = (struct mg_node_field){key, json};
    f->field[++f->n] = (struct mg_node_field){NULL, NULL};
}

void mg_node_fields_add(struct mg_node_fields *f, const char *key, const char *fmt, ...)
{
    if (f->n >= sizeof f->text / sizeof f->text[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->text[f->n], sizeof f->text[f->n], fmt, ap);
    va_end(ap);
    fields_insert(f, key, f->text[f->n]);
}

void mg_node_fields_add_json(struct mg_node_fields *f, const char *key, const char *json)
{
    if (f->n < sizeof f->text / sizeof f->text[0])
        fields_insert(f, key, json);
}

void mg_node_hash_fields(struct mg_node_fields *f, const struct mg_node_hash_sizes *hs)
{
    if (!hs->known)
        return;
    int max_size = 0;
    for (int size = 1; size <= 4; size++)
        if (hs->seen_mask & (1u << size))
            max_size = size;
    mg_node_fields_add(f, "hash_size", "%d", hs->size);
    mg_node_fields_add(f, "hash_size_inconsistent", "%s", hs->inconsistent ? "true" : "false");
    if (__builtin_popcount(hs->seen_mask) > 1) {
        char list[32] = "";
        size_t used = 0;
        for (int size = 1; size <= 4; size++)
            if (hs->seen_mask & (1u << size))
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", used ? "," : "",
                                         size);
        mg_node_fields_add(f, "hash_sizes_seen", "[%s]", list);
    }
    if (max_size >= 2) { /* CoreScope's "confirmed by advert" */
        mg_node_fields_add(f, "multi_byte_evidence", "\"advert\"");
        mg_node_fields_add(f, "multi_byte_max_hash_size", "%d", max_size);
        mg_node_fields_add(f, "multi_byte_status", "\"confirmed\"");
    }
}

/* The transmission rows of recentAdverts; ?1 the key, ?2 how many. */
