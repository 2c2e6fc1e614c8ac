/* SPDX-License-Identifier: ISC */
/*
 * proc_io: a process's I/O counters from /proc/PID/io (read_bytes, write_bytes,
 * cancelled_write_bytes, syscr, syscw: proc(5)), and what a group of processes did between two
 * samples (/api/perf/io). A process is one pid and its start time, so a pid used again by a
 * new process between two samples is not taken for the old one.
 */
#ifndef MESHGATE_PROC_IO_H
#define MESHGATE_PROC_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mg_proc_io {
    int64_t read_bytes, write_bytes, cancelled_write_bytes, syscr, syscw;
};

struct mg_proc_io_sample {
    int pid;
    uint64_t start_ticks; /* /proc/PID/stat starttime */
    struct mg_proc_io io;
};

/* Parses the text of /proc/PID/io ("key: value" lines; unknown keys and malformed lines are
 * skipped). False when no line named one of the five counters with a whole number. */
bool mg_proc_io_parse(const char *text, size_t len, struct mg_proc_io *out);

/* Reads pid's counters; false when it is gone or may not be read. */
bool mg_proc_io_read(int pid, struct mg_proc_io_sample *out);

/* The sum, over the processes of `after` that are in `before` too (same pid and start time),
 * of what each counted in between (a counter that went back counts 0). */
void mg_proc_io_delta(const struct mg_proc_io_sample *before, size_t before_n,
                      const struct mg_proc_io_sample *after, size_t after_n,
                      struct mg_proc_io *sum);

#endif
