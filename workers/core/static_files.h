/* SPDX-License-Identifier: ISC */
/*
 * static_files: the front end's files from MESHGATE_PUBLIC_DIR, for GET and HEAD of paths
 * outside /api/ that no route matched (off while the variable is empty).
 *
 * A path names a file under the directory and nothing else:
 *   - "/" and every path that names a directory serve that directory's index.html (no
 *     redirect to a trailing slash);
 *   - refused with 400 before any file is looked at: "." and ".." segments (the path is
 *     already percent-decoded, so %2e%2e is caught too) and an encoded slash (%2f) in the
 *     path as sent; a NUL never gets this far (dispatch refuses it);
 *   - not served (404): names that begin with "." (.git, .env, ...), missing files, a
 *     directory without index.html;
 *   - refused with 403: symbolic links, wherever they point (inside the directory too),
 *     anything that is not a regular file, files the server may not read;
 *   - never opened, answered 404: the database (MESHGATE_DB), its -wal, -shm and -journal,
 *     MESHGATE_API_KEYS_FILE, MESHGATE_ENV_FILE and MESHGATE_CORESCOPE_CONFIG, under any
 *     name (a hard link, a symbolic link to one), by device and inode (stat, never open: a
 *     worker that opened and closed the database file would drop its POSIX locks on it,
 *     docs/architecture.md); and any NAME-wal, NAME-shm or NAME-journal beside a NAME.
 * The last guard is the kernel's, not string checks: each file is opened with openat2()
 * beneath the directory (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
 * O_NOFOLLOW), relative to a descriptor of the directory that each worker opens once.
 * Without openat2 (Linux before 5.6) every file answers 500 with a message saying so.
 *
 * Memory: a file is never held whole per connection. The body is streamed by the worker
 * with sendfile() as the client reads it (workers/core/worker.c), under the send timeout, so a
 * connection costs its socket buffers whatever the file's size. The one exception is gzip:
 * a compressible file (text, JavaScript, JSON, SVG) of at most MG_STATIC_GZIP_MAX_BYTES, for
 * a client that accepts gzip and asks for no range, is compressed once for the group and its
 * body kept in the result cache (or a precompressed NAME.gz is streamed; static_files.c
 * says which); larger files without a .gz go out uncompressed.
 *
 * Ranges (RFC 9110 14): one range of bytes ("bytes=A-B", "bytes=A-", "bytes=-N") is answered
 * 206 with Content-Range; a range that starts past the end (or "bytes=-0") is 416 with
 * "Content-Range: bytes * /SIZE" (without the blank); anything else (several ranges, another unit,
 * a malformed value, or a Range with If-Range, since no validator is sent) is ignored, and the
 * whole file is answered 200, as the RFC allows. Every file answer says "Accept-Ranges: bytes".
 *
 * Caching: index.html gets "Cache-Control: no-cache" (a browser revalidates it, so a new
 * front end is seen at once); every other file "public, max-age=3600": an hour, since the
 * files' names carry no version and a deploy must show within reasonable time.
 */
#ifndef MESHGATE_STATIC_FILES_H
#define MESHGATE_STATIC_FILES_H

#include "handler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define MG_STATIC_MAX_AGE_S 3600
/* The largest file gzip-compressed in memory; larger files are streamed as they are. */
#define MG_STATIC_GZIP_MAX_BYTES (1024 * 1024)

enum { MG_RANGE_IGNORED = 0, MG_RANGE_OK, MG_RANGE_UNSATISFIABLE };

/*
 * The Range header value (len bytes) against a file of size bytes: MG_RANGE_OK with the
 * inclusive byte positions in *first and *last; MG_RANGE_UNSATISFIABLE (416); or
 * MG_RANGE_IGNORED (serve the whole file): several ranges, another unit, malformed, an
 * empty file.
 */
int mg_static_parse_range(const char *value, size_t len, uint64_t size, uint64_t *first,
                          uint64_t *last);

/* True when path (decoded) is one for static files: a public directory is set and the path
 * is not under /api/. */
bool mg_static_applies(const struct mg_config *cfg, const char *path);

/* Answers req (GET or HEAD) from the public directory. */
enum mg_turn mg_static_serve(struct mg_env *env, const struct mg_request *req,
                             struct mg_response *res);

/* The files a public directory must never serve (mg_static_guard_load): the database, its
 * three side files, the API keys file, the environment file, CoreScope's config.json. */
#define MG_STATIC_GUARDED_MAX 7

struct mg_static_guard {
    unsigned n; /* of file[]: those that exist */
    struct {
        dev_t dev;
        ino_t ino;
        const char *what; /* "MESHGATE_DB", "MESHGATE_DB's -wal", ... */
    } file[MG_STATIC_GUARDED_MAX];
};

/* Stats (never opens) each of cfg's guarded files that is set and exists. */
void mg_static_guard_load(struct mg_static_guard *g, const struct mg_config *cfg);
/* Which guarded file st is (by device and inode), or NULL. */
const char *mg_static_guard_match(const struct mg_static_guard *g, const struct stat *st);
/* Walks cfg's public directory as a request could reach it (no hidden names, no directory
 * through a symbolic link; at most a bounded number of entries) and calls found for each
 * name that is a guarded file or a symbolic link to one; returns how many it found. */
unsigned mg_static_guard_scan(const struct mg_config *cfg,
                              void (*found)(const char *path, const char *what, void *arg),
                              void *arg);

/* The Content-Type for a file name, by its extension; application/octet-stream when unknown. */
const char *mg_static_content_type(const char *name);

#endif
