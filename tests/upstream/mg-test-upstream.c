/* SPDX-License-Identifier: ISC */
/*
 * mg-test-upstream: a small HTTP/1.1 server that plays CoreScope's own server for the tests
 * and the benchmark of meshgate's reverse proxy. One thread per connection, kept alive.
 *
 *   mg-test-upstream --port-file FILE [--port N] [--log FILE] [--requests FILE] [--analytics-ms N]
 *                    [--max-concurrent N] [--stale-after N] [--fail-every N]
 *
 * It writes its port to FILE once it listens, and appends every byte it receives to the log
 * (so a test can prove that a request never reached it); --requests FILE appends a line
 * "METHOD TARGET" for every request it reads as one (so a test can tell a body that holds
 * requests from requests). Paths:
 *
 *   /echo            200, the request's body as the response's body
 *   /headers         200, the request's head as received (text/plain)
 *   /big?bytes=N     200, N bytes of a fixed pattern, with Content-Length
 *   /chunked?chunks=K&size=S   200, chunked: K chunks of S pattern bytes, and a trailer
 *   /slow?ms=N       200 after N ms
 *   /fail            500
 *   /close-mid?bytes=N   Content-Length 2N, N bytes sent, then the connection closes
 *   /no-answer       the connection closes without an answer
 *   /huge-head?bytes=N   200 whose head carries about N bytes of X-Pad lines, then "ok"
 *   /_stats          {"requests":R,"peak":P,"in_flight":F} of the analytics family
 *   /api/analytics/... 200 JSON after --analytics-ms, at most --max-concurrent at once (the
 *                    others wait for a turn), counted for /_stats
 *   /api/perf/write-sources  200, one write source, served_by_the_test_upstream (the browser
 *                    check: CoreScope's Perf page shows it)
 *   /api/healthz     200 {"ready":true}, as CoreScope's server once it has loaded
 *   other /api/...   200 {"path":"..."}; with --fail-every N, every Nth of them 500 instead
 *                    (CoreScope's server failing in a benchmark, tools/bench-read-api.sh)
 *   a WebSocket handshake on any path: 101, then every frame is echoed back (unmasked); a
 *                    close frame is answered with a close frame
 *
 * --stale-after N: a connection that has answered N requests reads the next one (logged)
 * and closes without an answer, as a server does whose idle timeout crossed a kept-alive
 * client's request: the request was received, and not acted on.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int log_fd = -1;
static int requests_fd = -1;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int analytics_ms;
static int max_concurrent;
static pthread_mutex_t turn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cond = PTHREAD_COND_INITIALIZER;
static int in_flight, peak;
static atomic_ulong analytics_requests;
static unsigned long fail_every;
static atomic_ulong other_requests;
static long stale_after;

static int open_log(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

static void log_bytes(const char *p, size_t n)
{
    if (log_fd < 0 || n == 0)
        return;
    pthread_mutex_lock(&log_lock);
    while (n > 0) {
        ssize_t w = write(log_fd, p, n);
        if (w <= 0)
            break;
        p += w, n -= (size_t)w;
    }
    pthread_mutex_unlock(&log_lock);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static int send_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static unsigned char pattern(uint64_t i)
{
    return (unsigned char)((i * 7 + 3) & 0xff);
}

static long query_long(const char *target, const char *name, long fallback)
{
    const char *q = strchr(target, '?');
    size_t n = strlen(name);
    while (q) {
        q++;
        if (strncmp(q, name, n) == 0 && q[n] == '=')
            return atol(q + n + 1);
        q = strchr(q, '&');
    }
    return fallback;
}

/* ---- SHA-1 and base64, for Sec-WebSocket-Accept (RFC 6455 section 4.2.2) ---- */
static uint32_t rol(uint32_t v, int n)
{
    return v << n | v >> (32 - n);
}

static void sha1(const unsigned char *msg, size_t len, unsigned char out[20])
{
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    size_t total = ((len + 8) / 64 + 1) * 64;
    unsigned char *m = calloc(1, total);
    memcpy(m, msg, len);
    m[len] = 0x80;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        m[total - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t off = 0; off < total; off += 64) {
        uint32_t w[80];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)m[off + 4 * i] << 24 | (uint32_t)m[off + 4 * i + 1] << 16 |
                   (uint32_t)m[off + 4 * i + 2] << 8 | m[off + 4 * i + 3];
        for (int i = 16; i < 80; i++)
            w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
        for (int i = 0; i < 80; i++) {
            uint32_t f, k;
            if (i < 20)
                f = (b & c) | (~b & d), k = 0x5A827999;
            else if (i < 40)
                f = b ^ c ^ d, k = 0x6ED9EBA1;
            else if (i < 60)
                f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
            else
                f = b ^ c ^ d, k = 0xCA62C1D6;
            uint32_t t = rol(a, 5) + f + e + k + w[i];
            e = d, d = c, c = rol(b, 30), b = a, a = t;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
    }
    free(m);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
}

static void base64(const unsigned char *in, size_t n, char *out)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        out[o++] = t[v >> 18 & 63];
        out[o++] = t[v >> 12 & 63];
        out[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? t[v & 63] : '=';
    }
    out[o] = '\0';
}

/* ---- a connection ---- */
struct conn {
    int fd;
    long answered;
    char buf[16 << 20]; /* a whole request: the largest body the tests send, and more */
    size_t len;
};

static ssize_t fill(struct conn *c)
{
    if (c->len >= sizeof c->buf)
        return -1;
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    if (n > 0) {
        log_bytes(c->buf + c->len, (size_t)n);
        c->len += (size_t)n;
    }
    return n;
}

static const char *header(const char *head, size_t head_len, const char *name, size_t *vlen)
{
    size_t n = strlen(name);
    for (const char *p = head; p && p < head + head_len;) {
        const char *nl = memchr(p, '\n', (size_t)(head + head_len - p));
        if (!nl)
            break;
        if ((size_t)(nl - p) > n && strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ')
                v++;
            const char *e = nl;
            if (e > v && e[-1] == '\r')
                e--;
            *vlen = (size_t)(e - v);
            return v;
        }
        p = nl + 1;
    }
    return NULL;
}

/* The head of an answer of n bytes. */
static int respond_head(int fd, int status, const char *type, size_t n)
{
    char head[256];
    int h = snprintf(head, sizeof head,
                     "HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: keep-alive\r\nKeep-Alive: timeout=120\r\n\r\n",
                     status, type, n);
    return send_all(fd, head, (size_t)h);
}

static int respond(int fd, int status, const char *type, const char *body, size_t n)
{
    if (respond_head(fd, status, type, n) < 0)
        return -1;
    return n ? send_all(fd, body, n) : 0;
}

/* Echoes frames until a close frame or the end of the connection. */
static void websocket(struct conn *c)
{
    for (;;) {
        while (c->len < 2)
            if (fill(c) <= 0)
                return;
        unsigned char *b = (unsigned char *)c->buf;
        size_t need = 2;
        uint64_t plen = b[1] & 0x7f;
        if (plen == 126)
            need += 2;
        else if (plen == 127)
            need += 8;
        bool masked = b[1] & 0x80;
        need += masked ? 4 : 0;
        while (c->len < need)
            if (fill(c) <= 0)
                return;
        b = (unsigned char *)c->buf;
        if (plen == 126)
            plen = (uint64_t)b[2] << 8 | b[3];
        else if (plen == 127)
            for (int k = 0, s = 0; k < 8; k++, s++)
                plen = (k == 0 ? 0 : plen << 8) | b[2 + k];
        if (plen > sizeof c->buf - need)
            return;
        while (c->len < need + plen)
            if (fill(c) <= 0)
                return;
        b = (unsigned char *)c->buf;
        unsigned char *mask = masked ? b + need - 4 : NULL;
        unsigned char *payload = b + need;
        for (uint64_t i = 0; mask && i < plen; i++)
            payload[i] ^= mask[i % 4];
        unsigned char out_head[10];
        size_t oh = 0;
        out_head[oh++] = b[0];
        if (plen < 126) {
            out_head[oh++] = (unsigned char)plen;
        } else if (plen < 65536) {
            out_head[oh++] = 126;
            out_head[oh++] = (unsigned char)(plen >> 8);
            out_head[oh++] = (unsigned char)plen;
        } else {
            out_head[oh++] = 127;
            for (int k = 7; k >= 0; k--)
                out_head[oh++] = (unsigned char)(plen >> (8 * k));
        }
        int opcode = b[0] & 0x0f;
        if (send_all(c->fd, out_head, oh) < 0 || send_all(c->fd, payload, (size_t)plen) < 0)
            return;
        memmove(c->buf, c->buf + need + plen, c->len - need - plen);
        c->len -= need + plen;
        if (opcode == 8)
            return;
    }
}

static void analytics_turn(bool take)
{
    pthread_mutex_lock(&turn_lock);
    if (take) {
        while (max_concurrent > 0 && in_flight >= max_concurrent)
            pthread_cond_wait(&turn_cond, &turn_lock);
        in_flight++;
        if (in_flight > peak)
            peak = in_flight;
    } else {
        in_flight--;
        pthread_cond_signal(&turn_cond);
    }
    pthread_mutex_unlock(&turn_lock);
}

/* Serves one request; returns 0 to go on with the connection. */
static int serve_one(struct conn *c)
{
    char *end;
    while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4)))
        if (fill(c) <= 0)
            return -1;
    size_t head_len = (size_t)(end + 4 - c->buf);
    if (stale_after > 0 && c->answered == stale_after)
        return -1;
    c->answered++;
    char method[16] = "", target[2048] = "";
    sscanf(c->buf, "%15s %2047s", method, target);
    if (requests_fd >= 0) {
        char line[2100];
        int n = snprintf(line, sizeof line, "%s %s\n", method, target);
        pthread_mutex_lock(&log_lock);
        if (write(requests_fd, line, (size_t)n) != n)
            perror("mg-test-upstream: --requests");
        pthread_mutex_unlock(&log_lock);
    }
    size_t vlen = 0;
    const char *cl = header(c->buf, head_len, "Content-Length", &vlen);
    size_t body_len = cl ? (size_t)strtoull(cl, NULL, 10) : 0;
    if (body_len > sizeof c->buf - head_len)
        return -1;
    while (c->len < head_len + body_len)
        if (fill(c) <= 0)
            return -1;
    const char *body = c->buf + head_len;
    const char *upgrade = header(c->buf, head_len, "Upgrade", &vlen);
    int rc = 0;
    if (upgrade && vlen == 9 && strncasecmp(upgrade, "websocket", 9) == 0) {
        const char *key = header(c->buf, head_len, "Sec-WebSocket-Key", &vlen);
        char in[128], accept[64];
        unsigned char digest[20];
        snprintf(in, sizeof in, "%.*s258EAFA5-E914-47DA-95CA-C5AB0DC85B11",
                 key ? (int)(vlen < 64 ? vlen : 64) : 0, key ? key : "");
        sha1((const unsigned char *)in, strlen(in), digest);
        base64(digest, 20, accept);
        char resp[256];
        int n = snprintf(resp, sizeof resp,
                         "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                         "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                         accept);
        memmove(c->buf, c->buf + head_len, c->len - head_len);
        c->len -= head_len;
        if (send_all(c->fd, resp, (size_t)n) == 0)
            websocket(c);
        return -1;
    }
    if (strncmp(target, "/echo", 5) == 0) {
        rc = respond(c->fd, 200, "application/octet-stream", body, body_len);
    } else if (strncmp(target, "/headers", 8) == 0) {
        rc = respond(c->fd, 200, "text/plain", c->buf, head_len);
    } else if (strncmp(target, "/big", 4) == 0) {
        /* The head at once, the pattern made a piece at a time as it is sent: a large answer
         * is relayed from its first byte however starved the machine. */
        size_t n = (size_t)query_long(target, "bytes", 1000);
        rc = respond_head(c->fd, 200, "application/octet-stream", n);
        char piece[65536];
        for (size_t at = 0; at < n && rc == 0;) {
            size_t k = n - at < sizeof piece ? n - at : sizeof piece;
            for (size_t i = 0; i < k; i++)
                piece[i] = (char)pattern(at + i);
            rc = send_all(c->fd, piece, k);
            at += k;
        }
    } else if (strncmp(target, "/chunked", 8) == 0) {
        long chunks = query_long(target, "chunks", 3), size = query_long(target, "size", 100);
        const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                           "Transfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n";
        rc = send_all(c->fd, head, strlen(head));
        uint64_t at = 0;
        char *b = malloc((size_t)size + 32);
        for (long k = 0; k < chunks && rc == 0; k++) {
            int h = snprintf(b, 32, "%lx;ext=1\r\n", size);
            rc = send_all(c->fd, b, (size_t)h);
            for (long i = 0; i < size; i++)
                b[i] = (char)pattern(at++);
            if (rc == 0)
                rc = send_all(c->fd, b, (size_t)size);
            if (rc == 0)
                rc = send_all(c->fd, "\r\n", 2);
            sleep_ms(2);
        }
        free(b);
        if (rc == 0) {
            const char *last = "0\r\nX-Checksum: 1\r\n\r\n";
            rc = send_all(c->fd, last, strlen(last));
        }
    } else if (strncmp(target, "/slow", 5) == 0) {
        sleep_ms((int)query_long(target, "ms", 1000));
        rc = respond(c->fd, 200, "application/json", "{\"slow\":true}", 13);
    } else if (strncmp(target, "/fail", 5) == 0) {
        rc = respond(c->fd, 500, "application/json", "{\"error\":\"fail\"}", 16);
    } else if (strncmp(target, "/close-mid", 10) == 0) {
        size_t n = (size_t)query_long(target, "bytes", 1000);
        char head[128];
        int h =
            snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", 2 * n);
        char *b = malloc(n ? n : 1);
        for (size_t i = 0; i < n; i++)
            b[i] = (char)pattern(i);
        send_all(c->fd, head, (size_t)h);
        send_all(c->fd, b, n);
        free(b);
        rc = -1;
    } else if (strncmp(target, "/huge-head", 10) == 0) {
        size_t n = (size_t)query_long(target, "bytes", 70000);
        char *b = malloc(n + 2100);
        size_t o = (size_t)snprintf(b, 64, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n");
        while (o < n) { /* lines of 2,000 bytes: the head's size, not its count of lines */
            memcpy(b + o, "X-Pad: ", 7);
            memset(b + o + 7, 'a', 1991);
            memcpy(b + o + 1998, "\r\n", 2);
            o += 2000;
        }
        memcpy(b + o, "\r\nok", 4);
        rc = send_all(c->fd, b, o + 4);
        free(b);
    } else if (strncmp(target, "/no-answer", 10) == 0) {
        rc = -1;
    } else if (strncmp(target, "/_stats", 7) == 0) {
        char b[128];
        pthread_mutex_lock(&turn_lock);
        int n = snprintf(b, sizeof b, "{\"requests\":%lu,\"peak\":%d,\"in_flight\":%d}",
                         atomic_load(&analytics_requests), peak, in_flight);
        pthread_mutex_unlock(&turn_lock);
        rc = respond(c->fd, 200, "application/json", b, (size_t)n);
    } else if (strncmp(target, "/api/analytics/", 15) == 0) {
        analytics_turn(true);
        atomic_fetch_add(&analytics_requests, 1);
        sleep_ms(analytics_ms);
        analytics_turn(false);
        rc = respond(c->fd, 200, "application/json", "{\"analytics\":true}", 18);
    } else if (strcmp(target, "/api/perf/write-sources") == 0) {
        /* The Write Sources table of CoreScope's Perf page; meshgate has no such route, so
         * the browser check sees data only the upstream has. */
        char b[256], now[32];
        time_t t = time(NULL);
        strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
        int n = snprintf(b, sizeof b,
                         "{\"sources\":{\"served_by_the_test_upstream\":42},"
                         "\"sampleAt\":\"%s\"}",
                         now);
        rc = respond(c->fd, 200, "application/json", b, (size_t)n);
    } else if (strcmp(target, "/api/healthz") == 0) {
        rc = respond(c->fd, 200, "application/json", "{\"ready\":true}", 14);
    } else if (fail_every && (atomic_fetch_add(&other_requests, 1) + 1) % fail_every == 0) {
        rc = respond(c->fd, 500, "application/json", "{\"error\":\"fail-every\"}", 22);
    } else {
        char b[2200];
        int n = snprintf(b, sizeof b, "{\"path\":\"%s\"}", target);
        rc = respond(c->fd, 200, "application/json", b, (size_t)n);
    }
    memmove(c->buf, c->buf + head_len + body_len, c->len - head_len - body_len);
    c->len -= head_len + body_len;
    return rc;
}

static void *serve(void *arg)
{
    struct conn *c = arg;
    while (serve_one(c) == 0)
        ;
    close(c->fd);
    free(c);
    return NULL;
}

int main(int argc, char **argv)
{
    int port = 0;
    const char *port_file = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--port-file") == 0)
            port_file = argv[i + 1];
        else if (strcmp(argv[i], "--log") == 0)
            log_fd = open_log(argv[i + 1]);
        else if (strcmp(argv[i], "--requests") == 0)
            requests_fd = open_log(argv[i + 1]);
        else if (strcmp(argv[i], "--analytics-ms") == 0)
            analytics_ms = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--max-concurrent") == 0)
            max_concurrent = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--fail-every") == 0)
            fail_every = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--stale-after") == 0)
            stale_after = atol(argv[i + 1]);
    }
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 512) < 0) {
        perror("mg-test-upstream: bind");
        return 1;
    }
    socklen_t len = sizeof sa;
    getsockname(lfd, (struct sockaddr *)&sa, &len);
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f)
            return 1;
        fprintf(f, "%u\n", ntohs(sa.sin_port));
        fclose(f);
        rename(tmp, port_file);
    }
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = malloc(sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->len = 0;
        c->answered = 0;
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, serve, c) != 0) {
            close(fd);
            free(c);
        }
        pthread_attr_destroy(&attr);
    }
}
