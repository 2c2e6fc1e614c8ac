/* SPDX-License-Identifier: ISC */
/*
 * log: one line per message on stderr, written with a single write(2) so lines from the
 * master and every worker never interleave (lines are kept under MG_LOG_LINE_MAX bytes, at
 * most PIPE_BUF, which a pipe writes whole). Each line carries the process's pid and role.
 *
 * Where the lines go decides how they start (mg_log_init, once, before the first fork):
 *   - stderr is the journal's stream (JOURNAL_STREAM names the device and inode of our
 *     stderr, as sd-daemon(3) says to check): the line starts with the priority prefix of
 *     sd-daemon(3), "<3>" error, "<4>" warning, "<6>" info, "<7>" debug, so that
 *     `journalctl -p err` finds errors; the journal adds the time itself;
 *   - anywhere else (a terminal, a file, a pipe): the line starts with its time, RFC 3339 in
 *     UTC with milliseconds ("2026-12-01T15:04:05.123Z ").
 */
#ifndef MESHGATE_LOG_H
#define MESHGATE_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mg_log_level { MG_LOG_ERROR = 0, MG_LOG_WARN, MG_LOG_INFO, MG_LOG_DEBUG };

/* The longest line written, newline included: PIPE_BUF, so a pipe never splits one. */
#define MG_LOG_LINE_MAX 4096
/* "2026-12-01T15:04:05.123Z" and its NUL. */
#define MG_LOG_TIME_MAX 25

/* Decides between the journal's prefix and timestamps from JOURNAL_STREAM and stderr. */
void mg_log_init(void);

void mg_log_set_level(enum mg_log_level level);
/* The name printed before each message, e.g. "master" or "worker 3". */
void mg_log_set_role(const char *role);
void mg_log(enum mg_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Writes an already formatted line (the access log) at level info; adds the newline. A line
 * that carries its own time (has_time: Apache's combined format, JSON) gets the journal's
 * prefix only; any other gets the prefix or the time, as mg_log's lines do. A line longer
 * than fits is cut.
 */
void mg_log_raw(const char *line, size_t len, bool has_time);

/* For a signal handler: the prefix and msg (which ends with its newline, at most 480 bytes)
 * in one write, with async-signal-safe calls only. */
void mg_log_signal_safe(enum mg_log_level level, const char *msg, size_t len);

/* realtime_ns (CLOCK_REALTIME) as RFC 3339 UTC with milliseconds, into out (at least
 * MG_LOG_TIME_MAX bytes). */
void mg_log_format_time(int64_t realtime_ns, char *out, size_t outlen);

/* True when JOURNAL_STREAM's text ("DEV:INODE", decimal) names that device and inode. */
bool mg_log_journal_stream_is(const char *journal_stream, uint64_t dev, uint64_t ino);

#define mg_error(...) mg_log(MG_LOG_ERROR, __VA_ARGS__)
#define mg_warn(...) mg_log(MG_LOG_WARN, __VA_ARGS__)
#define mg_info(...) mg_log(MG_LOG_INFO, __VA_ARGS__)
#define mg_debug(...) mg_log(MG_LOG_DEBUG, __VA_ARGS__)

#endif
