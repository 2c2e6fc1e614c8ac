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

struct mg_jobs {
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    struct mg_job *pending; /* handed over, not yet taken */
    bool busy;              /* a job is pending or running */
    bool stop;
    int nice;
    int event_fd;
    struct mg_db db; /* opened by the first mg_jobs_submit */
    const struct mg_config *cfg;
    const struct mg_db *like; /* the worker's own connection: its schema flags */
    dev_t db_dev;             /* the file the worker opened, to open no other one */
    ino_t db_ino;
    int64_t warned_ns; /* the last warning that the connection could not be opened */
};

static void *run(void *arg)
{
    struct mg_jobs *j = arg;
    /* Linux keeps a nice value per thread; raising it needs no privilege. */
    if (j->nice > 0 && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), j->nice) < 0)
        mg_warn("jobs: cannot lower the helper thread's priority: %s", strerror(errno));
    pthread_mutex_lock(&j->mutex);
    for (;;) {
        while (!j->pending && !j->stop)
            pthread_cond_wait(&j->cond, &j->mutex);
        if (!j->pending)
            break;
        struct mg_job *job = j->pending;
        j->pending = NULL;
        pthread_mutex_unlock(&j->mutex);
        job->run(job, &j->db);
        /* Heavy work leaves pages in the cache, the map and this thread's arena. */
        mg_mem_release(&j->db);
        atomic_store(&job->done, 1);
        pthread_mutex_lock(&j->mutex);
        j->busy = false;
        uint64_t one = 1;
        if (write(j->event_fd, &one, sizeof one) < 0 && errno != EAGAIN)
            mg_warn("jobs: cannot signal the loop: %s", strerror(errno));
    }
    pthread_mutex_unlock(&j->mutex);
    return NULL;
}

struct mg_jobs *mg_jobs_start(const struct mg_config *cfg, const struct mg_db *like, int nice,
                              int *event_fd, char *err, size_t errlen)
{
    struct mg_jobs *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "jobs: out of memory");
        return NULL;
    }
    struct stat st;
    if (stat(cfg->db_path, &st) < 0) {
        snprintf(err, errlen, "jobs: database %s: %s", cfg->db_path, strerror(errno));
        free(j);
        return NULL;
    }
    j->db_dev = st.st_dev;
    j->db_ino = st.st_ino;
    j->cfg = cfg;
    j->like = like;
    j->nice = nice;
    j->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&j->mutex, NULL);
    pthread_cond_init(&j->cond, NULL);
    /* The loop handles signals (signalfd); the thread must never take one. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = j->event_fd < 0 ? errno : pthread_create(&j->thread, NULL, run, j);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "jobs: cannot start the helper thread: %s", strerror(rc));
        if (j->event_fd >= 0)
            close(j->event_fd);
        free(j);
        return NULL;
    }
    *event_fd = j->event_fd;
    return j;
}

/* Opens the thread's connection (on the loop, while the thread waits for work; it reads
 * nothing, so a writer's lock does not hold the loop up: the job waits for it). The file must
 * be the one the worker opened at start: after a replacement the old one is served until the
 * reload (docs/architecture.md, "A live database"), never the two at once. */
static bool open_connection(struct mg_jobs *j)
{
    char err[1200] = "";
    struct stat st;
    bool same = false;
    if (mg_db_open_like(&j->db, j->like, j->cfg->db_path, j->cfg->db_busy_timeout_ms, err,
                        sizeof err) == 0) {
        same = stat(j->cfg->db_path, &st) == 0 && st.st_dev == j->db_dev && st.st_ino == j->db_ino;
        if (same)
            return true;
        mg_db_close(&j->db);
        snprintf(err, sizeof err,
                 "database %s is not the file this worker opened (replaced?): reload (SIGHUP)",
                 j->cfg->db_path);
    }
    int64_t now = mg_monotonic_ns();
    if (j->warned_ns == 0 || now - j->warned_ns >= 10 * MG_NS_PER_SEC) {
        mg_warn("jobs: the helper thread cannot open its connection: %s", err);
        j->warned_ns = now;
    }
    return false;
}

bool mg_jobs_submit(struct mg_jobs *j, struct mg_job *job)
{
    if (!j->db.conn && !mg_jobs_busy(j) && !open_connection(j))
        return false;
    pthread_mutex_lock(&j->mutex);
    bool taken = !j->busy && !j->stop;
    if (taken) {
        atomic_store(&job->done, 0);
        j->pending = job;
        j->busy = true;
        pthread_cond_signal(&j->cond);
    }
    pthread_mutex_unlock(&j->mutex);
    return taken;
}

bool mg_jobs_busy(struct mg_jobs *j)
{
    pthread_mutex_lock(&j->mutex);
    bool busy = j->busy;
    pthread_mutex_unlock(&j->mutex);
    return busy;
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
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->mutex);
    pthread_join(j->thread, NULL);
    close(j->event_fd);
    mg_db_close(&j->db);
    pthread_mutex_destroy(&j->mutex);
    pthread_cond_destroy(&j->cond);
    free(j);
}
