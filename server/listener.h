/* SPDX-License-Identifier: ISC */
/*
 * listener: the listening socket, made by the master before it forks (every worker accepts
 * on the same socket), or handed over by systemd socket activation (LISTEN_FDS).
 */
#ifndef MESHGATE_LISTENER_H
#define MESHGATE_LISTENER_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>

/*
 * Returns a non-blocking listening socket; *from_systemd tells where it came from. On
 * failure returns -1 with a message in err.
 */
int mg_listener_open(const struct mg_config *cfg, bool *from_systemd, char *err, size_t errlen);

/*
 * For --check: resolves MESHGATE_LISTEN as a start would, binding nothing (a running server
 * holds the port). Returns 0, or -1 with the message a start would give.
 */
int mg_listener_check(const struct mg_config *cfg, char *err, size_t errlen);

/*
 * A non-blocking listening socket on host ("": every address, IPv6 dual-stack where the
 * machine has it) and port; what names the variable in the message of a failure (-1).
 */
int mg_listener_bind(const char *what, const char *host, unsigned port, int backlog, char *err,
                     size_t errlen);

/* "127.0.0.1:8080" or "[::1]:8080" for a bound socket; host and port separately if wanted. */
void mg_listener_describe(int fd, char *out, size_t cap, char *host, size_t host_cap,
                          unsigned *port);

#endif
