/* SPDX-License-Identifier: ISC */
#include "malloc_trim.h"

#include <malloc.h>

void mg_malloc_give_back(void)
{
#ifndef __SANITIZE_ADDRESS__
    malloc_trim(0);
#endif
    /* Under AddressSanitizer the heap is the sanitizer's: glibc's arenas hold nothing to give
     * back, and malloc_trim walking them beside the worker's other threads crashed (SEGV in
     * mtrim, 1 start in about 100 under load). */
}
