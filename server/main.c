/* SPDX-License-Identifier: ISC */
/*
 * meshgate: a prefork HTTP server for CoreScope's read API. This file only gathers the
 * start-up: configuration, the database check, the listening socket; then the master runs.
 * Exit codes (sysexits.h): 0 stopped cleanly; 64 bad command line; 65 the database is not a
 * CoreScope database; 66 the database is missing or unreadable; 71 a system error (socket,
 * signals); 73 another live meshgate uses the segment name; 78 bad configuration.
 * `meshgate --check` (-t) runs the same checks, prints the effective configuration and exits
 * with the code a start would have, creating nothing (preflight.h).
 */
#include "build_info.h"
#include "config.h"
#include "db.h"
#include "keys.h"
#include "agent.h"
#include "listener.h"
#include "log.h"
#include "master.h"
#include "preflight.h"
#include "version.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static void print_line(const char *line, void *arg)
{
    (void)arg;
    mg_info("  %s", line);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: meshgate [--check | -t | --help | --version]\n\n"
                 "  --check, -t  check the configuration and everything it names (the database,\n"
                 "               the key file, the public directory, the listen address), print\n"
                 "               the effective configuration and exit: 0, or the exit code and\n"
                 "               message of a start; touches no running server\n\n"
                 "meshgate is configured by environment variables, and by the file\n"
                 "MESHGATE_ENV_FILE names (the environment wins over the file):\n\n");
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++)
        fprintf(out, "  %-32s %s\n  %-32s default: %s; %s\n", v->name, v->help, "",
                v->default_value ? (*v->default_value ? v->default_value : "(empty)")
                                 : "(required)",
                v->reload == MG_RELOAD_LIVE ? "a reload applies it" : "needs a restart");
    fprintf(out, "\nSee meshgate(8) and etc/meshgate.env.\n");
}

static void warn_line(const char *line, void *arg)
{
    (void)arg;
    mg_warn("%s", line);
}

int main(int argc, char **argv)
{
    setproctitle_init(argc, argv, environ);
    mg_log_init();
    mg_log_set_role("master");
    bool check = false;
    if (argc > 1) {
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[1], "--version") == 0) {
            printf("meshgate %s (commit %s, built %s)\n", MESHGATE_VERSION, mg_build_commit(),
                   mg_build_time());
            return 0;
        }
        check = strcmp(argv[1], "--check") == 0 || strcmp(argv[1], "-t") == 0;
        if (!check || argc > 2) {
            mg_error("unknown argument %s (configuration comes from MESHGATE_* environment "
                     "variables and MESHGATE_ENV_FILE; see --help)",
                     argv[check ? 2 : 1]);
            return 64;
        }
    }

    /* Where the configuration comes from: the environment, then MESHGATE_ENV_FILE. */
    static struct mg_config_sources sources;
    struct mg_config loaded, cfg;
    char err[1024];
    if (mg_config_sources_init(&sources, NULL, NULL, err, sizeof err) < 0 ||
        mg_config_load_sources(&loaded, &sources, err, sizeof err) < 0) {
        mg_error("%s", err);
        return MG_EXIT_CONFIG;
    }
    cfg = loaded;
    mg_log_set_level((enum mg_log_level)cfg.log_level);
    mg_log_set_role(check ? "check" : "master");
    mg_config_resolve(&cfg, err, sizeof err);
    if (err[0])
        mg_warn("%s", err);
    char unknown[512];
    if (mg_config_unknown(environ, unknown, sizeof unknown) > 0) {
        mg_error("unknown variable(s) %s: see meshgate --help", unknown);
        return MG_EXIT_CONFIG;
    }
    mg_config_sources_notes(&sources, warn_line, NULL);

    /* Everything the configuration names, before anything is created. */
    int rc = mg_preflight(&cfg, check ? MG_PREFLIGHT_CHECK : MG_PREFLIGHT_START, err, sizeof err);
    if (rc != 0) {
        mg_error("%s", err);
        return rc;
    }
    if (mg_api_keys.count)
        mg_info("%u API key(s) loaded", mg_api_keys.count);

    if (check) {
        if (!cfg.shm_name[0])
            mg_config_default_shm_name(cfg.listen_host, cfg.listen_port, cfg.shm_name,
                                       sizeof cfg.shm_name);
        mg_info("effective configuration:");
        mg_config_describe(&cfg, print_line, NULL);
        mg_info("configuration check passed: the database, %s, the listen address and every "
                "value are valid (nothing was started or changed)",
                cfg.api_keys_file[0] ? "the API key file" : "no API key file");
        return 0;
    }

    bool from_systemd = false;
    int listen_fd = mg_listener_open(&cfg, &from_systemd, err, sizeof err);
    if (listen_fd < 0) {
        mg_error("%s", err);
        return strncmp(err, "MESHGATE_LISTEN", 15) == 0 && strstr(err, "resolve") ? MG_EXIT_CONFIG
                                                                                  : 71;
    }
    int agent_fd = -1;
    if (cfg.agent_listen[0]) {
        agent_fd = mg_agent_listen(cfg.agent_listen, err, sizeof err);
        if (agent_fd < 0) {
            mg_error("%s", err);
            close(listen_fd);
            return strstr(err, "resolve") ? MG_EXIT_CONFIG : 71;
        }
        mg_info("HAProxy's agent-check port on %s (MESHGATE_AGENT_LISTEN)", cfg.agent_listen);
    }
    char desc[300], host[MG_HOST_MAX];
    unsigned port;
    mg_listener_describe(listen_fd, desc, sizeof desc, host, sizeof host, &port);
    /* The default name follows MESHGATE_LISTEN as written, so meshgate-shm derives the same
     * one from the same environment; under socket activation, from systemd's socket. */
    if (!cfg.shm_name[0] && from_systemd)
        mg_config_default_shm_name(host, port, cfg.shm_name, sizeof cfg.shm_name);
    else if (!cfg.shm_name[0])
        mg_config_default_shm_name(cfg.listen_host, cfg.listen_port, cfg.shm_name,
                                   sizeof cfg.shm_name);

    mg_info("meshgate %s (commit %s) starting (%s socket %s)", MESHGATE_VERSION, mg_build_commit(),
            from_systemd ? "systemd's" : "own", desc);
    if (sources.file_path[0])
        mg_info("configuration from the environment and %s (the environment wins; SIGHUP "
                "reads the file again)",
                sources.file_path);
    mg_info("effective configuration:");
    mg_config_describe(&cfg, print_line, NULL);
    return mg_master_run(&cfg, &loaded, &sources, listen_fd, agent_fd, desc);
}
