/* SPDX-License-Identifier: ISC */
#include "agent.h"

#include "clock.h"
#include "gate_fifo.h"
#include "gates.h"
#include "listener.h"
#include "scoreboard.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static double gate_room(const struct mg_agent_gate *g)
{
    if (g->cap == 0)
        return 1.0;
    double used = (double)g->in_flight + (double)g->waiting;
    double room = 1.0 - used / ((double)g->cap + (double)g->queue_max);
    return room < 0 ? 0 : room;
}

unsigned mg_agent_weight(const struct mg_agent_load *l)
{
    if (l->workers_configured == 0)
        return 1;
    unsigned alive = l->workers_alive, busy = l->workers_busy < alive ? l->workers_busy : alive;
    double workers = (double)(alive + (alive - busy)) / (2.0 * l->workers_configured);
    if (workers > 1)
        workers = 1;
    double room = fmin(gate_room(&l->cold), gate_room(&l->anon));
    long w = lround(100.0 * workers * room);
    return w < 1 ? 1 : w > 100 ? 100 : (unsigned)w;
}

size_t mg_agent_answer(const struct mg_agent_status *s, char *out, size_t cap)
{
    int n;
    if (s->maint)
        n = snprintf(out, cap, "maint\n");
    else if (s->db_down)
        n = snprintf(out, cap, "down\n");
    else if (s->draining || s->reloading ||
             (s->replica_max_lag_ms > 0 && s->replica_lag_ms > s->replica_max_lag_ms))
        n = snprintf(out, cap, "drain\n");
    else
        n = snprintf(out, cap, "ready up %u%%\n", mg_agent_weight(&s->load));
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

static void gate_load(const struct mg_fifo_snapshot *snap, struct mg_agent_gate *out)
{
    out->cap = snap->cap;
    out->in_flight = snap->in_flight;
    out->queue_max = snap->queue_max;
    out->waiting = snap->waiting;
}

void mg_agent_read_load(const struct mg_segment *seg, int pid, unsigned workers_configured,
                        struct mg_agent_load *out)
{
    memset(out, 0, sizeof *out);
    out->workers_configured = workers_configured;
    for (unsigned i = 0; i < seg->slot_count; i++) {
        uint32_t st = atomic_load(&seg->slots[i].state);
        if (st < MG_SLOT_IDLE || st > MG_SLOT_KEEPALIVE)
            continue;
        out->workers_alive++;
        out->workers_busy +=
            st == MG_SLOT_READING || st == MG_SLOT_HANDLING || st == MG_SLOT_WRITING;
    }
    struct mg_gate_snapshots all; /* every gate, by the table (shm/gates.h) */
    mg_gates_read(seg, pid, true, mg_monotonic_ns(), &all);
    gate_load(&all.cold, &out->cold);
    gate_load(&all.anon_line, &out->anon);
}

int mg_agent_listen(const char *address, char *err, size_t errlen)
{
    char host[MG_HOST_MAX];
    uint16_t port;
    if (mg_addr_parse_host_port(address, host, sizeof host, &port) < 0) {
        snprintf(err, errlen, "MESHGATE_AGENT_LISTEN=%s: must be HOST:PORT", address);
        return -1;
    }
    return mg_listener_bind("MESHGATE_AGENT_LISTEN", host, port, 64, err, errlen);
}

unsigned mg_agent_serve(int listen_fd, const char *line, size_t len)
{
    unsigned answered = 0;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break; /* EAGAIN, or an error of that one connection */
        /* One short line into an empty socket buffer: it fits, or the peer is gone. */
        (void)!send(fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(fd);
        answered++;
    }
    return answered;
}

bool mg_agent_probe_db(const char *path, char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    sqlite3_stmt *st = NULL;
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "PRAGMA schema_version", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    if (rc != SQLITE_OK)
        snprintf(err, errlen, "%s: %s", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_finalize(st);
    sqlite3_close_v2(db);
    int primary = rc & 0xff;
    return rc == SQLITE_OK || primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}
