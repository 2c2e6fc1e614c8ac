/* SPDX-License-Identifier: ISC */
#include "preflight.h"

#include "corescope_config.h"
#include "db.h"
#include "keys.h"
#include "listener.h"
#include "log.h"
#include "static_files.h"

#include <netdb.h>
#include <stdio.h>
#include <sys/socket.h>

static int check_public_dir(const struct mg_config *cfg, char *err, size_t errlen)
{
    return mg_config_check_public_dir(cfg, err, errlen) < 0 ? MG_EXIT_CONFIG : 0;
}

static int check_state_dir(const struct mg_config *cfg, char *err, size_t errlen)
{
    return mg_config_check_state_dir(cfg, err, errlen) < 0 ? MG_EXIT_CONFIG : 0;
}

static void guarded_in_public_dir(const char *path, const char *what, void *arg)
{
    (void)arg;
    mg_warn("MESHGATE_PUBLIC_DIR: %s is %s: it is never served (a request for it is answered "
            "404 unopened), but it does not belong in the public directory",
            path, what);
}

/* Warns of the database, its side files and meshgate's secrets in the public directory
 * (static_files.h); passes. */
static int check_public_dir_contents(const struct mg_config *cfg, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    mg_static_guard_scan(cfg, guarded_in_public_dir, NULL);
    return 0;
}

/* Opens the database read-only and checks its schema and its WAL files, as every worker
 * will (db.h); writes nothing. Warns first when that open would create the -wal or -shm as
 * root beside another user's database (mg_db_side_files_warning). */
static int check_database(const struct mg_config *cfg, char *err, size_t errlen)
{
    char why[900], note[2048];
    if (mg_db_side_files_warning(cfg->db_path, note, sizeof note))
        mg_warn("MESHGATE_DB: %s", note);
    int rc = mg_db_check(cfg->db_path, why, sizeof why);
    if (rc != 0)
        snprintf(err, errlen, "MESHGATE_DB: %s", why);
    return rc;
}

static int check_api_keys(const struct mg_config *cfg, char *err, size_t errlen)
{
    return mg_keys_load(&mg_api_keys, cfg->api_keys_file, err, errlen) < 0 ? MG_EXIT_CONFIG : 0;
}

/* Parsed once here; the workers serve what it rendered (corescope_config.h). */
static int check_corescope_config(const struct mg_config *cfg, char *err, size_t errlen)
{
    mg_corescope_free(&mg_corescope);
    return mg_corescope_load(&mg_corescope, cfg->corescope_config, err, errlen) < 0 ? MG_EXIT_CONFIG
                                                                                    : 0;
}

static int check_listen_address(const struct mg_config *cfg, char *err, size_t errlen)
{
    return mg_listener_check(cfg, err, errlen) < 0 ? MG_EXIT_CONFIG : 0;
}

/* The upstream's host must resolve; the upstream need not be up (it may start after us). */
static int check_upstream(const struct mg_config *cfg, char *err, size_t errlen)
{
    if (!cfg->upstream[0])
        return 0;
    char host[MG_HOST_MAX], port_text[8];
    uint16_t port;
    if (mg_addr_parse_host_port(cfg->upstream, host, sizeof host, &port) < 0) {
        snprintf(err, errlen, "MESHGATE_UPSTREAM=%s: must be HOST:PORT", cfg->upstream);
        return MG_EXIT_CONFIG;
    }
    snprintf(port_text, sizeof port_text, "%u", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port_text, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "MESHGATE_UPSTREAM=%s: cannot resolve %s: %s", cfg->upstream, host,
                 gai_strerror(rc));
        return MG_EXIT_CONFIG;
    }
    freeaddrinfo(res);
    return 0;
}

const struct mg_preflight_step mg_preflight_steps[] = {
    {"MESHGATE_PUBLIC_DIR", check_public_dir, false},
    {"MESHGATE_DB", check_database, false},
    {"MESHGATE_STATE_DIR", check_state_dir, false},
    {"MESHGATE_API_KEYS_FILE", check_api_keys, false},
    {"MESHGATE_CORESCOPE_CONFIG", check_corescope_config, false},
    {"MESHGATE_PUBLIC_DIR", check_public_dir_contents, true},
    {"MESHGATE_UPSTREAM", check_upstream, false},
    {"MESHGATE_LISTEN", check_listen_address, true},
    {NULL, NULL, false},
};

int mg_preflight(const struct mg_config *cfg, enum mg_preflight_mode mode, char *err, size_t errlen)
{
    for (const struct mg_preflight_step *s = mg_preflight_steps; s->what; s++) {
        if (s->check_only && mode != MG_PREFLIGHT_CHECK)
            continue;
        int rc = s->run(cfg, err, errlen);
        if (rc != 0)
            return rc;
    }
    return 0;
}
