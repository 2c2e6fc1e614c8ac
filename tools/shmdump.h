/* SPDX-License-Identifier: ISC */
/*
 * shmdump: the library half of meshgate-shm, the tool that shows a running meshgate's shared
 * segment from outside (invariant 7).
 *
 * A dump never blocks and never changes the server: the segment is opened O_RDONLY and mapped
 * PROT_READ, copied (all but the cache's body pages, unless asked) into private memory with memcpy
 * (no lock is taken, so a counter may be caught mid-update, as in Apache's mod_status), unmapped,
 * and only then checked with mg_segment_validate. Everything is rendered from the private copy, and
 * every string taken from it is bounded by its field's size and stripped of control characters
 * before use.
 *
 * Nothing here prints or exits: functions return a status, with a sentence in err.
 */
#ifndef MESHGATE_SHMDUMP_H
#define MESHGATE_SHMDUMP_H

#include "buf.h"
#include "config.h"
#include "segment.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What taking a dump can end in; the values are meshgate-shm's exit codes. */
enum mg_shmdump_status {
    MG_SHMDUMP_OK = 0,
    MG_SHMDUMP_MISSING = 1,        /* no segment under that name */
    MG_SHMDUMP_NOT_UNDERSTOOD = 2, /* not ours, another layout version, sizes differ */
    MG_SHMDUMP_SYSTEM_ERROR = 3,   /* permission denied, out of memory, ... */
};

/* A private, validated copy of a segment and what was learned when it was taken. */
struct mg_shmdump {
    char name[MG_SHM_NAME_MAX];
    void *copy;            /* malloc'd; seg's pointers point into it */
    size_t size;           /* bytes copied */
    struct mg_segment seg; /* as mg_segment_validate filled it, on the copy */
    int64_t taken_realtime_ns;
    int64_t taken_monotonic_ns;
    bool master_alive;        /* mg_process_alive(master pid, start ticks) when taken */
    bool cache_bodies_copied; /* false: the cache's body pages read as zero in the copy */
};

/* Copies the segment called name, all but the result cache's body pages (they read as zero
 * in the copy; no report shows them). On anything but MG_SHMDUMP_OK, d holds nothing to free. */
enum mg_shmdump_status mg_shmdump_take(struct mg_shmdump *d, const char *name, char *err,
                                       size_t errlen);

/* What mg_shmdump_take_with copies besides what every dump needs. */
enum { MG_SHMDUMP_CACHE_BODIES = 1u << 0 };
enum mg_shmdump_status mg_shmdump_take_with(struct mg_shmdump *d, const char *name, unsigned flags,
                                            char *err, size_t errlen);

/* The same checks on bytes already in hand (a saved copy; tests). bytes are copied. */
enum mg_shmdump_status mg_shmdump_from_bytes(struct mg_shmdump *d, const char *name,
                                             const void *bytes, size_t size, char *err,
                                             size_t errlen);

void mg_shmdump_release(struct mg_shmdump *d);

/* The plain-text report (see meshgate-shm --help), appended to out. */
void mg_shmdump_render_text(const struct mg_shmdump *d, struct mg_buf *out);
/* The same content as one JSON object of the shape documented at the top of shmdump.c. */
void mg_shmdump_render_json(const struct mg_shmdump *d, struct mg_buf *out);

/*
 * The segment names to try, in order. The first is the name the rule gives: the --name
 * option, else MESHGATE_SHM_NAME when set and not empty, else the name derived from
 * MESHGATE_LISTEN (default 127.0.0.1:8080) by mg_config_default_shm_name. The others are
 * what a server started with that MESHGATE_LISTEN may have derived from the address it
 * actually bound (":8080" binds "::" or "0.0.0.0"; "[0::1]" is bound as "::1").
 *
 * Both variables are read as the server's unit gives them: from the environment, else from
 * the server's environment file: the one MESHGATE_ENV_FILE names, or when it is not set,
 * default_env_file (the unit's, /etc/meshgate/meshgate.env) if that exists; set and empty:
 * no file. origin says where the name came from and where it was looked for.
 */
#define MG_SHMDUMP_NAMES_MAX 4
struct mg_shmdump_names {
    char name[MG_SHMDUMP_NAMES_MAX][MG_SHM_NAME_MAX];
    unsigned count;
    /* "--name", "MESHGATE_SHM_NAME in ...", "MESHGATE_LISTEN=... in ...; looked in ...", or
     * "the default address ...; looked in ..." */
    char origin[2 * MG_PATH_MAX + MG_HOST_MAX + 240];
};

/* lookup NULL reads the environment; default_env_file NULL: none. Returns 0; or -1 with a
 * usage message (a bad name or MESHGATE_LISTEN, an environment file that cannot be read or
 * parsed) in err. */
int mg_shmdump_resolve_names(const char *name_option, mg_getenv_fn lookup, void *arg,
                             const char *default_env_file, struct mg_shmdump_names *names,
                             char *err, size_t errlen);

/* Takes the first of names that exists; MG_SHMDUMP_MISSING only when none does, with a
 * message naming every name tried and how to name the segment. */
enum mg_shmdump_status mg_shmdump_take_first(struct mg_shmdump *d,
                                             const struct mg_shmdump_names *names, char *err,
                                             size_t errlen);

/* HOST:PORT, [V6]:PORT or :PORT (host ""), as MESHGATE_LISTEN accepts them. 0 or -1. */
int mg_shmdump_parse_listen(const char *text, char *host, size_t host_cap, unsigned *port);

/* "exit N", "signal N" or "-" (no previous incarnation: status -1) for a wait status. */
void mg_shmdump_describe_exit(int wait_status, char *out, size_t cap);

/* memcpy from a shared mapping that turns a SIGBUS (the object shrank under the mapping)
 * into -1 instead of a crash. Returns 0 when every byte was copied. */
int mg_shmdump_copy_mapping(void *dst, const void *src, size_t len);

#endif
