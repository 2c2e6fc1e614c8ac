/*
 * reclaim: what the master gives back for a worker it has reaped (invariant 2). Every part
 * of the segment that a worker can hold (a refresh lease today; the gates' permits and
 * places in line as they arrive) is listed in mg_segment_reclaim, so a crash, even kill -9,
 * leaks nothing: the master calls it right after waitpid, before it respawns the slot.
 */
#ifndef MESHGATE_RECLAIM_H
#define MESHGATE_RECLAIM_H

#include "segment.h"

/* Gives back everything pid (which ran in slot) held; returns how many things it freed. */
unsigned mg_segment_reclaim(struct mg_segment *seg, unsigned slot, int pid);

#endif
