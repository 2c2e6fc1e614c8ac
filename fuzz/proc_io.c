/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the /proc/PID/io parser of /api/perf/io (workers/data/proc_io.c). The input is
 * the file's text. Checks: every counter read is a whole number >= 0; what it read, written
 * back in the kernel's form, reads back the same; a delta of a sample with itself is zero.
 */
#include "proc_io.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    struct mg_proc_io io;
    if (!mg_proc_io_parse((const char *)data, size, &io))
        return 0;
    if (io.read_bytes < 0 || io.write_bytes < 0 || io.cancelled_write_bytes < 0 || io.syscr < 0 ||
        io.syscw < 0)
        abort();
    char text[512];
    int n =
        snprintf(text, sizeof text,
                 "rchar: 1\nwchar: 2\nsyscr: %" PRId64 "\nsyscw: %" PRId64 "\nread_bytes: %" PRId64
                 "\nwrite_bytes: %" PRId64 "\ncancelled_write_bytes: %" PRId64 "\n",
                 io.syscr, io.syscw, io.read_bytes, io.write_bytes, io.cancelled_write_bytes);
    struct mg_proc_io again;
    if (n <= 0 || (size_t)n >= sizeof text || !mg_proc_io_parse(text, (size_t)n, &again) ||
        memcmp(&io, &again, sizeof io) != 0)
        abort();
    struct mg_proc_io_sample s = {.pid = 1, .start_ticks = 2, .io = io};
    struct mg_proc_io d;
    mg_proc_io_delta(&s, 1, &s, 1, &d);
    if (d.read_bytes || d.write_bytes || d.cancelled_write_bytes || d.syscr || d.syscw)
        abort();
    return 0;
}
