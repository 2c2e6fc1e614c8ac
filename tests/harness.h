/* SPDX-License-Identifier: ISC */
/*
 * harness: what end-to-end tests share. It starts the real meshgate binary of this build
 * on a free loopback port with its own segment name, talks HTTP to it over real sockets,
 * and stops it by pid. Every wait is bounded; nothing is sent anywhere but 127.0.0.1.
 */
#ifndef MESHGATE_TEST_HARNESS_H
#define MESHGATE_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sqlite3.h>
#include <sys/types.h>

#ifndef MESHGATE_BUILD_DIR
#define MESHGATE_BUILD_DIR "build"
#endif
#ifndef MESHGATE_SOURCE_DIR
#define MESHGATE_SOURCE_DIR "."
#endif

struct mg_test_server {
    pid_t pid;
    int port;
    char shm_name[64];
    char log_path[256];
    char dir[128];   /* a private temporary directory (database, log) */
    int exit_status; /* wait status once stopped */
};

struct mg_test_response {
    int status;
    char head[8192]; /* status line and headers, NUL-terminated */
    char *body;      /* NUL-terminated, malloc'ed */
    size_t body_len;
};

/*
 * Cleanup whatever the outcome: every directory made by mg_test_tmpdir and every segment
 * registered here (the servers' own included) is removed when the test's process exits,
 * even after a failed assertion. A test killed outright (a timeout, a crash) cannot clean
 * up: the next registration in any later test removes the /dev/shm/mgtest-*-PID-* segments
 * of processes that no longer run.
 */
void mg_test_cleanup_shm(const char *name);
void mg_test_cleanup_dir(const char *dir);

/* A fresh private directory under /tmp (removed at exit); out gets its path. */
void mg_test_tmpdir(char *out, size_t cap);
/* Removes a directory made by mg_test_tmpdir and everything in it. */
void mg_test_rmdir(const char *dir);

/* Writes a database with CoreScope's base schema (migrated: with what CoreScope's migration
 * adds, as every live database has; never a table or column CoreScope lacks) and runs sql
 * (may be NULL) in it. Returns 0. */
int mg_test_make_db(const char *path, bool migrated, const char *sql);

/* sqlite3_open and sqlite3_open_v2 with a generous busy timeout (60 s) set on the new
 * connection: a test's connection waits for the server's readers and writers as any client
 * of the file would, however loaded the machine. Every test opens databases through these. */
#define MG_TEST_BUSY_TIMEOUT_MS 60000
int mg_test_sqlite_open(const char *path, sqlite3 **db);
int mg_test_sqlite_open_v2(const char *path, sqlite3 **db, int flags, const char *vfs);

/* Writes dir/keys holding one API key (mode 0600, as the server requires); setting gets
 * "MESHGATE_API_KEYS_FILE=dir/keys" for the server's environment. */
void mg_test_write_keys_file(const char *dir, const char *key, char *setting, size_t cap);

/* A database for reach reports: `count` repeaters (at most 14) whose keys are one repeated
 * byte each, with distinct first bytes (so each has a reliable token), heard along paths
 * through each other (upper-case hex) a minute ago. keys gets their public keys. */
void mg_test_make_reach_db(const char *path, char (*keys)[65], int count);

/* A TCP port on 127.0.0.1 that nothing listens on right now. */
int mg_test_free_port(void);
/* The index of the first of the n strings that text does not hold after the previous one's
 * start (each found past the one before it), or -1 when it holds them all in that order. */
int mg_test_missing_in_order(const char *text, const char *const *wanted, size_t n);

/*
 * Starts build/meshgate with MESHGATE_DB=db (NULL: a small database in the server's
 * directory), a free port, its own MESHGATE_SHM_NAME, MESHGATE_WORKERS=2 unless env says
 * otherwise, and each "NAME=value" of env (NULL-terminated, may be NULL). A server whose env
 * sets a MESHGATE_TEST_* variable (MESHGATE_TEST_HOOKS=park, say) is the test build,
 * build/meshgate-hooks (workers/test_hooks.h): the production binary has no hook and refuses
 * those names. Some entries are for the harness and not passed on: MG_TEST_UID=N runs the
 * server as that user; MG_TEST_JOURNAL_STREAM=1 sets JOURNAL_STREAM to the device and inode of
 * the log file, so the server writes as it does to the journal; MG_TEST_PORT=N listens on that
 * port, not a free one; MG_TEST_BINARY=NAME runs build/NAME whatever else env says.
 * Waits until the segment says it is running. Returns true when it is; false (with the log on
 * stderr) when it exited or did not get ready within 60 s.
 */
bool mg_test_server_start(struct mg_test_server *s, const char *db, const char *const *env);

/* Runs the binary with env and waits for it to exit (for start-up failures): returns the
 * wait status; the combined output goes to out. In env (here and for mg_test_server_start),
 * MG_TEST_ARG=x passes x as the one command-line argument (--check, say), and MG_TEST_UID=N
 * runs it as that user; neither reaches the binary's environment. */
int mg_test_run_expect_exit(const char *const *env, char *out, size_t cap, int timeout_ms);

/* SIGTERM, then wait up to timeout_ms (SIGKILL after it); removes the directory and segment.
 * Returns the exit status (WEXITSTATUS) or -1 when it had to be killed. */
int mg_test_server_stop(struct mg_test_server *s, int timeout_ms);

/* Reads the whole log of the server into a malloc'ed string. */
char *mg_test_server_log(const struct mg_test_server *s);
/* How often needle occurs in text (NULL: 0). */
int mg_test_count(const char *text, const char *needle);
/* Waits until the log holds needle `times` times, or ceiling_ms pass; returns the log. */
char *mg_test_wait_log(const struct mg_test_server *s, const char *needle, int times,
                       int ceiling_ms);

/* A blocking connection to 127.0.0.1:port with send/receive timeouts; -1 on failure. */
int mg_test_connect(int port);
/* Sends all of data; false on error. */
bool mg_test_send(int fd, const char *data, size_t len);
/*
 * Reads one response (head, then Content-Length bytes of body unless it is a response to
 * HEAD) within timeout_ms. Returns true when a whole response came.
 */
bool mg_test_read_response(int fd, struct mg_test_response *r, bool head_request, int timeout_ms);
/* One GET on a new connection ("Connection: close"); extra_headers may be NULL. */
/* Waits (ceiling 180 s) until /api/nodes?limit=1 answers 200 on port and the group has the
 * tables the list's fields come from (the hash sizes, and the relay probe or table: /metrics
 * counts a build or a copy of each): at a start the list answers at once with the fields as
 * CoreScope has them before its passes, which take longer than one GET's socket timeout under
 * ASan with several servers starting at once. */
bool mg_test_wait_node_list(int port);
bool mg_test_get(int port, const char *target, const char *extra_headers,
                 struct mg_test_response *r);
/* One GET: its body (malloc'ed; NULL: no answer), its status and whether the server answered
 * it in its first turn, never parked (the test build's X-Test-Prepared: turns=1). */
char *mg_test_get_turn(int port, const char *target, int *status, bool *first_turn);
/* The value of a response header (case-insensitive) copied into out; false when absent. */
bool mg_test_header(const struct mg_test_response *r, const char *name, char *out, size_t cap);
/* Inflates one gzip stream (RFC 1952) of exactly len bytes into a malloc'ed, NUL-terminated
 * buffer (its length in *out_len); NULL when it is not one. */
char *mg_test_gunzip(const char *in, size_t len, size_t *out_len);
void mg_test_response_free(struct mg_test_response *r);

/* A group counter as /metrics shows it (meshgate_NAME_total), or -1. */
long mg_test_metric(int port, const char *name);

/* True when the peer closed the connection (recv returns 0) within timeout_ms. */
bool mg_test_wait_closed(int fd, int timeout_ms);

/* The whole file at path, NUL-terminated and malloc'ed; NULL when it cannot be read. */
char *mg_test_read_file(const char *path);

/* Runs cmd through sh with its output (stdout, and stderr where cmd says 2>&1) in out;
 * returns its exit code, or -1 when it could not run or died by a signal. */
int mg_test_shell(const char *cmd, char *out, size_t cap);

int64_t mg_test_now_ms(void);
/* Only as the interval of a polling loop that waits for an event (mg_test_wait_until);
 * never to let something happen. */
void mg_test_sleep_ms(int ms);

/* Polls done(arg) every poll_ms until it is true (true) or ceiling_ms pass (false). The
 * ceiling is for a machine that is busy, and generous: a pass costs only the wait. */
bool mg_test_wait_until(bool (*done)(void *arg), void *arg, int ceiling_ms, int poll_ms);

/* The CPU time (user and system, all threads) process pid has used so far, in ms (the
 * kernel's tick, 10 ms, is its precision); -1 when it cannot be read. */
long mg_test_cpu_ms(int pid);

#endif
