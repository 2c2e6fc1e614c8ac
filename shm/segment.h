/* SPDX-License-Identifier: ISC */
/*
 * segment: creating, mapping and checking the one POSIX shared-memory segment of a meshgate
 * instance (its layout, and a process's view of it: segment_layout.h).
 *
 * Creation is exclusive (O_EXCL, mode 0600). An existing segment under the same name is
 * replaced only when it is ours (magic) and its master is gone: the pid no longer runs, or
 * runs a different process (its start time differs, or its command name is not meshgate's:
 * a crafted record naming pid 1 is stale), or is another user's. An empty file that we
 * own (a start that died between creating and sizing it, or a truncated segment) is removed.
 * A live master, or anything else under the name, stops the start with a message; a name
 * another user created is left alone and the segment goes under a stand-in no one can guess
 * (mg_segment_resolve_name finds it for readers).
 *
 * An existing name is opened with O_NOFOLLOW | O_NONBLOCK and checked with fstat before
 * anything reads it: a FIFO, a device or a symbolic link there is refused at once, never
 * waited on. The master keeps its descriptor so that it can notice (fstat, each tick) a
 * segment that someone truncated under it, before touching it would raise SIGBUS.
 */
#ifndef MESHGATE_SEGMENT_H
#define MESHGATE_SEGMENT_H

#include "segment_layout.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/*
 * Creates the segment exclusively (mode 0600), replacing a stale one left by a dead master.
 * Returns 0; or -1 with a message in err (a live instance on the name, a foreign segment,
 * a system error).
 */
int mg_segment_create(struct mg_segment *seg, const char *name, const struct mg_config *cfg,
                      uint32_t slot_count, const char *const *route_names, uint32_t route_count,
                      char *err, size_t errlen);

/* Maps an existing segment (read-only for the dump tool) and validates it. */
int mg_segment_attach(struct mg_segment *seg, const char *name, bool read_only, char *err,
                      size_t errlen);

/*
 * Checks that size bytes at base are a segment this build understands: magic, layout
 * version, header and record sizes, sections inside the size. Fills seg's pointers to point
 * into base. Used on live mappings and on the dump tool's private copies.
 */
int mg_segment_validate(void *base, size_t size, struct mg_segment *seg, char *err, size_t errlen);

void mg_segment_detach(struct mg_segment *seg);

/*
 * Checks that the header's fixed part and the sizes of the tables still say what they said
 * when seg was validated (someone with write access to the segment may have written over
 * them). Every walk of a table that the master makes is bounded by those sizes, so the
 * master asks this before any walk. Returns 0; or -1 with what differs in err.
 */
int mg_segment_check_shape(const struct mg_segment *seg, char *err, size_t errlen);

/*
 * Master: checks that the object under the mapping still has the size it was created with.
 * Returns 0; or -1 with a message in err when someone truncated it (touching the lost pages
 * would raise SIGBUS in every process).
 */
int mg_segment_check_size(const struct mg_segment *seg, char *err, size_t errlen);

/*
 * Opens an existing segment by name without ever blocking (O_NOFOLLOW | O_NONBLOCK) and
 * refuses anything that is not a regular file. Returns the descriptor and fills *st; or -1
 * with errno kept (ENOENT: no such name) and a message in err.
 */
int mg_segment_open_existing(const char *name, int flags, struct stat *st, char *err,
                             size_t errlen);
/*
 * The name readers should open for name: name itself, unless it is missing or another
 * user's and one of our live instances created a stand-in for it (mg_segment_create, when
 * another user had taken the name): then that stand-in, written to out (MG_SHM_NAME_MAX).
 */
const char *mg_segment_resolve_name(const char *name, char *out);

/* Removes the name (the mapping stays valid for whoever has it). */
int mg_segment_unlink(const char *name);

void mg_segment_set_state(struct mg_segment *seg, enum mg_server_state state);
const char *mg_server_state_name(uint32_t state);

/* A replica copy's lag (replica_copy_realtime_ns above): true with *lag_ms, at least 0; false
 * when the server does not serve a replica. */
bool mg_segment_replica_lag_ms(const struct mg_segment *seg, int64_t now_realtime_ns,
                               int64_t *lag_ms);

#endif
