/* SPDX-License-Identifier: ISC */
/*
 * hexgrid: CoreScope's binning of mobile receptions for its RX coverage maps
 * (workers/api/ep_rx_coverage.c): points projected to Web Mercator and snapped to pointy-top
 * hexagons whose size halves with each zoom level (28 px on screen at that zoom), cell ids
 * "res:q:r" in axial coordinates; latitudes clamped to Web Mercator's +-85.05112878. The
 * arithmetic is CoreScope's, operation for operation, so a point falls in the same cell; a
 * corner's last bit may differ where the C library's tan, atan, log or exp differ from Go's.
 * And the view's box: "minLat,minLon,maxLat,maxLon", four numbers.
 */
#ifndef MESHGATE_HEXGRID_H
#define MESHGATE_HEXGRID_H

#include "json.h"

#include <stdbool.h>
#include <stddef.h>

struct mg_hex_cell {
    int res;
    long long q, r;
};

/* The cell of (lat, lon) at resolution res. */
struct mg_hex_cell mg_hex_cell_at(double lat, double lon, int res);
/* Its id, "res:q:r" (at most 48 bytes with the NUL). */
void mg_hex_cell_id(const struct mg_hex_cell *c, char *out, size_t cap);
/* Its ring: the six corners and the first again, each [lon, lat], as a JSON array. */
void mg_hex_write_ring(struct mg_json *j, const struct mg_hex_cell *c);

/* Go's strconv.ParseFloat of s[0, len) trimmed of white space: false when it is empty,
 * malformed, or out of a double's range. */
bool mg_hex_parse_float(const char *s, size_t len, double *out);
/* "minLat,minLon,maxLat,maxLon" (CoreScope's parseBBox: split on commas, exactly four parts,
 * each mg_hex_parse_float) into box; false otherwise (NULL too). */
bool mg_hex_parse_bbox(const char *s, double box[4]);

#endif
