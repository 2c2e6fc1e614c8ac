/* SPDX-License-Identifier: ISC */
#include "master.h"

#include "agent.h"

#include "client_limit.h"
#include "clock.h"
#include "conn_limit.h"
#include "corescope_config.h"
#include "log.h"
#include "notify.h"
#include "rates.h"
#include "gate_diag.h"
#include "keys.h"
#include "gate_fifo.h"
#include "gates.h"
#include "live_ring.h"
#include "lock.h"
#include "process.h"
#include "reclaim.h"
#include "result_cache.h"
#include "router.h"
#include "scoreboard.h"
#include "segment.h"
#include "summaries.h"
#include "tx_summary.h"
#include "upstream_gate.h"
#include "wake.h"
#include "stats.h"
#include "wiring.h"
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * Respawn policy (docs/architecture.md, "Respawn"): a worker that lived at least
 * DIED_YOUNG_NS comes back at once; one that died younger waits 50 ms, doubling with each
 * young death in a row up to 1 s. But the slots never all wait at once: a worker that had
 * started serving (or was SIGKILLed) and leaves no other worker alive comes back at once, so
 * killing workers (an OOM killer, a crash on a repeated request) costs the service a fork and
 * a database open, not a backoff. A worker that could not start (it ended on its own before
 * serving: the database is gone, a crash in start-up) always waits, so that never becomes a
 * fork storm.
 */
#define RESPAWN_BACKOFF_MIN_NS (50 * MG_NS_PER_MS)
#define RESPAWN_BACKOFF_MAX_NS (1 * MG_NS_PER_SEC)
#define DIED_YOUNG_NS (1 * MG_NS_PER_SEC)
/* The longest the master waits in its own reclaim for a lock held by a worker that runs,
 * before it takes the worker for frozen (critical sections last microseconds). */
#define MASTER_LOCK_WAIT_NS (1 * MG_NS_PER_SEC)
/* After SIGKILL, how long the master waits for the holder to be gone before forcing its
 * lock anyway (a killed process never returns to user space). */
#define KILLED_GONE_WAIT_NS (1 * MG_NS_PER_SEC)
#define KILL_GRACE_NS (2 * MG_NS_PER_SEC)
#define RELOAD_STEP_TIMEOUT_NS (10 * MG_NS_PER_SEC)
#define LISTEN_SHUTDOWN_GRACE_NS (150 * MG_NS_PER_MS)

struct child {
    int pid;               /* 0: none */
    uint32_t generation;   /* the master's generation when it was spawned */
    bool replacing;        /* told to drain for a reload: respawn at once */
    unsigned fail_streak;  /* deaths in a row soon after spawning */
    int64_t respawn_at_ns; /* 0: nothing scheduled */
    int64_t spawned_ns;
    bool killing; /* the master sent it SIGKILL; why: */
    char kill_reason[200];
};

struct master {
    struct mg_config cfg;    /* in effect: what workers forked from now on get */
    struct mg_config loaded; /* the same as loaded, before "auto" was resolved */
    struct mg_config_sources *sources;
    struct mg_segment seg;
    struct mg_tx_summaries summaries; /* shared with the workers forked after it was mapped */
    int listen_fd;
    int signal_fd;
    int pid;
    struct child *child;
    unsigned slots;   /* the scoreboard's, fixed at start: MESHGATE_WORKERS then */
    unsigned workers; /* MESHGATE_WORKERS now: slots from here on are retired */
    uint32_t generation;
    bool ready_sent;
    bool draining;
    int64_t drain_deadline_ns;
    int64_t listen_shutdown_ns; /* when the listening socket is shut for every process */
    bool killed_stragglers;
    int reload_slot; /* next slot to replace, -1: no reload under way */
    int64_t reload_step_ns;
    int64_t watchdog_usec;
    int64_t last_watchdog_ns;
    int64_t last_status_ns;
    char last_status[384];
    /* The database file the workers opened (their connections keep that inode), and when
     * the path was last looked at: a file moved over the path is noticed and logged. */
    dev_t db_dev;
    ino_t db_ino;
    bool db_known;
    bool db_warned;
    int64_t db_checked_ns;
    /* The file at the path when the reload under way began: what its workers open. */
    dev_t pending_dev;
    ino_t pending_ino;
    int64_t pending_mtime_ns;
    bool pending_known;
    /* The reload under way is for a replaced replica copy, not a SIGHUP: routine, so the
     * agent does not announce it as a drain. */
    bool reload_for_copy;
    /* HAProxy's agent port (agent.h), -1: none; and the last database probe. */
    int agent_fd;
    bool db_down;
    int64_t db_probed_ns;
};

static void remember_db(struct master *m);
static void note_pending_db(struct master *m);

/* For the SIGBUS handler, which has nothing else to go by. */
static struct master *sigbus_master;
static char sigbus_path[16 + MG_SHM_NAME_MAX]; /* /dev/shm/NAME */

static int spawn(struct master *m, unsigned slot_index)
{
    struct mg_slot *slot = mg_slot_get(&m->seg, slot_index);
    struct child *ch = &m->child[slot_index];
    mg_slot_prepare(slot);
    pid_t pid = fork();
    if (pid < 0) {
        mg_error("cannot fork worker %u: %s; retrying", slot_index, strerror(errno));
        mg_slot_mark_dead(slot, -1);
        ch->respawn_at_ns = mg_monotonic_ns() + RESPAWN_BACKOFF_MIN_NS;
        return -1;
    }
    if (pid == 0) {
        close(m->signal_fd);
        if (m->agent_fd >= 0)
            close(m->agent_fd);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGBUS, SIG_DFL);
        mg_lock_set_watch(NULL, NULL);
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        unsetenv("WATCHDOG_PID");
        mg_slot_set_pid(slot, getpid());
        _exit(mg_worker_run(&m->seg, &m->cfg, m->summaries.header ? &m->summaries : NULL,
                            slot_index, m->listen_fd, m->pid));
    }
    mg_slot_set_pid(slot, pid);
    ch->pid = pid;
    ch->generation = m->generation;
    ch->replacing = false;
    ch->respawn_at_ns = 0;
    ch->spawned_ns = mg_monotonic_ns();
    ch->killing = false;
    ch->kill_reason[0] = '\0';
    mg_counter_add(&m->seg, MG_CTR_WORKER_SPAWNS, 1);
    mg_debug("worker %u started (pid %d)", slot_index, pid);
    return 0;
}

static void describe_exit(int status, char *out, size_t cap)
{
    if (WIFEXITED(status)) {
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        const char *abbrev = sigabbrev_np(WTERMSIG(status));
        snprintf(out, cap, "was killed by signal %d (SIG%s, %s)%s", WTERMSIG(status),
                 abbrev ? abbrev : "?", strsignal(WTERMSIG(status)),
                 WCOREDUMP(status) ? ", core dumped" : "");
    } else {
        snprintf(out, cap, "ended (wait status %d)", status);
    }
}

static int child_index(const struct master *m, int pid)
{
    for (unsigned i = 0; pid > 0 && i < m->slots; i++)
        if (m->child[i].pid == pid)
            return (int)i;
    return -1;
}

static unsigned live_children(const struct master *m)
{
    unsigned n = 0;
    for (unsigned i = 0; i < m->slots; i++)
        n += m->child[i].pid > 0;
    return n;
}

/* What the slot's worker is doing, for a log line: " while handling GET /x from 1.2.3.4". */
static void describe_request(struct mg_slot *slot, char *out, size_t cap)
{
    struct mg_slot copy;
    mg_slot_snapshot(slot, &copy);
    if (atomic_load(&copy.request_started_monotonic_ns) != 0)
        snprintf(out, cap, " while handling %s %s from %s", copy.method, copy.path,
                 copy.client[0] ? copy.client : "an unknown client");
    else if (copy.path[0])
        snprintf(out, cap, " between requests (its last: %s %s from %s)", copy.method, copy.path,
                 copy.client[0] ? copy.client : "an unknown client");
    else
        out[0] = '\0';
}

/* SIGKILL, once, with the reason kept for the line the reap writes. */
static void kill_worker(struct master *m, unsigned i, const char *why)
{
    struct child *ch = &m->child[i];
    if (ch->pid <= 0 || ch->killing)
        return;
    char doing[320];
    describe_request(mg_slot_get(&m->seg, i), doing, sizeof doing);
    mg_warn("killing worker %u (pid %d) with SIGKILL: %s%s", i, ch->pid, why, doing);
    kill(ch->pid, SIGKILL);
    ch->killing = true;
    snprintf(ch->kill_reason, sizeof ch->kill_reason, "%s", why);
    mg_counter_add(&m->seg, MG_CTR_WORKER_STALLS, 1);
}

static void force_free(struct master *m, struct mg_lock *l, const char *name, int holder,
                       const char *why)
{
    if (mg_lock_reclaim(l, holder)) {
        mg_error("forced the %s lock free from pid %d: %s", name, holder, why);
        mg_counter_add(&m->seg, MG_CTR_LOCKS_FORCED, 1);
    }
}

static void wait_gone(int pid, int64_t limit_ns)
{
    int64_t until = mg_monotonic_ns() + limit_ns;
    while (mg_process_state(pid, NULL) != MG_PROCESS_GONE && mg_monotonic_ns() < until) {
        struct timespec ts = {0, MG_NS_PER_MS};
        nanosleep(&ts, NULL);
    }
}

/*
 * The master's own lock waits (its reclaim after a reap): it never waits for a holder that
 * cannot release. A pid that is no worker of ours (a damaged word), or a worker that is gone,
 * is forced at once; a worker that is stopped, or keeps the lock past MASTER_LOCK_WAIT_NS, is
 * killed first, then forced (a killed process never runs another instruction).
 */
static void master_lock_watch(void *arg, struct mg_lock *l, enum mg_lock_event event, int holder,
                              enum mg_process_state state, int64_t held_ns)
{
    struct master *m = arg;
    if (event != MG_LOCK_WAITING)
        return;
    char name[48] = "shared";
    mg_segment_lock_at(&m->seg, (uint64_t)((char *)l - (char *)m->seg.base), name, sizeof name);
    int i = child_index(m, holder);
    if (i < 0) {
        force_free(m, l, name, holder, "no worker of this server has that pid");
        return;
    }
    if (state == MG_PROCESS_GONE) {
        force_free(m, l, name, holder, "the worker is gone and cannot release it");
        return;
    }
    if (state != MG_PROCESS_STOPPED && held_ns < MASTER_LOCK_WAIT_NS)
        return;
    char why[200];
    snprintf(why, sizeof why, "it holds the %s lock, which the master needs, and is %s", name,
             state == MG_PROCESS_STOPPED ? "stopped" : "not releasing it (frozen)");
    kill_worker(m, (unsigned)i, why);
    wait_gone(holder, KILLED_GONE_WAIT_NS);
    force_free(m, l, name, holder, "its worker was killed inside it");
}

static void reap(struct master *m)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        unsigned i;
        for (i = 0; i < m->slots && m->child[i].pid != pid; i++)
            ;
        if (i == m->slots)
            continue; /* not a worker of ours */
        struct child *ch = &m->child[i];
        int64_t now = mg_monotonic_ns();
        struct mg_slot *slot = mg_slot_get(&m->seg, i);
        /* What it was doing, before the slot forgets (a crash on a request names it). */
        char doing[320];
        describe_request(slot, doing, sizeof doing);
        bool served = atomic_load(&slot->state) != MG_SLOT_STARTING;
        /* Invariant 2: mark the slot and give back all it held before anything else. */
        mg_slot_mark_dead(slot, status);
        unsigned freed = mg_segment_reclaim(&m->seg, i, pid);
        mg_counter_add(&m->seg, MG_CTR_WORKER_SLOTS_RECLAIMED, 1);
        mg_counter_add(&m->seg, MG_CTR_WORKER_EXITS, 1);
        ch->pid = 0;

        bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        char how[512];
        describe_exit(status, how, sizeof how);
        if (ch->killing) {
            size_t used = strlen(how);
            snprintf(how + used, sizeof how - used, " (by the master: %s)", ch->kill_reason);
        }
        if (m->draining) {
            mg_debug("worker %u (pid %d) %s", i, pid, how);
            continue;
        }
        if (i >= m->workers) {
            /* A reload lowered MESHGATE_WORKERS: the slot stays empty. */
            mg_info("worker %u (pid %d) %s; retired (MESHGATE_WORKERS=%u)", i, pid, how,
                    m->workers);
            atomic_store(&slot->state, MG_SLOT_EMPTY);
            ch->respawn_at_ns = 0;
            continue;
        }
        if (ch->replacing && clean) {
            mg_info("worker %u (pid %d) drained for reload; starting its replacement", i, pid);
            ch->fail_streak = 0;
            spawn(m, i);
            continue;
        }
        mg_counter_add(&m->seg, MG_CTR_WORKER_CRASHES, 1);
        int64_t lived = now - ch->spawned_ns;
        int64_t delay = 0;
        const char *why_now = "";
        if (lived < DIED_YOUNG_NS) {
            ch->fail_streak++;
            delay = RESPAWN_BACKOFF_MIN_NS << (ch->fail_streak > 6 ? 5 : ch->fail_streak - 1);
            if (delay > RESPAWN_BACKOFF_MAX_NS)
                delay = RESPAWN_BACKOFF_MAX_NS;
            /* Killed from outside (an OOM killer, an operator) is not a failure to start:
             * only a worker that ended on its own before serving waits regardless. */
            bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
            if ((served || killed) && live_children(m) == 0) {
                delay = 0;
                why_now = " (no other worker is alive)";
            }
        } else {
            ch->fail_streak = 0;
        }
        ch->respawn_at_ns = now + delay;
        mg_warn("worker %u (pid %d) %s%s; %u held item(s) reclaimed; respawning in %lld ms%s", i,
                pid, how, doing, freed, (long long)(delay / MG_NS_PER_MS), why_now);
    }
}

static void begin_drain(struct master *m, int64_t now)
{
    if (m->draining) {
        /* Asked twice: stop now. */
        mg_warn("second stop signal: killing the workers");
        for (unsigned i = 0; i < m->slots; i++)
            if (m->child[i].pid > 0)
                kill(m->child[i].pid, SIGKILL);
        m->killed_stragglers = true;
        return;
    }
    m->draining = true;
    m->drain_deadline_ns = now + (int64_t)m->cfg.drain_timeout_ms * MG_NS_PER_MS + KILL_GRACE_NS;
    mg_segment_set_state(&m->seg, MG_SERVER_DRAINING);
    mg_notify("STOPPING=1\nSTATUS=draining: finishing requests in flight");
    mg_info("stopping: draining requests in flight (up to %d ms)", m->cfg.drain_timeout_ms);
    for (unsigned i = 0; i < m->slots; i++)
        if (m->child[i].pid > 0)
            kill(m->child[i].pid, SIGTERM);
    m->listen_shutdown_ns = now + LISTEN_SHUTDOWN_GRACE_NS;
}

/*
 * The listening socket is one object shared by every process: closing our descriptor does
 * not stop the kernel from completing handshakes while a worker busy in a handler still has
 * its own. shutdown() acts on the socket itself, so from then on new connections are
 * refused at once instead of waiting in a queue nobody will serve. Idle workers take what
 * was already queued first (they accept before closing their descriptor), so this waits
 * until every worker has begun draining, or a short grace.
 */
static void shutdown_listener(struct master *m, int64_t now)
{
    if (m->listen_fd < 0)
        return;
    bool all_draining = true;
    for (unsigned i = 0; i < m->slots; i++) {
        uint32_t st = atomic_load(&mg_slot_get(&m->seg, i)->state);
        if (m->child[i].pid > 0 && st != MG_SLOT_DRAINING)
            all_draining = false;
    }
    if (!all_draining && now < m->listen_shutdown_ns)
        return;
    shutdown(m->listen_fd, SHUT_RDWR);
    close(m->listen_fd);
    m->listen_fd = -1;
}

static void warn_line(const char *line, void *arg)
{
    (void)arg;
    mg_warn("reload: %s", line);
}

/*
 * Reads MESHGATE_ENV_FILE again and checks the result as a start would (every value, the
 * public directory, the key file). On success *next is the configuration to apply, with
 * every setting that needs a restart kept at its running value (one warning each), and the
 * keys are in *keys. On failure nothing is changed and the caller keeps serving.
 */
static bool reread_configuration(struct master *m, struct mg_config *next_loaded,
                                 struct mg_config *next, struct mg_keys *keys,
                                 struct mg_corescope_config *corescope)
{
    struct mg_config_sources fresh;
    char err[1024];
    if (mg_config_sources_reread(m->sources, &fresh, err, sizeof err) < 0) {
        mg_error("reload: %s; nothing changed, still serving with the running configuration", err);
        return false;
    }
    bool ok = mg_config_load_sources(next_loaded, &fresh, err, sizeof err) == 0;
    if (ok) {
        *next = *next_loaded;
        mg_config_resolve(next, err, sizeof err);
        if (err[0])
            mg_warn("reload: %s", err);
        ok = mg_config_check_public_dir(next, err, sizeof err) == 0 &&
             mg_keys_load(keys, next->api_keys_file, err, sizeof err) == 0 &&
             mg_corescope_load(corescope, next->corescope_config, err, sizeof err) == 0;
    }
    if (!ok) {
        mg_error("reload: %s; nothing changed, still serving with the running configuration", err);
        mg_config_sources_free(&fresh);
        return false;
    }
    mg_config_sources_notes(&fresh, warn_line, NULL);
    /* Restart-only settings keep their running values: decided on the values as loaded, then
     * resolved again so "auto" follows what is kept. */
    if (mg_config_keep_restart_settings(&m->loaded, next_loaded, m->slots, warn_line, NULL) > 0) {
        *next = *next_loaded;
        mg_config_resolve(next, err, sizeof err);
    }
    memcpy(next->shm_name, m->cfg.shm_name, sizeof next->shm_name); /* derived at start */
    mg_config_sources_free(m->sources);
    *m->sources = fresh;
    return true;
}

/* Logs each variable whose value a reload changes, as "NAME=old -> new". */
static unsigned log_changes(const struct mg_config *old, const struct mg_config *next)
{
    unsigned changed = 0;
    char a[MG_PATH_MAX + 64], b[MG_PATH_MAX + 64];
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        mg_config_describe_var(old, v, a, sizeof a);
        mg_config_describe_var(next, v, b, sizeof b);
        if (strcmp(a, b) != 0) {
            mg_info("reload: %s -> %s", a, b + strlen(v->name) + 1);
            changed++;
        }
    }
    return changed;
}

/*
 * What lives in the segment changes in place, under each gate's lock, at once for every
 * worker; the rest reaches the workers as they are replaced one at a time (each forks with
 * m->cfg). The segment's copy of the configuration is for readers (meshgate-shm, /metrics).
 */
static void apply_configuration(struct master *m, const struct mg_config *loaded,
                                const struct mg_config *next)
{
    const struct mg_config *c = next;
    mg_fifo_gate_configure(m->seg.cold, m->pid, (uint32_t)c->reach_cold_max,
                           c->reach_cold_queue > 0 ? (uint32_t)c->reach_cold_queue : 0,
                           (int64_t)c->reach_cold_wait_ms * MG_NS_PER_MS);
    mg_fifo_gate_configure(m->seg.anon, m->pid, (uint32_t)c->anon_concurrency,
                           (uint32_t)c->anon_queue, (int64_t)c->anon_wait_ms * MG_NS_PER_MS);
    mg_diag_gate_configure(m->seg.diag, m->pid, (int64_t)c->perf_mem_cooldown_ms * MG_NS_PER_MS,
                           c->perf_mem_gate);
    mg_result_cache_set_ttl(&m->seg.cache, m->pid, (int64_t)c->reach_cache_ttl_ms * MG_NS_PER_MS);
    mg_client_limit_set_rate(&m->seg.clients, (uint32_t)c->anon_rate, (uint32_t)c->anon_burst);
    mg_upstream_shm_configure(m->seg.upstream, m->pid, c);
    mg_live_ring_configure(m->seg.live, mg_live_clients_cap(c));
    if (c->max_conns_per_client > 0 && atomic_load(&m->seg.conns.table->cap) > 0)
        mg_conn_limit_set_cap(&m->seg.conns, (uint32_t)c->max_conns_per_client);
    memcpy(m->seg.config, c, sizeof *c);
    mg_log_set_level((enum mg_log_level)c->log_level);

    unsigned workers = (unsigned)c->workers;
    if (workers < m->workers) {
        for (unsigned i = workers; i < m->workers; i++) {
            m->child[i].respawn_at_ns = 0;
            if (m->child[i].pid > 0)
                kill(m->child[i].pid, SIGTERM); /* drains; reap leaves the slot empty */
        }
    }
    unsigned before = m->workers;
    m->workers = workers;
    m->cfg = *c;
    m->loaded = *loaded;
    for (unsigned i = before; i < workers; i++)
        if (m->child[i].pid == 0)
            spawn(m, i);
}

/* (Re)maps the transmission summaries the workers forked from now on share; without them
 * pages are read directly, which is slower but the same answer. */
static void open_summaries(struct master *m)
{
    char err[512];
    mg_tx_summaries_destroy(&m->summaries); /* workers of the older generation keep theirs */
    if (!m->cfg.tx_summaries)
        return;
    if (mg_summaries_open(m->cfg.db_path, m->cfg.db_busy_timeout_ms, &m->summaries, err,
                          sizeof err) < 0)
        mg_warn("%s: pages of /api/packets are read without summaries", err);
    else
        mg_info("transmission summaries: %llu records (%zu bytes mapped)",
                (unsigned long long)m->summaries.header->capacity, m->summaries.map_bytes);
}

static void begin_reload(struct master *m)
{
    if (m->draining)
        return;
    /* New workers fork from the master: they get the configuration and the keys as the
     * files say now. A file that fails its checks changes nothing. */
    static struct mg_keys fresh;
    struct mg_corescope_config corescope = {0};
    struct mg_config next_loaded, next;
    if (!reread_configuration(m, &next_loaded, &next, &fresh, &corescope)) {
        memset(&fresh, 0, sizeof fresh);
        mg_corescope_free(&corescope);
        return;
    }
    /* CoreScope's config.json as it reads now, for the workers forked from here on. */
    mg_corescope_free(&mg_corescope);
    mg_corescope = corescope;
    m->generation++;
    atomic_store(&m->seg.header->generation, m->generation);
    mg_counter_add(&m->seg, MG_CTR_RELOADS, 1);
    mg_segment_set_state(&m->seg, MG_SERVER_RELOADING);
    mg_notify("RELOADING=1\nSTATUS=reloading: replacing workers one at a time");
    unsigned changed = log_changes(&m->cfg, &next);
    apply_configuration(m, &next_loaded, &next);
    memcpy(&mg_api_keys, &fresh, sizeof fresh);
    memset(&fresh, 0, sizeof fresh);
    mg_info("reload (generation %u): %u setting(s) changed%s; replacing the workers one at a "
            "time",
            m->generation, changed, m->sources->file_path[0] ? "" : " (no MESHGATE_ENV_FILE)");
    /* The file may have been replaced: new workers start from empty summaries. */
    note_pending_db(m);
    open_summaries(m);
    m->reload_slot = 0;
    m->reload_step_ns = 0;
}

/* One step of a reload: replace the next worker of an older generation. */
static void reload_step(struct master *m, int64_t now)
{
    if (m->reload_slot < 0 || m->draining)
        return;
    /* Wait for the slot being replaced to be back and serving. */
    if (m->reload_step_ns) {
        struct child *ch = &m->child[m->reload_slot];
        uint32_t st = atomic_load(&mg_slot_get(&m->seg, (unsigned)m->reload_slot)->state);
        bool back = ch->pid > 0 && ch->generation == m->generation && st != MG_SLOT_STARTING &&
                    st != MG_SLOT_DEAD;
        if (!back && now - m->reload_step_ns < RELOAD_STEP_TIMEOUT_NS)
            return;
        m->reload_slot++;
        m->reload_step_ns = 0;
    }
    while (m->reload_slot < (int)m->workers) {
        struct child *ch = &m->child[m->reload_slot];
        if (ch->pid > 0 && ch->generation != m->generation) {
            ch->replacing = true;
            kill(ch->pid, SIGTERM);
            m->reload_step_ns = now;
            return;
        }
        m->reload_slot++;
    }
    m->reload_slot = -1;
    mg_segment_set_state(&m->seg, MG_SERVER_RUNNING);
    mg_notify("READY=1");
    mg_info("reload done: every worker is of generation %u", m->generation);
    /* The file the new workers opened: the one at the path when the reload began. */
    m->db_known = m->pending_known;
    m->db_dev = m->pending_dev;
    m->db_ino = m->pending_ino;
    m->db_warned = false;
    if (m->cfg.replica_max_lag_ms > 0 && m->pending_known)
        atomic_store(&m->seg.header->replica_copy_realtime_ns, m->pending_mtime_ns);
}

static bool heartbeats_fresh(struct master *m, int64_t now, int64_t limit_ns)
{
    unsigned alive = 0;
    for (unsigned i = 0; i < m->slots; i++) {
        struct mg_slot *s = mg_slot_get(&m->seg, i);
        uint32_t st = atomic_load(&s->state);
        if (st == MG_SLOT_EMPTY || st == MG_SLOT_DEAD || st == MG_SLOT_STARTING)
            continue;
        alive++;
        if (now - atomic_load(&s->heartbeat_monotonic_ns) > limit_ns)
            return false;
    }
    return alive > 0;
}

/*
 * A database replaced under the workers (mv or cp over MESHGATE_DB, a restore) is not what
 * they serve: each connection keeps the file it opened until SIGHUP replaces the workers,
 * and a reopen while the old file's -wal still holds frames reads them as pages of the new
 * file. Looked at every 2 s; logged once per replacement, with the safe order.
 *
 * A replica copy (MESHGATE_REPLICA_MAX_LAG_MS > 0, docs/scale-out.md) is different: nothing
 * writes it, a follower replaces it whole with a file that has no -wal, so the master reloads
 * as soon as it sees a new file (looked at every turn, 250 ms at most). The copy's
 * modification time is what the follower stamps as "current as of" (it touches an unchanged
 * copy): the lag is now minus the time of the copy the oldest serving workers opened.
 */
#define DB_CHECK_INTERVAL_NS (2 * MG_NS_PER_SEC)

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * MG_NS_PER_SEC + st->st_mtim.tv_nsec;
}

/* The file at the path now: its identity and modification time; false when there is none. */
static bool stat_db(const struct master *m, dev_t *dev, ino_t *ino, int64_t *mtime)
{
    struct stat st;
    if (stat(m->cfg.db_path, &st) < 0)
        return false;
    *dev = st.st_dev;
    *ino = st.st_ino;
    *mtime = mtime_ns(&st);
    return true;
}

static void remember_db(struct master *m)
{
    int64_t mtime;
    m->db_known = stat_db(m, &m->db_dev, &m->db_ino, &mtime);
    if (m->db_known && m->cfg.replica_max_lag_ms > 0)
        atomic_store(&m->seg.header->replica_copy_realtime_ns, mtime);
    m->db_warned = false;
}

static void note_pending_db(struct master *m)
{
    m->pending_known = stat_db(m, &m->pending_dev, &m->pending_ino, &m->pending_mtime_ns);
}

static void begin_reload(struct master *m);

static void check_db_file(struct master *m, int64_t now)
{
    bool replica = m->cfg.replica_max_lag_ms > 0;
    if (!replica)
        atomic_store(&m->seg.header->replica_copy_realtime_ns, 0);
    if ((!replica && now - m->db_checked_ns < DB_CHECK_INTERVAL_NS) || m->db_warned || !m->db_known)
        return;
    m->db_checked_ns = now;
    struct stat st;
    if (stat(m->cfg.db_path, &st) < 0) {
        mg_warn("the database %s is gone (%s): the workers go on serving the file they opened; "
                "put it back, or restart meshgate",
                m->cfg.db_path, strerror(errno));
    } else if (st.st_dev != m->db_dev || st.st_ino != m->db_ino) {
        if (replica) {
            if (m->reload_slot >= 0 || m->draining)
                return; /* after this reload, the next one */
            mg_info("the replica copy %s was replaced: reloading to serve it", m->cfg.db_path);
            mg_counter_add(&m->seg, MG_CTR_DATABASE_REPLACED, 1);
            begin_reload(m);
            m->reload_for_copy = m->reload_slot >= 0;
            return;
        }
        mg_warn("the database %s was replaced by another file: the workers go on serving the "
                "one they opened until SIGHUP. Reload only once the old file's -wal is empty "
                "(stop the ingestor, run PRAGMA wal_checkpoint(TRUNCATE)): a reopen reads a "
                "leftover -wal as pages of the new file (docs/architecture.md, A live database)",
                m->cfg.db_path);
    } else {
        /* The same file: the follower's touch says it is still current. */
        if (replica && m->reload_slot < 0)
            atomic_store(&m->seg.header->replica_copy_realtime_ns, mtime_ns(&st));
        return;
    }
    m->db_warned = true;
    mg_counter_add(&m->seg, MG_CTR_DATABASE_REPLACED, 1);
}

/* What the agent port answers now (agent.h). */
static void answer_agent(struct master *m, int64_t now)
{
    if (now - m->db_probed_ns >= MG_NS_PER_SEC || m->db_probed_ns == 0) {
        char err[600];
        bool up = mg_agent_probe_db(m->cfg.db_path, err, sizeof err);
        if (up != !m->db_down)
            mg_warn("agent: the database %s (%s)", up ? "answers again" : "does not answer",
                    up ? m->cfg.db_path : err);
        m->db_down = !up;
        m->db_probed_ns = now;
    }
    struct mg_agent_status status = {
        .maint = m->cfg.agent_maint_file[0] && access(m->cfg.agent_maint_file, F_OK) == 0,
        .db_down = m->db_down,
        .draining = m->draining,
        .reloading = m->reload_slot >= 0 && !m->reload_for_copy,
        .replica_max_lag_ms = m->cfg.replica_max_lag_ms,
    };
    mg_segment_replica_lag_ms(&m->seg, mg_realtime_ns(), &status.replica_lag_ms);
    mg_agent_read_load(&m->seg, m->pid, m->workers, &status.load);
    char line[64];
    size_t len = mg_agent_answer(&status, line, sizeof line);
    mg_agent_serve(m->agent_fd, line, len);
}

static void tick(struct master *m, int64_t now)
{
    mg_rates_sample(&m->seg, now / MG_NS_PER_SEC);
    if (!m->draining)
        for (unsigned i = 0; i < m->workers; i++)
            if (m->child[i].pid == 0 && m->child[i].respawn_at_ns &&
                m->child[i].respawn_at_ns <= now)
                spawn(m, i);

    unsigned alive = mg_scoreboard_alive(&m->seg), starting = 0;
    for (unsigned i = 0; i < m->slots; i++)
        starting += atomic_load(&mg_slot_get(&m->seg, i)->state) == MG_SLOT_STARTING;

    if (!m->ready_sent && !m->draining && alive == m->workers && starting == 0) {
        m->ready_sent = true;
        mg_segment_set_state(&m->seg, MG_SERVER_RUNNING);
        mg_notify("READY=1\nSTATUS=serving with %u of %u workers", alive, m->workers);
        mg_info("ready: %u workers serving", alive);
    }
    reload_step(m, now);
    check_db_file(m, now);

    if (now - m->last_status_ns >= 2 * MG_NS_PER_SEC) {
        char status[384];
        struct mg_gate_snapshots all; /* every gate, by the table (shm/gates.h) */
        mg_gates_read(&m->seg, m->pid, true, now, &all);
        const struct mg_fifo_snapshot cold = all.cold, anon = all.anon_line;
        const struct mg_diag_snapshot diag = all.diag;
        int len = snprintf(
            status, sizeof status,
            "%s: %u of %u workers alive, %llu requests served; cold builds %u/%u, "
            "%u waiting; anonymous heavy %u/%u, %u waiting; memory walk %s; %llu refused",
            m->draining           ? "draining"
            : m->reload_slot >= 0 ? "reloading"
                                  : "serving",
            alive, m->workers, (unsigned long long)mg_counter_get(&m->seg, MG_CTR_REQUESTS),
            cold.in_flight, cold.cap, cold.waiting, anon.in_flight, anon.cap, anon.waiting,
            diag.running ? "running" : "idle", (unsigned long long)mg_rates_refusals(&m->seg));
        if (m->seg.config->upstream[0] && len > 0 && (size_t)len < sizeof status) {
            const struct mg_fifo_snapshot ug = all.upstream;
            const struct mg_upstream_snapshot us = all.breaker;
            snprintf(status + len, sizeof status - (size_t)len,
                     "; upstream %u/%u, %u waiting, breaker %s, %u websockets", ug.in_flight,
                     ug.cap, ug.waiting, mg_breaker_state_name(us.breaker_state), us.tunnels_open);
        }
        if (strcmp(status, m->last_status) != 0) {
            mg_notify("STATUS=%s", status);
            memcpy(m->last_status, status, sizeof status);
        }
        m->last_status_ns = now;
    }
    /* Pet the watchdog only while every worker shows signs of life. */
    if (m->watchdog_usec && m->ready_sent) {
        int64_t interval = m->watchdog_usec * 1000;
        /* An idle worker beats once a second (its loop's longest sleep): allow for that. */
        if (now - m->last_watchdog_ns >= interval / 2 &&
            heartbeats_fresh(m, now, interval + 1500 * MG_NS_PER_MS)) {
            mg_notify("WATCHDOG=1");
            m->last_watchdog_ns = now;
        }
    }
}

/*
 * Frozen workers (docs/architecture.md): a worker whose heartbeat is older than
 * MESHGATE_WORKER_STALL_MS is killed; so is one that a waiting worker reports stopped inside
 * a shared lock (at once: it cannot release it), or holding one past the stall bound.
 */
static void judge_lock_report(struct master *m, unsigned waiter, int64_t now)
{
    struct mg_slot *slot = mg_slot_get(&m->seg, waiter);
    int holder = atomic_load(&slot->lock_wait_holder);
    if (holder == 0)
        return;
    char name[48];
    struct mg_lock *l =
        mg_segment_lock_at(&m->seg, atomic_load(&slot->lock_wait_offset), name, sizeof name);
    /* A report is a hint: act only while that lock still holds that pid. */
    if (!l || atomic_load(&l->owner_pid) != holder)
        return;
    int i = child_index(m, holder);
    if (i < 0)
        return; /* no worker of ours: the sweep forces it */
    if (m->child[i].killing)
        return;
    int64_t held_ns = now - atomic_load(&slot->lock_wait_since_ns);
    char letter;
    enum mg_process_state state = mg_process_state(holder, &letter);
    char why[200];
    if (state == MG_PROCESS_STOPPED)
        snprintf(why, sizeof why,
                 "it is stopped (state %c) inside the %s lock, which worker %u has waited "
                 "for %lld ms",
                 letter, name, waiter, (long long)(held_ns / MG_NS_PER_MS));
    else if (state == MG_PROCESS_RUNNING &&
             held_ns > (int64_t)m->cfg.worker_stall_ms * MG_NS_PER_MS)
        snprintf(why, sizeof why,
                 "it has held the %s lock for %lld ms (state %c) while worker %u waited "
                 "(MESHGATE_WORKER_STALL_MS=%d)",
                 name, (long long)(held_ns / MG_NS_PER_MS), letter, waiter, m->cfg.worker_stall_ms);
    else
        return;
    kill_worker(m, (unsigned)i, why);
}

static void watch_workers(struct master *m, int64_t now)
{
    int64_t stall_ns = (int64_t)m->cfg.worker_stall_ms * MG_NS_PER_MS;
    for (unsigned i = 0; i < m->slots; i++) {
        struct child *ch = &m->child[i];
        if (ch->pid <= 0 || ch->killing)
            continue;
        struct mg_slot *slot = mg_slot_get(&m->seg, i);
        int64_t age = now - atomic_load(&slot->heartbeat_monotonic_ns);
        if (age > stall_ns) {
            char letter, why[200];
            enum mg_process_state state = mg_process_state(ch->pid, &letter);
            snprintf(why, sizeof why,
                     "no heartbeat for %lld ms (MESHGATE_WORKER_STALL_MS=%d); it is %s "
                     "(state %c)",
                     (long long)(age / MG_NS_PER_MS), m->cfg.worker_stall_ms,
                     mg_process_state_name(state), letter);
            kill_worker(m, i, why);
            continue;
        }
        judge_lock_report(m, i, now);
    }
}

/* A lock word naming a pid that is no worker of ours will never be released by anyone: a
 * damaged word, or a leftover of a process long gone. The master holds no lock between its
 * steps, so its own pid there is damage too. */
static void sweep_lock(void *arg, struct mg_lock *l, const char *name)
{
    struct master *m = arg;
    int32_t owner = atomic_load_explicit(&l->owner_pid, memory_order_relaxed);
    if (owner != 0 && child_index(m, owner) < 0)
        force_free(m, l, name, owner,
                   "no worker of this server has that pid (a damaged lock word)");
}

/*
 * Someone truncated the segment, or wrote over its header or the sizes of its tables
 * (mg_segment_check_shape): every process that touches the lost pages dies of SIGBUS,
 * and the group's state (permits, lines, counters) is gone. The master does not touch it
 * again: it kills the workers, removes the name if it is still the object it created (so a
 * restart starts afresh), and stops with EX_OSERR, which systemd restarts.
 */
static int segment_lost(struct master *m, const char *why)
{
    mg_error("%s; stopping: killing the workers and removing the name so that a restart "
             "creates the segment afresh (exit 71)",
             why);
    for (unsigned i = 0; i < m->slots; i++)
        if (m->child[i].pid > 0)
            kill(m->child[i].pid, SIGKILL);
    int64_t until = mg_monotonic_ns() + 2 * MG_NS_PER_SEC;
    while (live_children(m) > 0 && mg_monotonic_ns() < until) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        int i = child_index(m, pid);
        if (i >= 0)
            m->child[i].pid = 0;
        else if (pid <= 0) {
            struct timespec ts = {0, MG_NS_PER_MS};
            nanosleep(&ts, NULL);
        }
    }
    struct stat ours, named;
    char err[256];
    int fd = mg_segment_open_existing(m->seg.name, O_RDONLY, &named, err, sizeof err);
    if (fd >= 0) {
        if (fstat(m->seg.fd, &ours) == 0 && ours.st_ino == named.st_ino &&
            ours.st_dev == named.st_dev)
            mg_segment_unlink(m->seg.name);
        close(fd);
    }
    return 71; /* EX_OSERR */
}

static void on_sigbus(int sig)
{
    (void)sig;
    static const char msg[] = "meshgate: master: SIGBUS: the shared segment was truncated "
                              "under the server; killing the workers and stopping (exit 71)\n";
    mg_log_signal_safe(MG_LOG_ERROR, msg, sizeof msg - 1);
    struct master *m = sigbus_master;
    for (unsigned i = 0; m && i < m->slots; i++)
        if (m->child[i].pid > 0)
            kill(m->child[i].pid, SIGKILL);
    /* As segment_lost does, with async-signal-safe calls only: open, fstat, unlink. */
    struct stat ours, named;
    int fd = open(sigbus_path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (m && fd >= 0 && fstat(fd, &named) == 0 && fstat(m->seg.fd, &ours) == 0 &&
        ours.st_ino == named.st_ino && ours.st_dev == named.st_dev)
        unlink(sigbus_path);
    _exit(71);
}

/* The poll timeout: the usual tick, shorter when a respawn falls due sooner. */
static int poll_timeout_ms(const struct master *m, int64_t now)
{
    int timeout_ms = m->ready_sent && m->reload_slot < 0 && !m->draining ? 250 : 20;
    for (unsigned i = 0; i < m->slots; i++) {
        int64_t at = m->child[i].respawn_at_ns;
        if (m->child[i].pid == 0 && at) {
            int64_t ms = at <= now ? 0 : (at - now + MG_NS_PER_MS - 1) / MG_NS_PER_MS;
            if (ms < timeout_ms)
                timeout_ms = (int)ms;
        }
    }
    return timeout_ms;
}

int mg_master_run(const struct mg_config *cfg, const struct mg_config *loaded,
                  struct mg_config_sources *sources, int listen_fd, int agent_fd,
                  const char *listen_desc)
{
    struct master m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.loaded = *loaded;
    m.sources = sources;
    m.listen_fd = listen_fd;
    m.agent_fd = agent_fd;
    m.pid = getpid();
    m.workers = (unsigned)cfg->workers;
    m.slots = m.workers;
    m.reload_slot = -1;
    m.watchdog_usec = mg_notify_watchdog_usec();
    mg_log_set_role("master");
    mg_site_wire();

    const char *routes[MG_ROUTES_MAX];
    unsigned route_count = mg_route_names(routes, MG_ROUTES_MAX);
    char err[512];
    if (mg_segment_create(&m.seg, cfg->shm_name, cfg, m.slots, routes, route_count, err,
                          sizeof err) < 0) {
        mg_error("%s", err);
        return strstr(err, "another meshgate") ? 73 /* EX_CANTCREAT */ : MG_EXIT_CONFIG;
    }
    if (m.seg.squatted) {
        mg_warn("%s", m.seg.squat_note);
        memcpy(m.cfg.shm_name, m.seg.name, sizeof m.cfg.shm_name);
        memcpy(m.loaded.shm_name, m.seg.name, sizeof m.loaded.shm_name);
    }
    if (m.seg.replaced_stale)
        mg_warn("replaced segment %s, left by an instance that is no longer running", m.seg.name);
    if (m.seg.removed_empty)
        mg_warn("removed an empty segment file %s (left by a start that failed, or truncated) "
                "and created it afresh",
                m.seg.name);
    /* The master's own waits for locks never wait on a holder that cannot release. */
    mg_lock_set_watch(master_lock_watch, &m);
    sigbus_master = &m;
    snprintf(sigbus_path, sizeof sigbus_path, "/dev/shm%s", m.seg.name);
    struct sigaction bus = {.sa_handler = on_sigbus};
    sigaction(SIGBUS, &bus, NULL);
    m.child = calloc(m.slots, sizeof *m.child);
    /* Each slot's wake, inherited by every worker (shm/wake.h). */
    if (!mg_wake_open(m.slots, err, sizeof err)) {
        mg_error("%s", err);
        mg_segment_unlink(m.seg.name);
        return 71;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    m.signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (!m.child || m.signal_fd < 0) {
        mg_error("cannot set up the master: %s", strerror(errno));
        mg_segment_unlink(m.seg.name);
        return 71;
    }
    setproctitle("master %s (%u workers, segment %s)", listen_desc, m.workers, m.seg.name);
    mg_info("listening on %s with %u workers; segment %s", listen_desc, m.workers, m.seg.name);

    remember_db(&m);
    open_summaries(&m);
    for (unsigned i = 0; i < m.workers; i++)
        spawn(&m, i);

    for (;;) {
        int64_t now = mg_monotonic_ns();
        if (m.draining) {
            shutdown_listener(&m, now);
            if (live_children(&m) == 0)
                break;
            if (now >= m.drain_deadline_ns && !m.killed_stragglers) {
                mg_warn("drain deadline passed: killing %u worker(s)", live_children(&m));
                for (unsigned i = 0; i < m.slots; i++)
                    if (m.child[i].pid > 0)
                        kill(m.child[i].pid, SIGKILL);
                m.killed_stragglers = true;
            }
        }
        struct pollfd pfd[2] = {{.fd = m.signal_fd, .events = POLLIN},
                                {.fd = m.agent_fd, .events = POLLIN}};
        poll(pfd, m.agent_fd >= 0 ? 2 : 1, poll_timeout_ms(&m, now));
        /* Before anything touches the segment: is it still whole? */
        if (mg_segment_check_size(&m.seg, err, sizeof err) < 0 ||
            mg_segment_check_shape(&m.seg, err, sizeof err) < 0) {
            int rc = segment_lost(&m, err);
            free(m.child);
            return rc;
        }
        struct signalfd_siginfo si;
        while (read(m.signal_fd, &si, sizeof si) == sizeof si) {
            now = mg_monotonic_ns();
            switch (si.ssi_signo) {
            case SIGCHLD:
                break; /* reaped below */
            case SIGTERM:
            case SIGINT:
                begin_drain(&m, now);
                break;
            case SIGHUP:
                begin_reload(&m);
                m.reload_for_copy = false;
                break;
            }
        }
        reap(&m);
        now = mg_monotonic_ns();
        watch_workers(&m, now);
        mg_segment_for_each_lock(&m.seg, sweep_lock, &m);
        tick(&m, now);
        if (m.agent_fd >= 0 && (pfd[1].revents & POLLIN))
            answer_agent(&m, mg_monotonic_ns());
    }
    mg_segment_set_state(&m.seg, MG_SERVER_STOPPED);
    mg_segment_unlink(m.seg.name);
    mg_info("stopped");
    free(m.child);
    return 0;
}
