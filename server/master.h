/* SPDX-License-Identifier: ISC */
/*
 * master: the process systemd starts. It owns the listening socket and the segment, forks
 * the workers, reaps them, gives back what a dead worker held, respawns it (with a backoff
 * when it dies young, so a worker that crashes at once is not a fork storm), and turns
 * signals into the server's life cycle:
 *
 *   STARTING --all workers out of STARTING--> RUNNING (READY=1)
 *   RUNNING --SIGHUP--> RELOADING: MESHGATE_ENV_FILE is read again and checked (a file that
 *                       fails changes nothing: no reload); gates take their new limits in
 *                       place; each worker in turn is told to drain and is replaced, with the
 *                       new configuration, as soon as it has exited; the listening socket
 *                       stays open throughout, so no connection is refused --> RUNNING
 *   any --SIGTERM/SIGINT--> DRAINING: the listening socket closes, every worker drains up to
 *                       MESHGATE_DRAIN_TIMEOUT_MS, stragglers are killed --> STOPPED, the
 *                       segment is removed, exit 0. A second SIGTERM/SIGINT kills at once.
 */
#ifndef MESHGATE_MASTER_H
#define MESHGATE_MASTER_H

#include "config.h"

/*
 * Runs the server until it is stopped; returns the exit code. cfg is in effect, loaded the
 * same before mg_config_resolve; agent_fd is MESHGATE_AGENT_LISTEN's socket or -1; SIGHUP reads
 * sources' file again (docs/architecture.md, "Reload") and applies what can change live.
 */
int mg_master_run(const struct mg_config *cfg, const struct mg_config *loaded,
                  struct mg_config_sources *sources, int listen_fd, int agent_fd,
                  const char *listen_desc);

#endif
