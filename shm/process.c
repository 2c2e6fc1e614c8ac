/* SPDX-License-Identifier: ISC */
#include "process.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ssize_t read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return n;
}

enum mg_process_state mg_process_state(int pid, char *letter)
{
    if (letter)
        *letter = '?';
    if (pid <= 0)
        return MG_PROCESS_GONE;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    if (read_small(path, buf, sizeof buf) <= 0)
        return kill(pid, 0) < 0 && errno == ESRCH ? MG_PROCESS_GONE : MG_PROCESS_RUNNING;
    /* The command name (field 2) may hold spaces and ')': the state follows the last ')'. */
    const char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return MG_PROCESS_RUNNING;
    char c = p[2];
    if (letter)
        *letter = c;
    switch (c) {
    case 'Z':
    case 'X':
    case 'x':
        return MG_PROCESS_GONE;
    case 'T':
    case 't':
        return MG_PROCESS_STOPPED;
    default:
        return MG_PROCESS_RUNNING;
    }
}

const char *mg_process_state_name(enum mg_process_state state)
{
    switch (state) {
    case MG_PROCESS_GONE:
        return "gone";
    case MG_PROCESS_STOPPED:
        return "stopped";
    case MG_PROCESS_RUNNING:
        return "running";
    }
    return "?";
}

bool mg_process_comm(int pid, char *out, size_t cap)
{
    char path[64], buf[64];
    snprintf(path, sizeof path, "/proc/%d/comm", pid);
    ssize_t n = read_small(path, buf, sizeof buf);
    if (n <= 0)
        return false;
    if (buf[n - 1] == '\n')
        buf[n - 1] = '\0';
    snprintf(out, cap, "%s", buf);
    return true;
}

static _Atomic int self_pid;
static pthread_once_t self_pid_once = PTHREAD_ONCE_INIT;

static void forget_self_pid(void)
{
    atomic_store(&self_pid, 0);
}

static void watch_forks(void)
{
    pthread_atfork(NULL, NULL, forget_self_pid);
}

int mg_self_pid(void)
{
    int pid = atomic_load_explicit(&self_pid, memory_order_relaxed);
    if (pid == 0) {
        pthread_once(&self_pid_once, watch_forks);
        pid = getpid();
        atomic_store_explicit(&self_pid, pid, memory_order_relaxed);
    }
    return pid;
}

uint64_t mg_process_start_ticks(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and ')'; fields restart after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    /* starttime is field 22; after ')' comes field 3. */
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p + 1, ' ');
    }
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

bool mg_process_alive(int pid, uint64_t start_ticks)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return false;
    if (start_ticks) {
        uint64_t now_ticks = mg_process_start_ticks(pid);
        if (now_ticks && now_ticks != start_ticks)
            return false; /* the pid was reused by another process */
    }
    return true;
}

bool mg_process_is_meshgate(int pid, uint64_t start_ticks)
{
    if (pid <= 0)
        return false;
    /* EPERM: another user's process, which cannot be the master of a segment we may open
     * (it is created 0600). */
    if (kill(pid, 0) < 0)
        return false;
    if (!mg_process_alive(pid, start_ticks))
        return false;
    char theirs[32], ours[32];
    if (!mg_process_comm(pid, theirs, sizeof theirs))
        return true; /* /proc does not say (hidepid): assume the worst, it may be one */
    if (strcmp(theirs, "meshgate") == 0)
        return true;
    return mg_process_comm(getpid(), ours, sizeof ours) && strcmp(theirs, ours) == 0;
}
