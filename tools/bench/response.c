/* SPDX-License-Identifier: ISC */
/*
 * bench/response.c: reading a response: the head, then a body by Content-Length or in chunks
 * (--chunked), and the epoll events of a connection.
 */
#include "engine.h"

#include "clock.h"
#include "text.h"

#include <errno.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static void complete(struct worker *w, struct conn *c, bool extra_bytes, int64_t now)
{
    if (extra_bytes) {
        /* Bytes past Content-Length: a server bug worth seeing. The response counts; the
         * connection is not trusted again. */
        c->close_after = true;
        if (c->counted)
            c->shard->t.overlong++;
    }
    mg_bench_conn_finish(w, c, c->status, 0, 0, now);
}

static void protocol_error(struct worker *w, struct conn *c, const char *why, int64_t now)
{
    struct tally *t = &c->shard->t;
    if (c->counted && !t->first_error[0])
        snprintf(t->first_error, sizeof t->first_error, "bad response: %s", why);
    mg_bench_conn_close(c);
    mg_bench_conn_finish(w, c, 0, MG_BENCH_ERR_PROTOCOL, 0, now);
}

/* Takes n bytes of a chunked body; the response is complete after the last chunk's trailer. */
static void feed_chunked(struct worker *w, struct conn *c, const char *data, size_t n, int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        char ch = data[i];
        switch (c->chunk_step) {
        case CHUNK_SIZE:
        case CHUNK_EXTENSION: {
            int v = mg_hex_digit((unsigned char)ch);
            if (c->chunk_step == CHUNK_SIZE && v >= 0) {
                if (c->chunk_size >> 56) {
                    protocol_error(w, c, "a chunk size too large", now);
                    return;
                }
                c->chunk_size = c->chunk_size * 16 + (uint64_t)v;
            } else if (ch == '\n') {
                c->chunk_step = c->chunk_size ? CHUNK_DATA : CHUNK_TRAILER;
                c->body_left = c->chunk_size;
                c->chunk_size = 0;
                c->trailer_line = 0;
            } else if (ch != '\r') {
                c->chunk_step = CHUNK_EXTENSION;
            }
            break;
        }
        case CHUNK_DATA: {
            size_t take = n - i < c->body_left ? n - i : (size_t)c->body_left;
            c->body_left -= take;
            i += take - 1;
            if (c->body_left == 0)
                c->chunk_step = CHUNK_DATA_END;
            break;
        }
        case CHUNK_DATA_END:
            if (ch == '\n')
                c->chunk_step = CHUNK_SIZE;
            break;
        case CHUNK_TRAILER:
            if (ch == '\n') {
                if (c->trailer_line == 0) {
                    c->chunk_step = CHUNK_NONE;
                    complete(w, c, i + 1 < n, now);
                    return;
                }
                c->trailer_line = 0;
            } else if (ch != '\r') {
                c->trailer_line++;
            }
            break;
        }
    }
}

/* Takes n bytes of the response from data. */
static void feed(struct worker *w, struct conn *c, const char *data, size_t n, int64_t now)
{
    if (!c->head_done) {
        const char *head = data;
        size_t have = n;
        if (c->head_len || !memmem(data, n, "\r\n\r\n", 4)) {
            /* The head comes in pieces: gather it. */
            if (!c->head_buf && !(c->head_buf = malloc(MG_BENCH_RESPONSE_HEAD_MAX))) {
                mg_bench_worker_fail(w, "out of memory for a response head");
                return;
            }
            size_t take = n;
            if (take > MG_BENCH_RESPONSE_HEAD_MAX - c->head_len)
                take = MG_BENCH_RESPONSE_HEAD_MAX - c->head_len;
            memcpy(c->head_buf + c->head_len, data, take);
            c->head_len += take;
            head = c->head_buf;
            have = c->head_len;
            /* what follows the head is counted from data: keep its offset right */
            data += take;
            n -= take;
        } else {
            data += n;
            n = 0;
        }
        struct mg_bench_response_head h;
        const char *why;
        enum mg_bench_parse rc = mg_bench_parse_response_head(head, have, &h, &why);
        if (rc == MG_BENCH_PARSE_BAD) {
            protocol_error(w, c, why, now);
            return;
        }
        if (rc == MG_BENCH_PARSE_MORE) {
            if (n > 0) /* the head buffer is full and still no end */
                protocol_error(w, c, "response head longer than 16384 bytes", now);
            return;
        }
        c->head_done = true;
        c->status = h.status;
        c->close_after = h.connection_close;
        c->body_left = h.content_length;
        if (h.chunked) {
            c->chunk_step = CHUNK_SIZE;
            c->chunk_size = 0;
            size_t after = have - h.head_len;
            /* The rest of the parsed bytes, then what did not fit the head buffer. */
            feed_chunked(w, c, head + h.head_len, after, now);
            if (n > 0 && c->chunk_step != CHUNK_NONE && c->state == CONN_RECEIVING)
                feed_chunked(w, c, data, n, now);
            return;
        }
        /* Bytes after the head in what was parsed, plus what did not fit the head buffer. */
        size_t after = have - h.head_len + n;
        if (after > c->body_left) {
            c->body_left = 0;
            complete(w, c, true, now);
            return;
        }
        c->body_left -= after;
        if (c->body_left == 0)
            complete(w, c, false, now);
        return;
    }
    if (c->chunk_step != CHUNK_NONE) {
        feed_chunked(w, c, data, n, now);
        return;
    }
    if (n > c->body_left) {
        c->body_left = 0;
        complete(w, c, true, now);
        return;
    }
    c->body_left -= n;
    if (c->body_left == 0)
        complete(w, c, false, now);
}

/* Epoll is level-triggered: a short read means the socket is drained for now, and whatever
 * comes later is announced again, so a recv that would only say EAGAIN is saved. */
static void on_readable(struct worker *w, struct conn *c)
{
    uint32_t gen = c->gen;
    while (c->state == CONN_RECEIVING && c->gen == gen && c->fd >= 0) {
        ssize_t n = recv(c->fd, w->scratch, sizeof w->scratch, 0);
        int64_t now = mg_monotonic_ns();
        if (n > 0) {
            c->got_bytes = true;
            feed(w, c, w->scratch, (size_t)n, now);
            if ((size_t)n < sizeof w->scratch)
                return;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        mg_bench_conn_fail_or_retry(w, c, MG_BENCH_ERR_CLOSED, n < 0 ? errno : 0, now);
        return;
    }
}

void mg_bench_conn_on_event(struct worker *w, struct conn *c, uint32_t events)
{
    int64_t now = mg_monotonic_ns();
    switch (c->state) {
    case CONN_CONNECTING: {
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
            soerr = errno;
        if (!soerr && (events & (EPOLLERR | EPOLLHUP)))
            soerr = ECONNREFUSED;
        if (soerr) {
            mg_bench_conn_finish(w, c, 0, MG_BENCH_ERR_CONNECT, soerr, now);
            return;
        }
        if (!(events & EPOLLOUT))
            return;
        c->state = CONN_SENDING;
        mg_bench_conn_try_send(w, c, now);
        return;
    }
    case CONN_SENDING:
        mg_bench_conn_try_send(w, c, now);
        return;
    case CONN_RECEIVING:
        on_readable(w, c);
        return;
    case CONN_WAITING:
        /* An idle kept-alive socket became readable: the server closed it (idle timeout,
         * shutdown) or sent something unasked. Either way it is not used again. */
        mg_bench_conn_close(c);
        return;
    case CONN_POOLED:
        mg_bench_list_remove(&c->shard->pool, c);
        mg_bench_conn_close(c);
        c->state = CONN_IDLE;
        mg_bench_list_push(&c->shard->free_list, c);
        return;
    default:
        return;
    }
}
