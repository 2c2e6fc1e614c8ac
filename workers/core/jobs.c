/* SPDX-License-Identifier: ISC */
#include "jobs.h"

#include "clock.h"
#include "log.h"
#include "mem.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct helper {
    struct mg_jobs *pool;
    pthread_t thread;
    enum { HELPER_EMPTY = 0, HELPER_RUNNING } state;
    bool opened; /* its connection is open */
    struct mg_db db;
};

struct mg_jobs {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    /* Handed over, not yet taken by a thread, oldest first. */
    struct mg_job *queue[MG_JOBS_THREADS_MAX];
    unsigned queued;
    unsigned threads; /* started */
    unsigned max_threads;
    unsigned idle;    /* started (or starting) and not running a job */
    unsigned in_hand; /* jobs queued or running */
    unsigned no_gate; /* of those, with no_gate */
    /* Requests that hold a permit for work on this pool (see mg_jobs_reserve). */
    const void *reserved[MG_JOBS_THREADS_MAX];
    unsigned reserved_count;
    bool stop;
    int nice;
    int event_fd;
    const struct mg_config *cfg;
    struct mg_db *like; /* the worker's own connection: its schema flags */
    dev_t db_dev;       /* the file the worker opened, to open no other one */
    ino_t db_ino;
    int64_t warned_ns; /* the last warning that a connection could not be opened */
    bool replaced;     /* the file is no longer the one the worker opened (open_connection) */
    _Atomic uint32_t *busy_word; /* in the segment: jobs in hand, at busy_shift */
    unsigned busy_shift;
    struct helper helper[MG_JOBS_THREADS_MAX];
};

static void *run(void *arg)
{
    struct helper *h = arg;
    struct mg_jobs *j = h->pool;
    /* Linux keeps a nice value per thread, which a new thread inherits from the loop; the
     * pool's is added to it (up to 19), so the helper yields to the loop even when the whole
     * server runs niced. Raising it needs no privilege. */
    if (j->nice > 0) {
        id_t tid = (id_t)syscall(SYS_gettid);
        errno = 0;
        int base = getpriority(PRIO_PROCESS, tid);
        int target = (errno == 0 ? base : 0) + j->nice;
        if (setpriority(PRIO_PROCESS, tid, target > 19 ? 19 : target) < 0)
            mg_warn("jobs: cannot lower the helper thread's priority: %s", strerror(errno));
    }
    pthread_mutex_lock(&j->mutex);
    for (;;) {
        while (j->queued == 0 && !j->stop)
            pthread_cond_wait(&j->cond, &j->mutex);
        if (j->queued == 0)
            break;
        j->idle--;
        struct mg_job *job = j->queue[0];
        memmove(&j->queue[0], &j->queue[1], --j->queued * sizeof j->queue[0]);
        pthread_mutex_unlock(&j->mutex);
        mg_db_fault_take(NULL, 0);
        job->run(job, &h->db);
        /* A fault of the connection: it is opened again for the next job (a request run
         * here whole retries itself: dispatch.c). */
        mg_db_heal(&h->db, "a helper");
        /* Heavy work leaves pages in the cache, the map and this thread's arena. */
        mg_mem_release(&h->db);
        bool no_gate = job->no_gate; /* the loop may free the job once it is done */
        pthread_mutex_lock(&j->mutex);
        j->idle++;
        j->in_hand--;
        j->no_gate -= no_gate;
        /* Done once this thread is counted idle: the loop that sees it answers, and the
         * client's next job finds the thread rather than starting another. */
        atomic_store(&job->done, 1);
        if (j->busy_word)
            atomic_fetch_sub(j->busy_word, 1u << j->busy_shift);
        uint64_t one = 1;
        if (write(j->event_fd, &one, sizeof one) < 0 && errno != EAGAIN)
            mg_warn("jobs: cannot signal the loop: %s", strerror(errno));
    }
    j->idle--;
    pthread_mutex_unlock(&j->mutex);
    return NULL;
}

/* Under the mutex, or before the pool is shared: a helper record for one more thread. */
static struct helper *free_helper(struct mg_jobs *j)
{
    for (unsigned i = 0; i < MG_JOBS_THREADS_MAX; i++) {
        struct helper *h = &j->helper[i];
        if (h->state == HELPER_RUNNING)
            continue;
        memset(h, 0, sizeof *h);
        h->pool = j;
        return h;
    }
    return NULL;
}

/* Opens h's connection, on the loop, when its thread is about to start (the first job that
 * needs it: a pool that never has one costs no connection, no page cache and no schema). It
 * reads nothing of the file (mg_db_open_like), so a writer's lock does not hold the loop up:
 * the job waits for it. The file must be the one the worker opened at start: after a
 * replacement the old one is served until the reload (docs/architecture.md, "A live
 * database"), never the two at once. */
static bool open_connection(struct mg_jobs *j, struct helper *h, char *err, size_t errlen)
{
    struct stat st;
    if (mg_db_open_like(&h->db, j->like, j->cfg->db_path, j->cfg->db_busy_timeout_ms, err,
                        errlen) != 0)
        return false;
    /* A replica's copy is replaced every time the primary changes and the master reloads
     * right after (MESHGATE_REPLICA_MAX_LAG_MS): the new file is a newer copy of the same
     * database, and a stale worker's helper takes it rather than leave its job waiting. */
    if (j->cfg->replica_max_lag_ms > 0 ||
        (stat(j->cfg->db_path, &st) == 0 && st.st_dev == j->db_dev && st.st_ino == j->db_ino)) {
        h->opened = true;
        return true;
    }
    mg_db_close(&h->db);
    snprintf(err, errlen,
             "database %s is not the file this worker opened (replaced?): its heavy work runs on "
             "the loop until the reload (SIGHUP)",
             j->cfg->db_path);
    j->replaced = true;
    return false;
}

/* Under the mutex: opens h's connection and starts its thread. */
static bool start_thread(struct mg_jobs *j, struct helper *h, char *err, size_t errlen)
{
    if (!h) {
        snprintf(err, errlen, "jobs: %d helper threads already", MG_JOBS_THREADS_MAX);
        return false;
    }
    if (!h->opened && !open_connection(j, h, err, errlen))
        return false;
    /* The loop handles signals (signalfd); the threads must never take one. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&h->thread, NULL, run, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "jobs: cannot start a helper thread: %s", strerror(rc));
        if (h->opened)
            mg_db_close(&h->db);
        memset(h, 0, sizeof *h);
        return false;
    }
    h->state = HELPER_RUNNING;
    j->threads++;
    j->idle++; /* counted from now, so the next job does not start another thread */
    return true;
}

struct mg_jobs *mg_jobs_start(const struct mg_config *cfg, struct mg_db *like, int nice,
                              unsigned max_threads, int *event_fd, _Atomic uint32_t *busy_word,
                              unsigned busy_shift, char *err, size_t errlen)
{
    struct stat st;
    if (stat(cfg->db_path, &st) < 0) {
        snprintf(err, errlen, "jobs: database %s: %s", cfg->db_path, strerror(errno));
        return NULL;
    }
    struct mg_jobs *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "jobs: out of memory");
        return NULL;
    }
    j->cfg = cfg;
    j->like = like;
    j->db_dev = st.st_dev;
    j->db_ino = st.st_ino;
    j->nice = nice;
    j->max_threads = max_threads < 1                     ? 1
                     : max_threads > MG_JOBS_THREADS_MAX ? MG_JOBS_THREADS_MAX
                                                         : max_threads;
    j->busy_word = busy_word;
    j->busy_shift = busy_shift;
    j->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (j->event_fd < 0) {
        snprintf(err, errlen, "jobs: eventfd: %s", strerror(errno));
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mutex, NULL);
    pthread_cond_init(&j->cond, NULL);
    /* No thread yet: the first job starts one (open_connection). */
    *event_fd = j->event_fd;
    return j;
}

/* Under the mutex. */
static int reservation(const struct mg_jobs *j, const void *owner)
{
    for (unsigned i = 0; owner && i < j->reserved_count; i++)
        if (j->reserved[i] == owner)
            return (int)i;
    return -1;
}

static void drop_reservation(struct mg_jobs *j, int at)
{
    j->reserved[at] = j->reserved[--j->reserved_count];
}

/* Under the mutex: a job of owner could be taken now (a thread is free or can be started). */
static bool available(const struct mg_jobs *j, const void *owner)
{
    if (j->stop)
        return false;
    return reservation(j, owner) >= 0 || j->in_hand + j->reserved_count < j->max_threads;
}

bool mg_jobs_available(struct mg_jobs *j, const void *owner)
{
    pthread_mutex_lock(&j->mutex);
    bool yes = available(j, owner);
    pthread_mutex_unlock(&j->mutex);
    return yes;
}

bool mg_jobs_reserve(struct mg_jobs *j, const void *owner)
{
    pthread_mutex_lock(&j->mutex);
    bool yes = owner && available(j, owner);
    if (yes && reservation(j, owner) < 0)
        j->reserved[j->reserved_count++] = owner;
    pthread_mutex_unlock(&j->mutex);
    return yes;
}

void mg_jobs_unreserve(struct mg_jobs *j, const void *owner)
{
    if (!j || !owner)
        return;
    pthread_mutex_lock(&j->mutex);
    int at = reservation(j, owner);
    if (at >= 0)
        drop_reservation(j, at);
    pthread_mutex_unlock(&j->mutex);
}

bool mg_jobs_submit(struct mg_jobs *j, struct mg_job *job)
{
    pthread_mutex_lock(&j->mutex);
    bool taken = available(j, job->owner);
    /* Every job in hand has a thread: start one when none is idle, for work under a permit,
     * or the pool's first (helpers start with their first job). */
    if (taken && j->idle <= j->queued && !job->under_permit && !job->no_gate && j->threads > 0) {
        taken = false;
    } else if (taken && j->idle <= j->queued) {
        char err[1200];
        taken = start_thread(j, free_helper(j), err, sizeof err);
        int64_t now = mg_monotonic_ns();
        if (!taken && (j->warned_ns == 0 || now - j->warned_ns >= 10 * MG_NS_PER_SEC)) {
            mg_warn("jobs: %s (the job waits; tried again later)", err);
            j->warned_ns = now;
        }
    }
    /* The file was replaced since the worker opened it, and its helpers cannot open the one
     * the worker serves until the reload: the job runs here, on the loop's connection, so it
     * reads what the worker's other answers read and never waits for a helper that cannot
     * come (docs/architecture.md, "A live database"). */
    bool here = !taken && j->replaced && available(j, job->owner);
    if (taken || here) {
        int at = reservation(j, job->owner);
        if (at >= 0)
            drop_reservation(j, at);
    }
    if (taken) {
        atomic_store(&job->done, 0);
        j->queue[j->queued++] = job;
        j->in_hand++;
        j->no_gate += job->no_gate;
        if (j->busy_word)
            atomic_fetch_add(j->busy_word, 1u << j->busy_shift);
        /* Every waiting thread: the one counted idle for this job may be still starting. */
        pthread_cond_broadcast(&j->cond);
    }
    pthread_mutex_unlock(&j->mutex);
    if (here) {
        job->run(job, j->like);
        atomic_store(&job->done, 1);
    }
    return taken || here;
}

bool mg_jobs_hand_over(struct mg_jobs *j, struct mg_job *job, struct mg_db *db)
{
    if (j)
        return mg_jobs_submit(j, job);
    job->run(job, db);
    atomic_store(&job->done, 1);
    return true;
}

bool mg_jobs_busy(struct mg_jobs *j)
{
    pthread_mutex_lock(&j->mutex);
    bool busy = j->in_hand > j->no_gate || j->reserved_count > 0;
    pthread_mutex_unlock(&j->mutex);
    return busy;
}

void mg_jobs_wake(struct mg_jobs *j)
{
    uint64_t one = 1;
    if (j && write(j->event_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        mg_warn("jobs: cannot signal the loop: %s", strerror(errno));
}

unsigned mg_jobs_threads(struct mg_jobs *j)
{
    pthread_mutex_lock(&j->mutex);
    unsigned n = j->threads;
    pthread_mutex_unlock(&j->mutex);
    return n;
}

void mg_jobs_ack(struct mg_jobs *j)
{
    uint64_t count;
    while (read(j->event_fd, &count, sizeof count) == sizeof count)
        ;
}

void mg_jobs_stop(struct mg_jobs *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mutex);
    j->stop = true;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->mutex);
    /* Each thread finishes the jobs queued before it sees stop (it takes work first). No new
     * thread starts now: only the loop starts them, and it is here. */
    for (unsigned i = 0; i < MG_JOBS_THREADS_MAX; i++) {
        struct helper *h = &j->helper[i];
        if (h->state == HELPER_EMPTY)
            continue;
        pthread_join(h->thread, NULL);
        if (h->opened)
            mg_db_close(&h->db);
    }
    close(j->event_fd);
    pthread_mutex_destroy(&j->mutex);
    pthread_cond_destroy(&j->cond);
    free(j);
}
