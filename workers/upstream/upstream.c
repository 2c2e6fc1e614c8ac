/* SPDX-License-Identifier: ISC */
#include "upstream.h"

#include "admission.h"
#include "clock.h"
#include "config_values.h"
#include "gate_fifo.h"
#include "log.h"
#include "netaddr.h"
#include "request_client.h"
#include "stats.h"
#include "upstream_gate.h"
#include "upstream_http.h"
#include "upstream_ticket.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* The most either direction holds: past it, the side that fills it is not read. */
#define BUFFER_BYTES (64 * 1024)
_Static_assert(BUFFER_BYTES >= MG_UPSTREAM_HEAD_MAX,
               "a head too large is seen whole, not waited for");
/* An idle pooled connection older than this is closed rather than reused (CoreScope's
 * server keeps idle connections 120 s). */
#define POOL_IDLE_NS (60 * MG_NS_PER_SEC)
/* After the close frames of a drain, how long a tunnel waits for the other sides. */
#define TUNNEL_CLOSE_GRACE_NS (1 * MG_NS_PER_SEC)
/* An idle tunnel's ping waits for a frame boundary: how soon it looks again. */
#define PARK_RETRY_NS (50 * MG_NS_PER_MS)

enum ex_state { X_CONNECTING, X_REQUEST, X_BODY, X_TUNNEL, X_ANSWER };

/* Why a tunnel ended, for its counters. */
enum tunnel_end { END_CLIENT, END_UPSTREAM, END_IDLE, END_DRAIN };

struct exchange;
struct fd_ref {
    struct exchange *x;
    bool upstream;
};

struct exchange {
    struct mg_upstream *u;
    void *owner;
    struct fd_ref cref, uref;
    int cfd, ufd;
    uint32_t cev, uev; /* interest registered now; UINT32_MAX: not registered */
    enum ex_state state;
    struct mg_upstream_ticket ticket;
    bool head_only, websocket, client_keep_alive, dechunk, close_after, resp_done, up_eof;
    bool broken;   /* the client connection must close: the response could not be completed */
    bool verdict;  /* the breaker heard about this exchange */
    bool finished; /* in the graveyard */
    bool started;  /* pumped once: mg_upstream_run starts what mg_upstream_begin set up */
    bool closing;  /* a tunnel being closed by a drain */
    bool heard;    /* a byte of the upstream's answer has arrived */
    bool sent_close_down, sent_close_up;
    bool pinged; /* a tunnel's client was sent a ping since it last said anything */
    enum tunnel_end tunnel_end;
    int64_t client_heard_ns;   /* a tunnel's client last sent a byte (or the tunnel opened) */
    int64_t total_deadline_ns; /* MESHGATE_UPSTREAM_RELAY_TIMEOUT_MS from the handover */
    int client_minor;
    int64_t body_left; /* request body bytes still to read from the client */
    struct mg_buf ubuf;
    size_t usent;
    /* The request head once more, while it may be sent again on a new connection (an
     * idempotent request on a reused one); empty otherwise, and after that one retry. */
    struct mg_buf retry_head;
    struct mg_buf rbuf;
    struct mg_buf dbuf;
    size_t dsent;
    bool have_head;
    struct mg_upstream_response resp;
    int64_t resp_left;
    struct mg_chunked chunked;
    struct mg_ws_frames ws_down, ws_up;
    int64_t start_ns, deadline_ns;
    struct mg_upstream_done done;
    uint8_t client_addr[MG_ADDR_BYTES]; /* who the breaker hears failed */
    struct exchange *prev, *next;
};

/* The breaker's own health request (MESHGATE_UPSTREAM_HEALTH_PATH), while this worker holds
 * the probe. */
struct probe {
    int fd; /* -1: none */
    bool connecting, registered, sent_all;
    struct mg_buf out, in;
    size_t sent;
    int64_t deadline_ns;
};

struct pooled {
    int fd;
    int64_t since_ns;
};

struct mg_upstream {
    const struct mg_env *env;
    mg_upstream_done_fn done;
    void *done_arg;
    int epfd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    bool resolved;
    int64_t resolve_after_ns;
    struct pooled *pool;
    unsigned pool_count, pool_cap;
    struct exchange *live, *graveyard;
    unsigned active;
    bool draining;
    struct probe probe;
    struct fd_ref probe_ref; /* x == NULL: the probe's socket */
};

static struct mg_segment *seg_of(const struct mg_upstream *u)
{
    return u->env->seg;
}

static bool resolve(struct mg_upstream *u, int64_t now)
{
    if (u->resolved)
        return true;
    if (now < u->resolve_after_ns)
        return false;
    u->resolve_after_ns = now + 5 * MG_NS_PER_SEC;
    char host[MG_HOST_MAX], port_text[8];
    uint16_t port;
    if (mg_addr_parse_host_port(u->env->cfg->upstream, host, sizeof host, &port) < 0)
        return false;
    snprintf(port_text, sizeof port_text, "%u", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host[0] ? host : NULL, port_text, &hints, &res);
    if (rc != 0 || !res) {
        mg_warn("MESHGATE_UPSTREAM=%s: cannot resolve %s: %s", u->env->cfg->upstream, host,
                gai_strerror(rc));
        return false;
    }
    memcpy(&u->addr, res->ai_addr, res->ai_addrlen);
    u->addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    u->resolved = true;
    return true;
}

struct mg_upstream *mg_upstream_new(const struct mg_env *env, mg_upstream_done_fn done, void *arg,
                                    char *err, size_t errlen)
{
    struct mg_upstream *u = calloc(1, sizeof *u);
    if (!u) {
        snprintf(err, errlen, "upstream: out of memory");
        return NULL;
    }
    u->env = env;
    u->done = done;
    u->done_arg = arg;
    u->probe.fd = -1;
    mg_buf_init(&u->probe.out);
    mg_buf_init(&u->probe.in);
    u->pool_cap = (unsigned)env->cfg->upstream_idle_conns;
    u->pool = calloc(u->pool_cap ? u->pool_cap : 1, sizeof *u->pool);
    u->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!u->pool || u->epfd < 0) {
        snprintf(err, errlen, "upstream: cannot set up: %s", strerror(errno));
        free(u->pool);
        if (u->epfd >= 0)
            close(u->epfd);
        free(u);
        return NULL;
    }
    resolve(u, mg_monotonic_ns());
    return u;
}

int mg_upstream_fd(const struct mg_upstream *u)
{
    return u->epfd;
}

unsigned mg_upstream_active(const struct mg_upstream *u)
{
    return u ? u->active : 0;
}

static void interest(struct mg_upstream *u, int fd, struct fd_ref *ref, uint32_t *now_events,
                     uint32_t want)
{
    if (fd < 0 || *now_events == want)
        return;
    struct epoll_event ev = {.events = want, .data.ptr = ref};
    if (*now_events == UINT32_MAX)
        epoll_ctl(u->epfd, EPOLL_CTL_ADD, fd, &ev);
    else
        epoll_ctl(u->epfd, EPOLL_CTL_MOD, fd, &ev);
    *now_events = want;
}

static void forget_fd(struct mg_upstream *u, int fd, uint32_t *now_events)
{
    if (fd >= 0 && *now_events != UINT32_MAX)
        epoll_ctl(u->epfd, EPOLL_CTL_DEL, fd, NULL);
    *now_events = UINT32_MAX;
}

static int pool_take(struct mg_upstream *u, int64_t now)
{
    while (u->pool_count > 0) {
        struct pooled p = u->pool[--u->pool_count];
        char byte;
        ssize_t n = recv(p.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        /* Alive and silent is the only state worth reusing: EOF, bytes nobody asked for or
         * an error all mean the upstream is done with it. */
        if (now - p.since_ns < POOL_IDLE_NS && n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return p.fd;
        close(p.fd);
    }
    return -1;
}

static void pool_put(struct mg_upstream *u, int fd, int64_t now)
{
    if (u->pool_count < u->pool_cap && !u->draining) {
        u->pool[u->pool_count++] = (struct pooled){fd, now};
        return;
    }
    close(fd);
}

static void breaker_verdict(struct exchange *x, bool success)
{
    if (x->verdict)
        return;
    x->verdict = true;
    struct mg_upstream_shm *s = seg_of(x->u)->upstream;
    const struct mg_env *env = x->u->env;
    if (success) {
        mg_admission_breaker_success(env, false);
    } else {
        mg_counter_add(seg_of(x->u), MG_CTR_UPSTREAM_FAILURES, 1);
        uint32_t run = atomic_load(&s->breaker.last_addr_run);
        if (mg_admission_breaker_failure(env, false, mg_monotonic_ns(), x->client_addr)) {
            char who[64];
            mg_addr_format(x->client_addr, who, sizeof who);
            mg_warn("the upstream's breaker opened: the last failure was %s %s from %s (%u "
                    "failures in a row from that address); meshgate probes %s itself",
                    x->done.method, x->done.target, who, run + 1,
                    x->u->env->cfg->upstream_health_path);
        }
    }
}

/* ---- the breaker's probe: a health request of meshgate's own ---- */

static int read_some(int fd, struct mg_buf *b, size_t cap);

static void probe_end(struct mg_upstream *u, bool healthy, const char *why)
{
    struct probe *p = &u->probe;
    if (p->fd >= 0) {
        if (p->registered)
            epoll_ctl(u->epfd, EPOLL_CTL_DEL, p->fd, NULL);
        close(p->fd);
    }
    p->fd = -1;
    p->registered = false;
    mg_buf_reset(&p->out);
    mg_buf_reset(&p->in);
    if (healthy) {
        mg_admission_breaker_success(u->env, true);
        mg_info("the upstream's breaker closed: %s answered", u->env->cfg->upstream_health_path);
    } else {
        mg_admission_breaker_failure(u->env, true, mg_monotonic_ns(), NULL);
        mg_info("the upstream's breaker stays open: its probe %s %s",
                u->env->cfg->upstream_health_path, why);
    }
}

static void probe_start(struct mg_upstream *u, int64_t now)
{
    struct probe *p = &u->probe;
    const struct mg_config *cfg = u->env->cfg;
    if (!resolve(u, now)) {
        probe_end(u, false, "could not resolve the upstream");
        return;
    }
    p->fd = socket(u->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->fd < 0) {
        probe_end(u, false, "could not open a socket");
        return;
    }
    mg_counter_add(seg_of(u), MG_CTR_UPSTREAM_CONNECTS, 1);
    p->connecting = connect(p->fd, (struct sockaddr *)&u->addr, u->addr_len) != 0;
    if (p->connecting && errno != EINPROGRESS) {
        probe_end(u, false, "was refused");
        return;
    }
    mg_buf_puts(&p->out, "GET ");
    if (!cfg->upstream_health_path[0])
        mg_buf_putc(&p->out, '/');
    for (const char *c = cfg->upstream_health_path; *c; c++) {
        if ((unsigned char)*c < 0x21 || (unsigned char)*c > 0x7e)
            mg_buf_printf(&p->out, "%%%02X", (unsigned char)*c);
        else
            mg_buf_putc(&p->out, *c);
    }
    mg_buf_printf(&p->out,
                  " HTTP/1.1\r\nHost: %s\r\nUser-Agent: meshgate-breaker-probe\r\n"
                  "Connection: close\r\n\r\n",
                  cfg->upstream);
    p->sent = 0;
    p->sent_all = false;
    p->deadline_ns =
        now + (int64_t)(cfg->upstream_connect_timeout_ms + cfg->upstream_timeout_ms) * MG_NS_PER_MS;
    u->probe_ref = (struct fd_ref){NULL, true};
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.ptr = &u->probe_ref};
    p->registered = epoll_ctl(u->epfd, EPOLL_CTL_ADD, p->fd, &ev) == 0;
}

/* Moves the probe on; its verdict once the answer's head is in (2xx: healthy). */
static void probe_pump(struct mg_upstream *u, int64_t now)
{
    struct probe *p = &u->probe;
    if (p->fd < 0)
        return;
    if (p->connecting) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof peer;
        if (err == 0 && getpeername(p->fd, (struct sockaddr *)&peer, &peer_len) < 0 &&
            errno == ENOTCONN)
            err = EINPROGRESS; /* not yet */
        if (err == EINPROGRESS || err == EALREADY)
            goto deadline;
        if (err) {
            probe_end(u, false, "was refused");
            return;
        }
        p->connecting = false;
    }
    while (p->sent < p->out.len) {
        ssize_t n = send(p->fd, p->out.data + p->sent, p->out.len - p->sent, MSG_NOSIGNAL);
        if (n > 0) {
            p->sent += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            goto deadline;
        probe_end(u, false, "could not be sent");
        return;
    }
    if (p->registered && !p->sent_all) {
        /* Sent: only the answer is waited for (EPOLLOUT would stay ready and spin the loop). */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = &u->probe_ref};
        epoll_ctl(u->epfd, EPOLL_CTL_MOD, p->fd, &ev);
        p->sent_all = true;
    }
    for (;;) {
        int r = read_some(p->fd, &p->in, MG_UPSTREAM_HEAD_MAX - p->in.len);
        struct mg_upstream_response resp;
        enum mg_http_result pr = mg_upstream_parse_response(p->in.data, p->in.len, false, &resp);
        while (pr == MG_HTTP_OK && resp.status >= 100 && resp.status < 200) {
            mg_buf_consume(&p->in, resp.head_len);
            pr = mg_upstream_parse_response(p->in.data, p->in.len, false, &resp);
        }
        if (pr == MG_HTTP_OK) {
            char why[64];
            snprintf(why, sizeof why, "answered %d", resp.status);
            probe_end(u, resp.status >= 200 && resp.status < 300, why);
            return;
        }
        if (pr == MG_HTTP_ERROR || r < 0) {
            probe_end(u, false, pr == MG_HTTP_ERROR ? "had a malformed answer" : "had no answer");
            return;
        }
        if (r == 0)
            break;
    }
deadline:
    if (now >= p->deadline_ns)
        probe_end(u, false, "had no answer in time");
}

/* Open and due: one worker of the group takes the probe and sends it. */
static void probe_maybe(struct mg_upstream *u, int64_t now)
{
    if (u->probe.fd >= 0 || u->draining || mg_admission_breaker_probe_due(u->env) > now)
        return;
    if (mg_admission_breaker_take_probe(u->env, now)) {
        probe_start(u, now);
        probe_pump(u, now);
    }
}

/* Gives back what admission took; once. */
static void release_ticket(struct mg_upstream *u, struct mg_upstream_ticket *t)
{
    /* The claim first: the release hands the permit on, and a place held back for want of a
     * claim (shm/upstream_gate.h) can take it when woken. */
    if (t->anon_claim)
        mg_admission_upstream_anon_unclaim(u->env);
    if (t->gate_held)
        mg_admission_release_token(&mg_gate_upstream, u->env, t->gate_token);
    if (t->tunnel)
        mg_admission_tunnel_close(u->env);
    mg_upstream_tunnel_share_give_back(u->env, t);
    memset(t, 0, sizeof *t);
}

/* A tunnel that ends: its counter by reason, and how long it stayed open. */
static void count_tunnel_end(struct exchange *x)
{
    static const enum mg_counter by_end[] = {
        [END_CLIENT] = MG_CTR_UPSTREAM_TUNNELS_CLOSED_CLIENT,
        [END_UPSTREAM] = MG_CTR_UPSTREAM_TUNNELS_CLOSED_UPSTREAM,
        [END_IDLE] = MG_CTR_UPSTREAM_TUNNELS_CLOSED_IDLE,
        [END_DRAIN] = MG_CTR_UPSTREAM_TUNNELS_CLOSED_DRAIN,
    };
    mg_counter_add(seg_of(x->u), by_end[x->tunnel_end], 1);
    x->done.tunnel = true;
}

static void finish(struct exchange *x, int64_t now)
{
    if (x->finished)
        return;
    struct mg_upstream *u = x->u;
    x->finished = true;
    if (x->state == X_TUNNEL)
        count_tunnel_end(x);
    release_ticket(u, &x->ticket);
    forget_fd(u, x->cfd, &x->cev);
    forget_fd(u, x->ufd, &x->uev);
    if (x->ufd >= 0) {
        bool reusable = x->state == X_BODY && x->resp_done && !x->broken && x->resp.keep_alive &&
                        x->rbuf.len == 0 && x->body_left == 0 && x->usent == x->ubuf.len;
        if (reusable)
            pool_put(u, x->ufd, now);
        else
            close(x->ufd);
        x->ufd = -1;
    }
    if (x->prev)
        x->prev->next = x->next;
    else
        u->live = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->next = u->graveyard;
    u->graveyard = x;
    u->active--;
    x->done.duration_ns = now - x->start_ns;
    x->done.keep_alive =
        !x->broken && !x->close_after && x->client_keep_alive && x->body_left == 0 && !u->draining;
    u->done(u->done_arg, x->owner, &x->done);
}

/* An answer of meshgate's own (502, 504) while the client has had nothing yet. */
static void answer(struct exchange *x, int status, const char *why)
{
    struct mg_upstream *u = x->u;
    mg_counter_add(seg_of(u), status == 504 ? MG_CTR_UPSTREAM_504 : MG_CTR_UPSTREAM_502, 1);
    if (x->ufd >= 0) {
        forget_fd(u, x->ufd, &x->uev);
        close(x->ufd);
        x->ufd = -1;
    }
    struct mg_response res;
    mg_response_init(&res);
    mg_response_refuse(&res, status, 1, why);
    /* Part of the request body may still be unread: then the connection cannot go on. */
    x->close_after = x->close_after || x->body_left > 0;
    mg_buf_reset(&x->dbuf);
    x->dsent = 0;
    mg_response_serialize(&res, &x->dbuf, x->head_only, x->client_keep_alive && !x->close_after,
                          false, 0);
    mg_response_free(&res);
    const char *end = memmem(x->dbuf.data, x->dbuf.len, "\r\n\r\n", 4);
    x->done.head_bytes = end ? (uint64_t)(end + 4 - x->dbuf.data) : x->dbuf.len;
    x->done.status = status;
    x->state = X_ANSWER;
    x->resp_done = true;
}

/* GET, HEAD and OPTIONS without a body: sending one twice asks the upstream nothing new
 * (RFC 9110, 9.2.2). */
static bool idempotent_without_body(const struct mg_http_request *hr)
{
    if (hr->content_length > 0)
        return false;
    if (hr->method_id == MG_METHOD_GET || hr->method_id == MG_METHOD_HEAD)
        return true;
    return hr->method.len == 7 && memcmp(hr->method.ptr, "OPTIONS", 7) == 0;
}

static bool start_connect(struct exchange *x, int64_t now);

/*
 * A kept-alive connection failed before a byte of the answer came back: the upstream closed
 * it while our request was on its way (its idle timeout, a restart), which the check in
 * pool_take cannot see coming. An idempotent request goes again, once, on a new connection,
 * as nginx's proxy_next_upstream does; the stale connection says nothing about the upstream's
 * health, so the breaker does not hear of it. Anything else keeps its 502: a POST may have
 * been acted on, and is never sent twice.
 */
static bool retry_on_new_connection(struct exchange *x, int64_t now)
{
    struct mg_upstream *u = x->u;
    if (x->retry_head.len == 0 || x->heard)
        return false;
    mg_counter_add(seg_of(u), MG_CTR_UPSTREAM_RETRIES, 1);
    forget_fd(u, x->ufd, &x->uev);
    close(x->ufd);
    x->ufd = -1;
    mg_buf_reset(&x->ubuf);
    mg_buf_append(&x->ubuf, x->retry_head.data, x->retry_head.len);
    mg_buf_free(&x->retry_head); /* once */
    x->usent = 0;
    mg_buf_reset(&x->rbuf);
    x->up_eof = false;
    x->deadline_ns = now + (int64_t)u->env->cfg->upstream_timeout_ms * MG_NS_PER_MS;
    start_connect(x, now);
    return true;
}

static bool start_connect(struct exchange *x, int64_t now)
{
    struct mg_upstream *u = x->u;
    if (!resolve(u, now)) {
        answer(x, 502, "the upstream's address cannot be resolved");
        return false;
    }
    int fd = socket(u->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        answer(x, 502, "cannot open a connection to the upstream");
        return false;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    mg_counter_add(seg_of(u), MG_CTR_UPSTREAM_CONNECTS, 1);
    x->ufd = fd;
    x->uev = UINT32_MAX;
    if (connect(fd, (struct sockaddr *)&u->addr, u->addr_len) == 0) {
        x->state = X_REQUEST;
        return true;
    }
    if (errno != EINPROGRESS) {
        breaker_verdict(x, false);
        answer(x, 502, "the upstream refused the connection");
        return false;
    }
    x->state = X_CONNECTING;
    x->deadline_ns = now + (int64_t)u->env->cfg->upstream_connect_timeout_ms * MG_NS_PER_MS;
    return true;
}

size_t mg_upstream_begin(struct mg_upstream *u, void *owner, int client_fd,
                         const struct mg_http_request *hr, const char *in, size_t in_len,
                         const struct mg_request *req, struct mg_park *park, int64_t now)
{
    struct exchange *x = calloc(1, sizeof *x);
    size_t body_here = 0;
    if (hr->content_length > 0)
        body_here = in_len - hr->head_len < (size_t)hr->content_length ? in_len - hr->head_len
                                                                       : (size_t)hr->content_length;
    if (!x) {
        struct mg_upstream_done d = {.status = 0}; /* the worker closes the connection */
        release_ticket(u, mg_upstream_ticket_of(park));
        u->done(u->done_arg, owner, &d);
        return hr->head_len + body_here;
    }
    x->u = u;
    x->owner = owner;
    x->cref = (struct fd_ref){x, false};
    x->uref = (struct fd_ref){x, true};
    x->cfd = client_fd;
    x->ufd = -1;
    x->cev = x->uev = UINT32_MAX;
    x->ticket = *mg_upstream_ticket_of(park);
    memset(mg_upstream_ticket_of(park), 0, sizeof x->ticket);
    x->head_only = hr->method_id == MG_METHOD_HEAD;
    x->websocket = x->ticket.tunnel;
    x->client_keep_alive = hr->keep_alive;
    x->client_minor = hr->minor_version;
    x->start_ns = now;
    snprintf(x->done.method, sizeof x->done.method, "%.*s",
             (int)(hr->method.len < sizeof x->done.method ? hr->method.len : 15), hr->method.ptr);
    snprintf(x->done.target, sizeof x->done.target, "%.*s",
             (int)(hr->target.len < sizeof x->done.target ? hr->target.len : 159), hr->target.ptr);
    mg_buf_init(&x->ubuf);
    mg_buf_init(&x->rbuf);
    mg_buf_init(&x->dbuf);
    mg_buf_init(&x->retry_head);

    /* Who the client is, as the rate limit sees it, and the scheme a trusted proxy saw. */
    uint8_t addr[MG_ADDR_BYTES];
    char client[64];
    const char *proto = "http";
    char proto_text[16];
    if (mg_request_client(u->env->cfg, hr, req->peer, addr)) {
        const struct mg_str *xfp = mg_http_header_get(hr, "X-Forwarded-Proto");
        if (xfp && xfp->len > 0 && xfp->len < sizeof proto_text) {
            memcpy(proto_text, xfp->ptr, xfp->len);
            proto_text[xfp->len] = '\0';
            proto = proto_text;
        }
    }
    mg_addr_format(addr, client, sizeof client);
    memcpy(x->client_addr, addr, sizeof x->client_addr);
    mg_upstream_request_head(hr, client, proto, x->websocket, &x->ubuf);
    mg_buf_append(&x->ubuf, in + hr->head_len, body_here);
    x->body_left = hr->content_length > 0 ? hr->content_length - (int64_t)body_here : 0;
    mg_counter_add(seg_of(u), MG_CTR_UPSTREAM_REQUESTS, 1);
    if (x->websocket)
        mg_counter_add(seg_of(u), MG_CTR_UPSTREAM_TUNNELS, 1);

    x->next = u->live;
    if (u->live)
        u->live->prev = x;
    u->live = x;
    u->active++;

    x->deadline_ns = now + (int64_t)u->env->cfg->upstream_timeout_ms * MG_NS_PER_MS;
    x->total_deadline_ns = now + (int64_t)u->env->cfg->upstream_relay_timeout_ms * MG_NS_PER_MS;
    /* A request with a body goes on a new connection: if a reused one turned out dead, the
     * body could not be sent again. */
    int fd = x->body_left == 0 && hr->content_length <= 0 ? pool_take(u, now) : -1;
    if (fd >= 0) {
        mg_counter_add(seg_of(u), MG_CTR_UPSTREAM_REUSED, 1);
        if (idempotent_without_body(hr))
            mg_buf_append(&x->retry_head, x->ubuf.data, x->ubuf.len);
        x->ufd = fd;
        x->state = X_REQUEST;
    } else {
        start_connect(x, now);
    }
    /* Not pumped here: the worker first drops the bytes taken from its buffer (an exchange
     * that ends at once calls it back, and it must not see this request again), then runs
     * the engine. */
    return hr->head_len + body_here;
}

/* Sends what is pending to fd; false on a broken connection. */
static bool send_pending(int fd, struct mg_buf *b, size_t *sent, uint64_t *total, bool *moved)
{
    while (*sent < b->len) {
        ssize_t n = send(fd, b->data + *sent, b->len - *sent, MSG_NOSIGNAL);
        if (n > 0) {
            *sent += (size_t)n;
            *total += (uint64_t)n;
            *moved = true;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        return false;
    }
    mg_buf_reset(b);
    *sent = 0;
    return true;
}

/* Reads up to cap bytes from fd into b; 1 read, 0 nothing now, -1 EOF or error. */
static int read_some(int fd, struct mg_buf *b, size_t cap)
{
    if (cap == 0 || !mg_buf_reserve(b, cap))
        return 0;
    ssize_t n = recv(fd, b->data + b->len, cap, 0);
    if (n > 0) {
        b->len += (size_t)n;
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    return -1;
}

static size_t pending(const struct mg_buf *b, size_t sent)
{
    return b->len - sent;
}

/* The response's head has arrived in rbuf: decide what the client gets. */
static void take_head(struct exchange *x)
{
    struct mg_upstream *u = x->u;
    bool keep_alive = x->client_keep_alive && !u->draining;
    if (x->websocket && x->resp.status == 101) {
        mg_upstream_response_head(&x->resp, x->client_minor, keep_alive, &x->dbuf, &x->dechunk,
                                  &x->close_after);
        x->done.head_bytes = x->dbuf.len;
        mg_buf_consume(&x->rbuf, x->resp.head_len);
        /* What follows the 101 is already the upstream's frames. */
        mg_ws_frames_feed(&x->ws_down, (const uint8_t *)x->rbuf.data, x->rbuf.len, false);
        mg_buf_append(&x->dbuf, x->rbuf.data, x->rbuf.len);
        mg_buf_reset(&x->rbuf);
        x->state = X_TUNNEL;
        x->client_heard_ns = mg_monotonic_ns();
        x->done.status = 101;
        x->close_after = true;
        return;
    }
    if (x->ticket.tunnel) {
        /* The upstream did not upgrade: an ordinary response, and no tunnel. */
        mg_admission_tunnel_close(u->env);
        mg_upstream_tunnel_share_give_back(u->env, &x->ticket);
        x->ticket.tunnel = false;
        x->websocket = false;
        keep_alive = false;
    }
    mg_upstream_response_head(&x->resp, x->client_minor, keep_alive, &x->dbuf, &x->dechunk,
                              &x->close_after);
    x->done.head_bytes = x->dbuf.len;
    mg_buf_consume(&x->rbuf, x->resp.head_len);
    x->done.status = x->resp.status;
    x->state = X_BODY;
    x->resp_left = x->resp.framing == MG_BODY_LENGTH ? x->resp.content_length : 0;
    memset(&x->chunked, 0, sizeof x->chunked);
    x->resp_done =
        x->resp.framing == MG_BODY_NONE || (x->resp.framing == MG_BODY_LENGTH && x->resp_left == 0);
}

/* Moves body bytes from rbuf to dbuf, as far as dbuf has room. */
static bool relay_body(struct exchange *x)
{
    size_t room =
        BUFFER_BYTES > pending(&x->dbuf, x->dsent) ? BUFFER_BYTES - pending(&x->dbuf, x->dsent) : 0;
    size_t n = x->rbuf.len < room ? x->rbuf.len : room;
    if (n == 0 || x->resp_done)
        return false;
    switch (x->resp.framing) {
    case MG_BODY_LENGTH:
        if ((int64_t)n > x->resp_left)
            n = (size_t)x->resp_left;
        mg_buf_append(&x->dbuf, x->rbuf.data, n);
        x->resp_left -= (int64_t)n;
        x->resp_done = x->resp_left == 0;
        break;
    case MG_BODY_CHUNKED: {
        bool done = false;
        long used;
        if (x->dechunk) {
            if (!mg_buf_reserve(&x->dbuf, n))
                return false;
            size_t out = 0;
            used = mg_chunked_feed(&x->chunked, x->rbuf.data, n, x->dbuf.data + x->dbuf.len, &out,
                                   &done);
            if (used >= 0)
                x->dbuf.len += out;
        } else {
            used = mg_chunked_feed(&x->chunked, x->rbuf.data, n, NULL, NULL, &done);
            if (used > 0)
                mg_buf_append(&x->dbuf, x->rbuf.data, (size_t)used);
        }
        if (used < 0) {
            x->broken = true; /* a malformed chunk: the client must not take it as whole */
            x->resp_done = true;
            mg_buf_reset(&x->rbuf);
            return true;
        }
        n = (size_t)used;
        x->resp_done = done;
        break;
    }
    case MG_BODY_CLOSE:
        mg_buf_append(&x->dbuf, x->rbuf.data, n);
        break;
    case MG_BODY_NONE:
        break;
    }
    mg_buf_consume(&x->rbuf, n);
    return n > 0;
}

/* A close frame, status 1001 (going away); masked when it goes to the upstream (a client). */
static void append_close_frame(struct mg_buf *b, bool masked)
{
    if (!masked) {
        const char frame[] = {(char)0x88, 0x02, 0x03, (char)0xe9};
        mg_buf_append(b, frame, sizeof frame);
        return;
    }
    const unsigned char mask[4] = {0x4d, 0x47, 0x41, 0x54};
    char frame[8] = {(char)0x88,    (char)0x82,    (char)mask[0],
                     (char)mask[1], (char)mask[2], (char)mask[3]};
    frame[6] = (char)(0x03 ^ mask[0]);
    frame[7] = (char)(0xe9 ^ mask[1]);
    mg_buf_append(b, frame, sizeof frame);
}

/* Tunnel: bytes read from one side into the other's buffer, watching frame boundaries. */
static bool tunnel_move(struct exchange *x, int from_fd, struct mg_buf *to, size_t to_sent,
                        struct mg_ws_frames *frames, bool *sent_close, bool masked, bool *eof)
{
    if (x->closing) {
        if (!*sent_close && mg_ws_frames_at_boundary(frames)) {
            append_close_frame(to, masked);
            *sent_close = true;
            return true;
        }
        if (*sent_close)
            return false;
    }
    size_t have = pending(to, to_sent);
    if (have >= BUFFER_BYTES)
        return false;
    struct mg_buf tmp;
    mg_buf_init(&tmp);
    int r = read_some(from_fd, &tmp, BUFFER_BYTES - have);
    if (r < 0)
        *eof = true;
    bool moved = false;
    if (r > 0) {
        /* Past the frame in progress, a closing tunnel drops what follows its close frame. */
        size_t took = mg_ws_frames_feed(frames, (const uint8_t *)tmp.data, tmp.len, x->closing);
        mg_buf_append(to, tmp.data, took);
        moved = true;
    }
    mg_buf_free(&tmp);
    return moved;
}

static void pump(struct exchange *x, int64_t now)
{
    struct mg_upstream *u = x->u;
    struct mg_segment *seg = seg_of(u);
    const struct mg_config *cfg = u->env->cfg;
    for (int round = 0; round < 64 && !x->finished; round++) {
        bool moved = false;
        uint64_t up_bytes = 0, client_bytes = 0;
        if (x->state == X_CONNECTING)
            break; /* the connect's completion arrives as EPOLLOUT (see on_event) */
        /* Client to upstream: the request body, or a tunnel's frames. */
        if (x->state == X_TUNNEL) {
            bool eof = false, heard = false;
            if (x->ufd >= 0)
                heard = tunnel_move(x, x->cfd, &x->ubuf, x->usent, &x->ws_up, &x->sent_close_up,
                                    true, &eof);
            if (heard && !x->closing) {
                x->client_heard_ns = now;
                x->pinged = false;
            }
            moved |= heard;
            if (eof) {
                if (!x->closing)
                    x->tunnel_end = END_CLIENT;
                finish(x, now);
                return;
            }
        } else if (x->body_left > 0 && x->ufd >= 0 && pending(&x->ubuf, x->usent) < BUFFER_BYTES) {
            size_t cap = BUFFER_BYTES - pending(&x->ubuf, x->usent);
            if ((int64_t)cap > x->body_left)
                cap = (size_t)x->body_left;
            size_t before = x->ubuf.len;
            int r = read_some(x->cfd, &x->ubuf, cap);
            if (r < 0) {
                x->broken = true; /* the client left in the middle of its body */
                finish(x, now);
                return;
            }
            x->body_left -= (int64_t)(x->ubuf.len - before);
            moved |= r > 0;
        }
        if (x->ufd >= 0 && x->state != X_ANSWER) {
            if (!send_pending(x->ufd, &x->ubuf, &x->usent, &up_bytes, &moved)) {
                if (x->state == X_REQUEST && retry_on_new_connection(x, now)) {
                    moved = true;
                } else if (x->state == X_REQUEST) {
                    breaker_verdict(x, false);
                    answer(x, 502, "the upstream closed the connection");
                } else {
                    if (!x->closing)
                        x->tunnel_end = END_UPSTREAM;
                    x->broken = true;
                    finish(x, now);
                    return;
                }
            }
        }
        /* Upstream to client. */
        if (x->state == X_TUNNEL) {
            bool eof = false;
            moved |= tunnel_move(x, x->ufd, &x->dbuf, x->dsent, &x->ws_down, &x->sent_close_down,
                                 false, &eof);
            if (eof) {
                if (!x->closing)
                    x->tunnel_end = END_UPSTREAM;
                /* Send what is here, then end. */
                send_pending(x->cfd, &x->dbuf, &x->dsent, &client_bytes, &moved);
                x->done.bytes += client_bytes;
                finish(x, now);
                return;
            }
        } else if ((x->state == X_REQUEST || x->state == X_BODY) && x->ufd >= 0 && !x->resp_done &&
                   pending(&x->dbuf, x->dsent) < BUFFER_BYTES && x->rbuf.len < BUFFER_BYTES) {
            size_t before = x->rbuf.len;
            int r = read_some(x->ufd, &x->rbuf, BUFFER_BYTES - x->rbuf.len);
            if (r < 0)
                x->up_eof = true;
            if (x->rbuf.len > before) {
                mg_counter_add(seg, MG_CTR_UPSTREAM_BYTES_RECEIVED, x->rbuf.len - before);
                moved = true;
                x->heard = true;
            }
        }
        while (x->state == X_REQUEST && !x->have_head) {
            enum mg_http_result pr =
                mg_upstream_parse_response(x->rbuf.data, x->rbuf.len, x->head_only, &x->resp);
            if (pr == MG_HTTP_INCOMPLETE && !x->up_eof)
                break;
            if (pr == MG_HTTP_INCOMPLETE && retry_on_new_connection(x, now)) {
                moved = true;
                break;
            }
            if (pr != MG_HTTP_OK) {
                breaker_verdict(x, false);
                answer(x, 502,
                       pr == MG_HTTP_INCOMPLETE ? "the upstream closed the connection without "
                                                  "an answer"
                       : x->rbuf.len >= MG_UPSTREAM_HEAD_MAX
                           ? "the upstream's response head is larger than 64 KiB"
                           : "the upstream's response is malformed");
                break;
            }
            if (x->resp.status >= 100 && x->resp.status < 200 && x->resp.status != 101) {
                mg_buf_consume(&x->rbuf, x->resp.head_len); /* interim: not relayed */
                continue;
            }
            if (x->resp.status == 101 && !x->websocket) {
                /* Not asked for: what follows is no HTTP the client could be given. */
                breaker_verdict(x, false);
                answer(x, 502,
                       "the upstream switched protocols for a request that did not "
                       "ask it to");
                break;
            }
            breaker_verdict(x, true);
            x->have_head = true;
            take_head(x);
            moved = true;
        }
        if (x->state == X_BODY) {
            moved |= relay_body(x);
            if (x->up_eof && x->rbuf.len == 0 && !x->resp_done) {
                if (x->resp.framing == MG_BODY_CLOSE) {
                    x->resp_done = true;
                } else {
                    /* Closed in the middle of the body: the client must see it broken. */
                    mg_counter_add(seg, MG_CTR_UPSTREAM_ABORTED, 1);
                    x->broken = true;
                    x->resp_done = true;
                }
            }
        }
        if (pending(&x->dbuf, x->dsent) > 0) {
            if (!send_pending(x->cfd, &x->dbuf, &x->dsent, &client_bytes, &moved)) {
                if (x->state == X_TUNNEL && !x->closing)
                    x->tunnel_end = END_CLIENT;
                if (x->state == X_BODY && !x->resp_done)
                    mg_counter_add(seg, MG_CTR_UPSTREAM_ABORTED, 1);
                x->broken = true;
                x->done.bytes += client_bytes;
                finish(x, now);
                return;
            }
        }
        x->done.bytes += client_bytes;
        if (up_bytes)
            mg_counter_add(seg, MG_CTR_UPSTREAM_BYTES_SENT, up_bytes);
        /* A body that moves has its stall bound again (the whole exchange keeps its total
         * one); the head's wait is counted from the request's start, whatever moves. */
        if (moved && x->state == X_BODY)
            x->deadline_ns = now + (int64_t)cfg->upstream_timeout_ms * MG_NS_PER_MS;
        if (x->state == X_TUNNEL && x->closing && x->sent_close_down && x->sent_close_up &&
            pending(&x->dbuf, x->dsent) == 0 && pending(&x->ubuf, x->usent) == 0) {
            finish(x, now);
            return;
        }
        if (x->resp_done && x->state != X_TUNNEL && pending(&x->dbuf, x->dsent) == 0) {
            finish(x, now);
            return;
        }
        if (!moved)
            break;
    }
    if (x->finished)
        return;
    if (x->state == X_TUNNEL && !x->closing) {
        /* Its next look: the ping at half the idle bound, the close at all of it. */
        int64_t idle = (int64_t)cfg->upstream_tunnel_idle_ms * MG_NS_PER_MS;
        x->deadline_ns = x->client_heard_ns + (x->pinged ? idle : idle / 2);
    }
    /* What each side is waited for now. */
    uint32_t cwant = 0, uwant = 0;
    if (pending(&x->dbuf, x->dsent) > 0)
        cwant |= EPOLLOUT;
    if ((x->state == X_TUNNEL && !x->closing && pending(&x->ubuf, x->usent) < BUFFER_BYTES) ||
        (x->state != X_TUNNEL && x->state != X_ANSWER && x->body_left > 0 &&
         pending(&x->ubuf, x->usent) < BUFFER_BYTES))
        cwant |= EPOLLIN | EPOLLRDHUP;
    if (x->ufd >= 0) {
        if (x->state == X_CONNECTING || pending(&x->ubuf, x->usent) > 0)
            uwant |= EPOLLOUT;
        if (x->state != X_CONNECTING && x->state != X_ANSWER && !x->resp_done &&
            pending(&x->dbuf, x->dsent) < BUFFER_BYTES)
            uwant |= EPOLLIN | EPOLLRDHUP;
    }
    interest(u, x->cfd, &x->cref, &x->cev, cwant);
    if (x->ufd >= 0)
        interest(u, x->ufd, &x->uref, &x->uev, uwant);
}

static void on_connected(struct exchange *x, int64_t now)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(x->ufd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err == EINPROGRESS || err == EALREADY)
        return;
    if (err) {
        breaker_verdict(x, false);
        answer(x, 502, "the upstream refused the connection");
        return;
    }
    x->state = X_REQUEST;
    x->deadline_ns = now + (int64_t)x->u->env->cfg->upstream_timeout_ms * MG_NS_PER_MS;
}

/* A ping to the client (unmasked, empty), between two of the upstream's frames. */
static bool send_ping(struct exchange *x)
{
    if (!mg_ws_frames_at_boundary(&x->ws_down))
        return false;
    const char frame[] = {(char)0x89, 0x00};
    mg_buf_append(&x->dbuf, frame, sizeof frame);
    return true;
}

/*
 * A tunnel whose client has said nothing for half of MESHGATE_UPSTREAM_TUNNEL_IDLE_MS is
 * sent a ping (a browser answers with a pong, which goes on to the upstream, where an
 * unsolicited pong is a heartbeat: RFC 6455, 5.5.3); one silent for all of it, pong
 * included, is closed like a drain closes it: a close frame each way, then the end.
 */
static void tunnel_idle(struct exchange *x, int64_t now)
{
    int64_t idle = (int64_t)x->u->env->cfg->upstream_tunnel_idle_ms * MG_NS_PER_MS;
    if (now - x->client_heard_ns >= idle) {
        x->closing = true;
        x->tunnel_end = END_IDLE;
        x->deadline_ns = now + TUNNEL_CLOSE_GRACE_NS;
    } else if (!x->pinged && now - x->client_heard_ns >= idle / 2) {
        x->pinged = send_ping(x);
    }
    pump(x, now);
    if (!x->finished && !x->closing && x->deadline_ns <= now)
        x->deadline_ns = now + PARK_RETRY_NS; /* not at a frame boundary yet: soon again */
}

static void on_deadline(struct exchange *x, int64_t now)
{
    if (x->state == X_TUNNEL) {
        if (x->closing)
            finish(x, now); /* the close's grace is over */
        else
            tunnel_idle(x, now);
        return;
    }
    if (now >= x->total_deadline_ns && x->state == X_BODY) {
        /* MESHGATE_UPSTREAM_RELAY_TIMEOUT_MS: a client reading this slowly keeps the
         * upstream's connection and permit no longer. */
        mg_counter_add(seg_of(x->u), MG_CTR_UPSTREAM_RELAY_TIMEOUTS, 1);
        if (!x->resp_done)
            mg_counter_add(seg_of(x->u), MG_CTR_UPSTREAM_ABORTED, 1);
        x->broken = true;
        finish(x, now);
        return;
    }
    if (x->state == X_CONNECTING) {
        breaker_verdict(x, false);
        answer(x, 504, "the upstream did not accept the connection in time");
    } else if (x->state == X_REQUEST && !x->have_head) {
        breaker_verdict(x, false);
        answer(x, 504, "the upstream did not answer in time");
    } else {
        /* The body stalled (either side): nothing more can be said to the client. */
        if (x->state == X_BODY && !x->resp_done)
            mg_counter_add(seg_of(x->u), MG_CTR_UPSTREAM_ABORTED, 1);
        x->broken = true;
        finish(x, now);
        return;
    }
    x->deadline_ns = now + (int64_t)x->u->env->cfg->send_timeout_ms * MG_NS_PER_MS;
    pump(x, now);
}

/* When the exchange must be looked at: its own deadline, or its whole exchange's (a relayed
 * response); meshgate's own answer (X_ANSWER) has the send timeout only. */
static int64_t due(const struct exchange *x)
{
    if (x->state == X_TUNNEL || x->state == X_ANSWER)
        return x->deadline_ns;
    return x->deadline_ns < x->total_deadline_ns ? x->deadline_ns : x->total_deadline_ns;
}

void mg_upstream_run(struct mg_upstream *u, int64_t now)
{
    probe_maybe(u, now);
    for (struct exchange *x = u->live, *next; x; x = next) {
        next = x->next;
        if (!x->started) {
            x->started = true;
            pump(x, now);
        }
    }
    struct epoll_event events[64];
    for (int round = 0; round < 8; round++) {
        int n = epoll_wait(u->epfd, events, 64, 0);
        if (n <= 0)
            break;
        for (int i = 0; i < n; i++) {
            struct fd_ref *ref = events[i].data.ptr;
            struct exchange *x = ref->x;
            if (!x) {
                probe_pump(u, now);
                continue;
            }
            if (x->finished)
                continue;
            if (ref->upstream && x->state == X_CONNECTING) {
                on_connected(x, now);
            }
            pump(x, now);
        }
        if (n < 64)
            break;
    }
    for (struct exchange *x = u->live, *next; x; x = next) {
        next = x->next;
        if (due(x) <= now)
            on_deadline(x, now);
    }
    if (u->probe.fd >= 0 && u->probe.deadline_ns <= now)
        probe_pump(u, now);
    while (u->graveyard) {
        struct exchange *x = u->graveyard;
        u->graveyard = x->next;
        mg_buf_free(&x->ubuf);
        mg_buf_free(&x->rbuf);
        mg_buf_free(&x->dbuf);
        mg_buf_free(&x->retry_head);
        free(x);
    }
}

int64_t mg_upstream_next_deadline(const struct mg_upstream *u)
{
    int64_t next = INT64_MAX;
    if (u && u->probe.fd >= 0)
        next = u->probe.deadline_ns;
    else if (u && !u->draining)
        next = mg_admission_breaker_probe_due(u->env);
    for (const struct exchange *x = u ? u->live : NULL; x; x = x->next)
        if (due(x) < next)
            next = due(x);
    return next;
}

void mg_upstream_drain(struct mg_upstream *u, int64_t now)
{
    if (!u || u->draining)
        return;
    u->draining = true;
    for (unsigned i = 0; i < u->pool_count; i++)
        close(u->pool[i].fd);
    u->pool_count = 0;
    for (struct exchange *x = u->live, *next; x; x = next) {
        next = x->next;
        if (x->state != X_TUNNEL)
            continue;
        x->closing = true;
        x->tunnel_end = END_DRAIN;
        x->deadline_ns = now + TUNNEL_CLOSE_GRACE_NS;
        pump(x, now);
    }
}

void mg_upstream_free(struct mg_upstream *u)
{
    if (!u)
        return;
    int64_t now = mg_monotonic_ns();
    while (u->live) {
        u->live->broken = true;
        u->live->tunnel_end = END_DRAIN;
        finish(u->live, now);
    }
    if (u->probe.fd >= 0) /* not heard: the next worker probes at once */
        mg_admission_breaker_abandon(u->env, now);
    if (u->probe.fd >= 0)
        close(u->probe.fd);
    u->probe.fd = -1;
    mg_buf_free(&u->probe.out);
    mg_buf_free(&u->probe.in);
    u->draining = true;      /* no new probe */
    mg_upstream_run(u, now); /* frees the graveyard */
    for (unsigned i = 0; i < u->pool_count; i++)
        close(u->pool[i].fd);
    free(u->pool);
    close(u->epfd);
    free(u);
}

const struct mg_proxy mg_upstream_proxy = {
    .new = mg_upstream_new,
    .free = mg_upstream_free,
    .fd = mg_upstream_fd,
    .begin = mg_upstream_begin,
    .run = mg_upstream_run,
    .next_deadline = mg_upstream_next_deadline,
    .active = mg_upstream_active,
    .drain = mg_upstream_drain,
    .applies = mg_upstream_applies,
    .handle = mg_upstream_handle,
    .is_heavy = mg_upstream_is_heavy,
    .is_websocket = mg_upstream_is_websocket,
    .prefers = mg_upstream_prefers,
};
