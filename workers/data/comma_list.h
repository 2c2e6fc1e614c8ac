/* SPDX-License-Identifier: ISC */
/*
 * comma_list: the one rule by which a comma list is split into its entries (every list
 * parameter, params.h, and the page scan's observer, region and node lists, packet_scan.c).
 */
#ifndef MESHGATE_COMMA_LIST_H
#define MESHGATE_COMMA_LIST_H

#include <stddef.h>

/* "ALL" (any case) is no entry (CoreScope's region lists). A flag of mg_param_list_split, and
 * of a list parameter (params.h: its other flags take other bits). */
#define MG_LIST_SKIP_ALL 4u

struct mg_list_item {
    const char *ptr; /* inside the list (a request's query): not NUL-terminated */
    size_t len;
};

/* The one list parser: splits list on commas into at most cap items (trimmed; empty ones and,
 * with MG_LIST_SKIP_ALL, "ALL" dropped); returns how many there are (may exceed cap). */
int mg_param_list_split(const char *list, unsigned flags, struct mg_list_item *items, int cap);

#endif
