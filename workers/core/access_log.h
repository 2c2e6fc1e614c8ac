/* SPDX-License-Identifier: ISC */
/*
 * access_log: one line per answered request, in the format MESHGATE_ACCESS_LOG names. The
 * worker fills a struct mg_access_entry after the response is serialized; this file only
 * formats it (no socket, no clock), so its tests need no server.
 *
 *   1         access CLIENT[ (via PROXY)] "METHOD TARGET HTTP/1.x" STATUS BYTES D.DDDms
 *             worker=N gate=OUTCOME waited_ms=N key=LABEL|-
 *             (BYTES: everything sent, head and body; the log adds the time or "<6>")
 *   combined  Apache's combined format, then the duration in microseconds (Apache's %D), then
 *             meshgate's fields:
 *             CLIENT - LABEL|- [DD/Mon/YYYY:HH:MM:SS +0000] "METHOD TARGET HTTP/1.x" STATUS
 *             BODY_BYTES|- "REFERER" "USER-AGENT" DURATION_US gate=OUTCOME waited_ms=N
 *             worker=N via=PROXY|-
 *   json      {"time":..,"client":..,"via":.. (behind a trusted proxy only),"method":..,
 *             "target":..,"status":..,"bytes":BODY_BYTES,"duration_ms":..,"referer":..|null,
 *             "user_agent":..|null,"worker":..,"gate":..,"waited_ms":..,"key":..|null}
 *
 * A request read whole and never answered (worker.c, close_unanswered) has a line with no
 * bytes and STATUS 499 (its client broke the connection before its turn) or 503 (the worker
 * stopped past its drain).
 *
 * OUTCOME is mg_outcome_text (handler.h): none, bypassed, admitted:GATE, waited:GATE or
 * refused:GATE, GATE one of rate-limit, anon-line, cold-gate, diag-gate, upstream-gate,
 * upstream-breaker. LABEL is the
 * signed-in key's label from the keys file, never the key. The time is the request's start.
 *
 * Text the client chose (target, referer, user agent, method) is escaped for its format: in
 * 1, every byte outside printable ASCII and '"' and '\' as \xHH; in combined as Apache does,
 * \" and \\ and \xHH for the rest; in JSON by the project's JSON writer. Each such field is
 * cut so that, escaped, it fits its share of MG_LOG_LINE_MAX.
 */
#ifndef MESHGATE_ACCESS_LOG_H
#define MESHGATE_ACCESS_LOG_H

#include "buf.h"
#include "handler.h"

struct mg_access_entry {
    int64_t start_realtime_ns;
    const char *client; /* the client's address as text */
    const char *via;    /* the trusted proxy it came through; NULL: it connected itself */
    bool has_request;   /* false: the head did not parse; method and target are "-" */
    struct mg_str method;
    struct mg_str target;
    int minor_version;
    int status;
    uint64_t bytes;      /* sent: head and body */
    uint64_t body_bytes; /* of them, the body */
    int64_t duration_us;
    struct mg_str referer;    /* ptr NULL: none */
    struct mg_str user_agent; /* ptr NULL: none */
    unsigned worker;
    struct mg_outcome outcome;
    const char *key_label; /* NULL: anonymous */
};

/* Appends the line (without its newline) for format (enum mg_access_log) to out. */
void mg_access_log_format(int format, const struct mg_access_entry *e, struct mg_buf *out);

#endif
