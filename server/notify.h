/* SPDX-License-Identifier: ISC */
/*
 * notify: the sd_notify protocol (a datagram to $NOTIFY_SOCKET), spoken only by the master:
 * systemd accepts readiness from the main pid alone (Type=notify). Written here rather than
 * linked from libsystemd because it is a dozen lines and the server then runs the same with
 * or without systemd.
 */
#ifndef MESHGATE_NOTIFY_H
#define MESHGATE_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/* Sends one message ("READY=1\nSTATUS=..."); returns 0, or -1 when it could not. */
int mg_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The watchdog interval systemd asks for in microseconds, 0 when none. */
int64_t mg_notify_watchdog_usec(void);

#endif
