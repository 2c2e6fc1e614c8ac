/*
 * log: one line per message on stderr, written with a single write(2) so lines from the
 * master and every worker never interleave. Under systemd the journal adds the time and the
 * unit name; each line carries the process's pid and role.
 */
#ifndef MESHGATE_LOG_H
#define MESHGATE_LOG_H

enum mg_log_level { MG_LOG_ERROR = 0, MG_LOG_WARN, MG_LOG_INFO, MG_LOG_DEBUG };

void mg_log_set_level(enum mg_log_level level);
enum mg_log_level mg_log_get_level(void);
/* The name printed before each message, e.g. "master" or "worker 3". */
void mg_log_set_role(const char *role);
void mg_log(enum mg_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes an already formatted line (the access log); adds the newline. */
void mg_log_raw(const char *line, int len);

#define mg_error(...) mg_log(MG_LOG_ERROR, __VA_ARGS__)
#define mg_warn(...) mg_log(MG_LOG_WARN, __VA_ARGS__)
#define mg_info(...) mg_log(MG_LOG_INFO, __VA_ARGS__)
#define mg_debug(...) mg_log(MG_LOG_DEBUG, __VA_ARGS__)

#endif
