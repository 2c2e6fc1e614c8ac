/* SPDX-License-Identifier: ISC */
#include "worker.h"

#include "admission.h"
#include "access_log.h"
#include "clock.h"
#include "conn_limit.h"
#include "db.h"
#include "db_counts.h"
#include "deadline_heap.h"
#include "node_hash_sizes.h"
#include "node_multibyte.h"
#include "node_usefulness.h"
#include "neighbor_graph.h"
#include "node_relay.h"
#include "dispatch.h"
#include "handler.h"
#include "http.h"
#include "summaries.h"
#include "jobs.h"
#include "mem.h"
#include "keys.h"
#include "live_ring.h"
#include "live_watch.h"
#include "log.h"
#include "netaddr.h"
#include "pacing.h"
#include "reclaim.h"
#include "region_map.h"
#include "scoreboard.h"
#include "site.h"
#include "stats.h"
#include "test_hooks.h"
#include "wake.h"
#include "websocket.h"
#include "table_stats.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* How often a parked request is asked again by a worker that has no wake of its own (one
 * started without the master's table, shm/wake.h). */
#define PARK_POLL_NS (2 * MG_NS_PER_MS)
/* How long a parked request waits at most between two asks: no wake is lost (shm/wake.h),
 * so this only bounds one the code forgot. */
#define PARK_SAFETY_NS MG_NS_PER_SEC
/* How often the loop asks its master's pid at most (the parent-death signal comes first). */
#define PARENT_CHECK_NS MG_NS_PER_SEC
/* The most of an answer (its serialized bytes, then its file) written to one connection in
 * one turn, so a fast reader of a large answer does not keep the loop from the others; the
 * rest goes on the next turns (the poll says the socket is still writable). Issue 23: a
 * packet detail of 2.9 MB went out in one send of 6 to 11 ms on the worker that also served
 * another client's healthz. */
#define TURN_WRITE_BYTES (256 * 1024)
/* Connections closed at once for their client's cap, at most, in one call to accept_some. */
#define CAPPED_PER_ACCEPT 64
/* A live feed client's unsent frames at most: past it, it takes no more events until it
 * reads, and is dropped when the ring laps it (shm/live_ring.h). */
#define LIVE_OUT_MAX (256 * 1024)
/* What a live feed client may have sent that is not a whole frame yet: a frame is at most
 * 14 bytes of head and MG_WS_MESSAGE_MAX of payload. */
#define LIVE_IN_MAX 1024

enum conn_state {
    CONN_IDLE,    /* kept alive, waiting for the first byte of a request */
    CONN_READING, /* part of a request head is in */
    CONN_BODY,    /* the head is in, its body is being read whole before it is handled */
    CONN_READY,   /* a whole head is in, waiting for its turn */
    CONN_PARKED,  /* its handler waits (a gate, a build): called again when woken (park.wait) */
    CONN_WRITING, /* a response is being sent */
    CONN_PACED,   /* a refusal held until its deadline before it is sent, not read (pacing.h) */
    CONN_PROXIED, /* the upstream engine has the socket (upstream.h) until it calls back */
    CONN_LIVE,    /* a WebSocket client of the live feed (live.h) */
    CONN_TARPIT,  /* shed, held open unread until its header deadline (conn_tarpit) */
};
#define CONN_STATES (CONN_TARPIT + 1)

/* Connections in the order they joined a list (the worker's heads and turn lists), each
 * through a link of its own for that list. */
struct conn;
struct conn_link {
    struct conn *prev, *next;
};
struct conn_list {
    struct conn *head, *tail;
};

/* A live feed client's state (CONN_LIVE). */
struct live_client {
    uint64_t next_seq; /* the ring's next event to send it */
    int64_t heard_ns;  /* when it last sent a frame */
    int64_t start_ns;  /* when it was upgraded */
    bool pinged;       /* a ping went since it was last heard */
    bool closing;      /* its close frame is queued: closed once sent (or at its deadline) */
    bool shared;       /* it holds one of its address's MESHGATE_LIVE_PER_CLIENT */
    struct mg_ws_reader reader;
};

struct conn {
    int fd;
    enum conn_state state;
    struct mg_buf in;
    struct mg_buf out;
    /* A large answer's body, moved from the response (not copied) and sent after out;
     * out_sent counts over both. */
    struct mg_buf tail;
    size_t out_sent;
    int file_fd;       /* a static file being sent after out (sendfile); -1: none */
    off_t file_offset; /* next byte of it to send */
    off_t file_end;    /* one past the last byte to send */
    int32_t hold;      /* its hold record in the per-client connection table; -1: not counted */
    /* Its deadline, in the worker's deadline order while its state has one (not READY,
     * PARKED or PROXIED: conn_set_state). */
    struct mg_deadline deadline;
    size_t unread_counted; /* of out, the unsent bytes counted in the worker's unread_bytes */
    int64_t body_start_ns; /* CONN_BODY: when the head was complete */
    size_t body_end;       /* CONN_BODY: the head's and body's bytes, all in `in` when read */
    unsigned requests;
    unsigned refusals_in_a_row; /* answers that were refusals, since its last other one */
    bool close_after_write;
    bool closed; /* on the graveyard list, freed at the end of the loop's turn */
    bool eof;    /* the client shut its side down after sending */
    uint32_t epoll_events;
    int64_t request_start_ns; /* when the request now being handled was first dispatched */
    struct mg_park park;
    int64_t park_asked_ns; /* while parked: when its handler was last called */
    bool park_ask;         /* while parked: its socket broke; ask it on the next turn */
    /* While parked: its head as parsed on its first turn (pointing into in, which does not
     * change while it is parked), so later turns do not parse it again. */
    struct mg_http_request *parked_head;
    /* While proxied: a copy of its head (the engine took its bytes), for the access log. */
    struct kept_head *proxied_head;
    struct live_client live;
    char peer[64];
    uint8_t peer_addr[16]; /* netaddr.h form */
    struct conn *prev, *next;
    /* In the worker's heads (shed_candidate): the order it last started sending a head. */
    struct conn_link head_link;
    bool in_heads;
    /* While READY or PARKED: in one of the worker's turn lists (1 + its index; 0: none). */
    struct conn_link turn_link;
    uint8_t listed;
};

struct worker {
    struct mg_env env;
    struct mg_db db;
    struct mg_slot *slot;
    int listen_fd;
    int epoll_fd;
    int signal_fd;
    int master_pid;
    bool listening;
    bool draining;
    int64_t drain_deadline_ns;
    struct conn *conns;     /* every open connection */
    struct conn *graveyard; /* closed this turn; events of the turn may still name them */
    /* The connections in the order they last started sending a request head (by their header
     * deadline), and some that have stopped since, taken off when met at the front. */
    struct conn_list heads;
    bool nodelay_inherited; /* the listener has TCP_NODELAY: its connections have it */
    unsigned conn_count;    /* open connections but the tarpit's: MESHGATE_MAX_CONNS_PER_WORKER */
    unsigned in_state[CONN_STATES]; /* the open connections in each state */
    unsigned tarpit_max;            /* shed connections held unread at most (conn_tarpit) */
    /* What a turn visits instead of every connection: the deadlines in order, and the
     * connections READY or PARKED. turns[ready] gathers them for the next turn's serve_ready,
     * which takes the other list's (so one made ready while it serves waits for the next turn:
     * one request of a connection a turn). */
    struct mg_deadline_heap deadlines;
    struct conn_list turns[2];
    unsigned ready;
    int64_t parent_check_ns; /* when the master's pid is asked next (the loop) */
    struct mg_http_limits limits;
    struct mg_response res;
    struct mg_buf log_line; /* the access log's line, reused */
    struct mg_dispatch_buffers bufs;
    struct mg_jobs *jobs; /* helper thread for signed-in heavy work */
    int jobs_fd;
    struct mg_jobs *anon_jobs; /* helper thread for anonymous heavy work, at MESHGATE_ANON_NICE */
    int anon_jobs_fd;
    bool yield_when_busy; /* stop accepting while a helper is busy (see the loop) */
    int wake_fd;          /* this slot's wake (shm/wake.h); -1: none */
    bool wake_parked;     /* woken this turn: ask the parked requests again */
    uint32_t *free_holds; /* this slot's free hold records of the connection table (a stack) */
    uint32_t free_hold_count;
    struct mg_upstream *upstream; /* the proxy engine; NULL without MESHGATE_UPSTREAM */
    int upstream_fd;              /* its epoll descriptor, in ours */
    struct mg_mem_watch mem;      /* gives back what large requests left (mem.h) */
    struct mg_pacing pacing;      /* refusals paced per client address (pacing.h) */
    /* At the open-file limit (accept_some): not accepting until then; failures since the
     * last line logged, and when that was. */
    int64_t accept_paused_until_ns;
    uint64_t accept_fd_failures;
    int64_t accept_logged_ns;
    /* Bytes of answers in the connections' out buffers not sent yet (unread_share); send
     * timeouts since the last line logged, and when that was. */
    size_t unread_bytes;
    uint64_t send_timeouts_unlogged;
    int64_t send_timeout_logged_ns;
    /* The live feed: its watcher while this worker holds the lease, its clients here, the
     * ring's head when they were last given events, and one event's copy. */
    struct mg_live_watch *live_watch;
    unsigned live_clients;
    uint64_t live_head_seen;
    bool live_backlog; /* a client took less than there was: give it more when it drains */
    char *live_event;
    /* What the loop has cost so far, for the test build's X-Test-Loop (test_hooks.h): turns,
     * connections visited by a turn's own passes, recv calls of heads and bodies, checks of
     * the master's pid, epoll_ctl calls for connections. */
    uint64_t turns_taken, walk_steps, recvs, parent_checks, poll_ctls;
    /* And what it wrote to answers: send and sendfile calls, the most bytes one connection's
     * answer got in one turn, the answers it compressed itself and the bytes it serialized
     * into the connections' out buffers (a large body is moved, not copied). */
    uint64_t sends, gzips, out_bytes;
    size_t max_turn_write;
};

/* epoll_ctl for a connection's descriptor, counted (X-Test-Loop). */
static int conn_poll_ctl(struct worker *w, int op, int fd, struct epoll_event *ev)
{
    w->poll_ctls++;
    return epoll_ctl(w->epoll_fd, op, fd, ev);
}

static void set_interest(struct worker *w, struct conn *c, uint32_t events)
{
    if (c->epoll_events == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    /* UINT32_MAX: taken out of the poll set while parked (see the event loop). */
    conn_poll_ctl(w, c->epoll_events == UINT32_MAX ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &ev);
    c->epoll_events = events;
}

/* c's link of the list whose links are at `at` in a connection (offsetof). */
static struct conn_link *link_of(struct conn *c, size_t at)
{
    return (struct conn_link *)((char *)c + at);
}

static void list_unlink(struct conn_list *l, struct conn *c, size_t at)
{
    struct conn_link *k = link_of(c, at);
    if (k->prev)
        link_of(k->prev, at)->next = k->next;
    else
        l->head = k->next;
    if (k->next)
        link_of(k->next, at)->prev = k->prev;
    else
        l->tail = k->prev;
    k->prev = k->next = NULL;
}

static void list_append(struct conn_list *l, struct conn *c, size_t at)
{
    struct conn_link *k = link_of(c, at);
    k->prev = l->tail;
    k->next = NULL;
    if (l->tail)
        link_of(l->tail, at)->next = c;
    else
        l->head = c;
    l->tail = c;
}

static void turn_unlink(struct worker *w, struct conn *c)
{
    if (c->listed)
        list_unlink(&w->turns[c->listed - 1], c, offsetof(struct conn, turn_link));
    c->listed = 0;
}

/* c waits for the next turn's serve_ready. */
static void turn_append(struct worker *w, struct conn *c)
{
    list_append(&w->turns[w->ready], c, offsetof(struct conn, turn_link));
    c->listed = (uint8_t)(w->ready + 1);
}

static bool has_turn(enum conn_state s)
{
    return s == CONN_READY || s == CONN_PARKED;
}

/* c's state becomes s: counted, and in the turn lists and the deadline order as s says. */
static void conn_set_state(struct worker *w, struct conn *c, enum conn_state s)
{
    if (!c->closed) {
        w->in_state[c->state]--;
        w->in_state[s]++;
        if (has_turn(s) && !c->listed)
            turn_append(w, c);
        else if (!has_turn(s))
            turn_unlink(w, c);
        /* Its handler or the upstream engine keeps its own deadlines meanwhile; the next state
         * that has one sets it (conn_deadline). */
        if (has_turn(s) || s == CONN_PROXIED)
            mg_deadline_remove(&w->deadlines, &c->deadline);
    }
    c->state = s;
}

static void conn_deadline(struct worker *w, struct conn *c, int64_t at_ns)
{
    if (c->closed)
        c->deadline.at_ns = at_ns;
    else
        mg_deadline_set(&w->deadlines, &c->deadline, at_ns);
}

static void heads_unlink(struct worker *w, struct conn *c)
{
    if (c->in_heads)
        list_unlink(&w->heads, c, offsetof(struct conn, head_link));
    c->in_heads = false;
}

/* c starts sending a request head now: its header deadline is the latest, so it goes last. */
static void heads_append(struct worker *w, struct conn *c)
{
    heads_unlink(w, c);
    list_append(&w->heads, c, offsetof(struct conn, head_link));
    c->in_heads = true;
}

static void conn_close(struct worker *w, struct conn *c)
{
    if (c->closed)
        return;
    w->in_state[c->state]--;
    turn_unlink(w, c);
    mg_deadline_remove(&w->deadlines, &c->deadline);
    /* A request closed while parked gives back a helper it had reserved with a permit, and
     * what dispatch kept of it. */
    mg_jobs_unreserve(w->jobs, &c->park);
    mg_jobs_unreserve(w->anon_jobs, &c->park);
    mg_dispatch_forget(&c->park);
    free(c->parked_head);
    c->parked_head = NULL;
    free(c->proxied_head);
    c->proxied_head = NULL;
    w->unread_bytes -= c->unread_counted;
    c->unread_counted = 0;
    if (c->state == CONN_LIVE) {
        mg_live_client_close(w->env.seg->live, w->env.slot);
        if (c->live.shared && c->hold >= 0)
            mg_admission_tunnel_share_close(&w->env, (uint32_t)c->hold);
        w->live_clients--;
        mg_route_record(w->env.seg, MG_SITE_TUNNEL, 101,
                        (mg_monotonic_ns() - c->live.start_ns) / 1000);
    }
    heads_unlink(w, c);
    /* The close takes it out of the poll set (and the upstream engine's): a worker never
     * duplicates a connection's descriptor nor forks, so this is its last reference. */
    close(c->fd);
    c->fd = -1;
    c->closed = true;
    if (c->file_fd >= 0)
        close(c->file_fd);
    c->file_fd = -1;
    if (c->hold >= 0) {
        mg_admission_conn_close(&w->env, (uint32_t)c->hold);
        w->free_holds[w->free_hold_count++] = (uint32_t)c->hold;
        c->hold = -1;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    mg_buf_free(&c->in);
    mg_buf_free(&c->out);
    mg_buf_free(&c->tail);
    c->next = w->graveyard;
    w->graveyard = c;
    if (c->state != CONN_TARPIT)
        w->conn_count--;
    mg_counter_add(w->env.seg, MG_CTR_CONNECTIONS_CLOSED, 1);
    mg_slot_set_connections(w->slot, w->conn_count);
}

static void listen_start(struct worker *w)
{
    if (w->listening || w->draining)
        return;
    /* EPOLLEXCLUSIVE: one waiting worker is woken per connection, not all of them. */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = NULL};
    if (epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->listen_fd, &ev) == 0)
        w->listening = true;
}

static void listen_stop(struct worker *w)
{
    if (!w->listening)
        return;
    epoll_ctl(w->epoll_fd, EPOLL_CTL_DEL, w->listen_fd, NULL);
    w->listening = false;
}

static void format_peer(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, host, sizeof host);
    else if (ss->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, host, sizeof host);
    else if (ss->ss_family == AF_UNIX)
        snprintf(host, sizeof host, "local");
    snprintf(out, cap, "%s", host);
}

/*
 * The per-client connection cap, decided on the peer address before anything is read
 * (X-Forwarded-For cannot be known yet). Trusted proxies and peers without an IP address
 * (a local socket) are not counted: every client behind them shares their address. Returns
 * false when the connection must be closed at once; *hold is its hold record, or -1 when it
 * is not counted.
 */
static bool client_cap_admits(struct worker *w, const uint8_t addr[MG_ADDR_BYTES], bool has_addr,
                              int32_t *hold)
{
    *hold = -1;
    const struct mg_config *cfg = w->env.cfg;
    if (cfg->max_conns_per_client == 0 || !has_addr || w->free_hold_count == 0 ||
        mg_cidr_list_contains(&cfg->trusted_proxies, addr))
        return true;
    uint8_t key[MG_ADDR_BYTES];
    mg_client_key(addr, key);
    uint32_t index = w->free_holds[w->free_hold_count - 1];
    enum mg_conn_verdict v = mg_admission_conn_open(&w->env, index, key);
    if (v == MG_CONN_OVER_CAP)
        return false;
    if (v == MG_CONN_COUNTED) {
        w->free_hold_count--;
        *hold = (int32_t)index;
    }
    return true;
}

static bool sending_head(const struct conn *c)
{
    return c->state == CONN_READING || (c->state == CONN_IDLE && c->requests == 0);
}

/*
 * When the worker is full, the connection a new one replaces, as Apache's and nginx's event
 * models do: the one that has been sending its request head (or not started its first one)
 * longest, by its header deadline. A connection kept alive between requests, or with a
 * request in hand (its body, its turn, a wait, a response, the upstream), is never shed.
 * NULL: none. The front of the heads, after taking off those that stopped sending a head
 * (each once): a shed costs no walk over the worker's connections, which a slowloris
 * makes on every accept.
 */
static struct conn *shed_candidate(struct worker *w)
{
    while (w->heads.head && !sending_head(w->heads.head))
        heads_unlink(w, w->heads.head);
    return w->heads.head;
}

/*
 * The connection shed for a new one, when it began a request head and is counted against its
 * address's cap, is kept open but no longer read until the header deadline it already had
 * (HAProxy's tarpit, for a connection nginx or Apache would close): a slowloris whose shed
 * connections are closed connects again at once, each new connection sheds another, and a
 * shed costs a handshake, an accept, a record and a close, thousands a second; held, the
 * connection leaves the attacker nothing to do until that deadline. It gives up its buffer
 * and its place among the worker's MESHGATE_MAX_CONNS_PER_WORKER, keeps a descriptor (at most
 * tarpit_max of them in the worker, MESHGATE_SHED_TARPIT) and keeps counting against its
 * address's cap, so an address holds no more than its cap in both together. It is polled for
 * the client's close only, which frees it at once. False (close it, as before) for a
 * connection that has sent nothing yet (a browser's preconnection), one not counted (a
 * trusted proxy's, a local socket's, no cap) and past the bound.
 */
static bool conn_tarpit(struct worker *w, struct conn *c)
{
    if (c->state != CONN_READING || c->hold < 0 || w->in_state[CONN_TARPIT] >= w->tarpit_max)
        return false;
    heads_unlink(w, c);
    conn_set_state(w, c, CONN_TARPIT);
    w->conn_count--;
    mg_buf_free(&c->in);
    set_interest(w, c, EPOLLRDHUP);
    mg_counter_add(w->env.seg, MG_CTR_CONNECTIONS_TARPITTED, 1);
    return true;
}

/*
 * The tarpit's bound: MESHGATE_SHED_TARPIT, within the descriptors the soft RLIMIT_NOFILE
 * leaves once the worker's connections have one each and a static file or an upstream socket
 * each too, and TARPIT_FD_MARGIN for its own files: a held connection must not make an
 * accept fail.
 */
#define TARPIT_FD_MARGIN 128

static unsigned tarpit_bound(const struct mg_config *cfg)
{
    uint64_t bound = (uint64_t)cfg->shed_tarpit;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        uint64_t used = 3 * (uint64_t)cfg->max_conns_per_worker + TARPIT_FD_MARGIN;
        uint64_t room = rl.rlim_cur > used ? (uint64_t)rl.rlim_cur - used : 0;
        if (bound > room)
            bound = room;
    }
    return (unsigned)bound;
}

/* Whether the client of a new connection already holds its cap (read without the lock: a
 * full worker sheds nothing for a connection it would then close). */
static bool client_at_cap(const struct worker *w, const uint8_t addr[MG_ADDR_BYTES], bool has_addr)
{
    const struct mg_config *cfg = w->env.cfg;
    if (cfg->max_conns_per_client == 0 || !has_addr ||
        mg_cidr_list_contains(&cfg->trusted_proxies, addr))
        return false;
    uint8_t key[MG_ADDR_BYTES];
    mg_client_key(addr, key);
    return mg_admission_conn_count(&w->env, key) >= (uint32_t)cfg->max_conns_per_client;
}

/* Whether a new connection may be taken now: there is room, or one to shed for it. */
static bool has_room(struct worker *w)
{
    return w->conn_count < (unsigned)w->env.cfg->max_conns_per_worker || shed_candidate(w);
}

/*
 * At the open-file limit a pending connection stays pending, so the listening socket stays
 * readable: accepting again at once would spin (and once logged every failure, 246,777 lines
 * in 10 s). So the worker stops polling the listener for ACCEPT_BACKOFF_NS and logs at most
 * once per ACCEPT_LOG_NS, with the count.
 */
#define ACCEPT_BACKOFF_NS (100 * MG_NS_PER_MS)
#define ACCEPT_LOG_NS (10 * MG_NS_PER_SEC)

static void accept_out_of_files(struct worker *w, int64_t now, int err)
{
    w->accept_fd_failures++;
    w->accept_paused_until_ns = now + ACCEPT_BACKOFF_NS;
    listen_stop(w);
    if (w->accept_logged_ns != 0 && now - w->accept_logged_ns < ACCEPT_LOG_NS)
        return;
    mg_warn("accept: %s: %llu time(s) since the last such line; not accepting for %lld ms at a "
            "time (raise LimitNOFILE or lower MESHGATE_MAX_CONNS_PER_WORKER)",
            strerror(err), (unsigned long long)w->accept_fd_failures,
            (long long)(ACCEPT_BACKOFF_NS / MG_NS_PER_MS));
    w->accept_fd_failures = 0;
    w->accept_logged_ns = now;
}

/* Accepts up to max connections; returns how many. */
static int accept_some(struct worker *w, int64_t now, int max)
{
    int accepted = 0, capped = 0;
    while (accepted < max && capped < CAPPED_PER_ACCEPT && has_room(w)) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept4(w->listen_fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINVAL) {
                listen_stop(w); /* the master shut the listening socket down: stopping */
                return accepted;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED) {
                mg_counter_add(w->env.seg, MG_CTR_ACCEPT_ERRORS, 1);
                if (errno == EMFILE || errno == ENFILE)
                    accept_out_of_files(w, now, errno);
            }
            return accepted;
        }
        uint8_t addr[MG_ADDR_BYTES];
        bool has_addr = mg_addr_from_sockaddr((const struct sockaddr *)&ss, addr);
        int32_t hold;
        bool full = w->conn_count >= (unsigned)w->env.cfg->max_conns_per_worker;
        if (full && !client_at_cap(w, addr, has_addr)) {
            /* Full: the oldest connection still sending its head makes room (has_room):
             * held unread (its hold record kept: the slot has one for each it may hold) or
             * closed, giving its record back. */
            mg_counter_add(w->env.seg, MG_CTR_CONNECTIONS_SHED, 1);
            struct conn *shed = shed_candidate(w);
            if (!conn_tarpit(w, shed))
                conn_close(w, shed);
        }
        if ((full && w->conn_count >= (unsigned)w->env.cfg->max_conns_per_worker) ||
            !client_cap_admits(w, addr, has_addr, &hold)) {
            /* Closed before a byte is read: the client's other connections go on. */
            close(fd);
            mg_counter_add(w->env.seg, MG_CTR_CONNECTIONS_OVER_CLIENT_CAP, 1);
            capped++;
            continue;
        }
        accepted++;
        struct conn *c = calloc(1, sizeof *c);
        /* Room in the deadline order for every connection, the held ones too. */
        if (!c ||
            !mg_deadline_reserve(&w->deadlines, w->conn_count + w->in_state[CONN_TARPIT] + 1)) {
            free(c);
            close(fd);
            if (hold >= 0) {
                mg_admission_conn_close(&w->env, (uint32_t)hold);
                w->free_holds[w->free_hold_count++] = (uint32_t)hold;
            }
            return accepted;
        }
        if (!w->nodelay_inherited) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        c->fd = fd;
        c->file_fd = -1;
        c->hold = hold;
        c->state = CONN_IDLE;
        w->in_state[CONN_IDLE]++;
        /* A new connection has the header deadline for its first request: a client that
         * connects and says nothing is cut like one that stops half-way. */
        conn_deadline(w, c, now + (int64_t)w->env.cfg->header_timeout_ms * MG_NS_PER_MS);
        mg_buf_init(&c->in);
        mg_buf_init(&c->out);
        mg_buf_init(&c->tail);
        format_peer(&ss, c->peer, sizeof c->peer);
        memcpy(c->peer_addr, addr, sizeof c->peer_addr);
        c->epoll_events = EPOLLIN | EPOLLRDHUP;
        /* Linked before epoll so that conn_close can give everything back on any failure. */
        c->next = w->conns;
        if (w->conns)
            w->conns->prev = c;
        w->conns = c;
        heads_append(w, c);
        w->conn_count++;
        mg_counter_add(w->env.seg, MG_CTR_CONNECTIONS_ACCEPTED, 1);
        mg_slot_set_connections(w->slot, w->conn_count);
        struct epoll_event ev = {.events = c->epoll_events, .data.ptr = c};
        if (conn_poll_ctl(w, EPOLL_CTL_ADD, fd, &ev) < 0)
            conn_close(w, c);
    }
    if (!has_room(w))
        listen_stop(w);
    return accepted;
}

static void conn_parse(struct worker *w, struct conn *c, int64_t now);
static bool conn_send(struct worker *w, struct conn *c, int64_t now);
static void live_begin(struct worker *w, struct conn *c, const struct mg_http_request *hr,
                       const struct mg_response *res, int64_t now);

/* Counts what c's out buffer holds unsent in the worker's unread_bytes. */
static void count_unread(struct worker *w, struct conn *c)
{
    size_t total = c->out.len + c->tail.len;
    size_t unsent = total > c->out_sent ? total - c->out_sent : 0;
    w->unread_bytes = w->unread_bytes - c->unread_counted + unsent;
    c->unread_counted = unsent;
}

/*
 * Whether the client of c (by its address key; trusted proxies and local sockets are not
 * judged) leaves MESHGATE_MAX_UNREAD_BYTES_PER_CLIENT or more of answers unread on its other
 * connections of this worker. Issue 23: 64 connections that never read a large answer held
 * 189 MB of the workers. One scan of the connections, only when the whole worker holds that
 * much unread.
 */
static bool unread_share_full(const struct worker *w, const struct conn *c)
{
    size_t cap = (size_t)w->env.cfg->max_unread_bytes_per_client;
    if (cap == 0 || w->unread_bytes - c->unread_counted < cap ||
        mg_cidr_list_contains(&w->env.cfg->trusted_proxies, c->peer_addr) ||
        strcmp(c->peer, "local") == 0)
        return false;
    uint8_t key[MG_ADDR_BYTES], other[MG_ADDR_BYTES];
    mg_client_key(c->peer_addr, key);
    size_t held = 0;
    for (const struct conn *o = w->conns; o && held < cap; o = o->next) {
        if (o == c || o->unread_counted == 0)
            continue;
        mg_client_key(o->peer_addr, other);
        if (memcmp(key, other, sizeof key) == 0)
            held += o->unread_counted;
    }
    return held >= cap;
}

/* Sends what is pending; returns false when the connection was closed. */
static bool conn_flush(struct worker *w, struct conn *c, int64_t now)
{
    bool open = conn_send(w, c, now);
    if (open)
        count_unread(w, c);
    return open;
}

/* Sends what out holds, at most budget bytes (*sent counts them): 1 when all of it went, 0
 * when the socket is full or the budget spent, -1 when the client is gone (the caller
 * closes). */
static int send_out_within(struct worker *w, struct conn *c, size_t budget, size_t *sent)
{
    while (c->out_sent < c->out.len + c->tail.len) {
        if (*sent >= budget)
            return 0;
        /* What is left of out, then of the tail, within the budget: one call for both. */
        size_t room = budget - *sent,
               head_sent = c->out_sent < c->out.len ? c->out_sent : c->out.len;
        struct iovec iov[2] = {{c->out.data + head_sent, c->out.len - head_sent},
                               {c->tail.data ? c->tail.data + (c->out_sent - head_sent) : NULL,
                                c->tail.len - (c->out_sent - head_sent)}};
        for (int i = 0; i < 2; i++) {
            iov[i].iov_len = iov[i].iov_len < room ? iov[i].iov_len : room;
            room -= iov[i].iov_len;
        }
        struct msghdr msg = {.msg_iov = iov[0].iov_len ? iov : iov + 1,
                             .msg_iovlen = iov[0].iov_len ? 2 : 1};
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_sent += (size_t)n;
            *sent += (size_t)n;
            w->sends++;
            mg_counter_add(w->env.seg, MG_CTR_BYTES_SENT, (uint64_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    }
    return 1;
}

/* Sends all that out holds (a live client's frames, bounded by LIVE_OUT_MAX). */
static int send_out(struct worker *w, struct conn *c)
{
    size_t sent = 0;
    return send_out_within(w, c, SIZE_MAX, &sent);
}

static bool conn_send(struct worker *w, struct conn *c, int64_t now)
{
    size_t sent_this_turn = 0;
    int sent = send_out_within(w, c, TURN_WRITE_BYTES, &sent_this_turn);
    if (sent_this_turn > w->max_turn_write)
        w->max_turn_write = sent_this_turn;
    if (sent == 0) {
        set_interest(w, c, EPOLLOUT); /* full, or still writable: the next turn goes on */
        return true;
    }
    if (sent < 0) {
        conn_close(w, c); /* the client is gone */
        return false;
    }
    /* Then the file, straight from the page cache: no copy of it is ever held here. */
    while (c->file_fd >= 0 && c->file_offset < c->file_end) {
        if (sent_this_turn >= TURN_WRITE_BYTES) {
            set_interest(w, c, EPOLLOUT); /* still writable: the next turn goes on */
            return true;
        }
        off_t left = c->file_end - c->file_offset;
        size_t budget = TURN_WRITE_BYTES - sent_this_turn;
        size_t chunk = (uint64_t)left < budget ? (size_t)left : budget;
        ssize_t n = sendfile(c->fd, c->file_fd, &c->file_offset, chunk);
        if (n > 0) {
            sent_this_turn += (size_t)n;
            w->sends++;
            if (sent_this_turn > w->max_turn_write)
                w->max_turn_write = sent_this_turn;
            mg_counter_add(w->env.seg, MG_CTR_BYTES_SENT, (uint64_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            set_interest(w, c, EPOLLOUT);
            return true;
        }
        /* The client is gone, or the file shrank under us (n == 0): the promised length
         * cannot be sent, and only closing tells the client so. */
        conn_close(w, c);
        return false;
    }
    if (c->file_fd >= 0) {
        close(c->file_fd);
        c->file_fd = -1;
    }
    mg_buf_shrink(&c->out, MG_MEM_CONN_BUF_KEEP_BYTES); /* a large response's copy is not kept */
    mg_buf_free(&c->tail);
    c->out_sent = 0;
    if (c->close_after_write || w->draining || (c->eof && c->in.len == 0)) {
        /* Half-close first so the client reads the whole response before the FIN. */
        shutdown(c->fd, SHUT_WR);
        conn_close(w, c);
        return false;
    }
    set_interest(w, c, EPOLLIN | EPOLLRDHUP);
    if (c->in.len > 0) {
        /* A pipelined request is already here: its head deadline starts now. */
        conn_set_state(w, c, CONN_READING);
        conn_deadline(w, c, now + (int64_t)w->env.cfg->header_timeout_ms * MG_NS_PER_MS);
        heads_append(w, c);
        conn_parse(w, c, now);
        return !c->closed;
    } else {
        conn_set_state(w, c, CONN_IDLE);
        conn_deadline(w, c, now + (int64_t)w->env.cfg->idle_timeout_ms * MG_NS_PER_MS);
    }
    return true;
}

/* Body bytes of a serialized response: what follows the head's blank line. */
static size_t body_bytes_of(const struct mg_buf *out)
{
    const char *end = out->len >= 4 ? memmem(out->data, out->len, "\r\n\r\n", 4) : NULL;
    return end ? out->len - (size_t)(end + 4 - out->data) : 0;
}

static void access_log(struct worker *w, struct conn *c, const struct mg_http_request *hr,
                       const struct mg_park *park, int status, size_t bytes, size_t body_bytes,
                       int64_t duration_us)
{
    struct mg_access_entry e;
    memset(&e, 0, sizeof e);
    /* Behind a trusted proxy the client is what X-Forwarded-For says, the proxy after it. */
    char client[64];
    uint8_t addr[MG_ADDR_BYTES];
    if (hr && mg_request_client(w->env.cfg, hr, c->peer_addr, addr)) {
        mg_addr_format(addr, client, sizeof client);
        e.via = c->peer;
    } else {
        snprintf(client, sizeof client, "%s", c->peer);
    }
    e.client = client;
    e.start_realtime_ns = mg_realtime_ns() - duration_us * 1000;
    e.has_request = hr != NULL;
    if (hr) {
        e.method = hr->method;
        e.target = hr->target;
        e.minor_version = hr->minor_version;
        const struct mg_str *h = mg_http_header_get(hr, "Referer");
        if (h)
            e.referer = *h;
        h = mg_http_header_get(hr, "User-Agent");
        if (h)
            e.user_agent = *h;
    }
    e.status = status;
    e.bytes = bytes;
    e.body_bytes = body_bytes;
    e.duration_us = duration_us;
    e.worker = w->env.slot;
    if (park) {
        e.outcome = park->outcome;
        unsigned k = park->outcome.key_number;
        if (k > 0 && k <= mg_api_keys.count)
            e.key_label = mg_api_keys.label[k - 1];
    }
    mg_buf_reset(&w->log_line);
    mg_access_log_format(w->env.cfg->access_log, &e, &w->log_line);
    if (!w->log_line.failed)
        mg_log_raw(w->log_line.data, w->log_line.len, w->env.cfg->access_log != MG_ACCESS_LOG_ON);
}

/* A request read whole and never answered is logged all the same, with status saying why
 * (499: its client broke the connection before its turn; 503: the worker stopped past its
 * drain) and no bytes. */
static void log_unanswered(struct worker *w, struct conn *c, int status)
{
    if (w->env.cfg->access_log != MG_ACCESS_LOG_OFF) {
        struct mg_http_request hr;
        int parse_status;
        const char *why;
        const struct mg_http_request *head = c->parked_head;
        if (!head && mg_http_parse_request(c->in.data, c->in.len, &w->limits, &hr, &parse_status,
                                           &why) == MG_HTTP_OK)
            head = &hr;
        bool parked = c->state == CONN_PARKED;
        int64_t us = parked ? (mg_monotonic_ns() - c->request_start_ns) / 1000 : 0;
        access_log(w, c, head, parked ? &c->park : NULL, status, 0, 0, us);
    }
}

/* Logged as unanswered (log_unanswered), then closed. */
static void close_unanswered(struct worker *w, struct conn *c, int status)
{
    log_unanswered(w, c, status);
    conn_close(w, c);
}

/* The group's counters, the route's histogram, the slow log and the slot, for one answer. */
static void count_response(struct worker *w, unsigned route, int status, int64_t duration_us,
                           const char *log_path)
{
    struct mg_segment *seg = w->env.seg;
    mg_counter_add(seg, MG_CTR_REQUESTS, 1);
    int cls = mg_status_class(status);
    if (cls >= 2 && cls <= 5)
        mg_counter_add(seg, (enum mg_counter)(MG_CTR_RESPONSES_2XX + (cls - 2)), 1);
    mg_route_record(seg, route, status, duration_us);
    mg_slow_record(seg, log_path, status, duration_us, mg_realtime_ns());
    atomic_fetch_add_explicit(&w->slot->requests, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->slot->requests_all, 1, memory_order_relaxed);
}

/*
 * How long res, a refusal or not, is held before it is written (pacing.h): 0 for an answer
 * that is not a refusal, for trusted proxies and local sockets, and with pacing off. A
 * connection refused MG_PACE_CLOSE_AFTER times in a row is closed after this refusal.
 */
static int64_t pace_of(struct worker *w, struct conn *c, struct mg_response *res, int64_t now)
{
    static const uint8_t no_addr[MG_ADDR_BYTES];
    const struct mg_config *cfg = w->env.cfg;
    bool refused = res->refused && (res->status == 429 || res->status == 503);
    c->refusals_in_a_row = refused ? c->refusals_in_a_row + 1 : 0;
    if (cfg->refusal_pace_max_ms == 0 || memcmp(c->peer_addr, no_addr, sizeof no_addr) == 0 ||
        mg_cidr_list_contains(&cfg->trusted_proxies, c->peer_addr))
        return 0;
    if (c->refusals_in_a_row >= MG_PACE_CLOSE_AFTER)
        res->close = true;
    uint8_t key[MG_ADDR_BYTES];
    mg_client_key(c->peer_addr, key);
    return mg_pacing_answer(&w->pacing, key, refused,
                            (int64_t)cfg->refusal_pace_max_ms * MG_NS_PER_MS, now);
}

/* Counts, logs, serializes and starts sending one response; then drops the request's
 * `consumed` bytes from the connection's buffer (hr points into them until it is logged). */
static void respond(struct worker *w, struct conn *c, const struct mg_http_request *hr,
                    const struct mg_park *park, unsigned route, bool head_only, bool gzip_ok,
                    int64_t start_ns, const char *log_path, size_t consumed)
{
    struct mg_response *res = &w->res;
    if (unread_share_full(w, c)) {
        /* Its answer is dropped at once rather than queued behind the unread ones. */
        mg_response_reset(res);
        mg_response_error(res, 503,
                          "this client has MESHGATE_MAX_UNREAD_BYTES_PER_CLIENT bytes of answers "
                          "it has not read: read them first");
        mg_response_header(res, "Retry-After: 1");
        res->close = true;
        mg_counter_add(w->env.seg, MG_CTR_UNREAD_REFUSED, 1);
    }
    int64_t pace_ns = pace_of(w, c, res, mg_monotonic_ns());
    bool keep_alive = hr && hr->keep_alive && !res->close && !w->draining &&
                      c->requests + 1 < (unsigned)w->env.cfg->max_requests_per_conn;
    mg_buf_reset(&c->out);
    mg_buf_free(&c->tail);
    c->out_sent = 0;
    if (mg_response_gzip(res, gzip_ok, w->env.cfg->gzip_min_bytes))
        w->gzips++; /* a light answer's; a heavy one came compressed from its helper */
    /* A large body is not copied behind its head: the connection takes the buffer over. */
    bool move_body = !head_only && res->file_fd < 0 && !res->body.failed && !res->headers.failed &&
                     res->body.len > MG_MEM_BUF_KEEP_BYTES;
    mg_response_serialize(res, &c->out, head_only || move_body, keep_alive, gzip_ok,
                          w->env.cfg->gzip_min_bytes);
    w->out_bytes += c->out.len;
    if (move_body) {
        struct mg_buf moved = res->body;
        res->body = c->tail; /* empty */
        c->tail = moved;
    }
    size_t bytes = c->out.len + c->tail.len;
    size_t body_bytes = head_only ? 0 : body_bytes_of(&c->out) + c->tail.len;
    /* The body is in c->out or c->tail now; a large one's first copy goes back at once. */
    mg_buf_shrink(&res->body, MG_MEM_BUF_KEEP_BYTES);
    mg_buf_shrink(&res->headers, MG_MEM_BUF_KEEP_BYTES);
    if (res->file_fd >= 0 && !head_only) {
        /* The connection takes the file over; it is sent after the head. */
        c->file_fd = res->file_fd;
        c->file_offset = (off_t)res->file_offset;
        c->file_end = (off_t)(res->file_offset + res->file_length);
        bytes += res->file_length;
        body_bytes += res->file_length;
        res->file_fd = -1;
    }
    mg_response_drop_file(res);
    c->requests++;
    c->close_after_write = !keep_alive;

    int64_t end_ns = mg_monotonic_ns();
    int64_t duration_us = (end_ns - start_ns) / 1000;
    count_response(w, route, res->status, duration_us, log_path);
    if (w->env.cfg->access_log != MG_ACCESS_LOG_OFF)
        access_log(w, c, hr, park, res->status, bytes, body_bytes, duration_us);
    /* The request's bytes are used up: dropped before the response goes out (a pipelined
     * request after them is parsed when it has been sent). */
    mg_buf_consume(&c->in, consumed);
    if (c->in.len == 0)
        mg_buf_shrink(&c->in, MG_MEM_CONN_BUF_KEEP_BYTES);

    if (pace_ns > 0) {
        /* Held, not read: its next request waits in the kernel's buffer (conn_timeout). */
        mg_counter_add(w->env.seg, MG_CTR_REFUSALS_PACED, 1);
        conn_set_state(w, c, CONN_PACED);
        conn_deadline(w, c, end_ns + pace_ns);
        set_interest(w, c, 0);
        return;
    }
    conn_set_state(w, c, CONN_WRITING);
    conn_deadline(w, c, end_ns + (int64_t)w->env.cfg->send_timeout_ms * MG_NS_PER_MS);
    conn_flush(w, c, end_ns);
}

/* An error found while reading the head: answer it and close. */
static void respond_parse_error(struct worker *w, struct conn *c, int status, const char *why,
                                int64_t now)
{
    mg_response_reset(&w->res);
    mg_response_error(&w->res, status, "%s", why);
    w->res.close = true;
    mg_counter_add(w->env.seg, MG_CTR_BAD_REQUESTS, 1);
    mg_buf_reset(&c->in);
    respond(w, c, NULL, NULL, MG_SITE_BAD_REQUEST, false, false, now, "(bad request)", 0);
}

/* A body not sent in time (body_deadline): 408, and the connection closes; the request
 * held nothing yet. */
static void respond_body_timeout(struct worker *w, struct conn *c)
{
    struct mg_http_request hr;
    int status;
    const char *why;
    bool parsed =
        mg_http_parse_request(c->in.data, c->in.len, &w->limits, &hr, &status, &why) == MG_HTTP_OK;
    mg_counter_add(w->env.seg, MG_CTR_BODY_TIMEOUTS, 1);
    mg_response_reset(&w->res);
    mg_response_error(&w->res, 408, "the request body did not arrive in time");
    w->res.close = true;
    memset(&c->park, 0, sizeof c->park);
    /* The connection closes: what arrived of the request goes with it, after its log line. */
    respond(w, c, parsed ? &hr : NULL, NULL, MG_SITE_BAD_REQUEST, false, false, c->body_start_ns,
            "(body timeout)", c->in.len);
}

/* The client shut its side or the connection broke: nobody will read an answer. */
static bool client_gone(void *arg)
{
    struct conn *c = arg;
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    return c->eof || (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
}

/* A copy of a request head whose bytes leave the connection's buffer before it is logged (a
 * request handed to the upstream engine), with hr's strings pointing into the copy. */
struct kept_head {
    struct mg_http_request hr;
    char bytes[];
};

static void rebase(struct mg_str *s, const char *from, const char *to)
{
    if (s->ptr)
        s->ptr = to + (s->ptr - from);
}

/* hr as parsed from base (its head is base[0..head_len)); NULL when out of memory. */
static struct kept_head *keep_head(const struct mg_http_request *hr, const char *base)
{
    struct kept_head *k = malloc(sizeof *k + hr->head_len);
    if (!k)
        return NULL;
    memcpy(k->bytes, base, hr->head_len);
    k->hr = *hr;
    rebase(&k->hr.method, base, k->bytes);
    rebase(&k->hr.target, base, k->bytes);
    rebase(&k->hr.path, base, k->bytes);
    rebase(&k->hr.query, base, k->bytes);
    for (size_t i = 0; i < k->hr.header_count; i++) {
        rebase(&k->hr.headers[i].name, base, k->bytes);
        rebase(&k->hr.headers[i].value, base, k->bytes);
    }
    return k;
}

static void handle_request(struct worker *w, struct conn *c, const struct mg_http_request *hr,
                           bool parsed_now, int64_t now)
{
    struct mg_response *res = &w->res;
    mg_response_reset(res);
    if (c->state != CONN_PARKED) {
        memset(&c->park, 0, sizeof c->park);
        c->request_start_ns = now;
    }
    c->park.turns++;
    c->park.head_parses += parsed_now;
    c->park.wait = (struct mg_park_wait){0}; /* said again by whatever parks it */
    c->park_asked_ns = now;
    c->park_ask = false;
    const struct mg_str *ae = mg_http_header_get(hr, "Accept-Encoding");
    struct mg_request req;
    memset(&req, 0, sizeof req);
    req.http = hr;
    /* A body read whole (body_to_read) follows its head in the buffer. */
    if (hr->content_length > 0 && c->in.len - hr->head_len >= (uint64_t)hr->content_length)
        req.body = (struct mg_str){c->in.data + hr->head_len, (size_t)hr->content_length};
    req.start_monotonic_ns = c->request_start_ns;
    req.start_realtime_ns = mg_realtime_ns();
    req.accepts_gzip = ae && mg_http_has_token(ae, "gzip");
    req.client_addr = c->peer;
    memcpy(req.peer, c->peer_addr, sizeof req.peer);
    req.client_gone = client_gone;
    req.client_gone_arg = c;
    req.park = &c->park;
    req.conn_hold_plus_one = c->hold >= 0 ? (uint32_t)c->hold + 1 : 0;
    /* Its first turn enters dispatch; a woken one continues where it parked. */
    enum mg_turn turn = c->state == CONN_PARKED ? mg_dispatch_resume(&w->env, &req, &w->bufs, res)
                                                : mg_dispatch(&w->env, &req, &w->bufs, res);
    unsigned route = c->park.route;
    if (turn == MG_PARK) {
        if (c->state != CONN_PARKED) {
            conn_set_state(w, c, CONN_PARKED);
            /* A client that leaves wakes it (it is asked only when woken). */
            if (c->epoll_events != UINT32_MAX)
                set_interest(w, c, EPOLLRDHUP);
            /* Kept for its later turns; without memory they parse it again. */
            c->parked_head = malloc(sizeof *c->parked_head);
            if (c->parked_head)
                *c->parked_head = *hr;
        }
        return;
    }
    mg_test_hooks_prepared(&w->env, &c->park, res);
    const struct mg_test_loop_counts loop = {w->turns_taken,    w->walk_steps, w->recvs,
                                             w->parent_checks,  w->poll_ctls,  w->sends,
                                             w->max_turn_write, w->gzips,      w->out_bytes};
    mg_test_hooks_loop(&w->env, res, &loop);
    if (turn == MG_UPSTREAM && w->upstream) {
        /* The engine takes the socket (out of our poll set) and calls upstream_done. */
        conn_poll_ctl(w, EPOLL_CTL_DEL, c->fd, NULL);
        c->epoll_events = UINT32_MAX;
        conn_set_state(w, c, CONN_PROXIED);
        free(c->proxied_head);
        c->proxied_head = keep_head(hr, c->in.data);
        size_t taken = mg_site->proxy->begin(w->upstream, c, c->fd, hr, c->in.data, c->in.len, &req,
                                             &c->park, now);
        if (!c->closed) {
            mg_buf_consume(&c->in, taken);
            if (c->in.len == 0) /* a body read whole is not kept while the exchange runs */
                mg_buf_shrink(&c->in, MG_MEM_CONN_BUF_KEEP_BYTES);
        }
        mg_site->proxy->run(w->upstream, now);
        return;
    }
    if (res->live) {
        live_begin(w, c, hr, res, now);
        return;
    }
    if (route == MG_SITE_BAD_REQUEST)
        mg_counter_add(w->env.seg, MG_CTR_BAD_REQUESTS, 1);

    /* The path for the slow log: the target as sent, without the query. */
    char raw_path[MG_SLOW_PATH_MAX];
    snprintf(raw_path, sizeof raw_path, "%.*s", (int)hr->path.len, hr->path.ptr);
    /* A body a native route read goes with its head; one that was not read closes the
     * connection (dispatch: res->close). */
    respond(w, c, hr, &c->park, route, hr->method_id == MG_METHOD_HEAD, req.accepts_gzip,
            c->request_start_ns, raw_path, hr->head_len + (res->close ? 0 : req.body.len));
}

/*
 * The body deadline: MESHGATE_BODY_GRACE_MS, then one second more for each
 * MESHGATE_BODY_MIN_RATE bytes received (as Apache's mod_reqtimeout extends its timeout),
 * never past MESHGATE_BODY_TIMEOUT_MS from the end of the head.
 */
static int64_t body_deadline(const struct worker *w, const struct conn *c, size_t head_len)
{
    const struct mg_config *cfg = w->env.cfg;
    int64_t total = c->body_start_ns + (int64_t)cfg->body_timeout_ms * MG_NS_PER_MS;
    if (cfg->body_min_rate <= 0)
        return total;
    int64_t got = (int64_t)(c->in.len > head_len ? c->in.len - head_len : 0);
    int64_t by_rate = c->body_start_ns + (int64_t)cfg->body_grace_ms * MG_NS_PER_MS +
                      got * MG_NS_PER_SEC / cfg->body_min_rate;
    return by_rate < total ? by_rate : total;
}

/*
 * A request's body (Content-Length bytes, up to what dispatch says its route takes: a native
 * route's body_max, or MESHGATE_UPSTREAM_MAX_BODY_BYTES for the upstream) is read whole
 * before the request is handled: nothing is admitted (no gate, no permit, no handler) for a
 * client still sending, the connection holds one of its address's
 * MESHGATE_MAX_CONNS_PER_CLIENT places meanwhile, and a body that misses its deadline
 * (body_deadline) is answered 408 and closed. A larger body, or a chunked one, is refused by
 * dispatch (413, 411) without being read, and the connection closes. A native route's client
 * that asked for it (Expect: 100-continue, HTTP/1.1) is told to send the body once its head
 * is taken.
 */
static bool body_to_read(struct worker *w, const struct mg_http_request *hr, bool *native)
{
    *native = false;
    if (hr->content_length <= 0)
        return false;
    size_t cap = mg_dispatch_body_cap(&w->env, hr, &w->bufs, native);
    return (uint64_t)hr->content_length <= cap;
}

/* "100 Continue" for a client that waits for it before it sends its body (RFC 9110, 10.1.1).
 * Sent once, before any byte of the body has come; a short send is let go: the client sends
 * its body after a wait of its own. */
static void send_continue(struct worker *w, struct conn *c, const struct mg_http_request *hr)
{
    const struct mg_str *expect = mg_http_header_get(hr, "Expect");
    if (!expect || hr->minor_version < 1 || !mg_http_has_token(expect, "100-continue") ||
        c->in.len != hr->head_len)
        return;
    static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
    ssize_t n = send(c->fd, line, sizeof line - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0)
        mg_counter_add(w->env.seg, MG_CTR_BYTES_SENT, (uint64_t)n);
}

/* Parses what has arrived; a complete head becomes READY, a bad one is answered. */
static void conn_parse(struct worker *w, struct conn *c, int64_t now)
{
    struct mg_http_request hr;
    int status = 0;
    const char *why = NULL;
    enum mg_http_result r =
        mg_http_parse_request(c->in.data, c->in.len, &w->limits, &hr, &status, &why);
    bool native = false;
    if (r == MG_HTTP_OK && c->state != CONN_BODY && body_to_read(w, &hr, &native) &&
        c->in.len < hr.head_len + (size_t)hr.content_length) {
        conn_set_state(w, c, CONN_BODY);
        c->body_start_ns = now;
        c->body_end = hr.head_len + (size_t)hr.content_length;
        if (native)
            send_continue(w, c, &hr);
    }
    if (r == MG_HTTP_OK && c->state == CONN_BODY) {
        if (c->in.len < c->body_end) {
            conn_deadline(w, c, body_deadline(w, c, hr.head_len));
            return;
        }
        conn_set_state(w, c, CONN_READY);
        set_interest(w, c, 0);
    } else if (r == MG_HTTP_OK) {
        conn_set_state(w, c, CONN_READY);
        /* Stop reading until it is answered: later bytes stay in the kernel's buffer. */
        set_interest(w, c, 0);
    } else if (r == MG_HTTP_ERROR) {
        respond_parse_error(w, c, status, why ? why : "the request is malformed", now);
    }
}

/* What the poll said (ev): a short read empties the socket, so the loop reads again only when
 * the poll says more came (it is level-triggered), not once more to be told EAGAIN; a client
 * that shut its side or broke is read to its end. */
static void conn_readable(struct worker *w, struct conn *c, int64_t now, uint32_t ev)
{
    /* A head, and the parser's 431 past its bound; a body, exactly to its end. */
    size_t limit = c->state == CONN_BODY ? c->body_end : (size_t)w->env.cfg->max_header_bytes + 1;
    for (;;) {
        if (c->in.len >= limit)
            break; /* the parser will say 431 */
        if (!mg_buf_reserve(&c->in, 4096)) {
            conn_close(w, c);
            return;
        }
        size_t room = c->in.cap - c->in.len - 1;
        if (room > limit - c->in.len)
            room = limit - c->in.len;
        w->recvs++;
        ssize_t n = recv(c->fd, c->in.data + c->in.len, room, 0);
        if (n > 0) {
            if (c->state == CONN_IDLE) {
                conn_set_state(w, c, CONN_READING);
                conn_deadline(w, c, now + (int64_t)w->env.cfg->header_timeout_ms * MG_NS_PER_MS);
                heads_append(w, c);
            }
            c->in.len += (size_t)n;
            if ((size_t)n < room && !(ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
                break;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n < 0) {
            conn_close(w, c);
            return;
        }
        /* EOF: a client may send its request and then shut its side; answer what is here. */
        c->eof = true;
        break;
    }
    if (c->state == CONN_READING || c->state == CONN_BODY)
        conn_parse(w, c, now);
    if (c->closed)
        return;
    if (c->eof && c->state != CONN_READY && c->state != CONN_WRITING)
        conn_close(w, c); /* nothing complete will come */
    else if (c->eof && c->state == CONN_READY)
        c->close_after_write = true;
}

/* The upstream engine is done with a connection: count and log the exchange, then go on as
 * after any response (the next request, kept alive, or close). */
static void upstream_done(void *arg, void *owner, const struct mg_upstream_done *d)
{
    struct worker *w = arg;
    struct conn *c = owner;
    int64_t now = mg_monotonic_ns();
    int status = d->status ? d->status : 502;
    /* From the request's first turn, as a native answer's: its waits at the gates count. */
    int64_t duration_us = (now - c->request_start_ns) / 1000;
    char path[MG_SLOW_PATH_MAX];
    snprintf(path, sizeof path, "%.*s", (int)strcspn(d->target, "?"), d->target);
    if (d->tunnel) /* how long a page stayed open: its own histogram, not a request's */
        mg_route_record(w->env.seg, MG_SITE_TUNNEL, status, duration_us);
    else
        count_response(w, MG_SITE_UPSTREAM, status, duration_us, path);
    mg_counter_add(w->env.seg, MG_CTR_BYTES_SENT, d->bytes);
    c->requests++;
    if (w->env.cfg->access_log != MG_ACCESS_LOG_OFF) {
        /* The head as the client sent it (its headers, X-Forwarded-For); without memory for
         * its copy, what the engine kept of it. */
        struct mg_http_request hr;
        memset(&hr, 0, sizeof hr);
        hr.method = (struct mg_str){d->method, strlen(d->method)};
        hr.target = (struct mg_str){d->target, strlen(d->target)};
        hr.minor_version = 1;
        access_log(w, c, c->proxied_head ? &c->proxied_head->hr : &hr, &c->park, status, d->bytes,
                   d->bytes > d->head_bytes ? d->bytes - d->head_bytes : 0, duration_us);
    }
    free(c->proxied_head);
    c->proxied_head = NULL;
    if (c->closed)
        return;
    if (d->status == 0) {
        conn_close(w, c);
        return;
    }
    mg_buf_reset(&c->out);
    c->out_sent = 0;
    c->close_after_write =
        !d->keep_alive || c->requests >= (unsigned)w->env.cfg->max_requests_per_conn;
    conn_set_state(w, c, CONN_WRITING);
    conn_deadline(w, c, now + (int64_t)w->env.cfg->send_timeout_ms * MG_NS_PER_MS);
    conn_flush(w, c, now);
}

/* ---- The live feed's clients (CONN_LIVE, live.h) ---- */

/* The kernel's send buffer of a live client: what it may hold unread is bounded here and in
 * LIVE_OUT_MAX, so a client that stops reading falls behind the ring and is dropped. */
#define LIVE_SNDBUF_BYTES (64 * 1024)

static void live_deadline(struct worker *w, struct conn *c)
{
    int64_t ping = (int64_t)w->env.cfg->live_ping_ms * MG_NS_PER_MS;
    if (!c->live.closing)
        conn_deadline(w, c, c->live.heard_ns + (c->live.pinged ? 2 * ping : ping));
}

/* Sends what is queued; false when the connection was closed. A closing client's side is
 * shut once its close frame is out; it is closed when it ends its own (or at its deadline). */
static bool live_flush(struct worker *w, struct conn *c)
{
    int sent = send_out(w, c);
    if (sent == 0) {
        set_interest(w, c, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
        count_unread(w, c);
        return true;
    }
    if (sent < 0) {
        conn_close(w, c);
        return false;
    }
    mg_buf_reset(&c->out);
    c->out_sent = 0;
    mg_buf_shrink(&c->out, MG_MEM_CONN_BUF_KEEP_BYTES);
    count_unread(w, c);
    if (c->live.closing)
        shutdown(c->fd, SHUT_WR);
    else if (c->live.next_seq < mg_live_head(w->env.seg->live))
        w->live_backlog = true; /* it drained while behind: the next pump gives it more */
    set_interest(w, c, EPOLLIN | EPOLLRDHUP);
    return true;
}

/* Queues a close frame with code (-1: none); the client is closed once it is out. */
static void live_close_code(struct worker *w, struct conn *c, int code)
{
    if (c->live.closing)
        return;
    if (code < 0)
        mg_ws_frame_append(&c->out, MG_WS_CLOSE, NULL, 0);
    else
        mg_ws_close_append(&c->out, (uint16_t)code);
    c->live.closing = true;
    /* Its close frame goes out, and its side ends, within MESHGATE_SEND_TIMEOUT_MS. */
    conn_deadline(w, c, mg_monotonic_ns() + (int64_t)w->env.cfg->send_timeout_ms * MG_NS_PER_MS);
    live_flush(w, c);
}

/* The whole frames a client sent: pings answered, a close echoed, a bad frame closed. */
static void live_frames(struct worker *w, struct conn *c, int64_t now)
{
    size_t off = 0;
    while (off < c->in.len) {
        struct mg_ws_frame f;
        uint16_t code = 0;
        enum mg_ws_read_result r = mg_ws_read(&c->live.reader, (const uint8_t *)c->in.data + off,
                                              c->in.len - off, &f, &code);
        if (r == MG_WS_MORE)
            break;
        if (r == MG_WS_FAIL) {
            mg_counter_add(w->env.seg, MG_CTR_LIVE_CLOSED_BAD_FRAME, 1);
            mg_buf_reset(&c->in);
            live_close_code(w, c, code);
            return;
        }
        off += f.used;
        c->live.heard_ns = now;
        c->live.pinged = false;
        if (f.opcode == MG_WS_PING) {
            mg_ws_frame_append(&c->out, MG_WS_PONG, f.payload, f.payload_len);
        } else if (f.opcode == MG_WS_CLOSE) {
            /* Its status code echoed (RFC 6455, 5.5.1); none: an empty close. */
            mg_buf_reset(&c->in);
            live_close_code(w, c, f.payload_len >= 2 ? f.payload[0] << 8 | f.payload[1] : -1);
            return;
        }
    }
    mg_buf_consume(&c->in, off);
    live_deadline(w, c);
    if (c->out.len > c->out_sent)
        live_flush(w, c);
}

static void live_readable(struct worker *w, struct conn *c, int64_t now)
{
    for (;;) {
        if (c->in.len >= LIVE_IN_MAX)
            break; /* whole frames are read out below; a frame is never this long */
        if (!mg_buf_reserve(&c->in, LIVE_IN_MAX)) {
            conn_close(w, c);
            return;
        }
        size_t room = LIVE_IN_MAX - c->in.len;
        ssize_t n = recv(c->fd, c->in.data + c->in.len, room, 0);
        if (n > 0) {
            if (c->live.closing)
                continue; /* after a close, what it sends is dropped */
            c->in.len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        conn_close(w, c); /* it ended its side, or broke it */
        return;
    }
    if (!c->live.closing)
        live_frames(w, c, now);
}

/* The handshake was accepted (live.h): 101, then the connection is a live client that gets
 * the events written from now on. */
static void live_begin(struct worker *w, struct conn *c, const struct mg_http_request *hr,
                       const struct mg_response *res, int64_t now)
{
    mg_buf_reset(&c->out);
    c->out_sent = 0;
    mg_buf_printf(&c->out,
                  "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                  res->live_accept);
    if (w->env.cfg->access_log != MG_ACCESS_LOG_OFF)
        access_log(w, c, hr, &c->park, 101, c->out.len, 0, (now - c->request_start_ns) / 1000);
    mg_buf_consume(&c->in, hr->head_len);
    int sndbuf = LIVE_SNDBUF_BYTES;
    setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    c->requests++;
    conn_set_state(w, c, CONN_LIVE);
    memset(&c->live, 0, sizeof c->live);
    c->live.next_seq = mg_live_head(w->env.seg->live);
    c->live.heard_ns = c->live.start_ns = now;
    c->live.shared = res->live_shared;
    w->live_clients++;
    live_deadline(w, c);
    if (live_flush(w, c) && c->in.len > 0)
        live_frames(w, c, now);
}

/* Gives every live client the events written since it was last given some: each event is
 * copied out of the ring once per worker. A client with LIVE_OUT_MAX unsent takes no more;
 * one the ring has lapped is sent a close frame (1008) and dropped. */
static void live_pump(struct worker *w, int64_t now)
{
    struct mg_segment *seg = w->env.seg;
    uint64_t head = mg_live_head(seg->live);
    if (w->live_clients == 0 || (head == w->live_head_seen && !w->live_backlog))
        return;
    w->live_head_seen = head;
    w->live_backlog = false;
    uint64_t low = head;
    for (struct conn *c = w->conns, *next; c; c = next) {
        next = c->next;
        if (c->state != CONN_LIVE || c->live.closing || c->live.next_seq >= head)
            continue;
        if (head - c->live.next_seq > MG_LIVE_SLOTS) {
            mg_counter_add(seg, MG_CTR_LIVE_DROPPED_SLOW, 1);
            live_close_code(w, c, MG_WS_CLOSE_POLICY);
        } else if (c->out.len - c->out_sent < LIVE_OUT_MAX && c->live.next_seq < low) {
            low = c->live.next_seq;
        }
    }
    uint64_t frames = 0;
    for (uint64_t seq = low; seq < head; seq++) {
        size_t len = 0;
        enum mg_live_read_result got =
            mg_live_read(seg->live, seg->live_slots, seq, w->live_event, &len);
        for (struct conn *c = w->conns, *next; c; c = next) {
            next = c->next;
            if (c->state != CONN_LIVE || c->live.closing || c->live.next_seq != seq)
                continue;
            if (got == MG_LIVE_LOST) {
                mg_counter_add(seg, MG_CTR_LIVE_DROPPED_SLOW, 1);
                live_close_code(w, c, MG_WS_CLOSE_POLICY);
            } else if (got == MG_LIVE_OK && c->out.len - c->out_sent < LIVE_OUT_MAX) {
                mg_ws_frame_append(&c->out, MG_WS_TEXT, w->live_event, len);
                c->live.next_seq++;
                frames++;
            }
        }
    }
    mg_counter_add(seg, MG_CTR_LIVE_FRAMES_SENT, frames);
    for (struct conn *c = w->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_LIVE && c->out.len > c->out_sent)
            live_flush(w, c);
    }
    (void)now;
}

#define DRAIN_IDLE_GRACE_NS (500 * MG_NS_PER_MS)
#define SEND_TIMEOUT_LOG_NS (10 * MG_NS_PER_SEC)

/* A connection cut for not reading its answer in MESHGATE_SEND_TIMEOUT_MS: logged, at most
 * once per SEND_TIMEOUT_LOG_NS with the count since the last line. */
static void log_send_timeout(struct worker *w, const struct conn *c)
{
    int64_t now = mg_monotonic_ns();
    w->send_timeouts_unlogged++;
    if (w->send_timeout_logged_ns != 0 && now - w->send_timeout_logged_ns < SEND_TIMEOUT_LOG_NS)
        return;
    mg_warn("closed a connection from %s that did not read its answer within "
            "MESHGATE_SEND_TIMEOUT_MS (%zu bytes unsent); %llu such since the last line",
            c->peer, c->out.len + c->tail.len - c->out_sent,
            (unsigned long long)w->send_timeouts_unlogged);
    w->send_timeouts_unlogged = 0;
    w->send_timeout_logged_ns = now;
}

static void conn_timeout(struct worker *w, struct conn *c)
{
    char byte;
    switch (c->state) {
    case CONN_IDLE:
        /* Draining: a request that came with the deadline is read on the next turn (its
         * bytes wake the poll); the drain's deadline bounds it. */
        if (w->draining && c->requests > 0 && recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 1) {
            conn_deadline(w, c, w->drain_deadline_ns);
            return;
        }
        mg_counter_add(w->env.seg, c->requests ? MG_CTR_IDLE_TIMEOUTS : MG_CTR_HEADER_TIMEOUTS, 1);
        break;
    case CONN_READING:
        mg_counter_add(w->env.seg, MG_CTR_HEADER_TIMEOUTS, 1);
        break;
    case CONN_WRITING:
        mg_counter_add(w->env.seg, MG_CTR_SEND_TIMEOUTS, 1);
        log_send_timeout(w, c);
        break;
    case CONN_BODY:
        respond_body_timeout(w, c);
        return;
    case CONN_PACED: {
        /* Its refusal has been held long enough: it goes out now. */
        int64_t now = mg_monotonic_ns();
        conn_set_state(w, c, CONN_WRITING);
        conn_deadline(w, c, now + (int64_t)w->env.cfg->send_timeout_ms * MG_NS_PER_MS);
        conn_flush(w, c, now);
        return;
    }
    case CONN_LIVE:
        if (c->live.closing)
            break;
        if (c->live.pinged) {
            mg_counter_add(w->env.seg, MG_CTR_LIVE_CLOSED_IDLE, 1);
            live_close_code(w, c, MG_WS_CLOSE_GOING_AWAY);
        } else {
            mg_ws_frame_append(&c->out, MG_WS_PING, NULL, 0);
            c->live.pinged = true;
            live_deadline(w, c);
            live_flush(w, c);
        }
        return;
    case CONN_READY:
    case CONN_PARKED:
    case CONN_PROXIED:
        return; /* being served; its handler (or the upstream engine) keeps its own deadlines */
    case CONN_TARPIT:
        break; /* its header deadline: the bound it had before it was shed */
    }
    conn_close(w, c);
}

static void begin_drain(struct worker *w, int64_t now)
{
    if (w->draining)
        return;
    /* Connections that reached the listen queue before the stop are taken and served:
     * the master shuts the socket down only once the workers had their chance. */
    if (w->listening)
        while (accept_some(w, now, 64) == 64)
            ;
    w->draining = true;
    w->drain_deadline_ns = now + (int64_t)w->env.cfg->drain_timeout_ms * MG_NS_PER_MS;
    listen_stop(w);
    close(w->listen_fd);
    w->listen_fd = -1;
    mg_slot_set_state(w->slot, MG_SLOT_DRAINING);
    mg_site->proxy->drain(w->upstream, now);
    /* The live feed: its clients get a close frame (1001), and the lease goes to a worker
     * that stays. */
    mg_live_watch_stop(&w->live_watch, &w->env);
    for (struct conn *c = w->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_LIVE && !c->live.closing) {
            mg_counter_add(w->env.seg, MG_CTR_LIVE_CLOSED_DRAIN, 1);
            live_close_code(w, c, MG_WS_CLOSE_GOING_AWAY);
        } else if (c->state == CONN_TARPIT) {
            conn_close(w, c); /* its place in its address's cap is free for the new workers */
        }
    }
    /* A kept-alive connection between requests may have its next request on the way, or
     * unread in its buffer: closing now would reset it. It gets DRAIN_IDLE_GRACE_NS to send
     * it, answered with Connection: close as every answer while draining; one that sends
     * nothing by then is closed (conn_timeout). A connection that has not sent its first
     * request yet gets to send it. */
    int64_t grace = now + DRAIN_IDLE_GRACE_NS;
    for (struct conn *c = w->conns; c; c = c->next)
        if (c->state == CONN_IDLE && c->requests > 0 && c->deadline.at_ns > grace)
            conn_deadline(w, c, grace);
}

static void update_slot_state(struct worker *w)
{
    if (w->draining) {
        mg_slot_set_state(w->slot, MG_SLOT_DRAINING);
        return;
    }
    const unsigned *n = w->in_state;
    bool writing = n[CONN_WRITING] || n[CONN_PACED] || n[CONN_PARKED] || n[CONN_PROXIED];
    bool reading = n[CONN_READING] || n[CONN_BODY] || n[CONN_READY];
    bool idle = n[CONN_IDLE] || n[CONN_LIVE];
    mg_slot_set_state(w->slot, n[CONN_PARKED] || mg_site->proxy->active(w->upstream)
                                   ? MG_SLOT_HANDLING
                               : writing ? MG_SLOT_WRITING
                               : reading ? MG_SLOT_READING
                               : idle    ? MG_SLOT_KEEPALIVE
                                         : MG_SLOT_IDLE);
}

/*
 * A lock wait past MG_LOCK_CHECK_MS (shm/lock.h). This worker is alive, only blocked by the
 * holder, so it beats; a holder that is stopped or gone, or keeps the lock longer than
 * LOCK_REPORT_NS, is logged (once per holder) and reported to the master in the slot. The
 * master judges it (server/master.c): it kills a holder that cannot run, and the heartbeat
 * rule catches one that is stuck. Runs on any thread of the worker.
 */
#define LOCK_REPORT_NS (100 * MG_NS_PER_MS)
/* With the master gone no one can force a lock: a wait for a holder that is gone or stopped,
 * or that keeps the lock this long, ends the worker (which closes its listening socket). */
#define ORPHAN_LOCK_WAIT_NS (1 * MG_NS_PER_SEC)
static _Thread_local const struct mg_lock *reported_lock;
static _Thread_local int reported_holder;

static void lock_watch(void *arg, struct mg_lock *l, enum mg_lock_event event, int holder,
                       enum mg_process_state state, int64_t held_ns)
{
    struct worker *w = arg;
    mg_scoreboard_beat();
    uint64_t offset = (uint64_t)((char *)l - (char *)w->env.seg->base);
    char name[48] = "shared";
    /* The parent-death signal waits for the loop, which does not turn while we wait here. */
    if (event == MG_LOCK_WAITING && getppid() != w->master_pid &&
        (state != MG_PROCESS_RUNNING || held_ns >= ORPHAN_LOCK_WAIT_NS)) {
        mg_segment_lock_at(w->env.seg, offset, name, sizeof name);
        mg_error("the master (pid %d) is gone and the %s lock's holder (pid %d) is %s: no one "
                 "can free it, exiting",
                 w->master_pid, name, holder, mg_process_state_name(state));
        _exit(EXIT_FAILURE);
    }
    if (event == MG_LOCK_ACQUIRED) {
        if (reported_lock == l) {
            mg_slot_clear_lock_wait(w->slot, offset);
            mg_segment_lock_at(w->env.seg, offset, name, sizeof name);
            mg_info("got the %s lock after %lld ms", name, (long long)(held_ns / MG_NS_PER_MS));
            reported_lock = NULL;
        }
        return;
    }
    if (state == MG_PROCESS_RUNNING && held_ns < LOCK_REPORT_NS)
        return;
    if (reported_lock != l || reported_holder != holder) {
        mg_segment_lock_at(w->env.seg, offset, name, sizeof name);
        mg_warn("waiting %lld ms for the %s lock, held by pid %d (%s); reported to the master",
                (long long)(held_ns / MG_NS_PER_MS), name, holder, mg_process_state_name(state));
        reported_lock = l;
        reported_holder = holder;
    }
    mg_slot_report_lock_wait(w->slot, holder, offset, mg_monotonic_ns() - held_ns);
}

static int setup_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    /* Ctrl-C in a terminal reaches the whole process group; the master decides. */
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGCHLD, SIG_DFL);
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

/* The process: role, title, signals, and the master's death. False: it must not run. */
static bool become_worker(struct worker *w, unsigned slot_index, int master_pid)
{
    char role[32];
    snprintf(role, sizeof role, "worker %u", slot_index);
    mg_log_set_role(role);
    setproctitle("worker %u", slot_index);
    /* A worker outlives its master only by accident: make the kernel tell it. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != master_pid)
        return false;
    w->signal_fd = setup_signals();
    return true;
}

/* The database, the event loop, the helpers, the upstream's engine and this slot's hold
 * records. False: logged. */
static bool open_resources(struct worker *w, struct mg_segment *seg)
{
    char err[512];
    w->upstream_fd = -1;
    mg_mem_worker_init();
    if (mg_db_open(&w->db, w->env.cfg->db_path, w->env.cfg->db_busy_timeout_ms, err, sizeof err) !=
        0) {
        mg_error("%s", err);
        return false;
    }
    bool buffers = mg_dispatch_buffers_init(&w->bufs, w->env.cfg);
    w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (w->signal_fd < 0 || w->epoll_fd < 0 || !buffers) {
        mg_error("cannot set up the event loop: %s", strerror(errno));
        return false;
    }
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &w->signal_fd};
    epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->signal_fd, &sev);
    /* As many helpers as the permits the worker may hold: signed-in, the cold builds and one
     * more (the walk, the row counts' refresh); anonymous, the line's permits, or with the
     * line off the cold builds and one. A cap of 0 (no gate: A/B measurements) gives one, as
     * before the pools. */
    const struct mg_config *limits = w->env.cfg;
    unsigned signed_in = limits->reach_cold_max > 0 ? (unsigned)limits->reach_cold_max + 1 : 1;
    unsigned anonymous =
        limits->anon_concurrency > 0 ? (unsigned)limits->anon_concurrency : signed_in;
    _Atomic uint32_t *helpers_busy = w->slot ? &w->slot->helpers_busy : NULL;
    w->jobs = mg_jobs_start(w->env.cfg, &w->db, 0, signed_in, &w->jobs_fd, helpers_busy,
                            MG_SLOT_HELPERS_SIGNED_IN_SHIFT, err, sizeof err);
    if (w->jobs)
        w->anon_jobs =
            mg_jobs_start(w->env.cfg, &w->db, w->env.cfg->anon_nice, anonymous, &w->anon_jobs_fd,
                          helpers_busy, MG_SLOT_HELPERS_ANON_SHIFT, err, sizeof err);
    if (!w->jobs || !w->anon_jobs) {
        mg_error("%s", err);
        return false;
    }
    w->env.jobs = w->jobs;
    w->env.anon_jobs = w->anon_jobs;
    if (w->env.cfg->upstream[0]) {
        w->upstream = mg_site->proxy->new (&w->env, upstream_done, w, err, sizeof err);
        if (!w->upstream) {
            mg_error("%s", err);
            return false;
        }
        w->upstream_fd = mg_site->proxy->fd(w->upstream);
        struct epoll_event uev = {.events = EPOLLIN, .data.ptr = &w->upstream_fd};
        epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->upstream_fd, &uev);
    }
    /* The base of the memory budgets: what a worker needs before its first request (the row
     * counts below read pages that the watch's first turn gives back). */
    mg_mem_watch_start(&w->mem);
    /* The gates bound the helpers busy at once in the whole group: an anonymous permit each,
     * the cold builds of signed-in clients, one diagnostic walk. Only when the workers
     * outnumber them all can a worker with a busy helper leave new connections to others
     * and be sure some remain. */
    const struct mg_config *cfg = w->env.cfg;
    w->yield_when_busy = cfg->anon_concurrency > 0 && cfg->reach_cold_max > 0 &&
                         cfg->workers > cfg->anon_concurrency + cfg->reach_cold_max + 1;
    struct epoll_event jev = {.events = EPOLLIN, .data.ptr = &w->jobs_fd};
    epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->jobs_fd, &jev);
    struct epoll_event aev = {.events = EPOLLIN, .data.ptr = &w->anon_jobs_fd};
    epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->anon_jobs_fd, &aev);
    /* The slot's wake: the gates hand a freed permit to a parked request through it. */
    w->wake_fd = mg_wake_fd(w->env.slot);
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &w->wake_fd};
    if (w->wake_fd >= 0)
        epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->wake_fd, &wev);
    /* This slot's hold records of the connection table, all free: the master cleared them
     * when it reaped the slot's last worker. */
    w->live_event = malloc(MG_LIVE_EVENT_MAX);
    if (!w->live_event) {
        mg_error("cannot set up the live feed: out of memory");
        return false;
    }
    uint32_t holds = seg->conns.table->holds_per_slot;
    w->free_holds = calloc(holds ? holds : 1, sizeof *w->free_holds);
    if (!w->free_holds) {
        mg_error("cannot set up the connection table: out of memory");
        return false;
    }
    for (uint32_t i = 0; i < holds; i++)
        w->free_holds[w->free_hold_count++] = holds - 1 - i;
    /* A held connection keeps its record: the tarpit holds no more than the records past the
     * worker's own connections (none without a cap: only counted connections are held). */
    uint32_t spare = holds - (holds ? (uint32_t)w->env.cfg->max_conns_per_worker : 0);
    if (w->tarpit_max > spare)
        w->tarpit_max = spare;
    return true;
}

/* Whether a parked request is asked on this turn: only when its worker was woken, its
 * socket broke, or its own deadline or the safety bound came (a worker started without the
 * master's table, which has no wake, asks them all). */
static bool park_due(const struct worker *w, const struct conn *c, bool woken, int64_t now)
{
    const struct mg_park_wait *wait = &c->park.wait;
    return w->wake_fd < 0 || woken || c->park_ask || (wait->until_ns && now >= wait->until_ns) ||
           now - c->park_asked_ns >= PARK_SAFETY_NS;
}

/* Serves one request of each connection whose head is complete, and asks each parked one
 * that is due again: the turn list gathered since the last turn, never every connection. One
 * that is still (or again) ready or parked after its turn waits in the other list for the
 * next turn. True when something was answered (the loop then turns again at once). */
static bool serve_ready(struct worker *w, int64_t *now)
{
    bool served = false;
    bool woken = w->wake_parked;
    w->wake_parked = false;
    struct conn_list *serving = &w->turns[w->ready];
    w->ready ^= 1;
    for (struct conn *c; (c = serving->head);) {
        w->walk_steps++;
        turn_unlink(w, c);
        if (c->state == CONN_PARKED && !park_due(w, c, woken, *now)) {
            turn_append(w, c);
            continue;
        }
        struct mg_http_request hr;
        int status;
        const char *why;
        bool was_parked = c->state == CONN_PARKED;
        /* A parked request resumes from its head as first parsed (the copy: conn_close may
         * free the kept one while the request is handled). */
        bool parse = !(was_parked && c->parked_head);
        if (!parse) {
            hr = *c->parked_head;
        } else if (mg_http_parse_request(c->in.data, c->in.len, &w->limits, &hr, &status, &why) !=
                   MG_HTTP_OK) {
            conn_close(w, c);
            continue;
        }
        handle_request(w, c, &hr, parse, *now);
        if (c->state != CONN_PARKED) {
            free(c->parked_head);
            c->parked_head = NULL;
        }
        if (!c->closed && has_turn(c->state) && !c->listed)
            turn_append(w, c); /* parked again */
        served |= !(was_parked && !c->closed && c->state == CONN_PARKED);
        *now = mg_monotonic_ns();
        mg_slot_heartbeat(w->slot, *now);
    }
    return served;
}

/* Closes the connections past their deadlines; returns when the loop must wake next. A turn
 * visits the ready and parked connections and the deadlines that came, not every connection. */
static int64_t next_wakeup(struct worker *w, int64_t now)
{
    int64_t next_deadline = now + MG_NS_PER_SEC;
    if (w->accept_paused_until_ns > now && w->accept_paused_until_ns < next_deadline)
        next_deadline = w->accept_paused_until_ns;
    if (w->draining && w->drain_deadline_ns < next_deadline)
        next_deadline = w->drain_deadline_ns;
    if (w->upstream && mg_site->proxy->next_deadline(w->upstream) < next_deadline)
        next_deadline = mg_site->proxy->next_deadline(w->upstream);
    for (struct conn *c = w->turns[w->ready].head; c; c = c->turn_link.next) {
        w->walk_steps++;
        if (c->state == CONN_READY) {
            next_deadline = now; /* a pipelined request waits for the next turn */
            continue;
        }
        if (c->state == CONN_PARKED) {
            /* It costs no turn until it is woken (its slot's or its helper's eventfd), or
             * its deadline comes; without a wake, it is asked again soon. */
            const struct mg_park_wait *wait = &c->park.wait;
            int64_t due = c->park_asked_ns + PARK_SAFETY_NS;
            if (wait->until_ns && wait->until_ns < due)
                due = wait->until_ns;
            if (w->wake_fd < 0 || c->park_ask)
                due = c->park_ask ? now : now + PARK_POLL_NS;
            if (due < next_deadline)
                next_deadline = due;
        }
    }
    /* The deadlines that came, in order; each at most once a turn (a deadline set again to
     * one that has passed waits for the next). */
    struct mg_deadline *d;
    for (uint32_t left = w->deadlines.len;
         left > 0 && (d = mg_deadline_first(&w->deadlines)) && d->at_ns <= now; left--) {
        w->walk_steps++;
        struct conn *c = (struct conn *)((char *)d - offsetof(struct conn, deadline));
        mg_deadline_remove(&w->deadlines, d);
        conn_timeout(w, c);
    }
    d = mg_deadline_first(&w->deadlines);
    if (d && d->at_ns < next_deadline)
        next_deadline = d->at_ns < now ? now : d->at_ns;
    return next_deadline;
}

/*
 * Whether this worker takes new connections now. A worker whose helpers are busy (anonymous
 * heavy work, a cold build, a diagnostic walk) leaves new connections to the others when the
 * gates guarantee there are others (yield_when_busy), so heavy work spreads over the
 * workers. Requests that wait in a line are parked and cost the loop nothing: their worker
 * keeps accepting. See docs/architecture.md for the worst case.
 */
static void choose_accepting(struct worker *w, int64_t now)
{
    bool helper_busy = w->yield_when_busy && (mg_jobs_busy(w->jobs) || mg_jobs_busy(w->anon_jobs));
    if (!w->draining && !helper_busy && now >= w->accept_paused_until_ns && has_room(w))
        listen_start(w);
    else if (helper_busy || !has_room(w))
        listen_stop(w); /* full, and nothing left to shed: another worker takes it */
}

/* Frees the connections closed during this turn. */
static void bury_closed(struct worker *w)
{
    while (w->graveyard) {
        struct conn *dead = w->graveyard;
        w->graveyard = dead->next;
        free(dead);
    }
}

/* What epoll said: the listening socket, the helpers, the signals first, then connections. */
static void handle_events(struct worker *w, const struct epoll_event *events, int n, int64_t now)
{
    for (int i = 0; i < n; i++) {
        void *ptr = events[i].data.ptr;
        if (ptr == NULL) {
            /* One at a time: handlers block (database work, a gate's line), so a burst of
             * new connections is spread over the idle workers rather than queued behind
             * one worker's handler. EPOLLEXCLUSIVE wakes the next idle worker for the next
             * connection. */
            if (!w->draining)
                accept_some(w, now, 1);
        } else if (ptr == &w->jobs_fd) {
            mg_jobs_ack(w->jobs);
            w->wake_parked = true; /* a job done, a thread free */
        } else if (ptr == &w->anon_jobs_fd) {
            mg_jobs_ack(w->anon_jobs);
            w->wake_parked = true;
        } else if (ptr == &w->wake_fd) {
            unsigned wakes = mg_wake_take(w->env.slot);
            mg_counter_add(w->env.seg, MG_CTR_PARK_WAKES, wakes);
            w->wake_parked = true;
        } else if (ptr == &w->upstream_fd) {
            mg_site->proxy->run(w->upstream, now);
        } else if (ptr == &w->signal_fd) {
            struct signalfd_siginfo si;
            while (read(w->signal_fd, &si, sizeof si) == sizeof si)
                ;
            begin_drain(w, now);
        }
    }
    /* Connections second. One closed by an earlier event of this batch is still in memory
     * (the graveyard) and marked closed. */
    for (int i = 0; i < n; i++) {
        struct conn *c = events[i].data.ptr;
        if (c == NULL || (void *)c == &w->signal_fd || (void *)c == &w->jobs_fd ||
            (void *)c == &w->anon_jobs_fd || (void *)c == &w->upstream_fd ||
            (void *)c == &w->wake_fd || c->closed)
            continue;
        uint32_t ev = events[i].events;
        if (c->state == CONN_LIVE) {
            if ((ev & EPOLLOUT) && !live_flush(w, c))
                continue;
            if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))
                live_readable(w, c, now);
        } else if (c->state == CONN_WRITING && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
            conn_flush(w, c, now);
        } else if ((c->state == CONN_IDLE || c->state == CONN_READING || c->state == CONN_BODY) &&
                   (ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))) {
            conn_readable(w, c, now, ev);
        } else if (c->state == CONN_PACED && (ev & (EPOLLERR | EPOLLHUP))) {
            conn_close(w, c); /* gone while its refusal was held: nobody will read it */
        } else if (c->state == CONN_TARPIT && (ev & (EPOLLERR | EPOLLHUP | EPOLLRDHUP))) {
            conn_close(w, c); /* the client gave up its shed connection: the descriptor is free */
        } else if (c->state == CONN_READY && (ev & EPOLLERR)) {
            close_unanswered(w, c, 499); /* the connection broke before its turn */
        } else if (c->state == CONN_PARKED && (ev & (EPOLLERR | EPOLLHUP | EPOLLRDHUP))) {
            /* The client is gone, but the handler still holds shared state (a place in
             * line, a permit, a build): it finds out through client_gone and finishes;
             * meanwhile the socket leaves the poll set so it cannot spin the loop. */
            conn_poll_ctl(w, EPOLL_CTL_DEL, c->fd, NULL);
            c->epoll_events = UINT32_MAX;
            c->park_ask = true;
        }
    }
    /* The engine's deadlines (a response head that does not come, a drain's grace). */
    if (w->upstream && mg_site->proxy->next_deadline(w->upstream) <= now)
        mg_site->proxy->run(w->upstream, now);
    bury_closed(w);
}

/* The helpers first: a job may still read its request in a connection's buffer; then the
 * upstream's exchanges. */
static void shut_down(struct worker *w)
{
    /* Every request cut here has its line before the helpers are waited for: a job that
     * outlasts the drain (heavy work runs on them) may outlast the master's patience too,
     * and then the worker is killed. Closed only after: a job reads its request's head. */
    for (struct conn *c = w->conns; c; c = c->next)
        if (c->state == CONN_READY || c->state == CONN_PARKED)
            log_unanswered(w, c, 503);
    mg_jobs_stop(w->jobs);
    mg_jobs_stop(w->anon_jobs);
    w->jobs = w->anon_jobs = w->env.jobs = w->env.anon_jobs = NULL;
    /* Exchanges still running end now: their owners are called back and closed below. */
    mg_site->proxy->free(w->upstream);
    w->upstream = NULL;
    mg_mem_watch_stop(&w->mem);
    mg_live_watch_stop(&w->live_watch, &w->env);
    while (w->conns)
        conn_close(w, w->conns);
    free(w->live_event);
    bury_closed(w);
    mg_response_free(&w->res);
    mg_buf_free(&w->log_line);
    free(w->free_holds);
    mg_deadline_heap_free(&w->deadlines);
    mg_db_close(&w->db);
    mg_dispatch_buffers_free(&w->bufs);
    mg_slot_set_state(w->slot, MG_SLOT_DRAINING);
}

/*
 * A worker's life: become the worker, open what it needs, then turn the loop until it has
 * drained: serve what is ready, find the next deadline, decide whether to accept, wait for
 * events and handle them.
 */
int mg_worker_run(struct mg_segment *seg, const struct mg_config *own_cfg,
                  struct mg_tx_summaries *summaries, unsigned slot_index, int listen_fd,
                  int master_pid)
{
    struct worker w;
    memset(&w, 0, sizeof w);
    static struct mg_config cfg_copy;
    cfg_copy = *own_cfg;
    w.env.cfg = &cfg_copy;
    w.env.seg = seg;
    w.env.db = &w.db;
    w.env.summaries = summaries;
    w.env.slot = slot_index;
    w.env.pid = getpid();
    mg_test_hooks_init(&w.env);
    w.slot = mg_slot_get(seg, slot_index);
    mg_scoreboard_set_self(w.slot);
    mg_db_count_faults_in(seg);
    mg_lock_set_watch(lock_watch, &w);
    w.listen_fd = listen_fd;
    /* Set on the listener, TCP_NODELAY is the accepted connections' own (Linux copies it):
     * no setsockopt per accept, which a slowloris makes thousands of a second. */
    int one = 1;
    w.nodelay_inherited = setsockopt(listen_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0;
    w.master_pid = master_pid;
    w.tarpit_max = tarpit_bound(w.env.cfg);
    w.limits.max_header_bytes = (size_t)w.env.cfg->max_header_bytes;
    w.limits.max_uri_bytes = (size_t)w.env.cfg->max_uri_bytes;
    if (!become_worker(&w, slot_index, master_pid) || !open_resources(&w, seg))
        return 1;
    /* The row counts exist before the first request reads them (db_counts.h); a worker that
     * replaces another finds them and leaves their refresh to its helper. */
    struct mg_db_counts counts;
    if (!mg_db_counts_peek(&w.env, &counts))
        mg_db_counts_get(&w.env, &counts);
    /* Likewise the node list's table of hash sizes (node_hash_sizes.h): the group's copy, or
     * the group's pass on a thread of its own (the first /api/nodes meanwhile is heavy). */
    mg_table_stats_bind(w.env.seg->cache.cache->tables); /* table_stats.h */
    mg_node_hash_sizes_adopt(&w.env);
    /* And its relay activity (node_relay.h): the group's copy when there is one; no pass
     * here (the first request that needs it makes or follows the group's). */
    mg_node_relay_adopt(&w.env);
    /* And the region map (region_map.h): the group's copy when there is one, never a pass. */
    mg_region_map_adopt(&w.env);
    /* And the neighbour graph's copy, when the group has one (neighbor_graph.h). */
    mg_neighbor_graph_adopt(&w.env);
    /* And the usefulness scores (node_usefulness.h): the group's copy, or its pass on a thread. */
    mg_node_usefulness_adopt(&w.env);
    /* And the multi-byte capability (node_multibyte.h), the same way. */
    mg_node_multibyte_adopt(&w.env);
    mg_response_init(&w.res);
    mg_buf_init(&w.log_line);
    listen_start(&w);
    mg_slot_set_state(w.slot, MG_SLOT_IDLE);
    mg_debug("serving");

    struct epoll_event events[64];
    for (;;) {
        int64_t now = mg_monotonic_ns();
        w.turns_taken++;
        mg_slot_heartbeat(w.slot, now);
        if (w.draining && (w.conn_count == 0 || now >= w.drain_deadline_ns))
            break;
        bool served = serve_ready(&w, &now);
        int64_t next_deadline = next_wakeup(&w, now);
        choose_accepting(&w, now);
        update_slot_state(&w);
        if (!w.draining)
            mg_summaries_tick(&w.env, &mg_background_cold, now);
        if (mg_mem_watch_tick(&w.mem, &w.db, now)) /* between requests: no statement runs */
            mg_counter_add(w.env.seg, MG_CTR_MEMORY_RELEASES_BUDGET, 1);

        int timeout_ms = (int)((next_deadline - now + MG_NS_PER_MS - 1) / MG_NS_PER_MS);
        if (timeout_ms < 0 || served)
            timeout_ms = 0;
        int n = epoll_wait(w.epoll_fd, events, 64, timeout_ms);
        if (n < 0 && errno != EINTR) {
            mg_error("epoll_wait: %s", strerror(errno));
            break;
        }
        if (n == 0 && timeout_ms > 0 && w.in_state[CONN_PARKED] > 0)
            mg_counter_add(w.env.seg, MG_CTR_PARKED_TIMER_TURNS, 1);
        handle_events(&w, events, n, mg_monotonic_ns());
        live_pump(&w, mg_monotonic_ns());
        if (!w.draining)
            mg_live_watch_tick(&w.live_watch, &w.env, mg_monotonic_ns());
        /* The master's death reaches the worker at once as SIGTERM (PR_SET_PDEATHSIG, read
         * from the signal descriptor); asking its pid too is a backstop, once a second at most
         * (the loop wakes at least that often), not a system call every turn. */
        now = mg_monotonic_ns();
        if (now >= w.parent_check_ns) {
            w.parent_check_ns = now + PARENT_CHECK_NS;
            w.parent_checks++;
            if (getppid() != w.master_pid)
                begin_drain(&w, now);
        }
    }
    shut_down(&w);
    return 0;
}
