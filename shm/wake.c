/* SPDX-License-Identifier: ISC */
#include "wake.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Set once by the master before it forks, then only read (each process has its copy). */
static int *wake_fds;
static unsigned wake_count;

bool mg_wake_open(unsigned slots, char *err, size_t errlen)
{
    mg_wake_close();
    wake_fds = calloc(slots ? slots : 1, sizeof *wake_fds);
    if (!wake_fds) {
        snprintf(err, errlen, "wake: out of memory");
        return false;
    }
    for (unsigned i = 0; i < slots; i++) {
        /* Workers are forked, never executed, so they keep them; nothing executed does. */
        wake_fds[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (wake_fds[i] < 0) {
            snprintf(err, errlen, "wake: eventfd for slot %u: %s", i, strerror(errno));
            wake_count = i;
            mg_wake_close();
            return false;
        }
    }
    wake_count = slots;
    return true;
}

void mg_wake_close(void)
{
    for (unsigned i = 0; i < wake_count; i++)
        close(wake_fds[i]);
    free(wake_fds);
    wake_fds = NULL;
    wake_count = 0;
}

int mg_wake_fd(unsigned slot)
{
    return slot < wake_count ? wake_fds[slot] : -1;
}

void mg_wake_slot(unsigned slot)
{
    if (slot >= wake_count)
        return;
    uint64_t one = 1;
    /* EAGAIN only when the count is at its maximum: the worker is woken already. */
    while (write(wake_fds[slot], &one, sizeof one) < 0 && errno == EINTR)
        ;
}

unsigned mg_wake_take(unsigned slot)
{
    uint64_t n = 0;
    if (slot >= wake_count || read(wake_fds[slot], &n, sizeof n) != sizeof n)
        return 0;
    return n > UINT32_MAX ? UINT32_MAX : (unsigned)n;
}
