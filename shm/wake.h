/* SPDX-License-Identifier: ISC */
/*
 * wake: one eventfd per worker slot, so any process of the group can wake the worker of a
 * slot (a freed permit handed to its next waiter, shm/gate_fifo.h). The master opens them
 * before it forks the first worker; every worker inherits all of them (it may wake any slot)
 * and watches its own slot's in its event loop; a worker that replaces a dead one inherits
 * the same descriptor, and a wake written while the slot had no worker is still counted
 * there when the new one first waits (a spurious wake: the worker asks its parked requests
 * again and finds nothing to do).
 *
 * An eventfd keeps its count until it is read, so a wake written between a waiter's last
 * look at its gate and its next wait is never lost. A process without the table (a unit test
 * that drives a gate directly) wakes nothing: mg_wake_slot does nothing there.
 */
#ifndef MESHGATE_WAKE_H
#define MESHGATE_WAKE_H

#include <stdbool.h>
#include <stddef.h>

/* Master, before forking: one eventfd per slot. False (err says why) when one cannot be made. */
bool mg_wake_open(unsigned slots, char *err, size_t errlen);
/* Closes the table (the master at exit; tests). */
void mg_wake_close(void);
/* The slot's descriptor, for its worker's epoll; -1 without one. */
int mg_wake_fd(unsigned slot);
/* Wakes the worker of slot (nothing when it has no descriptor). Never blocks. */
void mg_wake_slot(unsigned slot);
/* Reads the slot's count back to zero: the wakes received since the last call. */
unsigned mg_wake_take(unsigned slot);

#endif
