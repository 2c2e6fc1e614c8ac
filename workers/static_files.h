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
 *     anything that is not a regular file, files larger than 64 MiB, files the server may
 *     not read.
 * The last guard is the kernel's, not string checks: each file is opened with openat2()
 * beneath the directory (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
 * O_NOFOLLOW), relative to a descriptor of the directory that each worker opens once.
 * Without openat2 (Linux before 5.6) every file answers 500 with a message saying so.
 *
 * Caching: index.html gets "Cache-Control: no-cache" (a browser revalidates it, so a new
 * front end is seen at once); every other file "public, max-age=3600": an hour, since the
 * files' names carry no version and a deploy must show within reasonable time.
 */
#ifndef MESHGATE_STATIC_FILES_H
#define MESHGATE_STATIC_FILES_H

#include "handler.h"

#include <stdbool.h>

#define MG_STATIC_MAX_BYTES (64 * 1024 * 1024)
#define MG_STATIC_MAX_AGE_S 3600

/* True when path (decoded) is one for static files: a public directory is set and the path
 * is not under /api/. */
bool mg_static_applies(const struct mg_config *cfg, const char *path);

/* Answers req (GET or HEAD) from the public directory. */
void mg_static_serve(struct mg_env *env, const struct mg_request *req, struct mg_response *res);

/* The Content-Type for a file name, by its extension; application/octet-stream when unknown. */
const char *mg_static_content_type(const char *name);

#endif
