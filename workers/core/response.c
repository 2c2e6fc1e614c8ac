/* SPDX-License-Identifier: ISC */
#include "handler.h"

#include "clock.h"
#include "json.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

void mg_response_init(struct mg_response *res)
{
    memset(res, 0, sizeof *res);
    mg_buf_init(&res->body);
    mg_buf_init(&res->headers);
    res->status = 200;
    res->file_fd = -1;
}

void mg_response_file(struct mg_response *res, int fd, uint64_t file_offset, uint64_t file_length)
{
    mg_response_drop_file(res);
    mg_buf_reset(&res->body);
    res->file_fd = fd;
    res->file_offset = file_offset;
    res->file_length = file_length;
}

void mg_response_drop_file(struct mg_response *res)
{
    if (res->file_fd >= 0)
        close(res->file_fd);
    res->file_fd = -1;
    res->file_offset = res->file_length = 0;
}

void mg_response_reset(struct mg_response *res)
{
    mg_buf_reset(&res->body);
    mg_buf_reset(&res->headers);
    res->status = 200;
    res->content_type = NULL;
    res->no_store = false;
    res->close = false;
    res->refused = false;
    mg_response_drop_file(res);
    res->gzipped = false;
    res->live = false;
    res->live_shared = false;
}

void mg_response_free(struct mg_response *res)
{
    mg_buf_free(&res->body);
    mg_buf_free(&res->headers);
    mg_response_drop_file(res);
}

void mg_response_header(struct mg_response *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mg_buf_vprintf(&res->headers, fmt, ap);
    va_end(ap);
    mg_buf_puts(&res->headers, "\r\n");
}

void mg_response_json(struct mg_response *res, int status)
{
    res->status = status;
    res->content_type = "application/json";
    res->no_store = true;
}

void mg_response_error(struct mg_response *res, int status, const char *fmt, ...)
{
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    mg_response_drop_file(res);
    mg_buf_reset(&res->body);
    res->gzipped = false;
    mg_response_json(res, status);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "error", message);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
}

void mg_response_refuse(struct mg_response *res, int status, int retry_after_s, const char *message)
{
    if (retry_after_s < 1)
        retry_after_s = 1;
    mg_buf_reset(&res->body);
    mg_buf_reset(&res->headers);
    mg_response_json(res, status);
    res->refused = true;
    mg_response_header(res, "Retry-After: %d", retry_after_s);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "error", message);
    mg_json_kv_int(&j, "retryAfter", retry_after_s);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
}

/* RFC 9110 IMF-fixdate, formatted once per second. */
static const char *http_date(void)
{
    static time_t last;
    static char text[40];
    time_t now = time(NULL);
    if (now != last) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        last = now;
    }
    return text;
}

bool mg_response_compressible(const char *type)
{
    return type && (strncmp(type, "application/json", 16) == 0 || strncmp(type, "text/", 5) == 0 ||
                    strncmp(type, "application/javascript", 22) == 0 ||
                    strncmp(type, "image/svg+xml", 13) == 0);
}

bool mg_gzip(const struct mg_buf *in, struct mg_buf *out)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    /* Level 4: most of level 6's ratio on JSON at well under its cost. */
    if (deflateInit2(&z, 4, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return false;
    uLong bound = deflateBound(&z, (uLong)in->len);
    if (!mg_buf_reserve(out, bound)) {
        deflateEnd(&z);
        return false;
    }
    z.next_in = (Bytef *)in->data;
    z.avail_in = (uInt)in->len;
    z.next_out = (Bytef *)out->data + out->len;
    z.avail_out = (uInt)bound;
    int rc = deflate(&z, Z_FINISH);
    if (rc != Z_STREAM_END) {
        deflateEnd(&z);
        return false;
    }
    out->len += z.total_out;
    deflateEnd(&z);
    return true;
}

bool mg_response_gzip(struct mg_response *res, bool gzip_ok, int gzip_min_bytes)
{
    if (res->file_fd >= 0 || res->gzipped || !gzip_ok || gzip_min_bytes <= 0 || res->body.failed ||
        res->body.len < (size_t)gzip_min_bytes || !mg_response_compressible(res->content_type))
        return false;
    struct mg_buf zipped;
    mg_buf_init(&zipped);
    if (!mg_gzip(&res->body, &zipped)) {
        mg_buf_free(&zipped);
        return false;
    }
    mg_buf_free(&res->body);
    res->body = zipped;
    res->gzipped = true;
    return true;
}

void mg_response_serialize(struct mg_response *res, struct mg_buf *out, bool head_only,
                           bool keep_alive, bool gzip_ok, int gzip_min_bytes)
{
    if (res->body.failed || res->headers.failed) {
        mg_response_error(res, 500, "the server ran out of memory building this response");
        mg_buf_reset(&res->headers);
    }
    bool may_compress = mg_response_compressible(res->content_type);
    bool from_file = res->file_fd >= 0; /* the worker sends the file after the head */
    mg_response_gzip(res, gzip_ok, gzip_min_bytes);
    const struct mg_buf *body = &res->body;

    mg_buf_printf(out, "HTTP/1.1 %d %s\r\nServer: meshgate\r\nDate: %s\r\n", res->status,
                  mg_http_reason(res->status), http_date());
    if (res->content_type)
        mg_buf_printf(out, "Content-Type: %s\r\n", res->content_type);
    if (from_file)
        mg_buf_printf(out, "Content-Length: %llu\r\n", (unsigned long long)res->file_length);
    else
        mg_buf_printf(out, "Content-Length: %zu\r\n", body->len);
    if (res->gzipped)
        mg_buf_puts(out, "Content-Encoding: gzip\r\n");
    if (may_compress && gzip_min_bytes > 0)
        mg_buf_puts(out, "Vary: Accept-Encoding\r\n");
    if (res->no_store)
        mg_buf_puts(out, "Cache-Control: no-store\r\n");
    mg_buf_append(out, res->headers.data, res->headers.len);
    mg_buf_puts(out, keep_alive && !res->close ? "Connection: keep-alive\r\n\r\n"
                                               : "Connection: close\r\n\r\n");
    if (!head_only && !from_file)
        mg_buf_append(out, body->data, body->len);
}

void mg_outcome_wait(struct mg_outcome *o, enum mg_gate_id gate, int64_t now_ns)
{
    o->gate = (uint8_t)gate;
    if (o->wait_since_ns == 0)
        o->wait_since_ns = now_ns;
}

void mg_outcome_decide(struct mg_outcome *o, enum mg_gate_id gate, enum mg_gate_verdict verdict,
                       int64_t now_ns)
{
    bool waited_here = o->wait_since_ns != 0 && o->gate == gate;
    if (o->wait_since_ns != 0) {
        o->waited_ns += now_ns - o->wait_since_ns;
        o->wait_since_ns = 0;
    }
    if (verdict == MG_VERDICT_ADMITTED && waited_here)
        verdict = MG_VERDICT_WAITED;
    o->gate = (uint8_t)gate;
    o->verdict = (uint8_t)verdict;
}

const char *mg_outcome_text(const struct mg_outcome *o, char *out, size_t outlen)
{
    static const char *gates[] = {"none",      "rate-limit",    "anon-line",       "cold-gate",
                                  "diag-gate", "upstream-gate", "upstream-breaker"};
    static const char *verdicts[] = {"none", "bypassed", "admitted", "waited", "refused"};
    const char *verdict = o->verdict < 5 ? verdicts[o->verdict] : "?";
    if (o->verdict == MG_VERDICT_NONE || o->verdict == MG_VERDICT_BYPASSED || o->gate == 0 ||
        o->gate >= sizeof gates / sizeof gates[0])
        snprintf(out, outlen, "%s", verdict);
    else
        snprintf(out, outlen, "%s:%s", verdict, gates[o->gate]);
    return out;
}

void mg_response_db_failure_on(struct mg_response *res, const char *what, int rc, sqlite3 *conn)
{
    int primary = rc & 0xff;
    mg_buf_reset(&res->headers);
    mg_buf_reset(&res->body);
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
        mg_response_refuse(res, 503, 1, "the database is busy: retry in a moment");
        return;
    }
    const char *message = rc == SQLITE_NOMEM ? "out of memory"
                          : conn             ? sqlite3_errmsg(conn)
                                             : sqlite3_errstr(rc);
    mg_warn("reading %s from the database failed: %s", what, message);
    mg_response_error(res, 500, "reading %s from the database failed: %s", what, message);
}

void mg_response_db_failure(struct mg_response *res, const char *what, int rc)
{
    mg_response_db_failure_on(res, what, rc, NULL);
}
