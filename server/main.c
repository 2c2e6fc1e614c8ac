/*
 * meshgate: a prefork HTTP server for CoreScope's read API. This file only gathers the
 * start-up: configuration, the database check, the listening socket; then the master runs.
 * Exit codes (sysexits.h): 0 stopped cleanly; 64 bad command line; 65 the database is not a
 * CoreScope database; 66 the database is missing or unreadable; 71 a system error (socket,
 * signals); 73 another live meshgate uses the segment name; 78 bad configuration.
 */
#include "build_info.h"
#include "config.h"
#include "db.h"
#include "keys.h"
#include "listener.h"
#include "log.h"
#include "master.h"
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
    fprintf(out, "usage: meshgate [--help | --version]\n\n"
                 "meshgate is configured only by environment variables:\n\n");
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++)
        fprintf(out, "  %-32s %s\n  %-32s default: %s\n", v->name, v->help, "",
                v->default_value ? (*v->default_value ? v->default_value : "(empty)")
                                 : "(required)");
    fprintf(out, "\nSee meshgate(8) and etc/meshgate.env.\n");
}

int main(int argc, char **argv)
{
    setproctitle_init(argc, argv, environ);
    mg_log_init();
    mg_log_set_role("master");
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
        mg_error("unknown argument %s (configuration comes from MESHGATE_* environment "
                 "variables; see --help)",
                 argv[1]);
        return 64;
    }

    struct mg_config cfg;
    char err[1024];
    if (mg_config_load(&cfg, NULL, NULL, err, sizeof err) < 0) {
        mg_error("%s", err);
        return MG_EXIT_CONFIG;
    }
    if (mg_config_check_public_dir(&cfg, err, sizeof err) < 0) {
        mg_error("%s", err);
        return MG_EXIT_CONFIG;
    }
    mg_log_set_level((enum mg_log_level)cfg.log_level);
    mg_config_resolve(&cfg, err, sizeof err);
    if (err[0])
        mg_warn("%s", err);
    char unknown[512];
    if (mg_config_unknown(environ, unknown, sizeof unknown) > 0)
        mg_warn("ignoring unknown variable(s) %s: see meshgate --help", unknown);

    int rc = mg_db_check(cfg.db_path, err, sizeof err);
    if (rc != 0) {
        mg_error("MESHGATE_DB: %s", err);
        return rc;
    }

    if (mg_keys_load(&mg_api_keys, cfg.api_keys_file, err, sizeof err) < 0) {
        mg_error("%s", err);
        return MG_EXIT_CONFIG;
    }
    if (mg_api_keys.count)
        mg_info("%u API key(s) loaded", mg_api_keys.count);

    bool from_systemd = false;
    int listen_fd = mg_listener_open(&cfg, &from_systemd, err, sizeof err);
    if (listen_fd < 0) {
        mg_error("%s", err);
        return strncmp(err, "MESHGATE_LISTEN", 15) == 0 && strstr(err, "resolve") ? MG_EXIT_CONFIG
                                                                                  : 71;
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
    mg_info("effective configuration:");
    mg_config_describe(&cfg, print_line, NULL);
    return mg_master_run(&cfg, listen_fd, desc);
}
