/* SPDX-License-Identifier: ISC */
/*
 * bench/internal.h: what the files of meshgate-bench's library half share, apart from the
 * engine of a run (engine.h). Files: spec.c and cli.c (the command line), http.c (requests
 * and response heads), report.c (percentiles, text and JSON), and the engine's conn.c,
 * response.c, worker.c and run.c.
 */
#ifndef MESHGATE_BENCH_INTERNAL_H
#define MESHGATE_BENCH_INTERNAL_H

#include "bench.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STREAM_FORMS "NAME:PATH:closed:CONNS[:PAUSE_MS], NAME:PATH:open:RATE or NAME:PATH:once:N"

/* Writes the message into err, when there is one. */
void mg_bench_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* spec.c */
bool mg_bench_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out);
bool mg_bench_parse_decimal(const char *text, double min, bool min_open, double max, double *out);
bool mg_bench_token_char(char c);
int mg_bench_add_expect(struct mg_bench_config *cfg, const char *arg, char *err, size_t errlen);
int mg_bench_add_header(struct mg_bench_config *cfg, const char *arg, char *err, size_t errlen);
int mg_bench_load_keys(struct mg_bench_config *cfg, const char *path, char *err, size_t errlen);

/* http.c: --chunked, for the run under way (the parser is shared with the tests, which never
 * set it). */
extern bool mg_bench_accept_chunked;
size_t mg_bench_format_request(const struct mg_bench_config *cfg, const struct mg_bench_stream *s,
                               const char *key, char *out, size_t cap);
size_t mg_bench_longest_request(const struct mg_bench_config *cfg, const struct mg_bench_stream *s);

/* report.c */
void mg_bench_summarize(const int64_t *sorted, size_t n, struct mg_bench_latency *l);
const char *mg_bench_mode_name(enum mg_bench_mode m);

#endif
