/* SPDX-License-Identifier: ISC */
#include "proc_io.h"

#include "segment.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A whole non-negative decimal number filling s[0..len) after spaces; false otherwise. */
static bool whole_number(const char *s, size_t len, int64_t *out)
{
    while (len > 0 && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\r'))
        len--;
    if (len == 0 || len > 19)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        int d = s[i] - '0';
        if (v > (INT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

bool mg_proc_io_parse(const char *text, size_t len, struct mg_proc_io *out)
{
    static const struct {
        const char *key;
        size_t offset;
    } keys[] = {
        {"read_bytes", offsetof(struct mg_proc_io, read_bytes)},
        {"write_bytes", offsetof(struct mg_proc_io, write_bytes)},
        {"cancelled_write_bytes", offsetof(struct mg_proc_io, cancelled_write_bytes)},
        {"syscr", offsetof(struct mg_proc_io, syscr)},
        {"syscw", offsetof(struct mg_proc_io, syscw)},
    };
    memset(out, 0, sizeof *out);
    bool any = false;
    const char *end = text + len;
    for (const char *line = text; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *stop = nl ? nl : end;
        const char *colon = memchr(line, ':', (size_t)(stop - line));
        if (colon) {
            size_t klen = (size_t)(colon - line);
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
                int64_t v;
                if (strlen(keys[k].key) == klen && memcmp(keys[k].key, line, klen) == 0 &&
                    whole_number(colon + 1, (size_t)(stop - colon - 1), &v)) {
                    *(int64_t *)((char *)out + keys[k].offset) = v;
                    any = true;
                }
            }
        }
        line = stop + 1;
    }
    return any;
}

bool mg_proc_io_read(int pid, struct mg_proc_io_sample *out)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/io", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, text, sizeof text);
    close(fd);
    if (n <= 0 || !mg_proc_io_parse(text, (size_t)n, &out->io))
        return false;
    out->pid = pid;
    out->start_ticks = mg_process_start_ticks(pid);
    return true;
}

static int64_t grown(int64_t before, int64_t after)
{
    return after > before ? after - before : 0;
}

void mg_proc_io_delta(const struct mg_proc_io_sample *before, size_t before_n,
                      const struct mg_proc_io_sample *after, size_t after_n, struct mg_proc_io *sum)
{
    memset(sum, 0, sizeof *sum);
    for (size_t a = 0; a < after_n; a++)
        for (size_t b = 0; b < before_n; b++) {
            if (before[b].pid != after[a].pid || before[b].start_ticks != after[a].start_ticks)
                continue;
            const struct mg_proc_io *x = &before[b].io, *y = &after[a].io;
            sum->read_bytes += grown(x->read_bytes, y->read_bytes);
            sum->write_bytes += grown(x->write_bytes, y->write_bytes);
            sum->cancelled_write_bytes += grown(x->cancelled_write_bytes, y->cancelled_write_bytes);
            sum->syscr += grown(x->syscr, y->syscr);
            sum->syscw += grown(x->syscw, y->syscw);
            break;
        }
}
