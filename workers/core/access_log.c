/* SPDX-License-Identifier: ISC */
#include "access_log.h"

#include "config_values.h"
#include "json.h"
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* What each field the client chose may take, escaped; with the rest (under 700 bytes) the
 * line stays within MG_LOG_LINE_MAX whatever the client sends. */
#define TARGET_BUDGET 1536
#define HEADER_BUDGET 640
#define METHOD_BUDGET 64

typedef void (*escape_fn)(struct mg_buf *out, const char *s, size_t len);

/* meshgate's own line: \xHH for anything but printable ASCII, and for '"' and '\'. */
static void escape_hex(struct mg_buf *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\')
            mg_buf_printf(out, "\\x%02x", ch);
        else
            mg_buf_putc(out, (char)ch);
    }
}

/* Apache's (ap_escape_logitem): \" and \\, and \xHH for control bytes and bytes past ASCII. */
static void escape_apache(struct mg_buf *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            mg_buf_putc(out, '\\');
            mg_buf_putc(out, (char)ch);
        } else if (ch < 0x20 || ch >= 0x7f) {
            mg_buf_printf(out, "\\x%02x", ch);
        } else {
            mg_buf_putc(out, (char)ch);
        }
    }
}

static void escape_json(struct mg_buf *out, const char *s, size_t len)
{
    mg_json_escape(out, s, len);
}

/* s escaped onto out, from as long a prefix of s as fits budget bytes once escaped. */
static void escaped_within(struct mg_buf *out, escape_fn escape, const char *s, size_t len,
                           size_t budget)
{
    size_t take = len < budget ? len : budget;
    size_t start = out->len;
    for (;;) {
        out->len = start;
        escape(out, s, take);
        size_t used = out->len - start;
        if (used <= budget || take == 0)
            break;
        /* Too long: shrink in proportion (escapes are at most 6 bytes each, so a few
         * rounds do it). */
        size_t shorter = (size_t)((double)take * (double)budget / (double)used);
        take = shorter < take ? shorter : take - 1;
    }
}

static void format_one(const struct mg_access_entry *e, struct mg_buf *out)
{
    char gate[32];
    mg_buf_printf(out, "access %s", e->client);
    if (e->via)
        mg_buf_printf(out, " (via %s)", e->via);
    mg_buf_puts(out, " \"");
    if (e->has_request) {
        escaped_within(out, escape_hex, e->method.ptr, e->method.len, METHOD_BUDGET);
        mg_buf_putc(out, ' ');
        escaped_within(out, escape_hex, e->target.ptr, e->target.len, TARGET_BUDGET);
        mg_buf_printf(out, " HTTP/1.%d", e->minor_version);
    } else {
        mg_buf_puts(out, "- - HTTP/1.1");
    }
    mg_buf_printf(out, "\" %d %" PRIu64 " %.3fms worker=%u gate=%s waited_ms=%" PRId64 " key=%s",
                  e->status, e->bytes, (double)e->duration_us / 1000.0, e->worker,
                  mg_outcome_text(&e->outcome, gate, sizeof gate), e->outcome.waited_ns / 1000000,
                  e->key_label ? e->key_label : "-");
}

static void quoted_header(struct mg_buf *out, const struct mg_str *h)
{
    mg_buf_putc(out, '"');
    if (h->ptr)
        escaped_within(out, escape_apache, h->ptr, h->len, HEADER_BUDGET);
    else
        mg_buf_putc(out, '-');
    mg_buf_putc(out, '"');
}

static void format_combined(const struct mg_access_entry *e, struct mg_buf *out)
{
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    char t[MG_LOG_TIME_MAX], gate[32];
    mg_log_format_time(e->start_realtime_ns, t, sizeof t); /* 2026-12-01T15:04:05.123Z */
    int month = (t[5] - '0') * 10 + (t[6] - '0');
    mg_buf_printf(out, "%s - %s [%.2s/%s/%.4s:%.8s +0000] \"", e->client,
                  e->key_label ? e->key_label : "-", t + 8,
                  months[month >= 1 && month <= 12 ? month - 1 : 0], t, t + 11);
    if (e->has_request) {
        escaped_within(out, escape_apache, e->method.ptr, e->method.len, METHOD_BUDGET);
        mg_buf_putc(out, ' ');
        escaped_within(out, escape_apache, e->target.ptr, e->target.len, TARGET_BUDGET);
        mg_buf_printf(out, " HTTP/1.%d\" ", e->minor_version);
    } else {
        mg_buf_puts(out, "-\" "); /* Apache's request line for a request it could not read */
    }
    if (e->body_bytes)
        mg_buf_printf(out, "%d %" PRIu64 " ", e->status, e->body_bytes);
    else
        mg_buf_printf(out, "%d - ", e->status);
    quoted_header(out, &e->referer);
    mg_buf_putc(out, ' ');
    quoted_header(out, &e->user_agent);
    mg_buf_printf(out, " %" PRId64 " gate=%s waited_ms=%" PRId64 " worker=%u via=%s",
                  e->duration_us, mg_outcome_text(&e->outcome, gate, sizeof gate),
                  e->outcome.waited_ns / 1000000, e->worker, e->via ? e->via : "-");
}

static void json_text(struct mg_json *j, struct mg_buf *scratch, const char *key,
                      const struct mg_str *s, size_t budget)
{
    mg_json_key(j, key);
    if (!s->ptr) {
        mg_json_null(j);
        return;
    }
    mg_buf_reset(scratch);
    mg_buf_putc(scratch, '"');
    escaped_within(scratch, escape_json, s->ptr, s->len, budget);
    mg_buf_putc(scratch, '"');
    mg_json_raw(j, scratch->data, scratch->len);
}

static void format_json(const struct mg_access_entry *e, struct mg_buf *out)
{
    char t[MG_LOG_TIME_MAX], gate[32];
    mg_log_format_time(e->start_realtime_ns, t, sizeof t);
    struct mg_buf scratch;
    mg_buf_init(&scratch);
    struct mg_json j;
    mg_json_init(&j, out);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "time", t);
    mg_json_kv_string(&j, "client", e->client);
    if (e->via)
        mg_json_kv_string(&j, "via", e->via);
    struct mg_str none = {NULL, 0};
    json_text(&j, &scratch, "method", e->has_request ? &e->method : &none, METHOD_BUDGET);
    json_text(&j, &scratch, "target", e->has_request ? &e->target : &none, TARGET_BUDGET);
    mg_json_kv_int(&j, "status", e->status);
    mg_json_kv_uint(&j, "bytes", e->body_bytes);
    mg_json_key(&j, "duration_ms");
    mg_json_double_rounded(&j, (double)e->duration_us / 1000.0, 3);
    json_text(&j, &scratch, "referer", &e->referer, HEADER_BUDGET);
    json_text(&j, &scratch, "user_agent", &e->user_agent, HEADER_BUDGET);
    mg_json_kv_uint(&j, "worker", e->worker);
    mg_json_kv_string(&j, "gate", mg_outcome_text(&e->outcome, gate, sizeof gate));
    mg_json_kv_int(&j, "waited_ms", e->outcome.waited_ns / 1000000);
    mg_json_kv_string(&j, "key", e->key_label); /* NULL: null */
    mg_json_object_end(&j);
    mg_buf_free(&scratch);
}

void mg_access_log_format(int format, const struct mg_access_entry *e, struct mg_buf *out)
{
    if (format == MG_ACCESS_LOG_COMBINED)
        format_combined(e, out);
    else if (format == MG_ACCESS_LOG_JSON)
        format_json(e, out);
    else
        format_one(e, out);
}
