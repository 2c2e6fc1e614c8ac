/* SPDX-License-Identifier: ISC */
/*
 * config: meshgate is configured only from MESHGATE_* variables: the process environment,
 * and the file MESHGATE_ENV_FILE names (envfile.h), the one systemd's EnvironmentFile= reads.
 * The environment wins over the file; what neither sets takes its default.
 *
 * Every variable is one row of a table (config.c): its name, kind, bounds, default and a
 * sentence for people. The table drives parsing, the summary printed at start, the copy
 * recorded in the shared segment, and a test that checks each variable is documented in
 * etc/meshgate.env and the README. A bad value never falls back to a default: the start
 * stops with a message naming the variable, its value and what is accepted (exit 78,
 * EX_CONFIG, which the systemd unit tells systemd not to restart on).
 *
 * struct mg_config holds no pointers, so it is copied as it is into the segment.
 */
#ifndef MESHGATE_CONFIG_H
#define MESHGATE_CONFIG_H

#include "config_values.h"
#include "envfile.h"
#include "netaddr.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_EXIT_CONFIG 78 /* EX_CONFIG from sysexits.h */

enum mg_config_kind {
    MG_CFG_INT,
    MG_CFG_INT_AUTO, /* a whole number, or "auto" (MG_CONFIG_AUTO) resolved from others */
    MG_CFG_BOOL,
    MG_CFG_STRING,
    MG_CFG_PATH,
    MG_CFG_LISTEN,
    MG_CFG_SHM_NAME,
    MG_CFG_HOSTPORT, /* empty, or HOST:PORT / [IPV6]:PORT: a host to connect to */
    MG_CFG_LOG_LEVEL,
    MG_CFG_CIDRS,      /* a list of addresses and networks, kept as text and parsed (netaddr.h) */
    MG_CFG_ACCESS_LOG, /* enum mg_access_log: 0 (and the other false words), 1 (and the true
                          words), combined or json */
    MG_CFG_ADDRESS,    /* empty, or HOST:PORT as MESHGATE_LISTEN takes it, kept as text */
    MG_CFG_ROUTES,     /* native routes by their template (workers/api/router.c), comma-separated */
};

/*
 * What SIGHUP does with a variable the file changes (docs/architecture.md, "Reload"):
 *   live     applied: in place in the segment where a gate keeps it, and by the workers that
 *            replace the old ones one at a time (each forks with the new configuration);
 *   restart  kept at its running value, with one warning naming it: it shapes the segment
 *            (a table's size), or it is the socket, the segment's name or the database.
 * A row without a decision is a defect (tests/test_config.c) and is treated as restart.
 */
enum mg_config_reload { MG_RELOAD_UNSET = 0, MG_RELOAD_LIVE, MG_RELOAD_RESTART };

struct mg_config_var {
    const char *name;
    enum mg_config_kind kind;
    size_t offset; /* into struct mg_config */
    size_t size;   /* of the field, for strings */
    int64_t min, max;
    const char *default_value; /* as a person writes it; NULL: required */
    const char *help;
    enum mg_config_reload reload;
};

/* The table, ending with a row whose name is NULL. */
extern const struct mg_config_var mg_config_vars[];

/* Looks a variable up by name; NULL when it is not one of ours. */
typedef const char *(*mg_getenv_fn)(const char *name, void *arg);

/*
 * Fills cfg from the environment (getenv when lookup is NULL). Returns 0, or -1 with a
 * message for people in err. Unknown MESHGATE_* variables are reported through warn (so a
 * typo is seen) but do not stop the start.
 */
int mg_config_load(struct mg_config *cfg, mg_getenv_fn lookup, void *arg, char *err, size_t errlen);

/*
 * Fills in the values left "auto" (the cold queue: half the workers minus the cold cap; the
 * anonymous line's permits: half the workers, at least 1) and checks values that depend on
 * each other. A combination that works but defeats a gate's purpose is not an
 * error: warning (empty when all is well) says why. Returns 0.
 */
int mg_config_resolve(struct mg_config *cfg, char *warning, size_t warnlen);

/*
 * MESHGATE_PUBLIC_DIR, when set, must name a directory meshgate can read (checked at start,
 * so a typo is not every static request answering 500). Returns 0, or -1 with the message.
 */
int mg_config_check_public_dir(const struct mg_config *cfg, char *err, size_t errlen);

/* MESHGATE_STATE_DIR, when set, must name a directory meshgate can write that is not the
 * database's (checked at start). Returns 0, or -1 with the message. */
int mg_config_check_state_dir(const struct mg_config *cfg, char *err, size_t errlen);

/* Names MESHGATE_* variables in envp that no row of the table knows, each with the closest
 * known name; returns how many. Only the test build knows its hooks' MESHGATE_TEST_*
 * variables (workers/test_hooks.h). The start and --check refuse any (exit 78);
 * mg_config_load_sources refuses one in the file. */
int mg_config_unknown(char *const *envp, char *out, size_t outlen);
/* The known name closest to name[0..n) (by edit distance). */
const char *mg_config_closest(const char *name, size_t n);

/* One line per variable, "NAME=value", for the start-up summary and the dump tool. */
void mg_config_describe(const struct mg_config *cfg, void (*line)(const char *, void *), void *arg);

/* The segment name when MESHGATE_SHM_NAME is empty: "/meshgate-<host>-<port>", sanitized. */
void mg_config_default_shm_name(const char *host, unsigned port, char *out, size_t outlen);

const char *mg_log_level_name(int level);
/* "0", "1", "combined" or "json", as MESHGATE_ACCESS_LOG is written. */
const char *mg_access_log_name(int format);

/* ---- where values come from: the environment, then MESHGATE_ENV_FILE -------------------- */

#define MG_CONFIG_VARS_MAX 96

/*
 * The environment at start and the file as last read. A variable the environment sets wins
 * for the life of the process (the environment of a running process cannot change), except
 * when it holds exactly the file's value at start: that is the file passed on by systemd's
 * EnvironmentFile=, and a reload takes the file's new value. MESHGATE_ENV_FILE itself is
 * read from the environment only.
 */
struct mg_config_sources {
    mg_getenv_fn env; /* getenv when NULL */
    void *env_arg;
    char file_path[MG_PATH_MAX]; /* empty: no file */
    struct mg_envfile file;
    bool env_wins[MG_CONFIG_VARS_MAX]; /* by row of mg_config_vars */
};

/* At start: notes what the environment sets and reads the file it names. Returns 0, or -1
 * with a message (the file cannot be read or parsed). */
int mg_config_sources_init(struct mg_config_sources *s, mg_getenv_fn env, void *env_arg, char *err,
                           size_t errlen);
/* On reload: reads the file again into *next (a copy of s with the new file). s is not
 * changed. Returns 0, or -1 with a message. */
int mg_config_sources_reread(const struct mg_config_sources *s, struct mg_config_sources *next,
                             char *err, size_t errlen);
void mg_config_sources_free(struct mg_config_sources *s);

/* mg_config_load from the sources: the environment where it wins, else the file, else the
 * default. */
int mg_config_load_sources(struct mg_config *cfg, const struct mg_config_sources *s, char *err,
                           size_t errlen);

/* One line per variable the file sets that the environment overrides, and per unknown
 * MESHGATE_* name in the file, through line. Returns how many. */
int mg_config_sources_notes(const struct mg_config_sources *s, void (*line)(const char *, void *),
                            void *arg);

/*
 * For a reload: next (as loaded, before mg_config_resolve) takes running's value of every
 * variable that needs a restart and differs, with one line through warn naming it. So do
 * MESHGATE_WORKERS above worker_slots (the segment's scoreboard has no more slots) and
 * MESHGATE_MAX_CONNS_PER_CLIENT turned on or off (the connection table is sized at start).
 * Returns how many were kept.
 */
int mg_config_keep_restart_settings(const struct mg_config *running, struct mg_config *next,
                                    unsigned worker_slots, void (*warn)(const char *, void *),
                                    void *arg);

/* "NAME=value" of one variable of cfg, as mg_config_describe writes it. */
void mg_config_describe_var(const struct mg_config *cfg, const struct mg_config_var *v, char *out,
                            size_t cap);

#endif
