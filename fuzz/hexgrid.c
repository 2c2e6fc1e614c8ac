/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the RX coverage's box and hex grid (workers/data/hexgrid.c), what a client
 * sends as bbox=. Checks: an accepted box is four numbers, each written back ("%.17g") and
 * joined by commas accepted again as the same box; a finite point's cell, at the resolution
 * the first byte picks (3..18, as CoreScope's zoom clamp), has an id "res:q:r" that reads
 * back, and its ring is seven corners closing on the first.
 */
#include "hexgrid.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 512)
        return 0;
    int res = 3 + data[0] % 16;
    char *s = malloc(size);
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    double box[4], again[4];
    if (mg_hex_parse_bbox(s, box)) {
        char text[160];
        snprintf(text, sizeof text, "%.17g,%.17g,%.17g,%.17g", box[0], box[1], box[2], box[3]);
        if (!mg_hex_parse_bbox(text, again))
            abort();
        for (int i = 0; i < 4; i++)
            if (!(again[i] == box[i] || (isnan(again[i]) && isnan(box[i]))))
                abort();
        if (isfinite(box[0]) && isfinite(box[1]) && fabs(box[1]) < 1e6) {
            struct mg_hex_cell c = mg_hex_cell_at(box[0], box[1], res);
            char id[48];
            mg_hex_cell_id(&c, id, sizeof id);
            int r0;
            long long q, r;
            if (sscanf(id, "%d:%lld:%lld", &r0, &q, &r) != 3 || r0 != res || q != c.q || r != c.r)
                abort();
            struct mg_buf b;
            mg_buf_init(&b);
            struct mg_json j;
            mg_json_init(&j, &b);
            mg_hex_write_ring(&j, &c);
            const char *out = mg_buf_cstr(&b);
            int corners = 0;
            for (const char *p = out; *p; p++)
                corners += p[0] == '[' && p[1] != '[';
            if (corners != 7)
                abort();
            mg_buf_free(&b);
        }
    }
    free(s);
    return 0;
}
