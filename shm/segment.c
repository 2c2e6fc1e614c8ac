/* SPDX-License-Identifier: ISC */
#include "segment.h"
#include "version.h"

#include "client_limit.h"
#include "clock.h"
#include "conn_limit.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "live_ring.h"
#include "process.h"
#include "result_cache.h"
#include "scoreboard.h"
#include "shared_value.h"
#include "stats.h"
#include "upstream_gate.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    SEC_CONFIG,
    SEC_COUNTERS,
    SEC_ROUTES,
    SEC_SLOW,
    SEC_VALUES,
    SEC_DIAG,
    SEC_COLD,
    SEC_CACHE,
    SEC_CACHE_ENTRIES,
    SEC_CACHE_PAGES,
    SEC_SLOTS,
    SEC_ANON,
    SEC_CLIENTS,
    SEC_CLIENT_SETS,
    SEC_CONNS,
    SEC_CONN_SETS,
    SEC_CONN_HOLDS,
    SEC_UPSTREAM,
    SEC_LIVE,
    SEC_LIVE_SLOTS,
    SEC_COUNT
};

static const char *const section_names[SEC_COUNT] = {
    "config", "counters",     "routes",     "slow",     "values", "diag",     "cold",
    "cache",  "cacheentries", "cachepages", "slots",    "anon",   "clients",  "clientsets",
    "conns",  "connsets",     "connholds",  "upstream", "live",   "liveslots"};
static const size_t section_record_sizes[SEC_COUNT] = {
    sizeof(struct mg_config),       sizeof(struct mg_counters),
    sizeof(struct mg_route_stats),  sizeof(struct mg_slow_ring),
    sizeof(struct mg_shared_value), sizeof(struct mg_diag_gate),
    sizeof(struct mg_fifo_gate),    sizeof(struct mg_result_cache),
    sizeof(struct mg_cache_entry),  MG_CACHE_PAGE,
    sizeof(struct mg_slot),         sizeof(struct mg_fifo_gate),
    sizeof(struct mg_client_table), sizeof(struct mg_client_set),
    sizeof(struct mg_conn_table),   sizeof(struct mg_conn_set),
    sizeof(struct mg_conn_hold),    sizeof(struct mg_upstream_shm),
    sizeof(struct mg_live_ring),    sizeof(struct mg_live_slot)};

static size_t align_up(size_t n)
{
    return (n + 63) & ~(size_t)63; /* cache lines, so hot counters of two records never share */
}

static size_t layout(struct mg_shm_header *h, uint32_t slot_count, uint32_t route_count,
                     uint32_t cache_entries, uint32_t cache_pages, uint32_t client_sets,
                     uint32_t conn_sets, uint64_t conn_holds)
{
    const uint64_t counts[SEC_COUNT] = {1,
                                        1,
                                        route_count,
                                        1,
                                        MG_VALUE_COUNT,
                                        1,
                                        1,
                                        1,
                                        cache_entries,
                                        cache_pages,
                                        slot_count,
                                        1,
                                        1,
                                        client_sets,
                                        1,
                                        conn_sets,
                                        conn_holds,
                                        1,
                                        1,
                                        MG_LIVE_SLOTS};
    size_t off = align_up(sizeof *h);
    h->section_count = SEC_COUNT;
    for (int i = 0; i < SEC_COUNT; i++) {
        snprintf(h->sections[i].name, sizeof h->sections[i].name, "%s", section_names[i]);
        h->sections[i].offset = off;
        h->sections[i].record_size = section_record_sizes[i];
        h->sections[i].record_count = counts[i];
        off = align_up(off + section_record_sizes[i] * counts[i]);
    }
    return off;
}

static const char *file_type_name(mode_t mode)
{
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISLNK(mode)  ? "a symbolic link"
                            : "not a regular file";
}

int mg_segment_open_existing(const char *name, int flags, struct stat *st, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, for ever.
     * O_NOFOLLOW: a symbolic link under /dev/shm is not ours to follow. */
    int fd = shm_open(name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            snprintf(err, errlen,
                     "segment %s is a symbolic link, not a segment: remove /dev/shm%s if "
                     "nothing uses it, or set MESHGATE_SHM_NAME",
                     name, name);
        else
            snprintf(err, errlen, "segment %s: %s", name, strerror(e));
        errno = e;
        return -1;
    }
    if (fstat(fd, st) < 0) {
        int e = errno;
        snprintf(err, errlen, "segment %s: fstat: %s", name, strerror(e));
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen,
                 "segment %s is %s, not a shared-memory segment: remove /dev/shm%s if "
                 "nothing uses it, or set MESHGATE_SHM_NAME",
                 name, file_type_name(st->st_mode), name);
        close(fd);
        errno = EINVAL;
        return -1;
    }
    /* Reads and maps of a regular file never block; keep the descriptor ordinary. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

int mg_segment_validate(void *base, size_t size, struct mg_segment *seg, char *err, size_t errlen)
{
    struct mg_shm_header *h = base;
    if (size < sizeof *h || memcmp(h->magic, MG_SHM_MAGIC, sizeof h->magic) != 0) {
        snprintf(err, errlen, "not a meshgate segment (no \"%s\" magic)", MG_SHM_MAGIC);
        return -1;
    }
    if (h->layout_version != MG_SHM_LAYOUT_VERSION) {
        snprintf(err, errlen, "segment layout version %u, this build understands %u",
                 h->layout_version, MG_SHM_LAYOUT_VERSION);
        return -1;
    }
    if (h->header_size != sizeof *h || h->total_size > size || h->section_count != SEC_COUNT) {
        snprintf(err, errlen,
                 "segment header does not match this build (header %u bytes, expected %zu; "
                 "total %llu of %zu mapped; %u sections, expected %d)",
                 h->header_size, sizeof *h, (unsigned long long)h->total_size, size,
                 h->section_count, SEC_COUNT);
        return -1;
    }
    void *ptr[SEC_COUNT];
    for (int i = 0; i < SEC_COUNT; i++) {
        const struct mg_shm_section *s = &h->sections[i];
        if (strncmp(s->name, section_names[i], sizeof s->name) != 0 ||
            s->record_size != section_record_sizes[i]) {
            snprintf(err, errlen,
                     "segment section %d is \"%.16s\" of %llu-byte records, expected "
                     "\"%s\" of %zu",
                     i, s->name, (unsigned long long)s->record_size, section_names[i],
                     section_record_sizes[i]);
            return -1;
        }
        /* Written so that nothing can wrap: record_size is this build's, count <= 2^20. */
        if (s->offset % 8 || s->offset < sizeof *h || s->record_count > (1u << 20) ||
            s->offset > h->total_size ||
            s->record_size * s->record_count > h->total_size - s->offset) {
            snprintf(err, errlen, "segment section \"%s\" lies outside the segment",
                     section_names[i]);
            return -1;
        }
        if ((i == SEC_CONFIG || i == SEC_COUNTERS || i == SEC_SLOW || i == SEC_DIAG ||
             i == SEC_COLD || i == SEC_CACHE || i == SEC_ANON || i == SEC_CLIENTS ||
             i == SEC_CONNS) &&
            s->record_count != 1) {
            snprintf(err, errlen, "segment section \"%s\" holds %llu records, expected 1",
                     section_names[i], (unsigned long long)s->record_count);
            return -1;
        }
        ptr[i] = (char *)base + s->offset;
    }
    if (h->sections[SEC_ROUTES].record_count > MG_ROUTES_MAX ||
        h->sections[SEC_SLOTS].record_count > MG_WORKERS_MAX) {
        snprintf(err, errlen, "segment has more routes or slots than this build allows");
        return -1;
    }
    seg->base = base;
    seg->size = size;
    seg->header = h;
    seg->config = ptr[SEC_CONFIG];
    seg->counters = ptr[SEC_COUNTERS];
    seg->routes = ptr[SEC_ROUTES];
    seg->route_count = (uint32_t)h->sections[SEC_ROUTES].record_count;
    seg->slow = ptr[SEC_SLOW];
    seg->values = ptr[SEC_VALUES];
    if (h->sections[SEC_VALUES].record_count != MG_VALUE_COUNT) {
        snprintf(err, errlen, "segment has %llu shared values, this build expects %d",
                 (unsigned long long)h->sections[SEC_VALUES].record_count, MG_VALUE_COUNT);
        return -1;
    }
    seg->diag = ptr[SEC_DIAG];
    seg->cold = ptr[SEC_COLD];
    seg->cache.cache = ptr[SEC_CACHE];
    seg->cache.entry = ptr[SEC_CACHE_ENTRIES];
    seg->cache.pages = ptr[SEC_CACHE_PAGES];
    /* The cache's own counts must agree with its tables, or a reader would run past them. */
    if (seg->cache.cache->entries != h->sections[SEC_CACHE_ENTRIES].record_count ||
        seg->cache.cache->pages != h->sections[SEC_CACHE_PAGES].record_count) {
        snprintf(err, errlen,
                 "segment cache says %u entries and %u pages, its tables hold %llu "
                 "entries and %llu pages",
                 seg->cache.cache->entries, seg->cache.cache->pages,
                 (unsigned long long)h->sections[SEC_CACHE_ENTRIES].record_count,
                 (unsigned long long)h->sections[SEC_CACHE_PAGES].record_count);
        return -1;
    }
    seg->slots = ptr[SEC_SLOTS];
    seg->slot_count = (uint32_t)h->sections[SEC_SLOTS].record_count;
    seg->anon = ptr[SEC_ANON];
    seg->clients.table = ptr[SEC_CLIENTS];
    seg->clients.sets = ptr[SEC_CLIENT_SETS];
    if (seg->clients.table->sets != h->sections[SEC_CLIENT_SETS].record_count) {
        snprintf(err, errlen, "segment rate table says %u sets, its section holds %llu",
                 seg->clients.table->sets,
                 (unsigned long long)h->sections[SEC_CLIENT_SETS].record_count);
        return -1;
    }
    seg->upstream = ptr[SEC_UPSTREAM];
    seg->live = ptr[SEC_LIVE];
    seg->live_slots = ptr[SEC_LIVE_SLOTS];
    if (h->sections[SEC_LIVE_SLOTS].record_count != MG_LIVE_SLOTS) {
        snprintf(err, errlen, "segment live ring has %llu slots, this build expects %u",
                 (unsigned long long)h->sections[SEC_LIVE_SLOTS].record_count, MG_LIVE_SLOTS);
        return -1;
    }
    seg->conns.table = ptr[SEC_CONNS];
    seg->conns.sets = ptr[SEC_CONN_SETS];
    seg->conns.holds = ptr[SEC_CONN_HOLDS];
    if (seg->conns.table->sets != h->sections[SEC_CONN_SETS].record_count ||
        (uint64_t)seg->conns.table->slots * seg->conns.table->holds_per_slot !=
            h->sections[SEC_CONN_HOLDS].record_count) {
        snprintf(err, errlen,
                 "segment connection table says %u sets and %u x %u holds, its sections hold "
                 "%llu and %llu",
                 seg->conns.table->sets, seg->conns.table->slots, seg->conns.table->holds_per_slot,
                 (unsigned long long)h->sections[SEC_CONN_SETS].record_count,
                 (unsigned long long)h->sections[SEC_CONN_HOLDS].record_count);
        return -1;
    }
    memcpy(seg->header_fixed, h, sizeof seg->header_fixed);
    seg->cache_entries = seg->cache.cache->entries;
    seg->cache_pages = seg->cache.cache->pages;
    seg->client_sets = seg->clients.table->sets;
    seg->conn_sets = seg->conns.table->sets;
    seg->conn_slots = seg->conns.table->slots;
    seg->conn_holds_per_slot = seg->conns.table->holds_per_slot;
    return 0;
}

int mg_segment_check_shape(const struct mg_segment *seg, char *err, size_t errlen)
{
    const char *what = NULL;
    if (memcmp(seg->header, seg->header_fixed, sizeof seg->header_fixed) != 0)
        what = "its header (magic, layout, section table)";
    else if (seg->cache.cache->entries != seg->cache_entries ||
             seg->cache.cache->pages != seg->cache_pages)
        what = "the result cache's size";
    else if (seg->clients.table->sets != seg->client_sets)
        what = "the rate table's size";
    else if (seg->conns.table->sets != seg->conn_sets ||
             seg->conns.table->slots != seg->conn_slots ||
             seg->conns.table->holds_per_slot != seg->conn_holds_per_slot)
        what = "the connection table's size";
    if (!what)
        return 0;
    snprintf(err, errlen,
             "segment %s was written over by another process (%s changed): the group's shared "
             "state cannot be trusted",
             seg->name, what);
    return -1;
}

static int map_fd(int fd, bool read_only, void **base, size_t *size, char *err, size_t errlen,
                  const char *name)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        snprintf(err, errlen, "segment %s: fstat: %s", name, strerror(errno));
        return -1;
    }
    if (st.st_size < (off_t)sizeof(struct mg_shm_header)) {
        snprintf(err, errlen, "segment %s: %lld bytes, too small to be a meshgate segment", name,
                 (long long)st.st_size);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, read_only ? PROT_READ : PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "segment %s: mmap: %s", name, strerror(errno));
        return -1;
    }
    *base = p;
    *size = (size_t)st.st_size;
    return 0;
}

int mg_segment_attach(struct mg_segment *seg, const char *name, bool read_only, char *err,
                      size_t errlen)
{
    memset(seg, 0, sizeof *seg);
    char found[MG_SHM_NAME_MAX];
    name = mg_segment_resolve_name(name, found);
    struct stat st;
    int fd = mg_segment_open_existing(name, read_only ? O_RDONLY : O_RDWR, &st, err, errlen);
    if (fd < 0) {
        if (errno == ENOENT)
            snprintf(err, errlen,
                     "no segment %s: is meshgate running with this "
                     "MESHGATE_LISTEN or MESHGATE_SHM_NAME?",
                     name);
        return -1;
    }
    void *base;
    size_t size;
    int rc = map_fd(fd, read_only, &base, &size, err, errlen, name);
    close(fd);
    if (rc < 0)
        return -1;
    char why[256];
    if (mg_segment_validate(base, size, seg, why, sizeof why) < 0) {
        snprintf(err, errlen, "segment %s: %s", name, why);
        munmap(base, size);
        return -1;
    }
    seg->read_only = read_only;
    snprintf(seg->name, sizeof seg->name, "%s", name);
    return 0;
}

/* The owner of the object at name, when it is another user's (lstat: whatever it is, even
 * one we may not open); false when it is ours or gone. */
static bool other_users(const char *name, char *owner, size_t cap)
{
    char path[MG_SHM_NAME_MAX + 16];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    struct stat st;
    if (lstat(path, &st) < 0 || st.st_uid == geteuid())
        return false;
    struct passwd *pw = getpwuid(st.st_uid);
    snprintf(owner, cap, "user %s (uid %u)", pw ? pw->pw_name : "?", (unsigned)st.st_uid);
    return true;
}

/* An existing name: replace it when it is a stale segment of ours, refuse otherwise;
 * 3 (with the owner in err) when another user holds the name. */
static int handle_existing(const char *name, char *err, size_t errlen)
{
    struct stat st;
    char why_open[400];
    /* We create it 0600 as ourselves: another user's object is never one of ours. */
    if (other_users(name, err, errlen))
        return 3;
    int fd = mg_segment_open_existing(name, O_RDONLY, &st, why_open, sizeof why_open);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0; /* gone meanwhile */
        if (errno == EINVAL || errno == ELOOP)
            snprintf(err, errlen, "%s", why_open);
        else
            snprintf(err, errlen,
                     "segment %s exists and cannot be opened (%s); remove it with "
                     "`rm /dev/shm%s` if no meshgate uses it, or set MESHGATE_SHM_NAME",
                     name, strerror(errno), name);
        return -1;
    }
    /* Empty and ours: a start that died between creating and sizing it, or a segment
     * truncated under its server (which stops when it notices). Nothing to judge it by, and
     * nothing in it to lose. */
    if (st.st_size == 0 && st.st_uid == geteuid()) {
        close(fd);
        if (shm_unlink(name) < 0 && errno != ENOENT) {
            snprintf(err, errlen, "segment %s is empty but cannot be removed: %s", name,
                     strerror(errno));
            return -1;
        }
        return 2;
    }
    void *base;
    size_t size;
    char why[256];
    int rc = map_fd(fd, true, &base, &size, why, sizeof why, name);
    close(fd);
    if (rc < 0) {
        snprintf(err, errlen,
                 "segment %s exists but is not a meshgate segment (%s); choose "
                 "another MESHGATE_SHM_NAME or remove /dev/shm%s if nothing uses it",
                 name, why, name);
        return -1;
    }
    struct mg_shm_header *h = base;
    if (memcmp(h->magic, MG_SHM_MAGIC, sizeof h->magic) != 0) {
        munmap(base, size);
        snprintf(err, errlen,
                 "segment %s exists but is not a meshgate segment; choose another "
                 "MESHGATE_SHM_NAME or remove /dev/shm%s if nothing uses it",
                 name, name);
        return -1;
    }
    /* Magic is ours: pid and start time sit at the same place in every layout version. */
    int pid = atomic_load(&h->master_pid);
    uint64_t ticks = atomic_load(&h->master_start_ticks);
    munmap(base, size);
    if (mg_process_is_meshgate(pid, ticks)) {
        snprintf(err, errlen,
                 "another meshgate (master pid %d) is running on segment %s; stop "
                 "it first, or give this instance its own MESHGATE_SHM_NAME or MESHGATE_LISTEN",
                 pid, name);
        return -1;
    }
    if (shm_unlink(name) < 0 && errno != ENOENT) {
        snprintf(err, errlen,
                 "segment %s was left by a dead meshgate (pid %d) but cannot be "
                 "removed: %s",
                 name, pid, strerror(errno));
        return -1;
    }
    return 1;
}

/* The prefix of the names that stand in for name when another user holds it. */
static void fallback_prefix(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%.170s-u%u-", name, (unsigned)geteuid());
}

/*
 * Our segments that stand in for name (fallback_prefix), as /dev/shm lists them: fn is called
 * with each name until it returns true; returns whether one did.
 */
static bool each_fallback(const char *name, bool (*fn)(const char *, void *), void *arg)
{
    char prefix[MG_SHM_NAME_MAX];
    fallback_prefix(name, prefix, sizeof prefix);
    size_t n = strlen(prefix) - 1; /* without the leading '/' */
    DIR *d = opendir("/dev/shm");
    bool found = false;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        char candidate[MG_SHM_NAME_MAX];
        if (strncmp(e->d_name, prefix + 1, n) != 0 ||
            snprintf(candidate, sizeof candidate, "/%s", e->d_name) >= (int)sizeof candidate)
            continue;
        char owner[96];
        if (!other_users(candidate, owner, sizeof owner))
            found = fn(candidate, arg);
    }
    if (d)
        closedir(d);
    return found;
}

struct sweep {
    char *err;
    size_t errlen;
    bool refused;
};

/* A stand-in left by a dead instance is removed; a live one refuses the start. */
static bool sweep_fallback(const char *candidate, void *arg)
{
    struct sweep *s = arg;
    s->refused = handle_existing(candidate, s->err, s->errlen) < 0;
    return s->refused;
}

static bool live_fallback(const char *candidate, void *arg)
{
    struct stat st;
    char why[400];
    int fd = mg_segment_open_existing(candidate, O_RDONLY, &st, why, sizeof why);
    if (fd < 0)
        return false;
    struct mg_shm_header h;
    bool live =
        pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
        memcmp(h.magic, MG_SHM_MAGIC, sizeof h.magic) == 0 &&
        mg_process_is_meshgate(atomic_load(&h.master_pid), atomic_load(&h.master_start_ticks));
    close(fd);
    if (live)
        snprintf(arg, MG_SHM_NAME_MAX, "%s", candidate);
    return live;
}

const char *mg_segment_resolve_name(const char *name, char *out)
{
    char owner[96], path[MG_SHM_NAME_MAX + 16];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", name);
    bool missing = lstat(path, &st) < 0;
    if ((missing || other_users(name, owner, sizeof owner)) &&
        each_fallback(name, live_fallback, out))
        return out;
    return name;
}

int mg_segment_create(struct mg_segment *seg, const char *name, const struct mg_config *cfg,
                      uint32_t slot_count, const char *const *route_names, uint32_t route_count,
                      char *err, size_t errlen)
{
    memset(seg, 0, sizeof *seg);
    if (slot_count == 0 || slot_count > MG_WORKERS_MAX || route_count > MG_ROUTES_MAX) {
        snprintf(err, errlen, "segment %s: %u slots and %u routes is outside the layout's limits",
                 name, slot_count, route_count);
        return -1;
    }
    struct mg_shm_header proto;
    memset(&proto, 0, sizeof proto);
    uint32_t entries = cfg->reach_cache_entries > 0 ? (uint32_t)cfg->reach_cache_entries : 1;
    /* One pool of pages for all entries' bodies (shm/result_cache.h). */
    uint32_t cache_pages = (uint32_t)cfg->reach_cache_bytes / MG_CACHE_PAGE;
    if (cache_pages == 0)
        cache_pages = 1;
    uint32_t client_sets = mg_client_limit_sets_for((uint32_t)cfg->anon_clients);
    /* The connection table: twice the entries of the connections the group can hold, and a
     * hold record for each connection a worker can hold, its tarpit's too (none when there is
     * no cap). */
    uint32_t holds_per_slot =
        mg_conn_limit_holds_for(slot_count, (uint32_t)cfg->max_conns_per_worker,
                                (uint32_t)cfg->shed_tarpit, cfg->max_conns_per_client > 0);
    uint32_t conn_sets = mg_conn_limit_sets_for((uint64_t)slot_count * holds_per_slot);
    size_t total = layout(&proto, slot_count, route_count, entries, cache_pages, client_sets,
                          conn_sets, (uint64_t)slot_count * holds_per_slot);

    int fd = -1;
    char stand_in[MG_SHM_NAME_MAX];
    for (int attempt = 0; attempt < 4 && fd < 0; attempt++) {
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0)
            break;
        if (errno != EEXIST) {
            snprintf(err, errlen, "cannot create segment %s: %s", name, strerror(errno));
            return -1;
        }
        char owner[96];
        int rc = handle_existing(name, err, errlen);
        if (rc == 3) {
            snprintf(owner, sizeof owner, "%s", err);
            if (seg->squatted) {
                snprintf(err, errlen, "segment %s was created by %s as well", name, owner);
                return -1;
            }
            /* Another user made the name first (anyone may create under /dev/shm): it is
             * theirs, not ours to judge or remove. A name no one can guess instead, after the
             * stand-ins our dead instances left; readers find it (mg_segment_resolve_name). */
            struct sweep sweep = {err, errlen, false};
            if (each_fallback(name, sweep_fallback, &sweep))
                return -1;
            uint32_t r[2] = {0, 0};
            if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
                r[0] = (uint32_t)mg_monotonic_ns() ^ (uint32_t)getpid();
            char prefix[MG_SHM_NAME_MAX];
            fallback_prefix(name, prefix, sizeof prefix);
            snprintf(stand_in, sizeof stand_in, "%.150s%08x%08x", prefix, r[0], r[1]);
            snprintf(seg->squat_note, sizeof seg->squat_note,
                     "segment %s was created by %s, not by this server's user: someone may be "
                     "squatting the name; using %s instead (meshgate-shm finds it)",
                     name, owner, stand_in);
            seg->squatted = true;
            name = stand_in;
            continue;
        }
        if (rc < 0)
            return -1;
        if (rc == 1)
            seg->replaced_stale = true;
        else if (rc == 2)
            seg->removed_empty = true;
    }
    if (fd < 0) {
        snprintf(err, errlen, "cannot create segment %s: it keeps reappearing", name);
        return -1;
    }
    if (ftruncate(fd, (off_t)total) < 0) {
        snprintf(err, errlen, "segment %s: cannot size it to %zu bytes: %s", name, total,
                 strerror(errno));
        close(fd);
        shm_unlink(name);
        return -1;
    }
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        snprintf(err, errlen, "segment %s: mmap: %s", name, strerror(errno));
        close(fd);
        shm_unlink(name);
        return -1;
    }
    /* ftruncate zero-fills; every counter starts at 0. Magic goes last so that a reader
     * never sees a header that claims to be ours before its fields are in place. */
    struct mg_shm_header *h = base;
    memcpy(h, &proto, sizeof proto);
    memset(h->magic, 0, sizeof h->magic);
    h->layout_version = MG_SHM_LAYOUT_VERSION;
    h->header_size = sizeof *h;
    h->total_size = total;
    h->created_realtime_ns = mg_realtime_ns();
    h->created_monotonic_ns = mg_monotonic_ns();
    atomic_store(&h->master_pid, (int32_t)getpid());
    atomic_store(&h->master_start_ticks, mg_process_start_ticks(getpid()));
    atomic_store(&h->server_state, MG_SERVER_STARTING);
    atomic_store(&h->state_changed_realtime_ns, h->created_realtime_ns);
    snprintf(h->version, sizeof h->version, "%s", MESHGATE_VERSION);

    /* The cache's header, which validation checks against its tables. */
    struct mg_result_cache *cache =
        (struct mg_result_cache *)((char *)base + proto.sections[SEC_CACHE].offset);
    cache->entries = entries;
    cache->pages = cache_pages;
    struct mg_client_table *clients =
        (struct mg_client_table *)((char *)base + proto.sections[SEC_CLIENTS].offset);
    clients->sets = client_sets;
    struct mg_conn_table *conns =
        (struct mg_conn_table *)((char *)base + proto.sections[SEC_CONNS].offset);
    conns->sets = conn_sets;
    conns->slots = slot_count;
    conns->holds_per_slot = holds_per_slot;
    char why[256];
    memcpy(h->magic, MG_SHM_MAGIC, sizeof h->magic); /* validate wants it; fenced below */
    if (mg_segment_validate(base, total, seg, why, sizeof why) < 0) {
        snprintf(err, errlen, "segment %s: %s", name, why);
        munmap(base, total);
        close(fd);
        shm_unlink(name);
        return -1;
    }
    seg->fd = fd;
    seg->fd_open = true;
    memset(h->magic, 0, sizeof h->magic);
    memcpy(seg->config, cfg, sizeof *cfg);
    if (seg->squatted) /* the name the server runs under, for /server-status */
        snprintf(seg->config->shm_name, sizeof seg->config->shm_name, "%s", name);
    for (uint32_t i = 0; i < route_count; i++)
        snprintf(seg->routes[i].name, sizeof seg->routes[i].name, "%s", route_names[i]);
    for (uint32_t i = 0; i < slot_count; i++)
        atomic_store(&seg->slots[i].last_exit, -1);
    mg_diag_gate_init(seg->diag, (int64_t)cfg->perf_mem_cooldown_ms * MG_NS_PER_MS,
                      cfg->perf_mem_gate);
    mg_fifo_gate_init(seg->cold, (uint32_t)cfg->reach_cold_max,
                      cfg->reach_cold_queue > 0 ? (uint32_t)cfg->reach_cold_queue : 0,
                      (int64_t)cfg->reach_cold_wait_ms * MG_NS_PER_MS);
    mg_result_cache_init(&seg->cache, entries, cache_pages,
                         (int64_t)cfg->reach_cache_ttl_ms * MG_NS_PER_MS);
    mg_fifo_gate_init(seg->anon, (uint32_t)cfg->anon_concurrency, (uint32_t)cfg->anon_queue,
                      (int64_t)cfg->anon_wait_ms * MG_NS_PER_MS);
    mg_client_limit_init(&seg->clients, client_sets, (uint32_t)cfg->anon_rate,
                         (uint32_t)cfg->anon_burst);
    mg_conn_limit_init(&seg->conns, conn_sets, slot_count, holds_per_slot,
                       (uint32_t)cfg->max_conns_per_client);
    mg_upstream_shm_init(seg->upstream, cfg);
    mg_live_ring_init(seg->live, seg->live_slots, mg_live_clients_cap(cfg));
    atomic_thread_fence(memory_order_release);
    memcpy(h->magic, MG_SHM_MAGIC, sizeof h->magic);
    seg->read_only = false;
    snprintf(seg->name, sizeof seg->name, "%s", name);
    return 0;
}

void mg_segment_detach(struct mg_segment *seg)
{
    if (seg->base)
        munmap(seg->base, seg->size);
    if (seg->fd_open)
        close(seg->fd);
    memset(seg, 0, sizeof *seg);
}

int mg_segment_check_size(const struct mg_segment *seg, char *err, size_t errlen)
{
    struct stat st;
    if (!seg->fd_open || fstat(seg->fd, &st) < 0 || (uint64_t)st.st_size >= seg->size)
        return 0;
    snprintf(err, errlen,
             "segment %s was truncated from %zu to %lld bytes by another process: the "
             "group's shared state is lost and touching it raises SIGBUS",
             seg->name, seg->size, (long long)st.st_size);
    return -1;
}

int mg_segment_unlink(const char *name)
{
    return shm_unlink(name);
}

void mg_segment_set_state(struct mg_segment *seg, enum mg_server_state state)
{
    atomic_store(&seg->header->server_state, (uint32_t)state);
    atomic_store(&seg->header->state_changed_realtime_ns, mg_realtime_ns());
}

const char *mg_server_state_name(uint32_t state)
{
    static const char *names[] = {"starting", "running", "reloading", "draining", "stopped"};
    return state < sizeof names / sizeof names[0] ? names[state] : "unknown";
}

bool mg_segment_replica_lag_ms(const struct mg_segment *seg, int64_t now_realtime_ns,
                               int64_t *lag_ms)
{
    int64_t copy_ns = atomic_load(&seg->header->replica_copy_realtime_ns);
    if (copy_ns <= 0)
        return false;
    *lag_ms = now_realtime_ns > copy_ns ? (now_realtime_ns - copy_ns) / MG_NS_PER_MS : 0;
    return true;
}
