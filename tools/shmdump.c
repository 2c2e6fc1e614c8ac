/* SPDX-License-Identifier: ISC */
/*
 * shmdump: take a private copy of a meshgate segment and render it as text or JSON.
 *
 * The dump never writes to the segment, takes no lock and waits for nobody (invariant 7):
 * shm_open O_RDONLY, mmap PROT_READ, memcpy into private memory, munmap, and only then
 * mg_segment_validate on the copy. The result cache's body pages (most of the segment) are
 * copied only when asked (MG_SHMDUMP_CACHE_BODIES): no report shows them. A copy taken while
 * workers run may catch a counter or a histogram between two of its updates; that is the price of
 * never stopping the server, and the same one Apache's mod_status pays. Strings in the copy are
 * bounded by their fields and control bytes are escaped before they reach a terminal, so a request
 * path sent by a client cannot drive the operator's terminal.
 *
 * Beyond mg_segment_validate the copy must pass one check of our own: the sections read as
 * one record (config, counters, slow) hold exactly one (validate accepts a count of 0, which
 * would leave such a section pointing past its bytes). At most the largest segment this
 * build can lay out is copied, and the copy survives a segment that shrinks under it.
 *
 * The JSON shape (--json), stable within a layout version; keys appear in this order.
 * Durations are milliseconds (decimals, up to 3 places); times are RFC 3339 in UTC; a value
 * that is unknown or does not apply is null.
 *
 *   {
 *     "segment": {
 *       "name": "/meshgate-127.0.0.1-8080",     the name it was read from
 *       "magic": "MESHGATE",
 *       "layout_version": 1,
 *       "total_bytes": 215488,                  size recorded in the header
 *       "meshgate_version": "0.1.0",            of the server that created it
 *       "created": "2025-01-31T12:00:00Z",
 *       "age_ms": 3723000.5,                    since creation, on CLOCK_MONOTONIC
 *       "taken": "2025-01-31T13:02:03Z",        when this copy was made
 *       "master_pid": 1234,
 *       "master_alive": true,                   the pid runs and is the process that started
 *       "generation": 0,                        +1 per SIGHUP reload
 *       "state": "running",                     starting|running|reloading|draining|stopped
 *       "state_changed": "2025-01-31T12:00:01Z",
 *       "slots": 8,
 *       "routes": 12
 *     },
 *     "config": {"MESHGATE_LISTEN": "127.0.0.1:8080", "MESHGATE_BACKLOG": "511", ...},
 *                                               every variable, as mg_config_describe says it
 *     "counters": {"requests": 7, "responses_2xx": 7, ...},   every counter of MG_COUNTER_LIST
 *     "routes": [                               routes with at least one request
 *       {"route": "/api/nodes", "count": 2, "avg_ms": 1.5, "p50_ms": 1.023, "p95_ms": 2.047,
 *        "max_ms": 2.0, "errors_5xx": 0}
 *     ],
 *     "slow": [                                 the slow ring, newest first
 *       {"time": "2025-01-31T13:01:59Z", "ms": 150.2, "status": 200, "path": "/api/..."}
 *     ],
 *     "values": [                               one per enum mg_value_id
 *       {"id": 0, "name": "db_counts", "bytes": 120, "refreshes": 3, "age_ms": 812.5,
 *        "lease_pid": null}                     bytes and age_ms null: no value yet
 *     ],
 *     "gates": {                                one object per gate
 *       "perf_mem": {"enabled": true, "cap": 1, "running": 0, "peak": 1,
 *                    "cooldown_ms": 5000.0, "cooldown_remaining_ms": 1250.5,
 *                    "holder": null,             or {"worker", "pid", "age_ms"}
 *                    "last_walk_ms": 812.3, "admitted": 3, "refused_busy": 15,
 *                    "refused_cooling": 2, "reclaimed": 0},
 *       "reach_cold": {"cap": 2, "in_flight": 1, "waiting": 0, "queue_max": 6,
 *                      "wait_ms": 3000.0, "peak": 2,
 *                      "holders": [{"worker", "pid", "key", "age_ms"}],
 *                      "waiters": [...], "followers": [...],   same records
 *                      "acquired", "waited", "refused_full", "refused_timeout",
 *                      "cancelled", "reclaimed",
 *                      "cache": {"entries", "ready", "hits", "misses", "coalesced",
 *                                "stored", "evicted", "too_large", "takeovers",
 *                                "reclaimed", "pages": 4096, "pages_used": 35,
 *                                "max_body_bytes": 4194304,
 *                                "table": [             every entry not free
 *                                  {"entry": 3, "state": "ready",   or "building"
 *                                   "key": "nodes|clock-skew", "first_page": 12,
 *                                   "pages": 16, "bytes": 61234,   its run of the pool
 *                                   "builder_pid": null, "age_ms": 2100.5,
 *                                   "idle_ms": 812.3, "expires_in_ms": 297900.0,
 *                                   "pins": 0}]}},     idle_ms, expires_in_ms: null while
 *                                                      building; expired: negative
 *       "anon_line": {"cap": 8, "in_flight": 8, "waiting": 3, "queue_max": 32,
 *                     "wait_ms": 2000.0, "peak": 8,
 *                     "holders": [...], "waiters": [...],   records as above; the key is
 *                                                           "CLIENT PATH"
 *                     "admitted", "waited", "refused_full", "refused_timeout",
 *                     "cancelled", "reclaimed", "bypassed", "unauthorized"},
 *       "anon_rate": {"per_minute": 300, "burst": 30, "entries": 4096, "tracked": 12,
 *                     "allowed", "rate_limited", "evicted"}   per_minute 0: no limit
 *       "conn_cap": {"cap": 64, "sets": 512, "counted", "refused", "untracked",
 *                    "reclaimed"}                               cap 0: no cap
 *     },
 *     "scoreboard": "_HS_....",                 one mg_slot_state_char per slot
 *     "workers": [                              every slot
 *       {"slot": 0, "pid": 4321, "state": "handling", "spawns": 1, "connections": 1,
 *        "db_connections": 1,
 *        "requests": 5, "requests_all": 9, "age_ms": 61000.5, "heartbeat_age_ms": 12.5,
 *        "request": {"method": "GET", "path": "/api/nodes", "running_ms": 12.3},
 *        "last_exit": "signal 9"}               "exit N", "signal N", or null (none)
 *     ]
 *   }
 *
 * pid and lease_pid are null when no process is recorded; request is null when the worker
 * handles no request; age_ms and heartbeat_age_ms are null for a slot never started.
 */
#include "shmdump.h"

#include "client_limit.h"
#include "clock.h"
#include "envfile.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "gates.h"
#include "result_cache.h"
#include "json.h"
#include "live_ring.h"
#include "netaddr.h"
#include "scoreboard.h"
#include "shared_value.h"
#include "stats.h"
#include "upstream_gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const value_names[MG_VALUE_COUNT] = {"db_counts", "stats"};

/* --- taking the copy ------------------------------------------------------------------ */

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* The largest segment any layout of this build can have; more is never copied. */
static size_t max_segment_bytes(void)
{
    return align64(sizeof(struct mg_shm_header)) + align64(sizeof(struct mg_config)) +
           align64(sizeof(struct mg_counters)) +
           align64(sizeof(struct mg_route_stats) * MG_ROUTES_MAX) +
           align64(sizeof(struct mg_slow_ring)) +
           align64(sizeof(struct mg_shared_value) * MG_VALUE_COUNT) +
           align64(sizeof(struct mg_diag_gate)) + align64(sizeof(struct mg_fifo_gate)) +
           align64(sizeof(struct mg_result_cache)) + align64(sizeof(struct mg_cache_entry) * 4096) +
           align64((size_t)1073741824 + 4096 * (size_t)MG_CACHE_PAGE) +
           align64(sizeof(struct mg_slot) * MG_WORKERS_MAX);
}

/* volatile: the store must happen before memcpy, which the compiler knows cannot read it. */
static _Thread_local sigjmp_buf *volatile copy_escape;

static void copy_sigbus(int sig)
{
    if (copy_escape)
        siglongjmp(*copy_escape, 1);
    signal(sig, SIG_DFL); /* not ours: die as we would have */
    raise(sig);
}

int mg_shmdump_copy_mapping(void *dst, const void *src, size_t len)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = copy_sigbus;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &old) < 0) {
        memcpy(dst, src, len);
        return 0;
    }
    sigjmp_buf escape;
    volatile int rc = 0;
    if (sigsetjmp(escape, 1) == 0) {
        copy_escape = &escape;
        memcpy(dst, src, len);
    } else {
        rc = -1;
    }
    copy_escape = NULL;
    sigaction(SIGBUS, &old, NULL);
    return rc;
}

static const struct mg_shm_section *find_section(const struct mg_shm_header *h, const char *name)
{
    unsigned n = h->section_count < MG_SHM_SECTIONS_MAX ? h->section_count : MG_SHM_SECTIONS_MAX;
    for (unsigned i = 0; i < n; i++)
        if (strncmp(h->sections[i].name, name, sizeof h->sections[i].name) == 0)
            return &h->sections[i];
    return NULL;
}

/* After validate: the sections the dump reads as a single record hold one. */
static int check_single_records(const struct mg_shm_header *h, char *err, size_t errlen)
{
    static const char *const single[] = {"config", "counters", "slow"};
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++) {
        const struct mg_shm_section *s = find_section(h, single[i]);
        if (!s || s->record_count != 1) {
            snprintf(err, errlen, "segment section \"%s\" holds %" PRIu64 " records, expected 1",
                     single[i], s ? s->record_count : 0);
            return -1;
        }
    }
    return 0;
}

/* Validates copy (size bytes, malloc'd) and hands it to d; frees it when refused. */
static enum mg_shmdump_status adopt(struct mg_shmdump *d, const char *name, void *copy, size_t size,
                                    char *err, size_t errlen)
{
    char why[512];
    const struct mg_shm_header *h = copy;
    if (size < sizeof *h) {
        snprintf(err, errlen,
                 "segment %s is %zu bytes, smaller than a meshgate header (%zu bytes): not a "
                 "meshgate segment",
                 name, size, sizeof *h);
        free(copy);
        return MG_SHMDUMP_NOT_UNDERSTOOD;
    }
    if (mg_segment_validate(copy, size, &d->seg, why, sizeof why) < 0 ||
        check_single_records(h, why, sizeof why) < 0) {
        snprintf(err, errlen, "segment %s: %s", name, why);
        memset(&d->seg, 0, sizeof d->seg);
        free(copy);
        return MG_SHMDUMP_NOT_UNDERSTOOD;
    }
    d->copy = copy;
    d->size = size;
    d->seg.read_only = true;
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->seg.name, sizeof d->seg.name, "%s", name);
    d->taken_realtime_ns = mg_realtime_ns();
    d->taken_monotonic_ns = mg_monotonic_ns();
    d->master_alive = mg_process_alive(atomic_load(&d->seg.header->master_pid),
                                       atomic_load(&d->seg.header->master_start_ticks));
    return MG_SHMDUMP_OK;
}

/* Where the cache's body pages lie in a copy of len bytes, as the copied header says: *at and
 * *bytes, both within len (0 bytes when the header names no such section). */
static void body_pages(const struct mg_shm_header *h, size_t len, size_t *at, size_t *bytes)
{
    *at = len;
    *bytes = 0;
    const struct mg_shm_section *s = find_section(h, "cachepages");
    uint64_t size;
    if (!s || s->offset >= len || __builtin_mul_overflow(s->record_size, s->record_count, &size))
        return;
    *at = (size_t)s->offset;
    *bytes = size < len - *at ? (size_t)size : len - *at;
}

/* The copy: the header first, then everything but the body pages unless they are wanted.
 * The pages are most of a segment (16 MiB by default) and no report shows them; left out,
 * they read as zero in the calloc'd copy (fresh pages, never touched), as an empty cache's
 * do. Which bytes to leave out is judged on the private copy of the header, and validate
 * judges that same header afterwards. */
static int copy_segment(void *copy, const unsigned char *map, size_t len, unsigned flags)
{
    size_t head = len < sizeof(struct mg_shm_header) ? len : sizeof(struct mg_shm_header);
    if (mg_shmdump_copy_mapping(copy, map, head) < 0)
        return -1;
    size_t at = len, bytes = 0;
    if (!(flags & MG_SHMDUMP_CACHE_BODIES) && head == sizeof(struct mg_shm_header))
        body_pages(copy, len, &at, &bytes);
    if (at < head) { /* pages claimed inside the header: copy all, let validate refuse it */
        at = len;
        bytes = 0;
    }
    if (mg_shmdump_copy_mapping((char *)copy + head, map + head, at - head) < 0)
        return -1;
    return mg_shmdump_copy_mapping((char *)copy + at + bytes, map + at + bytes, len - at - bytes);
}

enum mg_shmdump_status mg_shmdump_take(struct mg_shmdump *d, const char *name, char *err,
                                       size_t errlen)
{
    return mg_shmdump_take_with(d, name, 0, err, errlen);
}

enum mg_shmdump_status mg_shmdump_take_with(struct mg_shmdump *d, const char *name, unsigned flags,
                                            char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    char found[MG_SHM_NAME_MAX];
    name = mg_segment_resolve_name(name, found);
    /* Never blocks: a FIFO or a symbolic link under the name is refused, not opened. */
    struct stat st;
    char why[400];
    int fd = mg_segment_open_existing(name, O_RDONLY, &st, why, sizeof why);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT) {
            snprintf(err, errlen, "no segment %s", name);
            return MG_SHMDUMP_MISSING;
        }
        if (e == EINVAL || e == ELOOP) {
            snprintf(err, errlen, "%s", why);
            return MG_SHMDUMP_NOT_UNDERSTOOD;
        }
        snprintf(err, errlen, "segment %s: cannot open it: %s%s", name, strerror(e),
                 e == EACCES ? " (run as the server's user, or as root)" : "");
        return MG_SHMDUMP_SYSTEM_ERROR;
    }
    if (st.st_size < (off_t)sizeof(struct mg_shm_header)) {
        snprintf(err, errlen,
                 "segment %s is %lld bytes, smaller than a meshgate header (%zu bytes): not a "
                 "meshgate segment",
                 name, (long long)st.st_size, sizeof(struct mg_shm_header));
        close(fd);
        return MG_SHMDUMP_NOT_UNDERSTOOD;
    }
    size_t len = (size_t)st.st_size;
    if (len > max_segment_bytes())
        len = max_segment_bytes(); /* the header will say whether the rest mattered */
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "segment %s: mmap: %s", name, strerror(map_errno));
        return MG_SHMDUMP_SYSTEM_ERROR;
    }
    void *copy = calloc(1, len);
    if (!copy) {
        munmap(map, len);
        snprintf(err, errlen, "segment %s: no memory for a %zu-byte copy", name, len);
        return MG_SHMDUMP_SYSTEM_ERROR;
    }
    int copied = copy_segment(copy, map, len, flags);
    munmap(map, len);
    if (copied < 0) {
        free(copy);
        snprintf(err, errlen,
                 "segment %s shrank while it was being copied; meshgate never shrinks its "
                 "segment, so something else owns it",
                 name);
        return MG_SHMDUMP_NOT_UNDERSTOOD;
    }
    enum mg_shmdump_status adopted = adopt(d, name, copy, len, err, errlen);
    d->cache_bodies_copied = adopted == MG_SHMDUMP_OK && (flags & MG_SHMDUMP_CACHE_BODIES);
    return adopted;
}

enum mg_shmdump_status mg_shmdump_from_bytes(struct mg_shmdump *d, const char *name,
                                             const void *bytes, size_t size, char *err,
                                             size_t errlen)
{
    memset(d, 0, sizeof *d);
    void *copy = malloc(size ? size : 1);
    if (!copy) {
        snprintf(err, errlen, "segment %s: no memory for a %zu-byte copy", name, size);
        return MG_SHMDUMP_SYSTEM_ERROR;
    }
    if (size)
        memcpy(copy, bytes, size);
    enum mg_shmdump_status st = adopt(d, name, copy, size, err, errlen);
    d->cache_bodies_copied = st == MG_SHMDUMP_OK;
    return st;
}

void mg_shmdump_release(struct mg_shmdump *d)
{
    free(d->copy);
    memset(d, 0, sizeof *d);
}

/* --- finding the segment ----------------------------------------------------------------- */

int mg_shmdump_parse_listen(const char *text, char *host, size_t host_cap, unsigned *port)
{
    const char *colon;
    size_t n;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || close == text + 1)
            return -1;
        n = (size_t)(close - text - 1);
        if (n >= host_cap)
            return -1;
        memcpy(host, text + 1, n);
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (!colon)
            return -1;
        n = (size_t)(colon - text);
        if (n >= host_cap || memchr(text, ':', n))
            return -1;
        memcpy(host, text, n);
    }
    host[n] = '\0';
    for (const char *p = host; *p; p++)
        if (*p == '/' || *p == ' ' || *p == '\t')
            return -1;
    const char *digits = colon + 1;
    if (*digits < '0' || *digits > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long value = strtoul(digits, &end, 10);
    if (errno || *end || value < 1 || value > 65535)
        return -1;
    *port = (unsigned)value;
    return 0;
}

static int check_name(const char *what, const char *name, char *err, size_t errlen)
{
    size_t n = strlen(name);
    if (name[0] != '/' || n < 2 || n >= MG_SHM_NAME_MAX || strchr(name + 1, '/')) {
        snprintf(err, errlen,
                 "%s %s: must be \"/\" followed by 1 to %d characters other than \"/\" "
                 "(e.g. /meshgate-127.0.0.1-8080)",
                 what, name, MG_SHM_NAME_MAX - 2);
        return -1;
    }
    return 0;
}

static void add_name(struct mg_shmdump_names *names, const char *host, unsigned port)
{
    char name[MG_SHM_NAME_MAX];
    mg_config_default_shm_name(host, port, name, sizeof name);
    for (unsigned i = 0; i < names->count; i++)
        if (strcmp(names->name[i], name) == 0)
            return;
    if (names->count < MG_SHMDUMP_NAMES_MAX)
        memcpy(names->name[names->count++], name, sizeof name);
}

static const char *env_lookup(const char *name, void *arg)
{
    (void)arg;
    return getenv(name);
}

/* The server's environment as its unit gives it: the process's own values, then the
 * environment file's (EnvironmentFile= and MESHGATE_ENV_FILE: the environment wins). */
struct sources {
    mg_getenv_fn lookup;
    void *arg;
    struct mg_envfile file;
    const char *file_path; /* NULL: no file */
};

/* name's value and where it came from ("the environment", the file's path); NULL when
 * neither sets it. */
static const char *source_get(const struct sources *s, const char *name, const char **where)
{
    const char *v = s->lookup(name, s->arg);
    *where = "the environment";
    if (!v && s->file_path) {
        v = mg_envfile_get(&s->file, name);
        *where = s->file_path;
    }
    return v;
}

/* Which file the server's environment comes from: MESHGATE_ENV_FILE when set (set and empty:
 * none), else default_file when it exists. Fills looked with where the names were looked
 * for. 0, or -1 with a message in err. */
static int sources_open(struct sources *s, mg_getenv_fn lookup, void *arg, const char *default_file,
                        char *looked, size_t looked_cap, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->lookup = lookup;
    s->arg = arg;
    const char *named = lookup("MESHGATE_ENV_FILE", arg);
    if (named && *named) {
        s->file_path = named;
        snprintf(looked, looked_cap, "looked in the environment and MESHGATE_ENV_FILE=%s", named);
    } else if (!named && default_file && access(default_file, F_OK) == 0) {
        s->file_path = default_file;
        snprintf(looked, looked_cap, "looked in the environment and %s (the unit's file)",
                 default_file);
    } else if (named) {
        snprintf(looked, looked_cap, "looked in the environment only: MESHGATE_ENV_FILE is empty");
    } else {
        snprintf(looked, looked_cap,
                 "looked in the environment only: MESHGATE_ENV_FILE is not set%s%s%s",
                 default_file ? " and " : "", default_file ? default_file : "",
                 default_file ? " does not exist" : "");
    }
    if (s->file_path && mg_envfile_read(&s->file, s->file_path, err, errlen) < 0) {
        s->file_path = NULL;
        return -1;
    }
    return 0;
}

int mg_shmdump_resolve_names(const char *name_option, mg_getenv_fn lookup, void *arg,
                             const char *default_env_file, struct mg_shmdump_names *names,
                             char *err, size_t errlen)
{
    memset(names, 0, sizeof *names);
    if (!lookup)
        lookup = env_lookup;
    if (name_option) {
        if (check_name("--name", name_option, err, errlen) < 0)
            return -1;
        snprintf(names->name[0], sizeof names->name[0], "%s", name_option);
        names->count = 1;
        snprintf(names->origin, sizeof names->origin, "--name");
        return 0;
    }
    struct sources src;
    char looked[MG_PATH_MAX + 120];
    if (sources_open(&src, lookup, arg, default_env_file, looked, sizeof looked, err, errlen) < 0)
        return -1;
    int rc = -1;
    const char *where;
    const char *env_name = source_get(&src, "MESHGATE_SHM_NAME", &where);
    if (env_name && *env_name) {
        if (check_name("MESHGATE_SHM_NAME", env_name, err, errlen) < 0)
            goto out;
        snprintf(names->name[0], sizeof names->name[0], "%s", env_name);
        names->count = 1;
        snprintf(names->origin, sizeof names->origin, "MESHGATE_SHM_NAME in %s", where);
        rc = 0;
        goto out;
    }
    const char *listen = source_get(&src, "MESHGATE_LISTEN", &where);
    char host[MG_HOST_MAX];
    unsigned port;
    if (listen && mg_shmdump_parse_listen(listen, host, sizeof host, &port) < 0) {
        snprintf(err, errlen,
                 "MESHGATE_LISTEN=%.*s: must be HOST:PORT, [IPV6]:PORT or :PORT with a port from "
                 "1 to 65535 (read from %s; or name the segment with --name or "
                 "MESHGATE_SHM_NAME)",
                 MG_HOST_MAX, listen, where);
        goto out;
    }
    if (listen) {
        snprintf(names->origin, sizeof names->origin, "MESHGATE_LISTEN=%.*s in %s; %s", MG_HOST_MAX,
                 listen, where, looked);
    } else {
        listen = "127.0.0.1:8080";
        mg_shmdump_parse_listen(listen, host, sizeof host, &port);
        snprintf(names->origin, sizeof names->origin,
                 "the default address %s: neither MESHGATE_SHM_NAME nor MESHGATE_LISTEN is set; "
                 "%s",
                 listen, looked);
    }
    add_name(names, host, port);
    /* What the server derives from the address it bound, when that is spelled otherwise. */
    if (!host[0]) {
        add_name(names, "::", port);
        add_name(names, "0.0.0.0", port);
    } else {
        unsigned char addr[sizeof(struct in6_addr)];
        char canonical[INET6_ADDRSTRLEN];
        int family = strchr(host, ':') ? AF_INET6 : AF_INET;
        if (inet_pton(family, host, addr) == 1 &&
            inet_ntop(family, addr, canonical, sizeof canonical))
            add_name(names, canonical, port);
    }
    rc = 0;
out:
    mg_envfile_free(&src.file);
    return rc;
}

enum mg_shmdump_status mg_shmdump_take_first(struct mg_shmdump *d,
                                             const struct mg_shmdump_names *names, char *err,
                                             size_t errlen)
{
    for (unsigned i = 0; i < names->count; i++) {
        enum mg_shmdump_status st = mg_shmdump_take(d, names->name[i], err, errlen);
        if (st != MG_SHMDUMP_MISSING)
            return st;
    }
    struct mg_buf tried;
    mg_buf_init(&tried);
    for (unsigned i = 1; i < names->count; i++)
        mg_buf_printf(&tried, "%s%s", i > 1 ? ", " : "", names->name[i]);
    snprintf(err, errlen,
             "no segment %s%s%s%s (from %s): is meshgate running? Name its segment with "
             "--name /NAME, or set MESHGATE_SHM_NAME or MESHGATE_LISTEN as the server has them, "
             "or MESHGATE_ENV_FILE to the server's environment file",
             names->count ? names->name[0] : "?", tried.len ? " (nor " : "",
             tried.len ? mg_buf_cstr(&tried) : "", tried.len ? ")" : "",
             names->origin[0] ? names->origin : "nothing");
    mg_buf_free(&tried);
    return MG_SHMDUMP_MISSING;
}

/* --- shared helpers for both renderings --------------------------------------------------- */

void mg_shmdump_describe_exit(int wait_status, char *out, size_t cap)
{
    if (wait_status == -1)
        snprintf(out, cap, "-");
    else if (WIFEXITED(wait_status))
        snprintf(out, cap, "exit %d", WEXITSTATUS(wait_status));
    else if (WIFSIGNALED(wait_status))
        snprintf(out, cap, "signal %d", WTERMSIG(wait_status));
    else
        snprintf(out, cap, "status %d", wait_status);
}

/* Copies at most max bytes of src (up to a NUL) into dst, bytes outside printable ASCII
 * written as \xNN, always terminated. */
static void clean_copy(char *dst, size_t cap, const char *src, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    size_t j = 0;
    for (size_t i = 0; i < max && src[i]; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c >= 0x20 && c < 0x7f) {
            if (j + 1 >= cap)
                break;
            dst[j++] = (char)c;
        } else {
            if (j + 4 >= cap)
                break;
            dst[j++] = '\\';
            dst[j++] = 'x';
            dst[j++] = hex[c >> 4];
            dst[j++] = hex[c & 15];
        }
    }
    dst[j] = '\0';
}

/* now - then, false when then is unset (0) or the difference is not a sane duration. */
static bool elapsed_ns(int64_t now, int64_t then, int64_t *out)
{
    if (then <= 0 || __builtin_sub_overflow(now, then, out) || *out < 0)
        return false;
    return true;
}

static bool format_rfc3339(int64_t realtime_ns, char *out, size_t cap)
{
    if (realtime_ns <= 0)
        return false;
    time_t t = (time_t)(realtime_ns / MG_NS_PER_SEC);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        return false;
    return true;
}

static void format_duration(int64_t ns, char *out, size_t cap)
{
    double ms = (double)ns / MG_NS_PER_MS;
    int64_t s = ns / MG_NS_PER_SEC;
    if (ms < 10)
        snprintf(out, cap, "%.1f ms", ms);
    else if (ms < 1000)
        snprintf(out, cap, "%.0f ms", ms);
    else if (s < 60)
        snprintf(out, cap, "%.1f s", ms / 1000);
    else if (s < 3600)
        snprintf(out, cap, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
    else if (s < 86400)
        snprintf(out, cap, "%" PRId64 "h%02" PRId64 "m", s / 3600, s % 3600 / 60);
    else
        snprintf(out, cap, "%" PRId64 "d%02" PRId64 "h", s / 86400, s % 86400 / 3600);
}

/* Elapsed time since a monotonic stamp for people: "-" when there is none. */
static void format_age(const struct mg_shmdump *d, int64_t then, char *out, size_t cap)
{
    int64_t ns;
    if (elapsed_ns(d->taken_monotonic_ns, then, &ns))
        format_duration(ns, out, cap);
    else
        snprintf(out, cap, "-");
}

/* The copy's config with every string field terminated and every bool a real bool, so
 * mg_config_describe can be run on it. */
static void config_copy(const struct mg_config *src, struct mg_config *dst)
{
    memcpy(dst, src, sizeof *dst);
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        char *field = (char *)dst + v->offset;
        switch (v->kind) {
        case MG_CFG_STRING:
        case MG_CFG_PATH:
        case MG_CFG_SHM_NAME:
        case MG_CFG_LISTEN:
        case MG_CFG_CIDRS:
        case MG_CFG_HOSTPORT:
        case MG_CFG_ADDRESS:
        case MG_CFG_ROUTES:
            if (v->size)
                field[v->size - 1] = '\0';
            break;
        case MG_CFG_BOOL: {
            unsigned char byte;
            memcpy(&byte, field, 1);
            bool b = byte != 0;
            memcpy(field, &b, sizeof b);
            break;
        }
        default:
            break;
        }
    }
}

static double us_to_ms(uint64_t us)
{
    return (double)us / 1000.0;
}

static double ns_to_ms(int64_t ns)
{
    return (double)ns / (double)MG_NS_PER_MS;
}

static uint64_t route_count(const struct mg_route_stats *r)
{
    return atomic_load_explicit(&r->count, memory_order_relaxed);
}

/* Average in ms; sum and count come from a copy that may have caught them apart. */
static double route_avg_ms(const struct mg_route_stats *r)
{
    uint64_t count = route_count(r);
    return count ? us_to_ms(atomic_load(&r->sum_us)) / (double)count : 0;
}

/* --- text --------------------------------------------------------------------------------- */

static void text_config_line(const char *line, void *arg)
{
    char clean[4 * (MG_PATH_MAX + 64) + 1];
    clean_copy(clean, sizeof clean, line, strlen(line));
    mg_buf_printf(arg, "  %s\n", clean);
}

static void text_header(const struct mg_shmdump *d, struct mg_buf *out)
{
    const struct mg_shm_header *h = d->seg.header;
    char name[4 * MG_SHM_NAME_MAX], taken[40], created[40], changed[40], age[32],
        version[4 * MG_VERSION_MAX];
    clean_copy(name, sizeof name, d->name, sizeof d->name);
    clean_copy(version, sizeof version, h->version, sizeof h->version);
    if (!format_rfc3339(d->taken_realtime_ns, taken, sizeof taken))
        snprintf(taken, sizeof taken, "?");
    if (!format_rfc3339(h->created_realtime_ns, created, sizeof created))
        snprintf(created, sizeof created, "?");
    if (!format_rfc3339(atomic_load(&h->state_changed_realtime_ns), changed, sizeof changed))
        snprintf(changed, sizeof changed, "?");
    format_age(d, h->created_monotonic_ns, age, sizeof age);
    uint32_t state = atomic_load(&h->server_state);
    mg_buf_printf(out, "meshgate segment %s (copied %s)\n", name, taken);
    mg_buf_printf(
        out, "  magic        %.8s, layout version %" PRIu32 ", %" PRIu64 " bytes, meshgate %s\n",
        h->magic, h->layout_version, h->total_size, version[0] ? version : "?");
    mg_buf_printf(out, "  created      %s, %s ago\n", created, age);
    mg_buf_printf(out, "  master       pid %" PRId32 ", %s\n", atomic_load(&h->master_pid),
                  d->master_alive ? "alive" : "not running");
    mg_buf_printf(out, "  generation   %" PRIu32 "\n", atomic_load(&h->generation));
    mg_buf_printf(out, "  server state %s, since %s\n", mg_server_state_name(state), changed);
}

static void text_counters(const struct mg_shmdump *d, struct mg_buf *out)
{
    int width = 0;
    for (int c = 0; c < MG_CTR_COUNT; c++)
        if ((int)strlen(mg_counter_names[c]) > width)
            width = (int)strlen(mg_counter_names[c]);
    mg_buf_puts(out, "\ncounters\n");
    for (int c = 0; c < MG_CTR_COUNT; c++)
        mg_buf_printf(out, "  %-*s %14" PRIu64 "  %s\n", width, mg_counter_names[c],
                      mg_counter_get(&d->seg, (enum mg_counter)c), mg_counter_help[c]);
}

static void text_routes(const struct mg_shmdump *d, struct mg_buf *out)
{
    char name[4 * MG_ROUTE_NAME_MAX + 1];
    int width = 5;
    unsigned shown = 0;
    for (uint32_t i = 0; i < d->seg.route_count; i++) {
        clean_copy(name, sizeof name, d->seg.routes[i].name, MG_ROUTE_NAME_MAX);
        if (route_count(&d->seg.routes[i]) > 0 && (int)strlen(name) > width)
            width = (int)strlen(name);
    }
    mg_buf_puts(out, "\nroutes\n");
    for (uint32_t i = 0; i < d->seg.route_count; i++) {
        const struct mg_route_stats *r = &d->seg.routes[i];
        if (route_count(r) == 0)
            continue;
        if (shown++ == 0)
            mg_buf_printf(out, "  %-*s %10s %9s %9s %9s %9s %8s\n", width, "route", "count",
                          "avg ms", "p50 ms", "p95 ms", "max ms", "5xx");
        clean_copy(name, sizeof name, r->name, MG_ROUTE_NAME_MAX);
        mg_buf_printf(out, "  %-*s %10" PRIu64 " %9.2f %9.2f %9.2f %9.2f %8" PRIu64 "\n", width,
                      name, route_count(r), route_avg_ms(r), us_to_ms(mg_hist_quantile_us(r, 0.50)),
                      us_to_ms(mg_hist_quantile_us(r, 0.95)), us_to_ms(atomic_load(&r->max_us)),
                      atomic_load(&r->errors));
    }
    if (!shown)
        mg_buf_puts(out, "  (no requests yet)\n");
}

static void text_slow(const struct mg_shmdump *d, struct mg_buf *out)
{
    struct mg_slow_entry entries[MG_SLOW_MAX];
    unsigned n = mg_slow_snapshot(&d->seg, entries);
    mg_buf_printf(out, "\nslow requests (at least %d ms, newest first)\n",
                  MG_SLOW_THRESHOLD_US / 1000);
    if (n == 0) {
        mg_buf_puts(out, "  (none)\n");
        return;
    }
    mg_buf_printf(out, "  %-20s %10s %6s  %s\n", "time", "ms", "status", "path");
    for (unsigned i = 0; i < n; i++) {
        char when[40], path[4 * MG_SLOW_PATH_MAX + 1];
        if (!format_rfc3339(entries[i].time_realtime_ns, when, sizeof when))
            snprintf(when, sizeof when, "?");
        clean_copy(path, sizeof path, entries[i].path, MG_SLOW_PATH_MAX);
        mg_buf_printf(out, "  %-20s %10.1f %6" PRIu32 "  %s\n", when,
                      (double)entries[i].duration_us / 1000.0, entries[i].status, path);
    }
}

/* Length of a shared value's data, or -1 when there is none (or it was caught mid-write). */
static long value_bytes(const struct mg_shared_value *v)
{
    if (atomic_load(&v->computed_monotonic_ns) == 0 || (atomic_load(&v->seq) & 1) ||
        v->len > MG_SHARED_VALUE_MAX)
        return -1;
    return (long)v->len;
}

static void text_values(const struct mg_shmdump *d, struct mg_buf *out)
{
    mg_buf_puts(out, "\nshared values\n");
    for (unsigned i = 0; i < MG_VALUE_COUNT; i++) {
        const struct mg_shared_value *v = &d->seg.values[i];
        char what[48], age[32], lease[32];
        long bytes = value_bytes(v);
        if (bytes < 0)
            snprintf(what, sizeof what, "no value yet");
        else
            snprintf(what, sizeof what, "%ld bytes", bytes);
        format_age(d, atomic_load(&v->computed_monotonic_ns), age, sizeof age);
        int32_t holder = atomic_load(&v->lease_pid);
        if (holder)
            snprintf(lease, sizeof lease, "pid %" PRId32, holder);
        else
            snprintf(lease, sizeof lease, "none");
        mg_buf_printf(out, "  %u %s: %s, %" PRIu64 " refreshes, age %s, lease holder %s\n", i,
                      value_names[i], what, atomic_load(&v->refreshes), age, lease);
    }
}

/* Every shared table (table_stats.h), from the lists: a pass under way is background work. */
static void text_tables(const struct mg_shmdump *d, struct mg_buf *out)
{
    struct mg_table_snapshot t[MG_TABLE_COUNT];
    mg_table_stats_read(d->seg.cache.cache->tables, t);
    mg_buf_puts(out, "\nshared tables\n");
    for (int i = 0; i < MG_TABLE_COUNT; i++) {
        mg_buf_printf(out, "  %s:", mg_table_names[i]);
#define TEXT_TABLE_STAT(field, json, type, what)                                                   \
    mg_buf_printf(out, " %s %" PRIu64, #field, t[i].field);
        MG_TABLE_STAT_LIST(TEXT_TABLE_STAT)
#undef TEXT_TABLE_STAT
        mg_buf_puts(out, t[i].building ? " (a pass under way: background work)\n" : "\n");
    }
}

/* One counter as the text report shows it ("refused full 3": the field, '_' as spaces). */
static void text_counter(struct mg_buf *out, const char *sep, const char *field, uint64_t value)
{
    char label[32];
    snprintf(label, sizeof label, "%s", field);
    for (char *u = strchr(label, '_'); u; u = strchr(u, '_'))
        *u = ' ';
    mg_buf_printf(out, "%s%s %" PRIu64, sep, label, value);
}

static void text_gates(const struct mg_shmdump *d, struct mg_buf *out)
{
    struct mg_diag_snapshot g;
    mg_diag_gate_read(d->seg.diag, 0, false, d->taken_monotonic_ns, &g); /* never locked */
    char age[32];
    mg_buf_puts(out, "\ngates\n");
    mg_buf_printf(out,
                  "  perf_mem (/api/perf?mem=1): %s, cap 1, %" PRIu32 " running, peak %" PRIu32
                  ", cooldown %.0f ms\n",
                  g.enabled ? "on" : "OFF", g.running, g.peak, ns_to_ms(g.cooldown_ns));
    if (g.holder_pid != 0) {
        format_age(d, g.holder_since_monotonic_ns, age, sizeof age);
        mg_buf_printf(out, "    holder: worker %" PRIu32 ", pid %" PRId32 ", walking for %s\n",
                      g.holder_slot, g.holder_pid, age);
    } else if (g.cooldown_remaining_ns > 0) {
        mg_buf_printf(out, "    holder: none; cooldown ends in %.0f ms\n",
                      ns_to_ms(g.cooldown_remaining_ns));
    } else {
        mg_buf_puts(out, "    holder: none; open\n");
    }
    const char *sep = "    ";
#define TEXT_COUNTER(field, json, what)                                                            \
    text_counter(out, sep, #field, g.field);                                                       \
    sep = ", ";
    MG_DIAG_COUNTER_LIST(TEXT_COUNTER)
#undef TEXT_COUNTER
    mg_buf_printf(out, ", last walk %.1f ms\n", ns_to_ms(g.last_walk_ns));
}

/* Whose share a permit or place counts against: its client's address, or "none". */
static void record_owner(const struct mg_fifo_record *r, char *out, size_t cap)
{
    static const uint8_t none[MG_FIFO_OWNER_BYTES];
    if (memcmp(r->owner, none, sizeof none) == 0)
        snprintf(out, cap, "none");
    else
        mg_addr_format(r->owner, out, cap);
}

static void text_records(const struct mg_shmdump *d, struct mg_buf *out, const char *what,
                         const struct mg_fifo_gate *gate, enum mg_fifo_records which)
{
    struct mg_fifo_record r[MG_FIFO_WAITERS_MAX];
    /* the dump's own copy: never locked */
    unsigned n = mg_fifo_gate_records(gate, 0, false, which, r, MG_FIFO_WAITERS_MAX);
    for (unsigned i = 0; i < n; i++) {
        char key[4 * MG_FIFO_KEY_MAX + 1], age[32], owner[48];
        clean_copy(key, sizeof key, r[i].key, sizeof r[i].key);
        format_age(d, r[i].since_monotonic_ns, age, sizeof age);
        mg_buf_printf(out, "    %-9s worker %" PRIu32 ", pid %" PRId32 ", %s, for %s", what,
                      r[i].slot, r[i].pid, key, age);
        /* A follower waits for a result, not a permit: it has no round and counts for no one. */
        if (which != MG_FIFO_FOLLOWERS) {
            record_owner(&r[i], owner, sizeof owner);
            mg_buf_printf(out, ", round %" PRIu64 ", owner %s%s", r[i].round, owner,
                          r[i].unready ? ", unready" : "");
        }
        mg_buf_puts(out, "\n");
    }
}

/* A FIFO gate's counters as the text report shows them ("    acquired 3, waited 1, refused
 * full 0, ..."), from MG_FIFO_COUNTER_LIST; acquired_as names the first. No newline. */
static void text_fifo_counters(struct mg_buf *out, const struct mg_fifo_snapshot *g,
                               const char *acquired_as)
{
    const char *sep = "    ";
#define TEXT_COUNTER(field, json, what)                                                            \
    text_counter(out, sep, strcmp(#field, "acquired") == 0 ? acquired_as : #field, g->field);      \
    sep = ", ";
    MG_FIFO_COUNTER_LIST(TEXT_COUNTER)
#undef TEXT_COUNTER
}

static const char *cache_state_name(uint32_t state)
{
    static const char *const names[] = {"free", "building", "ready"};
    return state < sizeof names / sizeof names[0] ? names[state] : "unknown";
}

/* The pool, then every entry that is not free with its run of pages. */
static void text_cache_entries(const struct mg_shmdump *d, struct mg_buf *out,
                               const struct mg_cache_snapshot *c)
{
    const struct mg_cache_view *v = &d->seg.cache;
    mg_buf_printf(out,
                  "    cache pages: %" PRIu64 " of %" PRIu32 " used (%u bytes each), a body of"
                  " at most %zu bytes is stored\n",
                  c->pages_used, c->pages, MG_CACHE_PAGE, mg_result_cache_max_body(v->cache));
    for (uint32_t i = 0; i < v->cache->entries; i++) {
        const struct mg_cache_entry *e = &v->entry[i];
        if (e->state == MG_CACHE_FREE)
            continue;
        char key[4 * MG_CACHE_KEY_MAX + 1], pages[64], age[32], used[32], when[48];
        clean_copy(key, sizeof key, e->key, sizeof e->key);
        if (e->page_count > 0)
            snprintf(pages, sizeof pages, "pages %" PRIu32 "-%" PRIu64 " (%" PRIu32 ")",
                     e->first_page, (uint64_t)e->first_page + e->page_count - 1, e->page_count);
        else
            snprintf(pages, sizeof pages, "no pages");
        format_age(d, e->since_monotonic_ns, age, sizeof age);
        if (e->state == MG_CACHE_READY) {
            int64_t left;
            format_age(d, e->used_monotonic_ns, used, sizeof used);
            if (!__builtin_sub_overflow(e->expires_monotonic_ns, d->taken_monotonic_ns, &left) &&
                left > 0) {
                char in[32];
                format_duration(left, in, sizeof in);
                snprintf(when, sizeof when, "expires in %s", in);
            } else {
                snprintf(when, sizeof when, "expired");
            }
            mg_buf_printf(out,
                          "      entry %" PRIu32 ": ready, %s, %" PRIu32
                          " bytes, %s, stored %s ago, used %s ago, %s, %" PRIu32 " pins\n",
                          i, pages, e->body_len, key[0] ? key : "(hidden)", age, used, when,
                          e->pins);
        } else {
            mg_buf_printf(out,
                          "      entry %" PRIu32 ": %s, %s, %s, worker %" PRIu32 ", pid %" PRId32
                          ", for %s\n",
                          i, cache_state_name(e->state), pages, key, e->builder_slot,
                          e->builder_pid, age);
        }
    }
}

static void text_cold(const struct mg_shmdump *d, struct mg_buf *out)
{
    const struct mg_fifo_gate *gate = d->seg.cold;
    struct mg_fifo_snapshot snap, *g = &snap;
    mg_fifo_gate_read(gate, 0, false, &snap); /* the dump's own copy: never locked */
    char cap[16];
    if (g->cap)
        snprintf(cap, sizeof cap, "%" PRIu32, g->cap);
    else
        snprintf(cap, sizeof cap, "unlimited");
    mg_buf_printf(
        out,
        "  reach_cold (cold reach builds): cap %s, %" PRIu32 " in flight, %" PRIu32
        " waiting of %" PRIu32 " places, wait %.0f ms, peak %" PRIu32 ", round %" PRIu64 "\n",
        cap, g->in_flight, g->waiting, g->queue_max, ns_to_ms(g->wait_ns), g->peak, g->round);
    text_records(d, out, "holder", gate, MG_FIFO_HOLDERS);
    text_records(d, out, "waiter", gate, MG_FIFO_WAITERS);
    text_records(d, out, "follower", gate, MG_FIFO_FOLLOWERS);
    text_fifo_counters(out, g, "acquired");
    mg_buf_puts(out, "\n");
    struct mg_cache_snapshot c;
    mg_result_cache_read(&d->seg.cache, 0, false, d->taken_monotonic_ns, &c); /* never locked */
    mg_buf_printf(out, "    cache: %u of %" PRIu32 " entries ready, %u building", c.ready,
                  c.entries, c.building);
#define TEXT_COUNTER(field, json, what) text_counter(out, ", ", #field, c.field);
    MG_CACHE_COUNTER_LIST(TEXT_COUNTER)
#undef TEXT_COUNTER
    mg_buf_puts(out, "\n");
    text_cache_entries(d, out, &c);
}

static void text_anon(const struct mg_shmdump *d, struct mg_buf *out)
{
    const struct mg_fifo_gate *gate = d->seg.anon;
    struct mg_fifo_snapshot snap, *g = &snap;
    mg_fifo_gate_read(gate, 0, false, &snap); /* the dump's own copy: never locked */
    if (g->cap)
        mg_buf_printf(out,
                      "  anon_line (anonymous heavy requests): cap %" PRIu32 ", %" PRIu32
                      " in flight, %" PRIu32 " waiting of %" PRIu32
                      " places, wait %.0f ms, peak %" PRIu32 ", round %" PRIu64 "\n",
                      g->cap, g->in_flight, g->waiting, g->queue_max, ns_to_ms(g->wait_ns), g->peak,
                      g->round);
    else
        mg_buf_puts(out, "  anon_line (anonymous heavy requests): OFF (no line)\n");
    text_records(d, out, "holder", gate, MG_FIFO_HOLDERS);
    text_records(d, out, "waiter", gate, MG_FIFO_WAITERS);
    text_fifo_counters(out, g, "admitted");
    mg_buf_printf(out, ", bypassed (signed in) %" PRIu64 ", 401s %" PRIu64 "\n",
                  mg_counter_get(&d->seg, MG_CTR_ANON_BYPASSED),
                  mg_counter_get(&d->seg, MG_CTR_UNAUTHORIZED));
    struct mg_client_snapshot t;
    mg_client_limit_read(&d->seg.clients, d->taken_monotonic_ns, &t);
    if (t.per_minute)
        mg_buf_printf(out,
                      "  anon_rate (per client): %" PRIu32 " a minute, burst %" PRIu32 ", %" PRIu32
                      " of %" PRIu32 " entries tracking, rate-limited %" PRIu64,
                      t.per_minute, t.burst, t.tracked, t.entries,
                      mg_counter_get(&d->seg, MG_CTR_ANON_RATE_LIMITED));
    else
        mg_buf_printf(out, "  anon_rate (per client): OFF, rate-limited %" PRIu64,
                      mg_counter_get(&d->seg, MG_CTR_ANON_RATE_LIMITED));
#define TEXT_COUNTER(field, json, what) text_counter(out, ", ", #field, t.field);
    MG_CLIENT_COUNTER_LIST(TEXT_COUNTER)
#undef TEXT_COUNTER
    mg_buf_puts(out, "\n");
}

/* The connection cap's row of the gate table (MESHGATE_MAX_CONNS_PER_CLIENT). */
static void text_conn_cap(const struct mg_shmdump *d, struct mg_buf *out)
{
    struct mg_gate_snapshots all;
    mg_gates_read(&d->seg, 0, false, d->taken_monotonic_ns, &all); /* never locked */
    const struct mg_conn_snapshot c = all.conn_cap;
    if (c.cap)
        mg_buf_printf(out, "  conn_cap (connections per client): cap %" PRIu32 ", %" PRIu32 " sets",
                      c.cap, c.sets);
    else
        mg_buf_puts(out, "  conn_cap (connections per client): OFF");
#define TEXT_COUNTER(field, json, what) text_counter(out, ", ", #field, c.field);
    MG_CONN_COUNTER_LIST(TEXT_COUNTER)
#undef TEXT_COUNTER
    mg_buf_puts(out, "\n");
}

static void json_conn_cap(struct mg_json *j, const struct mg_shmdump *d)
{
    struct mg_gate_snapshots all;
    mg_gates_read(&d->seg, 0, false, d->taken_monotonic_ns, &all);
    const struct mg_conn_snapshot c = all.conn_cap;
    mg_json_key(j, "conn_cap");
    mg_json_object_begin(j);
    mg_json_kv_uint(j, "cap", c.cap);
    mg_json_kv_uint(j, "sets", c.sets);
#define JSON_COUNTER(field, json, what) mg_json_kv_uint(j, #field, c.field);
    MG_CONN_COUNTER_LIST(JSON_COUNTER)
#undef JSON_COUNTER
    mg_json_object_end(j);
}

/* The upstream (MESHGATE_UPSTREAM): its gate, breaker and tunnels; nothing when it is off. */
static void text_upstream(const struct mg_shmdump *d, struct mg_buf *out)
{
    const struct mg_upstream_shm *u = d->seg.upstream;
    const struct mg_fifo_gate *gate = &u->gate;
    char address[sizeof d->seg.config->upstream];
    memcpy(address, d->seg.config->upstream, sizeof address);
    address[sizeof address - 1] = '\0';
    if (!address[0])
        return;
    struct mg_fifo_snapshot snap, *g = &snap;
    mg_fifo_gate_read(gate, 0, false, &snap); /* the dump's own copy: never locked */
    mg_buf_printf(out,
                  "  upstream %s: cap %" PRIu32 ", %" PRIu32 " in flight, %" PRIu32
                  " waiting of %" PRIu32 " places, wait %.0f ms, peak %" PRIu32 ", round %" PRIu64
                  "\n",
                  address, g->cap, g->in_flight, g->waiting, g->queue_max, ns_to_ms(g->wait_ns),
                  g->peak, g->round);
    text_records(d, out, "holder", gate, MG_FIFO_HOLDERS);
    text_records(d, out, "waiter", gate, MG_FIFO_WAITERS);
    text_fifo_counters(out, g, "admitted");
    mg_buf_puts(out, "\n");
    struct mg_upstream_snapshot s;
    mg_upstream_shm_read(u, d->taken_monotonic_ns, &s);
    mg_buf_printf(out, "    breaker %s, %" PRIu32 " failures in a row",
                  mg_breaker_state_name(s.breaker_state), s.breaker_failures);
#define TEXT_COUNTER(field, json, what) text_counter(out, ", ", #field, s.field);
    MG_BREAKER_COUNTER_LIST(TEXT_COUNTER)
#undef TEXT_COUNTER
    mg_buf_printf(out,
                  "; websockets %" PRIu32 " of %" PRIu32 " (peak %" PRIu32 ")\n"
                  "    anonymous %" PRIu32 " held (peak %" PRIu32 "), held back %" PRIu64
                  " times for the signed-in reserve\n",
                  s.tunnels_open, s.tunnel_cap, s.tunnels_peak, s.anon_held, s.anon_peak,
                  s.anon_held_back);
}

/* The live feed's ring and clients (shm/live_ring.h). */
static void text_live(const struct mg_shmdump *d, struct mg_buf *out)
{
    struct mg_live_snapshot l;
    mg_live_ring_read(d->seg.live, &l);
    mg_buf_printf(out,
                  "\nlive feed\n  clients %" PRIu32 " of %" PRIu32 " (peak %" PRIu32
                  "); ring %" PRIu32 " of %" PRIu32 " events, %" PRIu64
                  " written; watcher pid %d, high-water observation %" PRId64 "\n",
                  l.clients_open, l.clients_cap, l.clients_peak, l.fill, l.slots, l.events,
                  (int)l.writer_pid, l.hw_obs);
}

static void text_scoreboard(const struct mg_shmdump *d, struct mg_buf *out)
{
    /* Apache wraps its scoreboard line every 64 workers. */
    enum { PER_LINE = 64 };
    mg_buf_printf(out, "\nscoreboard (%" PRIu32 " slots, %u alive)\n", d->seg.slot_count,
                  mg_scoreboard_alive(&d->seg));
    for (uint32_t i = 0; i < d->seg.slot_count; i++) {
        if (i % PER_LINE == 0)
            mg_buf_puts(out, "  ");
        mg_buf_putc(out, mg_slot_state_char(atomic_load(&d->seg.slots[i].state)));
        if (i % PER_LINE == PER_LINE - 1 || i + 1 == d->seg.slot_count)
            mg_buf_putc(out, '\n');
    }
    mg_buf_puts(out, "  legend:");
    for (uint32_t s = 0; s < MG_SLOT_STATE_COUNT; s++)
        mg_buf_printf(out, " %c %s%s", mg_slot_state_char(s), mg_slot_state_name(s),
                      s + 1 < MG_SLOT_STATE_COUNT ? "," : "\n");

    mg_buf_printf(out, "\n  %4s %8s %-9s %6s %5s %17s %8s %9s %-9s %s\n", "slot", "pid", "state",
                  "spawns", "conns", "requests now/all", "age", "heartbeat", "last exit",
                  "current request");
    for (uint32_t i = 0; i < d->seg.slot_count; i++) {
        struct mg_slot s;
        mg_slot_snapshot(&d->seg.slots[i], &s);
        char pid[16], counts[48], age[32], beat[32], last[32];
        char method[4 * MG_SLOT_METHOD_MAX + 1], path[4 * MG_SLOT_PATH_MAX + 1];
        int32_t p = atomic_load(&s.pid);
        if (p)
            snprintf(pid, sizeof pid, "%" PRId32, p);
        else
            snprintf(pid, sizeof pid, "-");
        snprintf(counts, sizeof counts, "%" PRIu64 "/%" PRIu64, atomic_load(&s.requests),
                 atomic_load(&s.requests_all));
        format_age(d, atomic_load(&s.started_monotonic_ns), age, sizeof age);
        format_age(d, atomic_load(&s.heartbeat_monotonic_ns), beat, sizeof beat);
        mg_shmdump_describe_exit(atomic_load(&s.last_exit), last, sizeof last);
        mg_buf_printf(out, "  %4" PRIu32 " %8s %-9s %6" PRIu32 " %5" PRIu32 " %17s %8s %9s %-9s ",
                      i, pid, mg_slot_state_name(atomic_load(&s.state)), atomic_load(&s.spawns),
                      atomic_load(&s.connections), counts, age, beat, last);
        int64_t since = atomic_load(&s.request_started_monotonic_ns);
        if (since != 0) {
            char running[32];
            format_age(d, since, running, sizeof running);
            clean_copy(method, sizeof method, s.method, sizeof s.method);
            clean_copy(path, sizeof path, s.path, sizeof s.path);
            mg_buf_printf(out, "%s %s (%s)\n", method, path, running);
        } else {
            mg_buf_puts(out, "-\n");
        }
    }
}

void mg_shmdump_render_text(const struct mg_shmdump *d, struct mg_buf *out)
{
    struct mg_config cfg;
    text_header(d, out);
    mg_buf_puts(out, "\nconfiguration\n");
    config_copy(d->seg.config, &cfg);
    mg_config_describe(&cfg, text_config_line, out);
    text_counters(d, out);
    text_routes(d, out);
    text_slow(d, out);
    text_values(d, out);
    text_tables(d, out);
    text_gates(d, out);
    text_cold(d, out);
    text_anon(d, out);
    text_conn_cap(d, out);
    text_upstream(d, out);
    text_live(d, out);
    text_scoreboard(d, out);
}

/* --- JSON --------------------------------------------------------------------------------- */

static void json_time(struct mg_json *j, const char *key, int64_t realtime_ns)
{
    char text[40];
    mg_json_key(j, key);
    if (format_rfc3339(realtime_ns, text, sizeof text))
        mg_json_string(j, text);
    else
        mg_json_null(j);
}

static void json_ms(struct mg_json *j, const char *key, double ms)
{
    mg_json_key(j, key);
    mg_json_double_rounded(j, ms, 3);
}

static void json_age(struct mg_json *j, const struct mg_shmdump *d, const char *key, int64_t then)
{
    int64_t ns;
    if (elapsed_ns(d->taken_monotonic_ns, then, &ns))
        json_ms(j, key, ns_to_ms(ns));
    else
        mg_json_kv_null(j, key);
}

static void json_pid(struct mg_json *j, const char *key, int32_t pid)
{
    if (pid)
        mg_json_kv_int(j, key, pid);
    else
        mg_json_kv_null(j, key);
}

static void json_bounded(struct mg_json *j, const char *key, const char *s, size_t max)
{
    mg_json_key(j, key);
    mg_json_string_n(j, s, strnlen(s, max));
}

static void json_segment(struct mg_json *j, const struct mg_shmdump *d)
{
    const struct mg_shm_header *h = d->seg.header;
    mg_json_key(j, "segment");
    mg_json_object_begin(j);
    json_bounded(j, "name", d->name, sizeof d->name);
    json_bounded(j, "magic", h->magic, sizeof h->magic);
    mg_json_kv_uint(j, "layout_version", h->layout_version);
    mg_json_kv_uint(j, "total_bytes", h->total_size);
    json_bounded(j, "meshgate_version", h->version, sizeof h->version);
    json_time(j, "created", h->created_realtime_ns);
    json_age(j, d, "age_ms", h->created_monotonic_ns);
    json_time(j, "taken", d->taken_realtime_ns);
    mg_json_kv_int(j, "master_pid", atomic_load(&h->master_pid));
    mg_json_kv_bool(j, "master_alive", d->master_alive);
    mg_json_kv_uint(j, "generation", atomic_load(&h->generation));
    mg_json_kv_string(j, "state", mg_server_state_name(atomic_load(&h->server_state)));
    json_time(j, "state_changed", atomic_load(&h->state_changed_realtime_ns));
    mg_json_kv_uint(j, "slots", d->seg.slot_count);
    mg_json_kv_uint(j, "routes", d->seg.route_count);
    mg_json_object_end(j);
}

static void json_config_line(const char *line, void *arg)
{
    struct mg_json *j = arg;
    const char *eq = strchr(line, '=');
    if (!eq)
        return;
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)(eq - line), line);
    mg_json_kv_string(j, key, eq + 1);
}

static void json_routes(struct mg_json *j, const struct mg_shmdump *d)
{
    mg_json_key(j, "routes");
    mg_json_array_begin(j);
    for (uint32_t i = 0; i < d->seg.route_count; i++) {
        const struct mg_route_stats *r = &d->seg.routes[i];
        if (route_count(r) == 0)
            continue;
        mg_json_object_begin(j);
        json_bounded(j, "route", r->name, MG_ROUTE_NAME_MAX);
        mg_json_kv_uint(j, "count", route_count(r));
        json_ms(j, "avg_ms", route_avg_ms(r));
        json_ms(j, "p50_ms", us_to_ms(mg_hist_quantile_us(r, 0.50)));
        json_ms(j, "p95_ms", us_to_ms(mg_hist_quantile_us(r, 0.95)));
        json_ms(j, "max_ms", us_to_ms(atomic_load(&r->max_us)));
        mg_json_kv_uint(j, "errors_5xx", atomic_load(&r->errors));
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
}

static void json_slow(struct mg_json *j, const struct mg_shmdump *d)
{
    struct mg_slow_entry entries[MG_SLOW_MAX];
    unsigned n = mg_slow_snapshot(&d->seg, entries);
    mg_json_key(j, "slow");
    mg_json_array_begin(j);
    for (unsigned i = 0; i < n; i++) {
        mg_json_object_begin(j);
        json_time(j, "time", entries[i].time_realtime_ns);
        json_ms(j, "ms", (double)entries[i].duration_us / 1000.0);
        mg_json_kv_uint(j, "status", entries[i].status);
        json_bounded(j, "path", entries[i].path, MG_SLOW_PATH_MAX);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
}

static void json_values(struct mg_json *j, const struct mg_shmdump *d)
{
    mg_json_key(j, "values");
    mg_json_array_begin(j);
    for (unsigned i = 0; i < MG_VALUE_COUNT; i++) {
        const struct mg_shared_value *v = &d->seg.values[i];
        long bytes = value_bytes(v);
        mg_json_object_begin(j);
        mg_json_kv_uint(j, "id", i);
        mg_json_kv_string(j, "name", value_names[i]);
        if (bytes < 0)
            mg_json_kv_null(j, "bytes");
        else
            mg_json_kv_int(j, "bytes", bytes);
        mg_json_kv_uint(j, "refreshes", atomic_load(&v->refreshes));
        json_age(j, d, "age_ms", bytes < 0 ? 0 : atomic_load(&v->computed_monotonic_ns));
        json_pid(j, "lease_pid", atomic_load(&v->lease_pid));
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
}

static void json_tables(struct mg_json *j, const struct mg_shmdump *d)
{
    struct mg_table_snapshot t[MG_TABLE_COUNT];
    mg_table_stats_read(d->seg.cache.cache->tables, t);
    mg_json_key(j, "tables");
    mg_json_object_begin(j);
    for (int i = 0; i < MG_TABLE_COUNT; i++) {
        mg_json_key(j, mg_table_names[i]);
        mg_json_object_begin(j);
#define JSON_TABLE_STAT(field, json, type, what) mg_json_kv_uint(j, #field, t[i].field);
        MG_TABLE_STAT_LIST(JSON_TABLE_STAT)
#undef JSON_TABLE_STAT
        mg_json_object_end(j);
    }
    mg_json_object_end(j);
}

static void json_workers(struct mg_json *j, const struct mg_shmdump *d)
{
    char board[MG_WORKERS_MAX + 1];
    uint32_t n = d->seg.slot_count;
    for (uint32_t i = 0; i < n; i++)
        board[i] = mg_slot_state_char(atomic_load(&d->seg.slots[i].state));
    board[n] = '\0';
    mg_json_kv_string(j, "scoreboard", board);

    mg_json_key(j, "workers");
    mg_json_array_begin(j);
    for (uint32_t i = 0; i < n; i++) {
        struct mg_slot s;
        mg_slot_snapshot(&d->seg.slots[i], &s);
        mg_json_object_begin(j);
        mg_json_kv_uint(j, "slot", i);
        json_pid(j, "pid", atomic_load(&s.pid));
        mg_json_kv_string(j, "state", mg_slot_state_name(atomic_load(&s.state)));
        mg_json_kv_uint(j, "spawns", atomic_load(&s.spawns));
        mg_json_kv_uint(j, "connections", atomic_load(&s.connections));
        mg_json_kv_uint(j, "db_connections", atomic_load(&s.db_connections));
        mg_json_kv_uint(j, "requests", atomic_load(&s.requests));
        mg_json_kv_uint(j, "requests_all", atomic_load(&s.requests_all));
        json_age(j, d, "age_ms", atomic_load(&s.started_monotonic_ns));
        json_age(j, d, "heartbeat_age_ms", atomic_load(&s.heartbeat_monotonic_ns));
        mg_json_key(j, "request");
        int64_t since = atomic_load(&s.request_started_monotonic_ns);
        if (since != 0) {
            mg_json_object_begin(j);
            json_bounded(j, "method", s.method, sizeof s.method);
            json_bounded(j, "path", s.path, sizeof s.path);
            json_age(j, d, "running_ms", since);
            mg_json_object_end(j);
        } else {
            mg_json_null(j);
        }
        int32_t last = atomic_load(&s.last_exit);
        if (last == -1) {
            mg_json_kv_null(j, "last_exit");
        } else {
            char text[32];
            mg_shmdump_describe_exit(last, text, sizeof text);
            mg_json_kv_string(j, "last_exit", text);
        }
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
}

static void json_records(struct mg_json *j, const struct mg_shmdump *d, const char *name,
                         const struct mg_fifo_gate *gate, enum mg_fifo_records which)
{
    struct mg_fifo_record r[MG_FIFO_WAITERS_MAX];
    /* the dump's own copy: never locked */
    unsigned n = mg_fifo_gate_records(gate, 0, false, which, r, MG_FIFO_WAITERS_MAX);
    mg_json_key(j, name);
    mg_json_array_begin(j);
    for (unsigned i = 0; i < n; i++) {
        mg_json_object_begin(j);
        mg_json_kv_uint(j, "worker", r[i].slot);
        mg_json_kv_int(j, "pid", r[i].pid);
        json_bounded(j, "key", r[i].key, sizeof r[i].key);
        json_age(j, d, "age_ms", r[i].since_monotonic_ns);
        if (which != MG_FIFO_FOLLOWERS) {
            char owner[48];
            record_owner(&r[i], owner, sizeof owner);
            mg_json_kv_uint(j, "round", r[i].round);
            if (strcmp(owner, "none") == 0)
                mg_json_kv_null(j, "owner");
            else
                mg_json_kv_string(j, "owner", owner);
            mg_json_kv_bool(j, "ready", !r[i].unready);
        }
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
}

/* A FIFO gate's fields, the same for the cold gate and the anonymous line; admitted_key
 * names the permits given. Followers are the cold gate's only. */
static void json_fifo(struct mg_json *j, const struct mg_shmdump *d,
                      const struct mg_fifo_gate *gate, const char *admitted_key, bool followers)
{
    struct mg_fifo_snapshot g;
    mg_fifo_gate_read(gate, 0, false, &g); /* the dump's own copy: never locked */
    mg_json_kv_uint(j, "cap", g.cap);
    mg_json_kv_uint(j, "in_flight", g.in_flight);
    mg_json_kv_uint(j, "waiting", g.waiting);
    mg_json_kv_uint(j, "queue_max", g.queue_max);
    json_ms(j, "wait_ms", ns_to_ms(g.wait_ns));
    mg_json_kv_uint(j, "peak", g.peak);
    mg_json_kv_uint(j, "round", g.round);
    json_records(j, d, "holders", gate, MG_FIFO_HOLDERS);
    json_records(j, d, "waiters", gate, MG_FIFO_WAITERS);
    if (followers)
        json_records(j, d, "followers", gate, MG_FIFO_FOLLOWERS);
#define JSON_COUNTER(field, json, what)                                                            \
    mg_json_kv_uint(j, strcmp(#field, "acquired") == 0 ? admitted_key : #field, g.field);
    MG_FIFO_COUNTER_LIST(JSON_COUNTER)
#undef JSON_COUNTER
}

/* Every entry that is not free, with its run of pages. */
static void json_cache_table(struct mg_json *j, const struct mg_shmdump *d)
{
    const struct mg_cache_view *v = &d->seg.cache;
    mg_json_key(j, "table");
    mg_json_array_begin(j);
    for (uint32_t i = 0; i < v->cache->entries; i++) {
        const struct mg_cache_entry *e = &v->entry[i];
        if (e->state == MG_CACHE_FREE)
            continue;
        mg_json_object_begin(j);
        mg_json_kv_uint(j, "entry", i);
        mg_json_kv_string(j, "state", cache_state_name(e->state));
        json_bounded(j, "key", e->key, sizeof e->key);
        mg_json_kv_uint(j, "first_page", e->first_page);
        mg_json_kv_uint(j, "pages", e->page_count);
        mg_json_kv_uint(j, "bytes", e->body_len);
        json_pid(j, "builder_pid", e->state == MG_CACHE_BUILDING ? e->builder_pid : 0);
        json_age(j, d, "age_ms", e->since_monotonic_ns);
        if (e->state == MG_CACHE_READY) {
            json_age(j, d, "idle_ms", e->used_monotonic_ns);
            int64_t left;
            if (__builtin_sub_overflow(e->expires_monotonic_ns, d->taken_monotonic_ns, &left))
                mg_json_kv_null(j, "expires_in_ms");
            else
                json_ms(j, "expires_in_ms", ns_to_ms(left));
        } else {
            mg_json_kv_null(j, "idle_ms");
            mg_json_kv_null(j, "expires_in_ms");
        }
        mg_json_kv_uint(j, "pins", e->pins);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
}

static void json_cold(struct mg_json *j, const struct mg_shmdump *d)
{
    const struct mg_fifo_gate *g = d->seg.cold;
    struct mg_cache_snapshot c;
    mg_result_cache_read(&d->seg.cache, 0, false, d->taken_monotonic_ns, &c); /* never locked */
    mg_json_key(j, "reach_cold");
    mg_json_object_begin(j);
    json_fifo(j, d, g, "acquired", true);
    mg_json_key(j, "cache");
    mg_json_object_begin(j);
    mg_json_kv_uint(j, "entries", c.entries);
    mg_json_kv_uint(j, "ready", c.ready);
    mg_json_kv_uint(j, "building", c.building);
#define JSON_COUNTER(field, json, what) mg_json_kv_uint(j, #field, c.field);
    MG_CACHE_COUNTER_LIST(JSON_COUNTER)
#undef JSON_COUNTER
    mg_json_kv_uint(j, "pages", c.pages);
    mg_json_kv_uint(j, "pages_used", c.pages_used);
    mg_json_kv_uint(j, "max_body_bytes", mg_result_cache_max_body(d->seg.cache.cache));
    json_cache_table(j, d);
    mg_json_object_end(j);
    mg_json_object_end(j);
}

static void json_anon(struct mg_json *j, const struct mg_shmdump *d)
{
    const struct mg_fifo_gate *g = d->seg.anon;
    struct mg_client_snapshot t;
    mg_client_limit_read(&d->seg.clients, d->taken_monotonic_ns, &t);
    mg_json_key(j, "anon_line");
    mg_json_object_begin(j);
    json_fifo(j, d, g, "admitted", false);
    mg_json_kv_uint(j, "bypassed", mg_counter_get(&d->seg, MG_CTR_ANON_BYPASSED));
    mg_json_kv_uint(j, "unauthorized", mg_counter_get(&d->seg, MG_CTR_UNAUTHORIZED));
    mg_json_object_end(j);
    mg_json_key(j, "anon_rate");
    mg_json_object_begin(j);
    mg_json_kv_uint(j, "per_minute", t.per_minute);
    mg_json_kv_uint(j, "burst", t.burst);
    mg_json_kv_uint(j, "entries", t.entries);
    mg_json_kv_uint(j, "tracked", t.tracked);
    mg_json_kv_uint(j, "rate_limited", mg_counter_get(&d->seg, MG_CTR_ANON_RATE_LIMITED));
#define JSON_COUNTER(field, json, what) mg_json_kv_uint(j, #field, t.field);
    MG_CLIENT_COUNTER_LIST(JSON_COUNTER)
#undef JSON_COUNTER
    mg_json_object_end(j);
}

static void json_upstream(struct mg_json *j, const struct mg_shmdump *d)
{
    const struct mg_upstream_shm *u = d->seg.upstream;
    char address[sizeof d->seg.config->upstream];
    memcpy(address, d->seg.config->upstream, sizeof address);
    address[sizeof address - 1] = '\0';
    mg_json_key(j, "upstream");
    mg_json_object_begin(j);
    mg_json_kv_string(j, "address", address);
    json_fifo(j, d, &u->gate, "admitted", false);
    struct mg_upstream_snapshot s;
    mg_upstream_shm_read(u, d->taken_monotonic_ns, &s);
    mg_json_kv_string(j, "breaker", mg_breaker_state_name(s.breaker_state));
    mg_json_kv_uint(j, "breaker_failures_in_a_row", s.breaker_failures);
#define JSON_COUNTER(field, json, what) mg_json_kv_uint(j, "breaker_" #field, s.field);
    MG_BREAKER_COUNTER_LIST(JSON_COUNTER)
#undef JSON_COUNTER
    mg_json_kv_uint(j, "websockets", s.tunnels_open);
    mg_json_kv_uint(j, "websockets_cap", s.tunnel_cap);
    mg_json_kv_uint(j, "websockets_peak", s.tunnels_peak);
    mg_json_kv_uint(j, "anonymous_held", s.anon_held);
    mg_json_kv_uint(j, "anonymous_peak", s.anon_peak);
    mg_json_kv_uint(j, "anonymous_held_back", s.anon_held_back);
    mg_json_object_end(j);
}

static void json_live(struct mg_json *j, const struct mg_shmdump *d)
{
    struct mg_live_snapshot l;
    mg_live_ring_read(d->seg.live, &l);
    mg_json_key(j, "live");
    mg_json_object_begin(j);
    mg_json_kv_uint(j, "clients", l.clients_open);
    mg_json_kv_uint(j, "clients_cap", l.clients_cap);
    mg_json_kv_uint(j, "clients_peak", l.clients_peak);
    mg_json_kv_uint(j, "ring_fill", l.fill);
    mg_json_kv_uint(j, "ring_slots", l.slots);
    mg_json_kv_uint(j, "events", l.events);
    mg_json_kv_int(j, "watcher_pid", l.writer_pid);
    mg_json_kv_int(j, "high_water_observation", l.hw_obs);
    mg_json_object_end(j);
}

static void json_gates(struct mg_json *j, const struct mg_shmdump *d)
{
    struct mg_diag_snapshot g;
    mg_diag_gate_read(d->seg.diag, 0, false, d->taken_monotonic_ns, &g); /* never locked */
    mg_json_key(j, "gates");
    mg_json_object_begin(j);
    mg_json_key(j, "perf_mem");
    mg_json_object_begin(j);
    mg_json_kv_bool(j, "enabled", g.enabled);
    mg_json_kv_uint(j, "cap", 1);
    mg_json_kv_uint(j, "running", g.running);
    mg_json_kv_uint(j, "peak", g.peak);
    json_ms(j, "cooldown_ms", ns_to_ms(g.cooldown_ns));
    json_ms(j, "cooldown_remaining_ms", ns_to_ms(g.cooldown_remaining_ns));
    mg_json_key(j, "holder");
    if (g.holder_pid != 0) {
        mg_json_object_begin(j);
        mg_json_kv_uint(j, "worker", g.holder_slot);
        mg_json_kv_int(j, "pid", g.holder_pid);
        json_age(j, d, "age_ms", g.holder_since_monotonic_ns);
        mg_json_object_end(j);
    } else {
        mg_json_null(j);
    }
    json_ms(j, "last_walk_ms", ns_to_ms(g.last_walk_ns));
#define JSON_COUNTER(field, json, what) mg_json_kv_uint(j, #field, g.field);
    MG_DIAG_COUNTER_LIST(JSON_COUNTER)
#undef JSON_COUNTER
    mg_json_object_end(j);
    json_cold(j, d);
    json_anon(j, d);
    json_conn_cap(j, d);
    json_upstream(j, d);
    mg_json_object_end(j);
}

void mg_shmdump_render_json(const struct mg_shmdump *d, struct mg_buf *out)
{
    struct mg_json j;
    struct mg_config cfg;
    mg_json_init(&j, out);
    mg_json_object_begin(&j);
    json_segment(&j, d);

    mg_json_key(&j, "config");
    mg_json_object_begin(&j);
    config_copy(d->seg.config, &cfg);
    mg_config_describe(&cfg, json_config_line, &j);
    mg_json_object_end(&j);

    mg_json_key(&j, "counters");
    mg_json_object_begin(&j);
    for (int c = 0; c < MG_CTR_COUNT; c++)
        mg_json_kv_uint(&j, mg_counter_names[c], mg_counter_get(&d->seg, (enum mg_counter)c));
    mg_json_object_end(&j);

    json_routes(&j, d);
    json_slow(&j, d);
    json_values(&j, d);
    json_tables(&j, d);
    json_gates(&j, d);
    json_live(&j, d);
    json_workers(&j, d);
    mg_json_object_end(&j);
}
