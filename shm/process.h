/* SPDX-License-Identifier: ISC */
/*
 * process: what /proc says about another process, for the code that must decide whether a
 * pid found in shared memory can still act: the holder of a lock, the master named by a
 * segment's header.
 *
 * A process counts as running only when it can execute: a stopped one (SIGSTOP, a
 * debugger: state T or t) holds what it holds until someone resumes it, which may be never,
 * and a zombie (Z, X) will never touch memory again.
 */
#ifndef MESHGATE_PROCESS_H
#define MESHGATE_PROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mg_process_state {
    MG_PROCESS_GONE = 0, /* no such pid, or a zombie: it will never run again */
    MG_PROCESS_STOPPED,  /* T or t: stopped by a signal or a debugger */
    MG_PROCESS_RUNNING,  /* anything else, including D (uninterruptible sleep) */
};

/* The state of pid from /proc/PID/stat; *letter (may be NULL) gets the kernel's letter ('?'
 * when the pid is gone). A pid /proc does not show (hidepid) counts as running when
 * kill(pid, 0) finds it. */
enum mg_process_state mg_process_state(int pid, char *letter);

/* The state's name for a log line: "gone", "stopped", "running". */
const char *mg_process_state_name(enum mg_process_state state);

/* The command name of pid (/proc/PID/comm, at most 15 bytes) into out; false when unknown. */
bool mg_process_comm(int pid, char *out, size_t cap);

/* This process's pid without a system call each time (glibc's getpid is one): read once and
 * kept, forgotten in a child at fork. For readers asked thousands of times a second
 * (/api/healthz's gates). */
int mg_self_pid(void);

/* Start time of a process in clock ticks since boot (from /proc), 0 when unknown. */
uint64_t mg_process_start_ticks(int pid);
/* True when pid runs and, if start_ticks is not 0, is the process that started then. */
bool mg_process_alive(int pid, uint64_t start_ticks);
/* True when pid is a running meshgate that may be the master a header names: alive as
 * above, one we may signal, and with meshgate's command name (or this program's). */
bool mg_process_is_meshgate(int pid, uint64_t start_ticks);

#endif
