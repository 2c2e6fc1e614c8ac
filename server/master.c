#include "master.h"

#include "clock.h"
#include "log.h"
#include "notify.h"
#include "rates.h"
#include "gate_diag.h"
#include "keys.h"
#include "gate_fifo.h"
#include "reclaim.h"
#include "router.h"
#include "scoreboard.h"
#include "segment.h"
#include "stats.h"
#include "worker.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define RESPAWN_BACKOFF_MIN_NS (100 * MG_NS_PER_MS)
#define RESPAWN_BACKOFF_MAX_NS (10 * MG_NS_PER_SEC)
#define DIED_YOUNG_NS (1 * MG_NS_PER_SEC)
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
};

struct master {
    struct mg_config cfg;
    struct mg_segment seg;
    int listen_fd;
    int signal_fd;
    int pid;
    struct child *child;
    unsigned workers;
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
    char last_status[256];
};

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
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        unsetenv("WATCHDOG_PID");
        mg_slot_set_pid(slot, getpid());
        _exit(mg_worker_run(&m->seg, slot_index, m->listen_fd, m->pid));
    }
    mg_slot_set_pid(slot, pid);
    ch->pid = pid;
    ch->generation = m->generation;
    ch->replacing = false;
    ch->respawn_at_ns = 0;
    ch->spawned_ns = mg_monotonic_ns();
    mg_counter_add(&m->seg, MG_CTR_WORKER_SPAWNS, 1);
    mg_debug("worker %u started (pid %d)", slot_index, pid);
    return 0;
}

static void describe_exit(int status, char *out, size_t cap)
{
    if (WIFEXITED(status))
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, cap, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(out, cap, "ended (wait status %d)", status);
}

static void reap(struct master *m)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        unsigned i;
        for (i = 0; i < m->workers && m->child[i].pid != pid; i++)
            ;
        if (i == m->workers)
            continue; /* not a worker of ours */
        struct child *ch = &m->child[i];
        int64_t now = mg_monotonic_ns();
        struct mg_slot *slot = mg_slot_get(&m->seg, i);
        /* Invariant 2: mark the slot and give back all it held before anything else. */
        mg_slot_mark_dead(slot, status);
        unsigned freed = mg_segment_reclaim(&m->seg, i, pid);
        mg_counter_add(&m->seg, MG_CTR_WORKER_SLOTS_RECLAIMED, 1);
        mg_counter_add(&m->seg, MG_CTR_WORKER_EXITS, 1);
        ch->pid = 0;

        bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        char how[96];
        describe_exit(status, how, sizeof how);
        if (m->draining) {
            mg_debug("worker %u (pid %d) %s", i, pid, how);
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
        if (lived < DIED_YOUNG_NS) {
            ch->fail_streak++;
            delay = RESPAWN_BACKOFF_MIN_NS << (ch->fail_streak > 7 ? 7 : ch->fail_streak - 1);
            if (delay > RESPAWN_BACKOFF_MAX_NS)
                delay = RESPAWN_BACKOFF_MAX_NS;
        } else {
            ch->fail_streak = 0;
        }
        ch->respawn_at_ns = now + delay;
        mg_warn("worker %u (pid %d) %s; %u held item(s) reclaimed; respawning in %lld ms", i, pid,
                how, freed, (long long)(delay / MG_NS_PER_MS));
    }
}

static void begin_drain(struct master *m, int64_t now)
{
    if (m->draining) {
        /* Asked twice: stop now. */
        mg_warn("second stop signal: killing the workers");
        for (unsigned i = 0; i < m->workers; i++)
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
    for (unsigned i = 0; i < m->workers; i++)
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
    for (unsigned i = 0; i < m->workers; i++) {
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

static void begin_reload(struct master *m)
{
    if (m->draining)
        return;
    m->generation++;
    atomic_store(&m->seg.header->generation, m->generation);
    mg_counter_add(&m->seg, MG_CTR_RELOADS, 1);
    mg_segment_set_state(&m->seg, MG_SERVER_RELOADING);
    mg_notify("RELOADING=1\nSTATUS=reloading: replacing workers one at a time");
    mg_info("reload (generation %u): replacing the workers one at a time", m->generation);
    /* New workers fork from the master: they get the keys as the file says now. */
    static struct mg_keys fresh;
    char err[512];
    if (mg_keys_load(&fresh, m->cfg.api_keys_file, err, sizeof err) < 0)
        mg_error("%s; the workers keep the keys they had", err);
    else
        memcpy(&mg_api_keys, &fresh, sizeof fresh);
    memset(&fresh, 0, sizeof fresh);
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
}

static bool heartbeats_fresh(struct master *m, int64_t now, int64_t limit_ns)
{
    unsigned alive = 0;
    for (unsigned i = 0; i < m->workers; i++) {
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

static void tick(struct master *m, int64_t now)
{
    mg_rates_sample(&m->seg, now / MG_NS_PER_SEC);
    if (!m->draining)
        for (unsigned i = 0; i < m->workers; i++)
            if (m->child[i].pid == 0 && m->child[i].respawn_at_ns &&
                m->child[i].respawn_at_ns <= now)
                spawn(m, i);

    unsigned alive = mg_scoreboard_alive(&m->seg), starting = 0;
    for (unsigned i = 0; i < m->workers; i++)
        starting += atomic_load(&mg_slot_get(&m->seg, i)->state) == MG_SLOT_STARTING;

    if (!m->ready_sent && !m->draining && alive == m->workers && starting == 0) {
        m->ready_sent = true;
        mg_segment_set_state(&m->seg, MG_SERVER_RUNNING);
        mg_notify("READY=1\nSTATUS=serving with %u of %u workers", alive, m->workers);
        mg_info("ready: %u workers serving", alive);
    }
    reload_step(m, now);

    if (now - m->last_status_ns >= 2 * MG_NS_PER_SEC) {
        char status[256];
        const struct mg_fifo_gate *cold = m->seg.cold;
        snprintf(status, sizeof status,
                 "%s: %u of %u workers alive, %llu requests served; cold builds %u/%u, "
                 "%u waiting; anonymous heavy %u/%u, %u waiting; memory walk %s; %llu refused",
                 m->draining           ? "draining"
                 : m->reload_slot >= 0 ? "reloading"
                                       : "serving",
                 alive, m->workers, (unsigned long long)mg_counter_get(&m->seg, MG_CTR_REQUESTS),
                 cold->in_flight, cold->cap, cold->waiting, m->seg.anon->in_flight,
                 m->seg.anon->cap, m->seg.anon->waiting,
                 atomic_load(&m->seg.diag->running) ? "running" : "idle",
                 (unsigned long long)mg_rates_refusals(&m->seg));
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

static unsigned live_children(const struct master *m)
{
    unsigned n = 0;
    for (unsigned i = 0; i < m->workers; i++)
        n += m->child[i].pid > 0;
    return n;
}

int mg_master_run(const struct mg_config *cfg, int listen_fd, const char *listen_desc)
{
    struct master m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.listen_fd = listen_fd;
    m.pid = getpid();
    m.workers = (unsigned)cfg->workers;
    m.reload_slot = -1;
    m.watchdog_usec = mg_notify_watchdog_usec();
    mg_log_set_role("master");

    const char *routes[MG_ROUTES_MAX];
    unsigned route_count = mg_route_names(routes, MG_ROUTES_MAX);
    char err[512];
    if (mg_segment_create(&m.seg, cfg->shm_name, cfg, m.workers, routes, route_count, err,
                          sizeof err) < 0) {
        mg_error("%s", err);
        return strstr(err, "another meshgate") ? 73 /* EX_CANTCREAT */ : MG_EXIT_CONFIG;
    }
    if (m.seg.replaced_stale)
        mg_warn("replaced segment %s, left by an instance that is no longer running",
                cfg->shm_name);
    m.child = calloc(m.workers, sizeof *m.child);
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
    setproctitle("master %s (%u workers, segment %s)", listen_desc, m.workers, cfg->shm_name);
    mg_info("listening on %s with %u workers; segment %s", listen_desc, m.workers, cfg->shm_name);

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
                for (unsigned i = 0; i < m.workers; i++)
                    if (m.child[i].pid > 0)
                        kill(m.child[i].pid, SIGKILL);
                m.killed_stragglers = true;
            }
        }
        struct pollfd pfd = {.fd = m.signal_fd, .events = POLLIN};
        int timeout_ms = m.ready_sent && m.reload_slot < 0 && !m.draining ? 250 : 20;
        poll(&pfd, 1, timeout_ms);
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
                break;
            }
        }
        reap(&m);
        tick(&m, mg_monotonic_ns());
    }
    mg_segment_set_state(&m.seg, MG_SERVER_STOPPED);
    mg_segment_unlink(m.seg.name);
    mg_info("stopped");
    free(m.child);
    return 0;
}
