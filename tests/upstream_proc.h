/* SPDX-License-Identifier: ISC */
/*
 * upstream_proc: the test upstream (tests/upstream/mg-test-upstream.c) as a process of a
 * test, and clients that come from other loopback addresses (127.0.0.x), for the tests of
 * per-address shares.
 */
#ifndef MESHGATE_TEST_UPSTREAM_PROC_H
#define MESHGATE_TEST_UPSTREAM_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct mg_test_upstream {
    pid_t pid;
    int port;
    char dir[128];
    char log[256]; /* every byte it received */
    char port_file[256];
};

/* Starts it (on port, or a free one when 0) with extra arguments (NULL-terminated, may be
 * NULL); fails the test when it does not start. */
void mg_test_upstream_start(struct mg_test_upstream *u, int port, const char *const *args);
/* SIGKILL and reap. */
void mg_test_upstream_stop(struct mg_test_upstream *u);

/* A blocking connection to 127.0.0.1:port from the address from (e.g. "127.0.0.2"), with
 * send and receive timeouts of 10 s; -1 on failure. */
int mg_test_connect_from(const char *from, int port);

/* A WebSocket handshake on path from the address from; head gets the response head (read
 * byte by byte: frames follow it). Returns the connection. */
int mg_test_ws_open_from(const char *from, int port, const char *path, char *head, size_t cap);

#endif
