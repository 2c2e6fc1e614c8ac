/* SPDX-License-Identifier: ISC */
/*
 * malloc_trim: gives the malloc arenas' free pages back to the system (mem.h tells when).
 */
#ifndef MESHGATE_MALLOC_TRIM_H
#define MESHGATE_MALLOC_TRIM_H

/* Every arena's free pages; nothing under AddressSanitizer, whose heap is its own. */
void mg_malloc_give_back(void);

#endif
