/* SPDX-License-Identifier: ISC */
#include "jobs.h"

#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

struct helper {
    struct mg_jobs *pool;
    pthread_t thread;
    enum { HELPER_EMPTY = 0, HELPER_RUNNING, HELPER_ENDED } state; /* ENDED: to be joined */
    bool opened;                                                   /* its connection is open */
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
    /* Requests that hold a permit for work on this pool (see mg_jobs_reserve). */
    const void *reserved[MG_JOBS_THREADS_MAX];
    unsigned reserved_count;
    bool stop;
    int nice;
    int event_fd;
    char db_path[4096];
    int busy_timeout_ms;
    _Atomic uint32_t *busy_word; /* in the segment: jobs in hand, at busy_shift */
    unsigned busy_shift;
    struct helper helper[MG_JOBS_THREADS_MAX];
};

static void *run(void *arg)
{
    struct helper *h = arg;
    struct mg_jobs *j = h->pool;
    /* Linux keeps a nice value per thread; raising it needs no privilege. */
    if (j->nice > 0 && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), j->nice) < 0)
        mg_warn("jobs: cannot lower the helper thread's priority: %s", strerror(errno));
    /* A thread started while the worker serves opens its connection here, off the loop: an
     * open reads the schema, which waits while a writer holds the database. */
    char err[512];
    if (!h->opened && mg_db_open(&h->db, j->db_path, j->busy_timeout_ms, err, sizeof err) != 0) {
        mg_warn("%s: a helper thread could not start; its job waits for another", err);
        pthread_mutex_lock(&j->mutex);
        h->state = HELPER_ENDED;
        j->threads--;
        j->idle--;
        pthread_mutex_unlock(&j->mutex);
        return NULL;
    }
    h->opened = true;
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
        job->run(job, &h->db);
        atomic_store(&job->done, 1);
        pthread_mutex_lock(&j->mutex);
        j->idle++;
        j->in_hand--;
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
        if (h->state == HELPER_ENDED)
            pthread_join(h->thread, NULL); /* it could not open its connection and returned */
        memset(h, 0, sizeof *h);
        h->pool = j;
        return h;
    }
    return NULL;
}

/* Under the mutex, or before the pool is shared: starts h's thread. Its connection is open
 * already (h->opened: the first thread, before the worker serves), or the thread opens it. */
static bool start_thread(struct mg_jobs *j, struct helper *h, char *err, size_t errlen)
{
    if (!h) {
        snprintf(err, errlen, "jobs: %d helper threads already", MG_JOBS_THREADS_MAX);
        return false;
    }
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

struct mg_jobs *mg_jobs_start(const struct mg_config *cfg, int nice, unsigned max_threads,
                              int *event_fd, _Atomic uint32_t *busy_word, unsigned busy_shift,
                              char *err, size_t errlen)
{
    struct mg_jobs *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "jobs: out of memory");
        return NULL;
    }
    snprintf(j->db_path, sizeof j->db_path, "%s", cfg->db_path);
    j->busy_timeout_ms = cfg->db_busy_timeout_ms;
    j->nice = nice;
    j->max_threads = max_threads < 1                     ? 1
                     : max_threads > MG_JOBS_THREADS_MAX ? MG_JOBS_THREADS_MAX
                                                         : max_threads;
    j->busy_word = busy_word;
    j->busy_shift = busy_shift;
    j->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&j->mutex, NULL);
    pthread_cond_init(&j->cond, NULL);
    /* The first connection is opened here, so a start that cannot open one fails. The
     * connection stays where it is opened: its handlers point at it. */
    struct helper *first = free_helper(j);
    if (j->event_fd < 0) {
        snprintf(err, errlen, "jobs: eventfd: %s", strerror(errno));
    } else if (mg_db_open(&first->db, j->db_path, j->busy_timeout_ms, err, errlen) == 0) {
        first->opened = true;
        pthread_mutex_lock(&j->mutex);
        bool started = start_thread(j, first, err, errlen);
        pthread_mutex_unlock(&j->mutex);
        if (started) {
            *event_fd = j->event_fd;
            return j;
        }
    }
    if (j->event_fd >= 0)
        close(j->event_fd);
    pthread_mutex_destroy(&j->mutex);
    pthread_cond_destroy(&j->cond);
    free(j);
    return NULL;
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
    /* Every job in hand has a thread: start one when none is idle, for work under a permit. */
    if (taken && j->idle <= j->queued && !job->under_permit) {
        taken = false;
    } else if (taken && j->idle <= j->queued) {
        char err[512];
        taken = start_thread(j, free_helper(j), err, sizeof err);
        if (!taken)
            mg_warn("%s (the job waits for a free helper)", err);
    }
    if (taken) {
        int at = reservation(j, job->owner);
        if (at >= 0)
            drop_reservation(j, at);
        atomic_store(&job->done, 0);
        j->queue[j->queued++] = job;
        j->in_hand++;
        if (j->busy_word)
            atomic_fetch_add(j->busy_word, 1u << j->busy_shift);
        /* Every waiting thread: the one counted idle for this job may be still starting. */
        pthread_cond_broadcast(&j->cond);
    }
    pthread_mutex_unlock(&j->mutex);
    return taken;
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
    bool busy = j->in_hand > 0 || j->reserved_count > 0;
    pthread_mutex_unlock(&j->mutex);
    return busy;
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
