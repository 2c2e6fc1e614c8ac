/* SPDX-License-Identifier: ISC */
/* The hex grid of CoreScope's RX coverage: see hexgrid.h. */
#include "hexgrid.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EARTH_R 6378137.0
#define MAX_LAT 85.05112878
/* 28 px hexes: half of it times Web Mercator's metres per pixel at zoom 0 (156543.03392),
 * the product written out so that it rounds once, as Go's constant arithmetic does. */
#define HEX_SIZE_Z0 2191602.47488
/* pi / 180, rounded once (Go folds the constant exactly) */
#define DEG_TO_RAD 0.017453292519943295769236907684886

static double hex_size(int res)
{
    return HEX_SIZE_Z0 / pow(2, res);
}

struct mg_hex_cell mg_hex_cell_at(double lat, double lon, int res)
{
    if (lat > MAX_LAT)
        lat = MAX_LAT;
    else if (lat < -MAX_LAT)
        lat = -MAX_LAT;
    double size = hex_size(res);
    double x = EARTH_R * lon * M_PI / 180;
    double y = EARTH_R * log(tan(M_PI / 4 + lat * M_PI / 360));
    double fq = (sqrt(3) / 3 * x - 1.0 / 3 * y) / size, fr = (2.0 / 3 * y) / size;
    /* cube rounding */
    double cx = fq, cz = fr, cy = -cx - cz;
    double rx = round(cx), ry = round(cy), rz = round(cz);
    double dx = fabs(rx - cx), dy = fabs(ry - cy), dz = fabs(rz - cz);
    if (dx > dy && dx > dz)
        rx = -ry - rz;
    else if (dy > dz)
        ry = -rx - rz;
    else
        rz = -rx - ry;
    return (struct mg_hex_cell){res, (long long)rx, (long long)rz};
}

void mg_hex_cell_id(const struct mg_hex_cell *c, char *out, size_t cap)
{
    snprintf(out, cap, "%d:%lld:%lld", c->res, c->q, c->r);
}

void mg_hex_write_ring(struct mg_json *j, const struct mg_hex_cell *c)
{
    double size = hex_size(c->res);
    double cx = size * (sqrt(3) * (double)c->q + sqrt(3) / 2 * (double)c->r);
    double cy = size * (1.5 * (double)c->r);
    double ring[6][2];
    for (int i = 0; i < 6; i++) {
        double ang = DEG_TO_RAD * (double)(60 * i - 30);
        double x = cx + size * cos(ang), y = cy + size * sin(ang);
        ring[i][0] = x / EARTH_R * 180 / M_PI;
        ring[i][1] = (2 * atan(exp(y / EARTH_R)) - M_PI / 2) * 180 / M_PI;
    }
    mg_json_array_begin(j);
    for (int i = 0; i <= 6; i++) {
        mg_json_array_begin(j);
        mg_json_double(j, ring[i % 6][0]);
        mg_json_double(j, ring[i % 6][1]);
        mg_json_array_end(j);
    }
    mg_json_array_end(j);
}

bool mg_hex_parse_float(const char *s, size_t len, double *out)
{
    while (len && isspace((unsigned char)*s))
        s++, len--;
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    char text[64];
    if (len == 0 || len >= sizeof text || memchr(s, '\0', len))
        return false;
    memcpy(text, s, len);
    text[len] = '\0';
    if (strchr(text, '(')) /* strtod's "nan(...)": not Go's */
        return false;
    char *end;
    errno = 0;
    *out = strtod(text, &end);
    return *end == '\0' && !(errno == ERANGE && isinf(*out));
}

bool mg_hex_parse_bbox(const char *s, double box[4])
{
    double v[4];
    int n = 0;
    for (const char *p = s ? s : "";; n++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n >= 4 || !mg_hex_parse_float(p, len, &v[n]))
            return false;
        if (!comma)
            break;
        p = comma + 1;
    }
    if (n != 3)
        return false;
    memcpy(box, v, sizeof v);
    return true;
}
