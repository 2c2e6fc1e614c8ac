/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the dump tool's reader (tools/shmdump.c) on a damaged copy of a segment. At
 * start a small real segment is laid out (the server's own code, a 4 KiB cache) and kept as
 * bytes; the name is removed at once. Each input damages a copy: byte 0 chooses how much of
 * the copy is given (all, or a cut), then each 5-byte record writes one byte (a 4-byte
 * offset, half of them into the header where the layout is described, and the value).
 * Checks: the copy is refused as not understood, or rendered as text and as valid JSON.
 */
#include "json_check.h"
#include "router.h"
#include "stats.h"
#include "segment.h"
#include "shmdump.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned char *good;
static size_t good_size;

static const char *small_segment(const char *name, void *arg)
{
    static const char *const env[][2] = {
        {"MESHGATE_DB", "/srv/corescope/fuzz.db"},
        {"MESHGATE_WORKERS", "4"},
        {"MESHGATE_REACH_CACHE_BYTES", "4096"},
        {"MESHGATE_REACH_CACHE_ENTRIES", "4"},
        {"MESHGATE_ANON_CLIENTS", "8"},
    };
    (void)arg;
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
        if (strcmp(env[i][0], name) == 0)
            return env[i][1];
    return NULL;
}

static void make_good(void)
{
    struct mg_config cfg;
    struct mg_segment seg;
    char err[512], name[64];
    snprintf(name, sizeof name, "/mgtest-fuzz-shmdump-%d", (int)getpid());
    const char *routes[MG_ROUTES_MAX];
    unsigned n = mg_route_names(routes, MG_ROUTES_MAX);
    if (mg_config_load(&cfg, small_segment, NULL, err, sizeof err) != 0 ||
        mg_config_resolve(&cfg, err, sizeof err) != 0 ||
        mg_segment_create(&seg, name, &cfg, 4, routes, n, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz-shmdump: %s\n", err);
        abort();
    }
    mg_segment_unlink(name);
    good_size = seg.size;
    good = malloc(good_size);
    memcpy(good, seg.base, good_size);
    mg_segment_detach(&seg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!good)
        make_good();
    if (size < 1)
        return 0;
    unsigned char *bytes = malloc(good_size);
    memcpy(bytes, good, good_size);
    size_t len = data[0] < 200 ? good_size : good_size * (data[0] - 200) / 56;
    for (size_t at = 1; at + 5 <= size; at += 5) {
        uint32_t off;
        memcpy(&off, data + at, 4);
        off = off & 1 ? off % sizeof(struct mg_shm_header) : off % good_size;
        bytes[off] = data[at + 4];
    }
    struct mg_shmdump d;
    char err[512];
    enum mg_shmdump_status st = mg_shmdump_from_bytes(&d, "/fuzz", bytes, len, err, sizeof err);
    free(bytes);
    if (st != MG_SHMDUMP_OK) {
        if (st != MG_SHMDUMP_NOT_UNDERSTOOD || !err[0])
            abort();
        return 0;
    }
    struct mg_buf text, json;
    mg_buf_init(&text);
    mg_buf_init(&json);
    mg_shmdump_render_text(&d, &text);
    mg_shmdump_render_json(&d, &json);
    if (text.failed || json.failed || !json_is_valid(mg_buf_cstr(&json), json.len))
        abort();
    mg_buf_free(&text);
    mg_buf_free(&json);
    mg_shmdump_release(&d);
    return 0;
}
