/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the JSON bodies of meshgate's POST routes (POST /api/packets/observations, its
 * reader of CoreScope's {"hashes": [...]}; POST /api/decode, of {"hex": "..."}; POST
 * /api/paths/inspect, its reader of {"prefixes": [...], "limit": N, "context": {...}}, the
 * UTF-8 it repairs as Go's decoder does, and the beam search the prefixes start): the input
 * is the body, sent whole with its Content-Length as the worker hands it over to each route,
 * dispatched in-process on a small CoreScope database with relays and edges
 * (tests/inproc.c). Checks: each answer is 200 or 400, and valid JSON.
 */
#include "harness.h"
#include "inproc.h"
#include "json_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char rows[] =
    "INSERT INTO observers (rowid, id, name, iata) VALUES (1, 'AAAA01', 'Alpha', 'SFO');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, payload_type,"
    " decoded_json) VALUES (1, '11', 'abcdef0000000001', '2026-05-01T00:00:00Z', 1, 4,"
    " '{\"type\":\"ADVERT\"}');"
    "INSERT INTO observations (transmission_id, observer_idx, direction, snr, rssi, path_json,"
    " timestamp) VALUES (1, 1, 'rx', 1.5, -80, '[\"AA\"]', 1779041349);"
    "INSERT INTO nodes (public_key, name, role, lat, lon) VALUES"
    " ('aa11', 'A', 'repeater', 37.0, -122.0), ('aa22', 'B', 'room', 37.5, -122.0),"
    " ('ab33', 'C', 'Repeater', NULL, NULL), ('AB44', NULL, 'companion', 0, 0);"
    "INSERT INTO neighbor_edges (node_a, node_b, count, last_seen) VALUES"
    " ('aa11', 'aa22', 5, '2026-05-01T00:00:00Z'), ('aa22', 'ab33', 200, NULL),"
    " ('ab33', 'aa11', 1, '2026-05-01 00:00:00');";

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
        fprintf(stderr, "fuzz-post_body: no test database in %s\n", dir);
        abort();
    }
    t.seg.clients.table->per_minute = 0; /* no rate limit between runs */
    ctx = &t;
    atexit(remove_database);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx)
        open_ctx();
    if (size > 65536)
        return 0;
    /* mg_test_ctx_request takes a C string: the input up to a NUL (a body with a NUL is the
     * same to the JSON reader, which refuses it). */
    char *body = malloc(size + 1);
    memcpy(body, data, size);
    body[size] = '\0';
    static const char *const routes[] = {"/api/packets/observations", "/api/paths/inspect",
                                         "/api/decode"};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        int status = mg_test_ctx_request(ctx, "POST", routes[i], body);
        const char *answer = (const char *)ctx->res.body.data;
        if (status != 200 && status != 400) {
            fprintf(stderr, "fuzz-post_body: %s: status %d: %.300s\n", routes[i], status, answer);
            abort();
        }
        if (!json_is_valid(answer, ctx->res.body.len)) {
            fprintf(stderr, "fuzz-post_body: %s: answer is not valid JSON: %.300s\n", routes[i],
                    answer);
            abort();
        }
    }
    free(body);
    return 0;
}
