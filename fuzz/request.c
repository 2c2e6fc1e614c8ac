/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the whole request path in-process: the input is the bytes a client sends; the
 * head is parsed as the worker parses it and, when complete, dispatched (routing, parameters,
 * gates, the endpoint's queries on a small CoreScope database, the response) as
 * tests/inproc.c does, with the body that follows the head for a route that reads one. Checks: a
 * parsed head gets a status from 200 to 599, and every JSON answer (but to HEAD) is valid JSON. The
 * database lives in a private directory removed at exit.
 */
#include "clock.h"
#include "harness.h"
#include "http.h"
#include "inproc.h"
#include "json_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PK_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define PK_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static const char rows[] =
    "INSERT INTO observers (rowid, id, name, iata) VALUES"
    " (1, 'AAAA01', 'Alpha', 'SFO'), (2, 'BBBB02', 'Bravo', 'OAK'), (3, 'cccc03', 'Charlie', '');"
    "INSERT INTO nodes (public_key, name, role, lat, lon, last_seen, first_seen) VALUES"
    " ('" PK_A "', 'Node A', 'repeater', 37.5, -122.1, strftime('%Y-%m-%dT%H:%M:%SZ','now'),"
    "  '2026-01-01T00:00:00Z'),"
    " ('" PK_B "', 'Node \"B\" <x>', 'companion', NULL, NULL, '2026-05-10T00:00:00Z', NULL);"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, payload_type,"
    " decoded_json, from_pubkey, channel_hash) VALUES"
    " (1, '11', 'abcdef0000000001', strftime('%Y-%m-%dT%H:%M:%SZ','now'), 1, 4,"
    "  '{\"type\":\"ADVERT\"}', '" PK_A "', NULL),"
    " (2, '22', 'abcdef0000000002', '2026-05-02T00:00:00Z', 2, 5,"
    "  '{\"type\":\"CHAN\",\"channelHashHex\":\"D9\",\"channel\":\"#test\"}', NULL, 'D9'),"
    " (3, '33', 'abcdef0000000003', '2026-05-03T00:00:00Z', 1, 5, 'not json {', NULL, NULL);"
    "INSERT INTO observations (transmission_id, observer_idx, direction, snr, rssi, path_json,"
    " timestamp, resolved_path) VALUES"
    " (1, 1, 'rx', 1.5, -80, '[\"AA\"]', strftime('%s','now'), '[\"" PK_A "\"]'),"
    " (1, 2, 'rx', 2, -81, '[\"AA\",\"BB\"]', strftime('%s','now') - 60,"
    "  '[null,\"" PK_B "\"]'),"
    " (2, 3, 'rx', 3, -82, '[]', strftime('%s','now') - 3600, NULL),"
    " (3, 1, 'rx', 4, -83, NULL, strftime('%s','now') - 86400, NULL);"
    "INSERT INTO neighbor_edges (node_a, node_b, count, last_seen) VALUES"
    " ('" PK_A "', '" PK_B "', 3, '2026-05-10T00:00:00Z');";

static struct mg_test_ctx *ctx;
static char dir[128];

static void remove_database(void)
{
    mg_test_ctx_close(ctx);
    mg_test_rmdir(dir);
}

static void open_ctx(void)
{
    static struct mg_test_ctx t;
    char path[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/fuzz.db", dir);
    if (!dir[0] || mg_test_make_db(path, true, rows) != 0 || !mg_test_ctx_open(&t, path)) {
        fprintf(stderr, "fuzz-request: no test database in %s\n", dir);
        abort();
    }
    ctx = &t;
    atexit(remove_database);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx)
        open_ctx();
    if (size > 16384)
        return 0;
    /* The bytes, and the same with an end of head added, as a client may or may not send. */
    char *buf = malloc(size + 4);
    memcpy(buf, data, size);
    struct mg_http_limits limits = {ctx->cfg.max_header_bytes, ctx->cfg.max_uri_bytes};
    struct mg_http_request hr;
    int status = 0;
    const char *why = NULL;
    enum mg_http_result r = mg_http_parse_request(buf, size, &limits, &hr, &status, &why);
    if (r == MG_HTTP_INCOMPLETE) {
        memcpy(buf + size, "\r\n\r\n", 4);
        r = mg_http_parse_request(buf, size + 4, &limits, &hr, &status, &why);
    }
    if (r != MG_HTTP_OK) {
        free(buf);
        return 0;
    }
    struct mg_request req;
    memset(&req, 0, sizeof req);
    req.http = &hr;
    /* A body that came whole after the head, as the worker hands it to a route that reads
     * one (POST /api/packets/observations). */
    if (hr.content_length > 0 && hr.head_len <= size &&
        size - hr.head_len >= (uint64_t)hr.content_length)
        req.body = (struct mg_str){buf + hr.head_len, (size_t)hr.content_length};
    req.start_monotonic_ns = mg_monotonic_ns();
    req.start_realtime_ns = mg_realtime_ns();
    req.client_addr = "127.0.0.1";
    static const uint8_t loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    memcpy(req.peer, loopback, sizeof loopback);
    req.peer[15] = (uint8_t)(size * 31 + (size ? data[0] : 0)); /* spread over the rate table */
    struct mg_park park;
    memset(&park, 0, sizeof park);
    req.park = &park;
    mg_response_reset(&ctx->res);
    /* A parked request is asked again, as the worker's loop would; no wait is longer than
     * the gates' own bounds (a few seconds). */
    for (int turn = 0;; turn++) {
        park.turns++;
        if ((turn ? mg_dispatch_resume(&ctx->env, &req, &ctx->bufs, &ctx->res)
                  : mg_dispatch(&ctx->env, &req, &ctx->bufs, &ctx->res)) != MG_PARK)
            break;
        if (turn > 20000) {
            fprintf(stderr, "fuzz-request: still parked after 20000 turns\n");
            abort();
        }
        mg_response_reset(&ctx->res);
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
    struct mg_response *res = &ctx->res;
    if (res->status < 200 || res->status > 599) {
        fprintf(stderr, "fuzz-request: status %d\n", res->status);
        abort();
    }
    const char *body = mg_buf_cstr(&res->body);
    if (hr.method_id != MG_METHOD_HEAD && res->content_type && strstr(res->content_type, "json") &&
        res->body.len > 0 && !json_is_valid(body, res->body.len)) {
        fprintf(stderr, "fuzz-request: %d answer is not valid JSON: %.300s\n", res->status, body);
        abort();
    }
    free(buf);
    return 0;
}
