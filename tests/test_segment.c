/* SPDX-License-Identifier: ISC */
/*
 * Tests for the shared segment (shm/segment.c) and what lives in it: counters, route
 * histograms and the slow ring (stats.c), the scoreboard (scoreboard.c), shared values
 * (shared_value.c) and what the master gives back for a dead worker (reclaim.c).
 *
 * Every segment gets its own name, /mgtest-seg-<pid>-<n>, and every name a test made is
 * unlinked when the test ends, pass or fail. Tests that need several processes fork; a child
 * never asserts (criterion's asserts belong to the test process): it reports through its
 * exit status or a pipe and ends with _exit.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include "clock.h"
#include "config.h"
#include "group_value.h"
#include "process.h"
#include "reclaim.h"
#include "scoreboard.h"
#include "segment.h"
#include "shared_value.h"
#include "stats.h"
#include "wake.h"

#include <fcntl.h>
#include <sched.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- names, cleanup and helpers -------------------------------------------------------- */

#define NAMES_MAX 16

static char names[NAMES_MAX][64];
static int name_count;
static void *private_copy;

static const char *new_name(void)
{
    cr_assert_lt(name_count, NAMES_MAX, "too many segment names in one test");
    snprintf(names[name_count], sizeof names[name_count], "/mgtest-seg-%d-%d", (int)getpid(),
             name_count);
    shm_unlink(names[name_count]); /* a leftover of a crashed earlier run with this pid */
    return names[name_count++];
}

static void cleanup(void)
{
    for (int i = 0; i < name_count; i++)
        shm_unlink(names[i]);
    name_count = 0;
    free(private_copy);
    private_copy = NULL;
}

static bool shm_exists(const char *name)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", name);
    return stat(path, &st) == 0;
}

static const char *const route_names[] = {
    "/api/nodes",
    "/api/packets",
    "/api/healthz",
    "/api/a-route-template-name-that-is-longer-than-the-field-holds/{id}",
};
#define ROUTE_COUNT 4u
#define SLOT_COUNT 3u

static struct mg_config test_config(void)
{
    struct mg_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.listen_host, sizeof c.listen_host, "127.0.0.1");
    c.listen_port = 18080;
    c.backlog = 77;
    snprintf(c.db_path, sizeof c.db_path, "/var/lib/corescope/meshcore.db");
    c.workers = (int32_t)SLOT_COUNT;
    c.max_header_bytes = 8192;
    c.max_uri_bytes = 4096;
    c.access_log = true;
    return c;
}

static char err[1024];

static void create_segment(struct mg_segment *seg, const char *name)
{
    struct mg_config c = test_config();
    int rc =
        mg_segment_create(seg, name, &c, SLOT_COUNT, route_names, ROUTE_COUNT, err, sizeof err);
    cr_assert_eq(rc, 0, "cannot create %s: %s", name, err);
}

/* A pid that certainly ran and is certainly gone: a child that exited and was reaped. */
static int dead_pid(void)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork");
    if (pid == 0)
        _exit(0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    return (int)pid;
}

static void wait_child_ok(pid_t pid)
{
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d ended with wait status %d",
              (int)pid, status);
}

static const struct mg_shm_section *section(const struct mg_shm_header *h, const char *name)
{
    for (uint32_t i = 0; i < h->section_count && i < MG_SHM_SECTIONS_MAX; i++)
        if (strncmp(h->sections[i].name, name, sizeof h->sections[i].name) == 0)
            return &h->sections[i];
    cr_assert_fail("no section \"%s\"", name);
    return NULL;
}

/* True when the decimal number n stands in text on its own (not inside a longer number). */
static bool mentions_number(const char *text, unsigned long long n)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%llu", n);
    size_t len = strlen(digits);
    for (const char *p = strstr(text, digits); p; p = strstr(p + 1, digits)) {
        bool before = p > text && p[-1] >= '0' && p[-1] <= '9';
        bool after = p[len] >= '0' && p[len] <= '9';
        if (!before && !after)
            return true;
    }
    return false;
}

/* ---- create and attach ----------------------------------------------------------------- */

TestSuite(segment, .fini = cleanup, .timeout = 10);

Test(segment, create_lays_out_a_header_this_build_understands)
{
    const char *name = new_name();
    struct mg_segment seg;
    create_segment(&seg, name);
    const struct mg_shm_header *h = seg.header;
    cr_assert(memcmp(h->magic, MG_SHM_MAGIC, sizeof h->magic) == 0);
    cr_assert_eq(h->layout_version, MG_SHM_LAYOUT_VERSION);
    cr_assert_eq(h->header_size, sizeof *h);
    cr_assert_eq(h->total_size, seg.size);
    cr_assert_eq(seg.slot_count, SLOT_COUNT);
    cr_assert_eq(seg.route_count, ROUTE_COUNT);
    cr_assert_eq(atomic_load(&h->master_pid), getpid());
    cr_assert_eq(atomic_load(&h->master_start_ticks), mg_process_start_ticks(getpid()));
    cr_assert_neq(atomic_load(&h->master_start_ticks), 0);
    cr_assert_eq(atomic_load(&h->server_state), MG_SERVER_STARTING);
    cr_assert_str_eq(seg.name, name);
    cr_assert_not(seg.read_only);
    cr_assert_gt(h->created_realtime_ns, 0);
    cr_assert_leq(h->created_monotonic_ns, mg_monotonic_ns());
    cr_assert_neq(h->version[0], '\0', "no version string");
    cr_assert(memchr(h->version, '\0', sizeof h->version), "version is not terminated");
    for (uint32_t i = 0; i < h->section_count; i++) {
        const struct mg_shm_section *s = &h->sections[i];
        cr_assert_eq(s->offset % 64, 0, "section %s is not cache-line aligned", s->name);
        cr_assert_geq(s->offset, sizeof *h, "section %s overlaps the header", s->name);
        cr_assert_leq(s->offset + s->record_size * s->record_count, h->total_size);
        if (i > 0) {
            const struct mg_shm_section *prev = &h->sections[i - 1];
            cr_assert_geq(s->offset, prev->offset + prev->record_size * prev->record_count,
                          "section %s overlaps %s", s->name, prev->name);
        }
    }
    mg_segment_detach(&seg);
}

Test(segment, created_segment_is_readable_and_writable_by_its_owner_only)
{
    const char *name = new_name();
    struct mg_segment seg;
    create_segment(&seg, name);
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", name);
    cr_assert_eq(stat(path, &st), 0, "%s: %m", path);
    cr_assert_eq(st.st_mode & 07777, 0600, "mode %o", (unsigned)(st.st_mode & 07777));
    cr_assert_eq(st.st_uid, getuid());
    cr_assert_eq((uint64_t)st.st_size, seg.header->total_size);
    mg_segment_detach(&seg);
}

Test(segment, create_starts_every_counter_at_zero_and_every_slot_empty)
{
    const char *name = new_name();
    struct mg_segment seg;
    create_segment(&seg, name);
    for (int c = 0; c < MG_CTR_COUNT; c++)
        cr_assert_eq(mg_counter_get(&seg, (enum mg_counter)c), 0, "%s", mg_counter_names[c]);
    for (unsigned i = 0; i < seg.slot_count; i++) {
        cr_assert_eq(atomic_load(&seg.slots[i].state), MG_SLOT_EMPTY);
        cr_assert_eq(atomic_load(&seg.slots[i].last_exit), -1, "slot %u has a last exit", i);
        cr_assert_eq(atomic_load(&seg.slots[i].pid), 0);
    }
    for (int v = 0; v < MG_VALUE_COUNT; v++) {
        cr_assert_eq(atomic_load(&seg.values[v].lease_pid), 0);
        char buf[16];
        cr_assert_eq(mg_shared_value_read(&seg.values[v], buf, sizeof buf, 0, NULL), -1);
    }
    cr_assert_eq(mg_scoreboard_alive(&seg), 0);
    mg_segment_detach(&seg);
}

static void assert_same_contents(const struct mg_segment *seg, const struct mg_config *c)
{
    cr_assert_eq(seg->slot_count, SLOT_COUNT);
    cr_assert_eq(seg->route_count, ROUTE_COUNT);
    cr_assert(memcmp(seg->config, c, sizeof *c) == 0, "the config copy differs");
    for (unsigned i = 0; i < ROUTE_COUNT; i++) {
        const char *stored = seg->routes[i].name;
        cr_assert(memchr(stored, '\0', MG_ROUTE_NAME_MAX), "route %u name not terminated", i);
        cr_assert(strncmp(stored, route_names[i], MG_ROUTE_NAME_MAX - 1) == 0, "route %u is \"%s\"",
                  i, stored);
    }
    cr_assert_eq(strlen(seg->routes[3].name), MG_ROUTE_NAME_MAX - 1,
                 "a long route name is not cut to the field");
    cr_assert_eq(atomic_load(&seg->header->master_pid), getpid());
}

Test(segment, attach_read_only_sees_what_create_wrote)
{
    const char *name = new_name();
    struct mg_segment owner, reader;
    create_segment(&owner, name);
    mg_counter_add(&owner, MG_CTR_REQUESTS, 42);
    cr_assert_eq(mg_segment_attach(&reader, name, true, err, sizeof err), 0, "%s", err);
    cr_assert(reader.read_only);
    cr_assert_str_eq(reader.name, name);
    cr_assert_neq(reader.base, owner.base, "attach did not map the segment anew");
    struct mg_config c = test_config();
    assert_same_contents(&reader, &c);
    cr_assert_eq(mg_counter_get(&reader, MG_CTR_REQUESTS), 42);

    /* The mapping itself refuses writes: its line in /proc/self/maps is "r--s". */
    FILE *maps = fopen("/proc/self/maps", "r");
    cr_assert_not_null(maps);
    char line[512], perms[8] = "";
    unsigned long start = (unsigned long)reader.base;
    while (fgets(line, sizeof line, maps)) {
        unsigned long from, to;
        char p[8];
        if (sscanf(line, "%lx-%lx %4s", &from, &to, p) == 3 && from == start) {
            snprintf(perms, sizeof perms, "%s", p);
            break;
        }
    }
    fclose(maps);
    cr_assert_str_eq(perms, "r--s", "read-only mapping has permissions \"%s\"", perms);
    mg_segment_detach(&reader);
    mg_segment_detach(&owner);
}

Test(segment, attach_read_write_shares_updates_both_ways)
{
    const char *name = new_name();
    struct mg_segment owner, other;
    create_segment(&owner, name);
    cr_assert_eq(mg_segment_attach(&other, name, false, err, sizeof err), 0, "%s", err);
    cr_assert_not(other.read_only);
    struct mg_config c = test_config();
    assert_same_contents(&other, &c);
    mg_counter_add(&other, MG_CTR_BYTES_SENT, 5);
    mg_counter_add(&owner, MG_CTR_BYTES_SENT, 6);
    cr_assert_eq(mg_counter_get(&owner, MG_CTR_BYTES_SENT), 11);
    cr_assert_eq(mg_counter_get(&other, MG_CTR_BYTES_SENT), 11);
    mg_segment_set_state(&other, MG_SERVER_RUNNING);
    cr_assert_eq(atomic_load(&owner.header->server_state), MG_SERVER_RUNNING);
    cr_assert_str_eq(mg_server_state_name(MG_SERVER_RUNNING), "running");
    cr_assert_str_eq(mg_server_state_name(99), "unknown");
    mg_segment_detach(&other);
    cr_assert_null(other.base, "detach leaves a pointer behind");
    mg_segment_detach(&owner);
}

Test(segment, attach_to_a_missing_name_says_so_and_hints_at_the_variables)
{
    const char *name = new_name();
    struct mg_segment seg;
    cr_assert_eq(mg_segment_attach(&seg, name, true, err, sizeof err), -1);
    cr_assert(strstr(err, name), "%s", err);
    cr_assert(strstr(err, "MESHGATE_SHM_NAME"), "%s", err);
}

Test(segment, attach_refuses_a_segment_whose_creation_has_not_finished)
{
    /* Magic is written last: until then a reader must not take the segment for ours. */
    const char *name = new_name();
    struct mg_segment seg, reader;
    create_segment(&seg, name);
    memset(seg.header->magic, 0, sizeof seg.header->magic);
    cr_assert_eq(mg_segment_attach(&reader, name, true, err, sizeof err), -1);
    cr_assert(strstr(err, "not a meshgate segment"), "%s", err);
    mg_segment_detach(&seg);
}

Test(segment, create_refuses_slot_and_route_counts_outside_the_layout)
{
    const char *name = new_name();
    struct mg_segment seg;
    struct mg_config c = test_config();
    cr_assert_eq(mg_segment_create(&seg, name, &c, 0, route_names, 1, err, sizeof err), -1);
    cr_assert_eq(
        mg_segment_create(&seg, name, &c, MG_WORKERS_MAX + 1, route_names, 1, err, sizeof err), -1);
    cr_assert_eq(
        mg_segment_create(&seg, name, &c, 1, route_names, MG_ROUTES_MAX + 1, err, sizeof err), -1);
    cr_assert_not(shm_exists(name), "a refused create left %s behind", name);
    cr_assert_eq(mg_segment_create(&seg, name, &c, MG_WORKERS_MAX, route_names, 1, err, sizeof err),
                 0, "the largest layout is refused: %s", err);
    cr_assert_eq(seg.slot_count, MG_WORKERS_MAX);
    mg_segment_detach(&seg);
}

Test(segment, unlink_removes_the_name_but_not_the_mapping)
{
    const char *name = new_name();
    struct mg_segment seg;
    create_segment(&seg, name);
    cr_assert_eq(mg_segment_unlink(name), 0);
    cr_assert_not(shm_exists(name));
    mg_counter_add(&seg, MG_CTR_RELOADS, 1);
    cr_assert_eq(mg_counter_get(&seg, MG_CTR_RELOADS), 1);
    mg_segment_detach(&seg);
}

/* ---- an existing name: live, stale, reused pid, foreign -------------------------------- */

Test(segment, second_create_on_a_live_masters_name_is_refused)
{
    const char *name = new_name();
    struct mg_segment first, second;
    create_segment(&first, name);
    mg_counter_add(&first, MG_CTR_REQUESTS, 3);
    cr_assert_eq(mg_segment_create(&second, name, first.config, SLOT_COUNT, route_names,
                                   ROUTE_COUNT, err, sizeof err),
                 -1, "a second instance took the name of a live one");
    cr_assert(strstr(err, "another meshgate"), "%s", err);
    cr_assert(mentions_number(err, (unsigned long long)getpid()), "pid not named: %s", err);
    cr_assert(strstr(err, "MESHGATE_SHM_NAME"), "no way out offered: %s", err);
    /* The live instance's segment is untouched. */
    struct mg_segment reader;
    cr_assert_eq(mg_segment_attach(&reader, name, true, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mg_counter_get(&reader, MG_CTR_REQUESTS), 3);
    mg_segment_detach(&reader);
    mg_segment_detach(&first);
}

Test(segment, stale_segment_of_a_dead_master_is_replaced, .init = cr_redirect_stderr)
{
    const char *name = new_name();
    struct mg_segment old, fresh;
    create_segment(&old, name);
    mg_counter_add(&old, MG_CTR_REQUESTS, 7);
    atomic_store(&old.header->master_pid, dead_pid());
    atomic_store(&old.header->master_start_ticks, 0);

    create_segment(&fresh, name);
    cr_assert_eq(mg_counter_get(&fresh, MG_CTR_REQUESTS), 0, "the old segment was reused");
    cr_assert_eq(atomic_load(&fresh.header->master_pid), getpid());
    cr_assert_eq(mg_counter_get(&old, MG_CTR_REQUESTS), 7, "the old mapping was changed");
    struct mg_segment reader;
    cr_assert_eq(mg_segment_attach(&reader, name, true, err, sizeof err), 0, "%s", err);
    cr_assert_eq(atomic_load(&reader.header->master_pid), getpid());
    cr_assert_eq(mg_counter_get(&reader, MG_CTR_REQUESTS), 0, "the name still leads to the old");
    mg_segment_detach(&reader);
    mg_segment_detach(&fresh);
    mg_segment_detach(&old);
}

Test(segment, stale_segment_with_its_dead_masters_start_time_is_replaced,
     .init = cr_redirect_stderr)
{
    const char *name = new_name();
    struct mg_segment old, fresh;
    create_segment(&old, name);
    /* The dead master's own start time: the pid is gone, whatever the time says. */
    atomic_store(&old.header->master_pid, dead_pid());
    atomic_store(&old.header->master_start_ticks, mg_process_start_ticks(getpid()));
    create_segment(&fresh, name);
    cr_assert_eq(atomic_load(&fresh.header->master_pid), getpid());
    mg_segment_detach(&fresh);
    mg_segment_detach(&old);
}

Test(segment, segment_whose_master_pid_was_reused_by_another_process_is_replaced,
     .init = cr_redirect_stderr)
{
    const char *name = new_name();
    struct mg_segment old, fresh;
    create_segment(&old, name);
    int other = (int)getppid(); /* alive, but not the process that started at these ticks */
    uint64_t real_ticks = mg_process_start_ticks(other);
    cr_assert_neq(real_ticks, 0, "cannot read the start time of pid %d", other);
    atomic_store(&old.header->master_pid, other);
    atomic_store(&old.header->master_start_ticks, real_ticks + 12345);
    create_segment(&fresh, name);
    cr_assert_eq(atomic_load(&fresh.header->master_pid), getpid());
    mg_segment_detach(&fresh);
    mg_segment_detach(&old);
}

Test(segment, segment_whose_master_pid_runs_with_the_same_start_time_is_kept)
{
    /* The counterpart of the pid-reuse test: same pid and start time is a live master. */
    const char *name = new_name();
    struct mg_segment old, fresh;
    create_segment(&old, name);
    int other = (int)getppid();
    atomic_store(&old.header->master_pid, other);
    atomic_store(&old.header->master_start_ticks, mg_process_start_ticks(other));
    cr_assert_eq(mg_segment_create(&fresh, name, old.config, SLOT_COUNT, route_names, ROUTE_COUNT,
                                   err, sizeof err),
                 -1);
    cr_assert(strstr(err, "another meshgate"), "%s", err);
    cr_assert(mentions_number(err, (unsigned long long)other), "pid not named: %s", err);
    mg_segment_detach(&old);
}

static void make_foreign(const char *name, const void *bytes, size_t len)
{
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0, "shm_open %s: %m", name);
    cr_assert_eq(write(fd, bytes, len), (ssize_t)len);
    close(fd);
}

static void assert_foreign_kept(const char *name, const void *bytes, size_t len)
{
    cr_assert(shm_exists(name), "the foreign segment %s was removed", name);
    int fd = shm_open(name, O_RDONLY, 0);
    cr_assert_geq(fd, 0);
    char *back = malloc(len + 1);
    cr_assert_not_null(back);
    ssize_t n = read(fd, back, len + 1);
    close(fd);
    bool same = n == (ssize_t)len && memcmp(back, bytes, len) == 0;
    free(back);
    cr_assert(same, "the foreign segment %s was changed", name);
}

Test(segment, foreign_segment_is_refused_and_left_alone)
{
    const char *name = new_name();
    static unsigned char noise[8192];
    srand(12345);
    for (size_t i = 0; i < sizeof noise; i++)
        noise[i] = (unsigned char)rand();
    noise[0] = 'X'; /* never our magic by chance */
    make_foreign(name, noise, sizeof noise);
    struct mg_segment seg;
    struct mg_config c = test_config();
    cr_assert_eq(
        mg_segment_create(&seg, name, &c, SLOT_COUNT, route_names, ROUTE_COUNT, err, sizeof err),
        -1, "a foreign segment was taken over");
    cr_assert(strstr(err, "not a meshgate segment"), "%s", err);
    cr_assert(strstr(err, name), "%s", err);
    assert_foreign_kept(name, noise, sizeof noise);
    cr_assert_eq(mg_segment_attach(&seg, name, true, err, sizeof err), -1);
    cr_assert(strstr(err, "not a meshgate segment"), "%s", err);
}

Test(segment, too_small_segment_is_refused_and_left_alone_even_with_our_magic)
{
    const char *name = new_name();
    const char tiny[10] = "MESHGATE\1";
    make_foreign(name, tiny, sizeof tiny);
    struct mg_segment seg;
    struct mg_config c = test_config();
    cr_assert_eq(
        mg_segment_create(&seg, name, &c, SLOT_COUNT, route_names, ROUTE_COUNT, err, sizeof err),
        -1);
    cr_assert(strstr(err, "not a meshgate segment"), "%s", err);
    assert_foreign_kept(name, tiny, sizeof tiny);
    cr_assert_eq(mg_segment_attach(&seg, name, true, err, sizeof err), -1);
    cr_assert(strstr(err, "too small"), "%s", err);
}

/* ---- validation of copies -------------------------------------------------------------- */

/* A private copy of a freshly created segment (the way the dump tool validates). */
static struct mg_shm_header *copy_of_new_segment(size_t *size)
{
    const char *name = new_name();
    struct mg_segment seg;
    create_segment(&seg, name);
    *size = seg.size;
    private_copy = malloc(seg.size);
    cr_assert_not_null(private_copy);
    memcpy(private_copy, seg.base, seg.size);
    mg_segment_detach(&seg);
    return private_copy;
}

static void assert_copy_refused(struct mg_shm_header *h, size_t size, const char *why)
{
    struct mg_segment view;
    memset(&view, 0, sizeof view);
    err[0] = '\0';
    cr_assert_eq(mg_segment_validate(h, size, &view, err, sizeof err), -1,
                 "a copy with %s was accepted", why);
    cr_assert_neq(err[0], '\0', "no message for %s", why);
}

Test(segment, validate_accepts_an_intact_copy_and_points_into_it)
{
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    struct mg_segment view;
    cr_assert_eq(mg_segment_validate(h, size, &view, err, sizeof err), 0, "%s", err);
    char *base = (char *)h;
    cr_assert_eq(view.base, base);
    cr_assert_eq((char *)view.config, base + section(h, "config")->offset);
    cr_assert_eq((char *)view.counters, base + section(h, "counters")->offset);
    cr_assert_eq((char *)view.routes, base + section(h, "routes")->offset);
    cr_assert_eq((char *)view.slow, base + section(h, "slow")->offset);
    cr_assert_eq((char *)view.values, base + section(h, "values")->offset);
    cr_assert_eq((char *)view.slots, base + section(h, "slots")->offset);
    cr_assert_eq(view.slot_count, SLOT_COUNT);
    cr_assert_eq(view.route_count, ROUTE_COUNT);
    cr_assert_eq(view.config->backlog, 77);
}

Test(segment, validate_refuses_wrong_magic)
{
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    memcpy(h->magic, "MESHGATX", 8);
    assert_copy_refused(h, size, "wrong magic");
    cr_assert(strstr(err, "not a meshgate segment"), "%s", err);
}

Test(segment, validate_refuses_another_layout_version_naming_both_versions)
{
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    h->layout_version = MG_SHM_LAYOUT_VERSION + 76;
    assert_copy_refused(h, size, "another layout version");
    cr_assert(mentions_number(err, MG_SHM_LAYOUT_VERSION + 76), "theirs not named: %s", err);
    cr_assert(mentions_number(err, MG_SHM_LAYOUT_VERSION), "ours not named: %s", err);
}

Test(segment, validate_refuses_a_header_size_other_than_this_builds)
{
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    h->header_size += 8;
    assert_copy_refused(h, size, "a larger header");
    cr_assert(mentions_number(err, sizeof *h + 8), "%s", err);
}

Test(segment, validate_refuses_a_total_size_larger_than_the_mapping)
{
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    assert_copy_refused(h, size - 1, "a mapping one byte short");
    cr_assert(mentions_number(err, size), "%s", err);
    h->total_size = size + 4096;
    assert_copy_refused(h, size, "a total size past the mapping");
}

Test(segment, validate_refuses_a_mapping_smaller_than_a_header)
{
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    assert_copy_refused(h, sizeof *h - 1, "a mapping shorter than the header");
}

Test(segment, validate_refuses_a_section_running_past_the_total_size)
{
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    struct mg_shm_section *last = &h->sections[0];
    /* ">=": an empty section (no hold records without a per-client cap) shares its offset
     * with the next one, and moving an empty one moves nothing past the end. */
    for (uint32_t i = 1; i < h->section_count; i++)
        if (h->sections[i].offset >= last->offset)
            last = &h->sections[i];
    last->offset += 64; /* past the padding after the last section, whatever its size */
    assert_copy_refused(h, size, "the last section moved past the end");
    cr_assert(strstr(err, last->name), "the section is not named: %s", err);
}

Test(segment, validate_refuses_a_section_with_more_records_than_fit)
{
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    struct mg_shm_section *routes = (struct mg_shm_section *)section(h, "routes");
    routes->record_count = h->total_size / routes->record_size + 1;
    assert_copy_refused(h, size, "a route count past the end");
}

Test(segment, validate_refuses_a_section_offset_that_wraps_around)
{
    /* offset + size overflows 64 bits and lands inside the segment: the sum alone passes. */
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    struct mg_shm_section *slots = (struct mg_shm_section *)section(h, "slots");
    slots->offset = UINT64_MAX - 7; /* a multiple of 8 */
    assert_copy_refused(h, size, "a slots offset near 2^64");
}

Test(segment, validate_refuses_a_record_size_other_than_this_builds)
{
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    struct mg_shm_section *slots = (struct mg_shm_section *)section(h, "slots");
    slots->record_size += 8;
    assert_copy_refused(h, size, "larger slot records");
    cr_assert(strstr(err, "slots"), "%s", err);
}

Test(segment, validate_refuses_a_renamed_or_missing_section)
{
    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    struct mg_shm_section *values = (struct mg_shm_section *)section(h, "values");
    memcpy(values->name, "gates", 6);
    assert_copy_refused(h, size, "a section renamed");
    memcpy(values->name, "values", 7);
    h->section_count -= 1;
    assert_copy_refused(h, size, "a section missing");
}

/* The cache's pool is MESHGATE_REACH_CACHE_BYTES in pages whatever the number of entries
 * (an entry used to get a fixed share, at least a page each), and a copy whose cache says
 * otherwise than its pages section is refused: a reader would run past the pool. */
Test(segment, the_cache_pool_is_the_configured_bytes_and_a_copy_must_agree_with_it)
{
    struct mg_config c = test_config();
    c.reach_cache_bytes = 65536;
    c.reach_cache_entries = 100;
    struct mg_segment seg;
    cr_assert_eq(mg_segment_create(&seg, new_name(), &c, SLOT_COUNT, route_names, ROUTE_COUNT, err,
                                   sizeof err),
                 0, "%s", err);
    cr_expect_eq(seg.cache.cache->pages, 16);
    cr_expect_eq(seg.cache.cache->entries, 100);
    cr_expect_eq(section(seg.header, "cachepages")->record_count, 16);
    mg_segment_detach(&seg);

    size_t size;
    struct mg_shm_header *h = copy_of_new_segment(&size);
    struct mg_result_cache *cache =
        (struct mg_result_cache *)((char *)h + section(h, "cache")->offset);
    cache->pages += 1;
    assert_copy_refused(h, size, "a cache of more pages than its section holds");
}

/* ---- processes and their start times --------------------------------------------------- */

Test(segment, process_start_ticks_identify_a_process)
{
    uint64_t mine = mg_process_start_ticks(getpid());
    cr_assert_neq(mine, 0);
    cr_assert_eq(mg_process_start_ticks(getpid()), mine, "start time changes between reads");
    cr_assert(mg_process_alive(getpid(), 0));
    cr_assert(mg_process_alive(getpid(), mine));
    cr_assert_not(mg_process_alive(getpid(), mine + 1), "another start time is the same process");
    int gone = dead_pid();
    cr_assert_eq(mg_process_start_ticks(gone), 0);
    cr_assert_not(mg_process_alive(gone, 0));
    cr_assert_not(mg_process_alive(0, 0));
    cr_assert_not(mg_process_alive(-1, 0));
}

Test(segment, process_start_ticks_survive_a_command_name_with_spaces_and_parentheses)
{
    int to_parent[2], to_child[2];
    cr_assert_eq(pipe(to_parent), 0);
    cr_assert_eq(pipe(to_child), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        alarm(5); /* never outlive the test, whatever happens to the parent */
        close(to_child[1]);
        uint64_t before = mg_process_start_ticks(getpid());
        prctl(PR_SET_NAME, "x) 1 2 (y) 3");
        ssize_t w = write(to_parent[1], &before, sizeof before);
        char c;
        ssize_t r = read(to_child[0], &c, 1);
        _exit(w == sizeof before && r >= 0 ? 0 : 1);
    }
    uint64_t child_saw;
    cr_assert_eq(read(to_parent[0], &child_saw, sizeof child_saw), (ssize_t)sizeof child_saw);
    uint64_t parent_sees = mg_process_start_ticks((int)pid);
    close(to_child[1]);
    wait_child_ok(pid);
    cr_assert_neq(child_saw, 0);
    cr_assert_eq(parent_sees, child_saw, "the renamed process reads as started at another time");
}

/* ---- stats ------------------------------------------------------------------------------ */

/* healthz's gates read their pid without a system call (mg_self_pid): kept once read, and a
 * child forked after the read has its own. */
Test(segment, the_kept_pid_is_the_process_own_after_a_fork)
{
    cr_assert_eq(mg_self_pid(), getpid());
    cr_assert_eq(mg_self_pid(), getpid(), "the second read");
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0)
        _exit(mg_self_pid() == getpid() && mg_self_pid() != getppid() ? 0 : 1);
    int status = 0;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child read its parent's pid");
    cr_expect_eq(mg_self_pid(), getpid());
}

TestSuite(stats, .fini = cleanup, .timeout = 10);

static void check_bucket_of(uint64_t v)
{
    unsigned b = mg_hist_bucket(v);
    cr_assert_lt(b, MG_HIST_BUCKETS);
    uint64_t upper = mg_hist_bucket_upper_us(b);
    cr_assert_geq(upper, v, "%" PRIu64 " us lies in bucket %u with upper bound %" PRIu64, v, b,
                  upper);
    cr_assert_leq(upper, v + v / 8 + 1,
                  "bucket %u of %" PRIu64 " us is too wide (upper %" PRIu64 ")", b, v, upper);
    if (b > 0)
        cr_assert_lt(mg_hist_bucket_upper_us(b - 1), v,
                     "%" PRIu64 " us would fit the bucket below %u", v, b);
}

Test(stats, hist_bucket_bounds_are_strictly_increasing)
{
    for (unsigned b = 1; b < MG_HIST_BUCKETS; b++)
        cr_assert_gt(mg_hist_bucket_upper_us(b), mg_hist_bucket_upper_us(b - 1), "bucket %u", b);
    cr_assert_geq(mg_hist_bucket_upper_us(MG_HIST_BUCKETS - 1), 1ull << 40,
                  "the last bucket ends below 2^40 us");
}

Test(stats, hist_bucket_is_monotonic_and_within_an_eighth_for_small_values)
{
    unsigned prev = 0;
    for (uint64_t v = 0; v <= 70000; v++) {
        unsigned b = mg_hist_bucket(v);
        cr_assert_geq(b, prev, "bucket of %" PRIu64 " us goes down", v);
        prev = b;
        check_bucket_of(v);
    }
}

Test(stats, hist_bucket_is_within_an_eighth_up_to_2_pow_40_us)
{
    for (unsigned e = 0; e <= 40; e++) {
        uint64_t p = 1ull << e;
        check_bucket_of(p - 1);
        check_bucket_of(p);
        check_bucket_of(p + 1);
        check_bucket_of(p + p / 2);
        cr_assert_leq(mg_hist_bucket(p - 1), mg_hist_bucket(p));
    }
    uint64_t x = 0x9e3779b97f4a7c15ull, prev_v = 0;
    unsigned prev_b = 0;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t v = x >> (24 + (unsigned)(x % 40)); /* spread over every power of two */
        if (v > (1ull << 40))
            v >>= 1;
        check_bucket_of(v);
        if (v >= prev_v)
            cr_assert_geq(mg_hist_bucket(v), prev_b);
        prev_v = v;
        prev_b = mg_hist_bucket(v);
    }
}

static void assert_near(uint64_t got, uint64_t truth, const char *what)
{
    cr_assert(got >= truth && got <= truth + truth / 8 + 1,
              "%s is %" PRIu64 " us, the true value %" PRIu64 " us", what, got, truth);
}

Test(stats, quantiles_of_a_uniform_spread_are_within_an_eighth)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    cr_assert_eq(mg_hist_quantile_us(&seg.routes[0], 0.5), 0, "no samples yet");
    for (int64_t us = 1; us <= 1000; us++)
        mg_route_record(&seg, 0, 200, us);
    assert_near(mg_hist_quantile_us(&seg.routes[0], 0.50), 500, "p50");
    assert_near(mg_hist_quantile_us(&seg.routes[0], 0.95), 950, "p95");
    assert_near(mg_hist_quantile_us(&seg.routes[0], 0.99), 990, "p99");
    cr_assert_eq(mg_hist_quantile_us(&seg.routes[0], 1.0), 1000, "the maximum is exact");
    cr_assert_eq(mg_hist_quantile_us(&seg.routes[0], 0.0), 1);
    cr_assert_eq(atomic_load(&seg.routes[0].max_us), 1000);
    cr_assert_eq(atomic_load(&seg.routes[0].sum_us), 500500);
    mg_segment_detach(&seg);
}

Test(stats, quantiles_of_a_two_peaked_spread_follow_each_peak)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    for (int i = 0; i < 900; i++)
        mg_route_record(&seg, 1, 200, 100);
    for (int i = 0; i < 100; i++)
        mg_route_record(&seg, 1, 200, 2500000);
    assert_near(mg_hist_quantile_us(&seg.routes[1], 0.5), 100, "p50");
    assert_near(mg_hist_quantile_us(&seg.routes[1], 0.9), 100, "p90");
    cr_assert_eq(mg_hist_quantile_us(&seg.routes[1], 0.95), 2500000, "p95 capped by the max");
    cr_assert_eq(mg_hist_quantile_us(&seg.routes[1], 0.999), 2500000);
    cr_assert_eq(mg_hist_quantile_us(&seg.routes[0], 0.5), 0, "another route got samples");
    mg_segment_detach(&seg);
}

Test(stats, route_record_counts_requests_errors_and_keeps_the_maximum)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    static const int statuses[] = {200, 204, 304, 404, 499, 500, 502, 503, 599, 200};
    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
        mg_route_record(&seg, 2, statuses[i], (int64_t)(i + 1) * 10);
    mg_route_record(&seg, 2, 200, -5); /* a clock step backwards counts as 0 us */
    struct mg_route_stats *r = &seg.routes[2];
    cr_assert_eq(atomic_load(&r->count), 11);
    cr_assert_eq(atomic_load(&r->errors), 4, "5xx responses are the errors");
    cr_assert_eq(atomic_load(&r->max_us), 100);
    cr_assert_eq(atomic_load(&r->sum_us), 550);
    cr_assert_eq(atomic_load(&r->bucket[0]), 1, "the negative duration is not in bucket 0");
    mg_route_record(&seg, ROUTE_COUNT, 500, 10); /* no such route: ignored */
    mg_route_record(&seg, 1000, 500, 10);
    for (unsigned i = 0; i < ROUTE_COUNT; i++)
        cr_assert_eq(atomic_load(&seg.routes[i].count), i == 2 ? 11 : 0, "route %u", i);
    mg_segment_detach(&seg);
}

Test(stats, slow_ring_ignores_fast_requests)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    mg_slow_record(&seg, "/api/nodes", 200, MG_SLOW_THRESHOLD_US - 1, 1);
    mg_slow_record(&seg, "/api/nodes", 200, 0, 1);
    struct mg_slow_entry out[MG_SLOW_MAX];
    cr_assert_eq(mg_slow_snapshot(&seg, out), 0);
    mg_slow_record(&seg, "/api/slow", 503, MG_SLOW_THRESHOLD_US, 99);
    cr_assert_eq(mg_slow_snapshot(&seg, out), 1, "a request at the threshold is slow");
    cr_assert_str_eq(out[0].path, "/api/slow");
    cr_assert_eq(out[0].status, 503);
    cr_assert_eq(out[0].duration_us, MG_SLOW_THRESHOLD_US);
    cr_assert_eq(out[0].time_realtime_ns, 99);
    mg_segment_detach(&seg);
}

Test(stats, slow_ring_keeps_the_newest_entries_newest_first)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    const int total = MG_SLOW_MAX + 7;
    for (int i = 0; i < total; i++) {
        char path[32];
        snprintf(path, sizeof path, "/api/slow/%d", i);
        mg_slow_record(&seg, path, 200, MG_SLOW_THRESHOLD_US + i, 1000 + i);
    }
    struct mg_slow_entry out[MG_SLOW_MAX];
    cr_assert_eq(mg_slow_snapshot(&seg, out), MG_SLOW_MAX);
    for (int k = 0; k < MG_SLOW_MAX; k++) {
        int i = total - 1 - k;
        char path[32];
        snprintf(path, sizeof path, "/api/slow/%d", i);
        cr_assert_str_eq(out[k].path, path, "entry %d", k);
        cr_assert_eq(out[k].duration_us, MG_SLOW_THRESHOLD_US + i);
        cr_assert_eq(out[k].time_realtime_ns, 1000 + i);
    }
    mg_segment_detach(&seg);
}

Test(stats, slow_ring_cuts_long_paths_inside_the_field)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    char path[MG_SLOW_PATH_MAX * 2];
    memset(path, 'q', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = '\0';
    mg_slow_record(&seg, path, 200, MG_SLOW_THRESHOLD_US, 1);
    struct mg_slow_entry out[MG_SLOW_MAX];
    cr_assert_eq(mg_slow_snapshot(&seg, out), 1);
    cr_assert_eq(strlen(out[0].path), MG_SLOW_PATH_MAX - 1);
    cr_assert(strncmp(out[0].path, path, MG_SLOW_PATH_MAX - 1) == 0);
    mg_segment_detach(&seg);
}

Test(stats, counters_from_several_processes_add_up_exactly)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    enum { CHILDREN = 4, ADDS = 1000000, RECORDS = 20000 };
    /* A start line outside the segment: the children spin until all are there, so their
     * adds overlap and a lost update would show. */
    struct start_line {
        _Atomic int ready;
        _Atomic int go;
    } *line = mmap(NULL, sizeof *line, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(line, MAP_FAILED);
    pid_t pids[CHILDREN];
    for (int c = 0; c < CHILDREN; c++) {
        pids[c] = fork();
        cr_assert_geq(pids[c], 0, "fork");
        if (pids[c] == 0) {
            alarm(10); /* a child never outlives a stuck test */
            atomic_fetch_add(&line->ready, 1);
            while (!atomic_load(&line->go))
                sched_yield();
            for (int i = 0; i < ADDS; i++) {
                mg_counter_add(&seg, MG_CTR_REQUESTS, 1);
                mg_counter_add(&seg, MG_CTR_BYTES_SENT, 3);
            }
            for (int i = 0; i < RECORDS; i++)
                mg_route_record(&seg, 0, 200, i);
            _exit(0);
        }
    }
    while (atomic_load(&line->ready) < CHILDREN)
        sched_yield();
    atomic_store(&line->go, 1);
    for (int c = 0; c < CHILDREN; c++)
        wait_child_ok(pids[c]);
    munmap(line, sizeof *line);
    cr_assert_eq(mg_counter_get(&seg, MG_CTR_REQUESTS), (uint64_t)CHILDREN * ADDS);
    cr_assert_eq(mg_counter_get(&seg, MG_CTR_BYTES_SENT), (uint64_t)CHILDREN * ADDS * 3);
    cr_assert_eq(atomic_load(&seg.routes[0].count), (uint64_t)CHILDREN * RECORDS);
    cr_assert_eq(atomic_load(&seg.routes[0].max_us), RECORDS - 1);
    uint64_t in_buckets = 0;
    for (unsigned b = 0; b < MG_HIST_BUCKETS; b++)
        in_buckets += atomic_load(&seg.routes[0].bucket[b]);
    cr_assert_eq(in_buckets, (uint64_t)CHILDREN * RECORDS);
    mg_segment_detach(&seg);
}

Test(stats, counter_names_and_help_are_complete_and_distinct)
{
    for (int c = 0; c < MG_CTR_COUNT; c++) {
        cr_assert(mg_counter_names[c] && *mg_counter_names[c], "counter %d has no name", c);
        cr_assert(mg_counter_help[c] && *mg_counter_help[c], "counter %d has no help", c);
        for (int d = 0; d < c; d++)
            cr_assert_str_neq(mg_counter_names[c], mg_counter_names[d]);
    }
}

/* ---- scoreboard ------------------------------------------------------------------------- */

TestSuite(scoreboard, .fini = cleanup, .timeout = 10);

Test(scoreboard, slot_goes_through_spawn_request_and_death)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_slot *slot = mg_slot_get(&seg, 1);
    cr_assert_not_null(slot);
    cr_assert_null(mg_slot_get(&seg, SLOT_COUNT), "a slot past the end");

    mg_slot_prepare(slot);
    cr_assert_eq(atomic_load(&slot->state), MG_SLOT_STARTING);
    cr_assert_eq(atomic_load(&slot->spawns), 1);
    cr_assert_eq(atomic_load(&slot->pid), 0);
    cr_assert_gt(atomic_load(&slot->started_monotonic_ns), 0);
    cr_assert_eq(mg_scoreboard_alive(&seg), 0, "a slot without a pid counts as alive");

    mg_slot_set_pid(slot, 4242);
    cr_assert_eq(atomic_load(&slot->pid), 4242);
    cr_assert_eq(mg_scoreboard_alive(&seg), 1);
    mg_slot_set_state(slot, MG_SLOT_IDLE);
    mg_slot_set_connections(slot, 3);
    mg_slot_heartbeat(slot, 777);
    cr_assert_eq(atomic_load(&slot->heartbeat_monotonic_ns), 777);

    mg_slot_begin_request(slot, "GET", "/api/nodes?limit=5", 123456);
    cr_assert_eq(atomic_load(&slot->state), MG_SLOT_HANDLING);
    cr_assert_eq(atomic_load(&slot->request_started_monotonic_ns), 123456);
    cr_assert_eq(atomic_load(&slot->seq) % 2, 0, "sequence left odd after a write");
    struct mg_slot copy;
    mg_slot_snapshot(slot, &copy);
    cr_assert_str_eq(copy.method, "GET");
    cr_assert_str_eq(copy.path, "/api/nodes?limit=5");
    mg_slot_end_request(slot);
    cr_assert_eq(atomic_load(&slot->request_started_monotonic_ns), 0);
    atomic_fetch_add(&slot->requests, 5);

    mg_slot_mark_dead(slot, 9); /* killed by SIGKILL */
    cr_assert_eq(atomic_load(&slot->state), MG_SLOT_DEAD);
    cr_assert_eq(atomic_load(&slot->last_exit), 9);
    cr_assert_eq(atomic_load(&slot->connections), 0);
    cr_assert_eq(mg_scoreboard_alive(&seg), 0, "a dead slot counts as alive");

    mg_slot_prepare(slot);
    cr_assert_eq(atomic_load(&slot->state), MG_SLOT_STARTING);
    cr_assert_eq(atomic_load(&slot->spawns), 2);
    cr_assert_eq(atomic_load(&slot->requests), 0, "a new incarnation inherits requests");
    cr_assert_eq(atomic_load(&slot->last_exit), 9, "how the previous incarnation ended is lost");
    cr_assert_eq(atomic_load(&slot->pid), 0, "a new incarnation keeps the dead pid");
    mg_segment_detach(&seg);
}

Test(scoreboard, snapshot_terminates_strings_a_writer_left_unterminated)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_slot *slot = mg_slot_get(&seg, 0);
    memset(slot->method, 'M', sizeof slot->method);
    memset(slot->path, 'P', sizeof slot->path);
    struct mg_slot copy;
    memset(&copy, 'Z', sizeof copy);
    mg_slot_snapshot(slot, &copy);
    cr_assert_eq(strnlen(copy.method, sizeof copy.method), MG_SLOT_METHOD_MAX - 1);
    cr_assert_eq(strnlen(copy.path, sizeof copy.path), MG_SLOT_PATH_MAX - 1);
    mg_segment_detach(&seg);
}

Test(scoreboard, snapshot_of_a_slot_being_written_still_returns_terminated_strings)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_slot *slot = mg_slot_get(&seg, 0);
    memset(slot->path, 'P', sizeof slot->path);
    atomic_store(&slot->seq, 1); /* a writer stopped in the middle (it was killed) */
    struct mg_slot copy;
    mg_slot_snapshot(slot, &copy); /* must return, not spin */
    cr_assert_eq(strnlen(copy.path, sizeof copy.path), MG_SLOT_PATH_MAX - 1);
    mg_segment_detach(&seg);
}

Test(scoreboard, begin_request_cuts_long_fields_and_clears_what_a_longer_one_left)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_slot *slot = mg_slot_get(&seg, 2);
    char path[MG_SLOT_PATH_MAX * 2];
    memset(path, 'x', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = '\0';
    mg_slot_begin_request(slot, "PROPFINDX", path, 1);
    struct mg_slot copy;
    mg_slot_snapshot(slot, &copy);
    cr_assert_str_eq(copy.method, "PROPFIN");
    cr_assert_eq(strlen(copy.path), MG_SLOT_PATH_MAX - 1);
    mg_slot_begin_request(slot, "GET", "/a", 2);
    cr_assert_str_eq(slot->path, "/a");
    for (size_t i = 2; i < sizeof slot->path; i++)
        cr_assert_eq(slot->path[i], '\0', "byte %zu of the old path remains", i);
    mg_segment_detach(&seg);
}

Test(scoreboard, alive_counts_slots_with_a_pid_in_a_live_state)
{
    struct mg_segment seg;
    struct mg_config c = test_config();
    const char *name = new_name();
    cr_assert_eq(mg_segment_create(&seg, name, &c, 8, route_names, 1, err, sizeof err), 0, "%s",
                 err);
    static const enum mg_slot_state states[] = {
        MG_SLOT_STARTING, MG_SLOT_IDLE,      MG_SLOT_READING, MG_SLOT_HANDLING,
        MG_SLOT_WRITING,  MG_SLOT_KEEPALIVE, MG_SLOT_DRAINING};
    for (unsigned i = 0; i < 7; i++) {
        mg_slot_prepare(mg_slot_get(&seg, i));
        mg_slot_set_pid(mg_slot_get(&seg, i), 1000 + (int)i);
        mg_slot_set_state(mg_slot_get(&seg, i), states[i]);
    }
    cr_assert_eq(mg_scoreboard_alive(&seg), 7);
    mg_slot_mark_dead(mg_slot_get(&seg, 3), 0);
    mg_slot_mark_dead(mg_slot_get(&seg, 5), 0);
    cr_assert_eq(mg_scoreboard_alive(&seg), 5);
    mg_slot_set_state(mg_slot_get(&seg, 7), MG_SLOT_IDLE); /* a state without a pid */
    cr_assert_eq(mg_scoreboard_alive(&seg), 5);
    mg_segment_detach(&seg);
}

Test(scoreboard, every_state_has_a_name_and_a_distinct_letter)
{
    for (uint32_t s = 0; s < MG_SLOT_STATE_COUNT; s++) {
        cr_assert_str_neq(mg_slot_state_name(s), "unknown", "state %u", s);
        cr_assert_neq(mg_slot_state_char(s), '?', "state %u", s);
        for (uint32_t t = 0; t < s; t++) {
            cr_assert_str_neq(mg_slot_state_name(s), mg_slot_state_name(t));
            cr_assert_neq(mg_slot_state_char(s), mg_slot_state_char(t));
        }
    }
    cr_assert_str_eq(mg_slot_state_name(MG_SLOT_STATE_COUNT), "unknown");
    cr_assert_eq(mg_slot_state_char(MG_SLOT_STATE_COUNT), '?');
    cr_assert_str_eq(mg_slot_state_name(MG_SLOT_DEAD), "dead");
    cr_assert_eq(mg_slot_state_char(MG_SLOT_IDLE), '_');
}

/* ---- shared values and reclaim ----------------------------------------------------------- */

TestSuite(shared_value, .fini = cleanup, .timeout = 10);

Test(shared_value, read_before_any_value_finds_none)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    char buf[64];
    int64_t age = -1;
    cr_assert_eq(mg_shared_value_read(&seg.values[0], buf, sizeof buf, 1000, &age), -1);
    cr_assert_eq(age, -1, "age written without a value");
    mg_segment_detach(&seg);
}

/* A request parked on a loop for another worker's first value marks its slot; the lease's
 * end (a value, a failure, the master's reclaim of a dead holder) wakes exactly the marked
 * slots, once, so no waiter polls (group_value.h). */
Test(shared_value, the_leases_end_wakes_the_slots_that_wait_for_a_value)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    char why[128];
    cr_assert(mg_wake_open(3, why, sizeof why), "%s", why);
    struct mg_shared_value *v = &seg.values[MG_VALUE_STATS];
    int me = (int)getpid();
    cr_assert(mg_shared_value_try_lease(v, me, 1));
    mg_shared_value_wait_mark(v, 2);
    mg_shared_value_publish(v, me, "{}", 2, 5);
    cr_expect_eq(mg_wake_take(2), 1, "the waiting slot was not woken by the value");
    cr_expect_eq(mg_wake_take(1), 0, "a slot that did not wait was woken");
    cr_expect_eq(mg_wake_take(0), 0, "the publisher's own slot was woken");
    /* Marks are used up: the next lease's end wakes no one who did not mark again. */
    cr_assert(mg_shared_value_try_lease(v, me, 6));
    mg_shared_value_release(v, me);
    cr_expect_eq(mg_wake_take(2), 0, "a used-up mark woke again");
    /* A computation that failed wakes the waiters, which compute their own. */
    cr_assert(mg_shared_value_try_lease(v, me, 7));
    mg_shared_value_wait_mark(v, 1);
    mg_shared_value_release(v, me);
    cr_expect_eq(mg_wake_take(1), 1, "a failed computation left its waiter asleep");
    /* The master's reclaim of a holder that died. */
    const int killed = 424242;
    atomic_store(&v->lease_pid, killed);
    mg_shared_value_wait_mark(v, 0);
    mg_shared_value_wait_mark(v, 2);
    cr_assert(mg_shared_value_reclaim(v, killed));
    cr_expect_eq(mg_wake_take(0), 1, "the reclaim left a waiter asleep");
    cr_expect_eq(mg_wake_take(2), 1, "the reclaim left a waiter asleep");
    mg_wake_close();
    mg_segment_detach(&seg);
}

static int computed_here;

/* This thread's voluntary context switches so far: each time it slept. */
static long voluntary_switches(void)
{
    struct rusage ru;
    cr_assert_eq(getrusage(RUSAGE_THREAD, &ru), 0);
    return ru.ru_nvcsw;
}

static long count_computation(struct mg_env *env, char *out, size_t cap)
{
    (void)env;
    computed_here++;
    return snprintf(out, cap, "{\"here\":1}");
}

/* A helper thread that needs a value another worker is computing for the first time sleeps
 * until that worker's lease ends (group_value.c, on the lease word), instead of looking every
 * few milliseconds: while the holder takes 1.5 s, the waiter sleeps a handful of times (it
 * used to wake some 700 times), and it is answered with the holder's value as it is published. */
Test(shared_value, a_helper_waiting_for_the_first_value_sleeps_until_it_is_published)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_shared_value *v = &seg.values[MG_VALUE_STATS];
    _Atomic int64_t *published_at =
        mmap(NULL, sizeof *published_at, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(published_at, MAP_FAILED);
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t holder = fork();
    cr_assert_geq(holder, 0);
    if (holder == 0) {
        alarm(20);
        if (!mg_shared_value_try_lease(v, (int)getpid(), mg_monotonic_ns()))
            _exit(1);
        if (write(go[1], "l", 1) != 1)
            _exit(2);
        struct timespec hold = {1, 500 * MG_NS_PER_MS};
        nanosleep(&hold, NULL); /* the computation takes long */
        atomic_store(published_at, mg_monotonic_ns());
        mg_shared_value_publish(v, (int)getpid(), "{\"held\":1}", 10, mg_monotonic_ns());
        _exit(0);
    }
    char c;
    cr_assert_eq(read(go[0], &c, 1), 1, "the holder did not take the lease");
    struct mg_env env = {.seg = &seg, .pid = (int)getpid(), .slot = 0};
    char out[MG_SHARED_VALUE_MAX];
    computed_here = 0;
    long sleeps = voluntary_switches(); /* every sleep, whatever system call it is */
    long len = mg_group_value_get(&env, MG_VALUE_STATS, 10 * MG_NS_PER_SEC, count_computation, out,
                                  sizeof out);
    int64_t answered = mg_monotonic_ns();
    long woke = voluntary_switches() - sleeps;
    cr_assert_eq(len, 10, "not the holder's value (%ld bytes)", len);
    cr_expect(memcmp(out, "{\"held\":1}", 10) == 0);
    cr_expect_eq(computed_here, 0, "the waiter computed its own value");
    cr_expect_leq(woke, 8, "the waiter woke %ld times while the holder computed", woke);
    cr_expect_lt(answered - atomic_load(published_at), MG_NS_PER_SEC,
                 "answered %lld ms after the value was published",
                 (long long)((answered - atomic_load(published_at)) / MG_NS_PER_MS));
    int status;
    cr_assert_eq(waitpid(holder, &status, 0), holder);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "holder status %d", status);
    close(go[0]);
    close(go[1]);
    munmap(published_at, sizeof *published_at);
    mg_segment_detach(&seg);
}

Test(shared_value, publish_then_read_round_trips_with_its_age)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_shared_value *v = &seg.values[MG_VALUE_STATS];
    int me = (int)getpid();
    cr_assert(mg_shared_value_try_lease(v, me, 1000));
    cr_assert_eq(atomic_load(&v->lease_pid), me);
    cr_assert_eq(atomic_load(&v->lease_monotonic_ns), 1000);
    mg_shared_value_publish(v, me, "{\"nodes\":3}", 11, 5000);
    cr_assert_eq(atomic_load(&v->lease_pid), 0, "publish kept the lease");
    cr_assert_eq(atomic_load(&v->refreshes), 1);
    char buf[64];
    int64_t age = 0;
    cr_assert_eq(mg_shared_value_read(v, buf, sizeof buf, 7500, &age), 11);
    cr_assert(memcmp(buf, "{\"nodes\":3}", 11) == 0);
    cr_assert_eq(age, 2500);
    cr_assert_eq(mg_shared_value_read(v, buf, sizeof buf, 7500, NULL), 11, "age may be NULL");
    cr_assert_eq(mg_shared_value_read(&seg.values[MG_VALUE_DB_COUNTS], buf, sizeof buf, 7500, NULL),
                 -1, "the other value was written");

    /* A second publish replaces the value. */
    cr_assert(mg_shared_value_try_lease(v, me, 8000));
    mg_shared_value_publish(v, me, "{}", 2, 9000);
    cr_assert_eq(mg_shared_value_read(v, buf, sizeof buf, 9001, &age), 2);
    cr_assert(memcmp(buf, "{}", 2) == 0);
    cr_assert_eq(age, 1);
    cr_assert_eq(atomic_load(&v->refreshes), 2);
    mg_segment_detach(&seg);
}

Test(shared_value, read_into_a_buffer_too_small_copies_nothing)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_shared_value *v = &seg.values[0];
    int me = (int)getpid();
    cr_assert(mg_shared_value_try_lease(v, me, 1));
    mg_shared_value_publish(v, me, "0123456789", 10, 2);
    char buf[16];
    memset(buf, '#', sizeof buf);
    cr_assert_eq(mg_shared_value_read(v, buf, 9, 3, NULL), -1);
    for (size_t i = 0; i < sizeof buf; i++)
        cr_assert_eq(buf[i], '#', "byte %zu written", i);
    mg_segment_detach(&seg);
}

Test(shared_value, publish_cuts_a_value_to_the_maximum)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_shared_value *v = &seg.values[0];
    int me = (int)getpid();
    static char big[MG_SHARED_VALUE_MAX + 100], back[MG_SHARED_VALUE_MAX + 100];
    memset(big, 'b', sizeof big);
    cr_assert(mg_shared_value_try_lease(v, me, 1));
    mg_shared_value_publish(v, me, big, sizeof big, 2);
    cr_assert_eq(mg_shared_value_read(v, back, sizeof back, 3, NULL), MG_SHARED_VALUE_MAX);
    mg_segment_detach(&seg);
}

Test(shared_value, lease_is_exclusive_between_processes)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_shared_value *v = &seg.values[0];
    int ready[2], hold[2];
    cr_assert_eq(pipe(ready), 0);
    cr_assert_eq(pipe(hold), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        alarm(10); /* a child never outlives a stuck test */
        close(hold[1]);
        char ok = mg_shared_value_try_lease(v, (int)getpid(), 1) ? 'y' : 'n';
        ssize_t w = write(ready[1], &ok, 1);
        char c;
        while (read(hold[0], &c, 1) > 0)
            ;
        _exit(w == 1 ? 0 : 1);
    }
    close(hold[0]);
    char ok = 0;
    cr_assert_eq(read(ready[0], &ok, 1), 1);
    cr_assert_eq(ok, 'y', "the child could not take a free lease");
    cr_assert_eq(atomic_load(&v->lease_pid), pid);
    cr_assert_not(mg_shared_value_try_lease(v, (int)getpid(), 2),
                  "two processes hold the lease at once");
    mg_shared_value_release(v, (int)getpid()); /* not ours: must change nothing */
    cr_assert_eq(atomic_load(&v->lease_pid), pid, "a non-holder released the lease");
    close(hold[1]);
    wait_child_ok(pid);
    cr_assert(mg_shared_value_try_lease(v, (int)getpid(), 3),
              "the lease of a reaped holder cannot be taken");
    mg_segment_detach(&seg);
}

Test(shared_value, exactly_one_of_several_racing_processes_gets_the_lease)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_shared_value *v = &seg.values[1];
    enum { RACERS = 4 };
    int go[2], results[2], hold[2];
    cr_assert_eq(pipe(go), 0);
    cr_assert_eq(pipe(results), 0);
    cr_assert_eq(pipe(hold), 0);
    pid_t pids[RACERS];
    for (int i = 0; i < RACERS; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0) {
            alarm(10); /* a child never outlives a stuck test */
            close(go[1]);
            close(hold[1]);
            char c;
            while (read(go[0], &c, 1) > 0)
                ;
            char won = mg_shared_value_try_lease(v, (int)getpid(), 1) ? 'y' : 'n';
            ssize_t w = write(results[1], &won, 1);
            while (read(hold[0], &c, 1) > 0) /* stay alive until every racer has tried */
                ;
            _exit(w == 1 ? 0 : 1);
        }
    }
    close(go[0]);
    close(hold[0]);
    close(go[1]); /* start them all */
    int winners = 0;
    for (int i = 0; i < RACERS; i++) {
        char won;
        cr_assert_eq(read(results[0], &won, 1), 1);
        winners += won == 'y';
    }
    int holder = atomic_load(&v->lease_pid);
    close(hold[1]);
    for (int i = 0; i < RACERS; i++)
        wait_child_ok(pids[i]);
    cr_assert_eq(winners, 1, "%d processes took the lease", winners);
    bool holder_is_a_racer = false;
    for (int i = 0; i < RACERS; i++)
        holder_is_a_racer |= holder == pids[i];
    cr_assert(holder_is_a_racer, "the lease is held by %d", holder);
    mg_segment_detach(&seg);
}

Test(shared_value, lease_of_a_dead_holder_can_be_taken_over)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_shared_value *v = &seg.values[0];
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(mg_shared_value_try_lease(v, (int)getpid(), 1) ? 0 : 1); /* dies holding it */
    wait_child_ok(pid);
    cr_assert_eq(atomic_load(&v->lease_pid), pid, "the child did not take the lease");
    cr_assert(mg_shared_value_try_lease(v, (int)getpid(), 2), "a dead holder keeps the lease");
    cr_assert_eq(atomic_load(&v->lease_pid), getpid());
    cr_assert_eq(atomic_load(&v->lease_monotonic_ns), 2);
    mg_segment_detach(&seg);
}

Test(shared_value, value_is_published_after_taking_over_from_a_writer_killed_mid_publish)
{
    /* A holder killed inside publish leaves the sequence odd. If a worker takes its lease
     * over before the master's reclaim runs (the pid is gone as soon as it is reaped), the
     * reclaim no longer matches the pid, so the new holder must be able to publish anyway:
     * otherwise the value can never be published again. */
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_shared_value *v = &seg.values[0];
    int me = (int)getpid();
    cr_assert(mg_shared_value_try_lease(v, me, 1));
    mg_shared_value_publish(v, me, "old", 3, 2);
    int gone = dead_pid();
    atomic_store(&v->lease_pid, gone);
    atomic_fetch_add(&v->seq, 1); /* it died between the two sequence steps */

    cr_assert(mg_shared_value_try_lease(v, me, 10), "the dead writer's lease is not free");
    mg_shared_value_publish(v, me, "new", 3, 11);
    cr_assert_eq(mg_segment_reclaim(&seg, 0, gone), 0, "the taken-over lease was reclaimed");
    char buf[16];
    long n = mg_shared_value_read(v, buf, sizeof buf, 12, NULL);
    cr_assert_eq(n, 3, "no value after a fresh publish: the sequence stayed odd (seq %u)",
                 atomic_load(&v->seq));
    cr_assert(memcmp(buf, "new", 3) == 0);
    mg_segment_detach(&seg);
}

TestSuite(reclaim, .fini = cleanup, .timeout = 10);

Test(reclaim, reclaim_frees_the_leases_of_the_reaped_pid_only)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    const int reaped = 424242, other = 434343;
    atomic_store(&seg.values[MG_VALUE_DB_COUNTS].lease_pid, reaped);
    atomic_store(&seg.values[MG_VALUE_STATS].lease_pid, other);
    cr_assert_eq(mg_segment_reclaim(&seg, 1, reaped), 1);
    cr_assert_eq(atomic_load(&seg.values[MG_VALUE_DB_COUNTS].lease_pid), 0);
    cr_assert_eq(atomic_load(&seg.values[MG_VALUE_STATS].lease_pid), other,
                 "another worker's lease was freed");
    cr_assert_eq(mg_segment_reclaim(&seg, 1, reaped), 0, "freed twice");
    cr_assert_eq(mg_segment_reclaim(&seg, 2, other), 1);
    cr_assert_eq(atomic_load(&seg.values[MG_VALUE_STATS].lease_pid), 0);
    mg_segment_detach(&seg);
}

Test(reclaim, reclaim_after_a_writer_killed_mid_publish_discards_the_torn_value)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_shared_value *v = &seg.values[0];
    int me = (int)getpid();
    cr_assert(mg_shared_value_try_lease(v, me, 1));
    mg_shared_value_publish(v, me, "good", 4, 2);
    const int killed = 424242;
    atomic_store(&v->lease_pid, killed);
    atomic_fetch_add(&v->seq, 1); /* killed between the two sequence steps */
    char buf[16];
    cr_assert_eq(mg_shared_value_read(v, buf, sizeof buf, 3, NULL), -1,
                 "a value being written was read");

    cr_assert_eq(mg_segment_reclaim(&seg, 0, killed), 1);
    cr_assert_eq(atomic_load(&v->seq) % 2, 0, "the sequence stays odd");
    cr_assert_eq(mg_shared_value_read(v, buf, sizeof buf, 3, NULL), -1,
                 "a possibly torn value is served");
    cr_assert(mg_shared_value_try_lease(v, me, 4));
    mg_shared_value_publish(v, me, "fresh", 5, 5);
    cr_assert_eq(mg_shared_value_read(v, buf, sizeof buf, 6, NULL), 5);
    cr_assert(memcmp(buf, "fresh", 5) == 0);
    mg_segment_detach(&seg);
}

Test(reclaim, reclaim_for_another_pid_leaves_a_write_in_progress_alone)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_shared_value *v = &seg.values[0];
    const int writing = 424242, reaped = 434343;
    atomic_store(&v->lease_pid, writing);
    atomic_store(&v->seq, 1);
    atomic_store(&v->computed_monotonic_ns, 99);
    cr_assert_eq(mg_segment_reclaim(&seg, 0, reaped), 0);
    cr_assert_eq(atomic_load(&v->seq), 1, "a live writer's sequence was changed");
    cr_assert_eq(atomic_load(&v->computed_monotonic_ns), 99);
    cr_assert_eq(atomic_load(&v->lease_pid), writing);
    mg_segment_detach(&seg);
}

/*
 * A worker killed between the two stores of a scoreboard write (here: a forked process that
 * makes the first store, the sequence going odd, and is killed with SIGKILL before the
 * second) must not leave the next incarnation of its slot publishing copies with the parity
 * reversed: prepare makes the sequence even again.
 */
Test(scoreboard, a_worker_killed_between_the_two_stores_leaves_the_next_one_whole_copies)
{
    struct mg_segment seg;
    create_segment(&seg, new_name());
    struct mg_slot *slot = mg_slot_get(&seg, 1);
    mg_slot_begin_request(slot, "GET", "/before", 1);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        uint32_t seq = atomic_load(&slot->seq);
        atomic_store(&slot->seq, seq + 1); /* the first store: a write has begun */
        memset(slot->path, 'T', 4);        /* half of it */
        raise(SIGKILL);                    /* and the second store never comes */
        _exit(0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    cr_assert_eq(atomic_load(&slot->seq) % 2, 1, "the killed write should have left it odd");

    mg_slot_mark_dead(slot, status);
    mg_slot_prepare(slot);
    cr_assert_eq(atomic_load(&slot->seq) % 2, 0, "prepare left the sequence odd");
    mg_slot_begin_request(slot, "GET", "/after", 2);
    cr_assert_eq(atomic_load(&slot->seq) % 2, 0, "a whole write left the sequence odd");
    struct mg_slot copy;
    mg_slot_snapshot(slot, &copy);
    cr_assert_str_eq(copy.path, "/after");
    mg_segment_detach(&seg);
}
