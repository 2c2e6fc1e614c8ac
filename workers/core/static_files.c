/* SPDX-License-Identifier: ISC */
#include "static_files.h"

#include "clock.h"
#include "log.h"
#include "result_body.h"
#include "segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define INDEX_FILE "index.html"

static const struct {
    const char *extension;
    const char *type;
} content_types[] = {
    {"html", "text/html; charset=utf-8"},
    {"htm", "text/html; charset=utf-8"},
    {"css", "text/css; charset=utf-8"},
    {"js", "text/javascript; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"},
    {"json", "application/json"},
    {"map", "application/json"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"ico", "image/x-icon"},
    {"webp", "image/webp"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"txt", "text/plain; charset=utf-8"},
    {"wasm", "application/wasm"},
};

const char *mg_static_content_type(const char *name)
{
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    const char *dot = strrchr(base, '.');
    if (dot && dot != base)
        for (size_t i = 0; i < sizeof content_types / sizeof content_types[0]; i++)
            if (strcasecmp(dot + 1, content_types[i].extension) == 0)
                return content_types[i].type;
    return "application/octet-stream";
}

bool mg_static_applies(const struct mg_config *cfg, const char *path)
{
    return cfg->public_dir[0] != '\0' && strncmp(path, "/api/", 5) != 0;
}

/*
 * The public directory, opened once per worker (O_PATH: it is only ever a starting point
 * for openat2). Reopened when the configured path changes; a directory replaced under the
 * same name is seen after a reload, which starts new workers.
 */
static int public_fd = -1;
static char public_path[MG_PATH_MAX];

static int public_dir(const char *dir)
{
    if (public_fd >= 0 && strcmp(public_path, dir) == 0)
        return public_fd;
    if (public_fd >= 0)
        close(public_fd);
    public_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (public_fd >= 0)
        snprintf(public_path, sizeof public_path, "%s", dir);
    return public_fd;
}

/* Opens rel beneath dirfd, never through a symbolic link, never outside dirfd. */
static int open_beneath(int dirfd, const char *rel)
{
    struct open_how how;
    memset(&how, 0, sizeof how);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused after fstat. */
    how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    return (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
}

/*
 * The guarded files (static_files.h): known by device and inode, from stat(), so a request
 * that names one (a hard link, a symbolic link to one) is answered 404 before anything is
 * opened. A worker opening and closing the database file, even read-only and under another
 * name, would drop every POSIX lock its process holds on that file (SQLite's, on its live
 * connections), the cause of "database disk image is malformed" beside a live writer.
 */
void mg_static_guard_load(struct mg_static_guard *g, const struct mg_config *cfg)
{
    const struct {
        const char *path, *suffix, *what;
    } files[MG_STATIC_GUARDED_MAX] = {
        {cfg->db_path, "", "MESHGATE_DB"},
        {cfg->db_path, "-wal", "MESHGATE_DB's -wal file"},
        {cfg->db_path, "-shm", "MESHGATE_DB's -shm file"},
        {cfg->db_path, "-journal", "MESHGATE_DB's -journal file"},
        {cfg->api_keys_file, "", "MESHGATE_API_KEYS_FILE"},
        {cfg->env_file, "", "MESHGATE_ENV_FILE"},
        {cfg->corescope_config, "", "MESHGATE_CORESCOPE_CONFIG"},
    };
    g->n = 0;
    for (unsigned i = 0; i < MG_STATIC_GUARDED_MAX; i++) {
        char path[MG_PATH_MAX + 16];
        struct stat st;
        if (!files[i].path[0])
            continue;
        snprintf(path, sizeof path, "%s%s", files[i].path, files[i].suffix);
        if (stat(path, &st) == 0) {
            g->file[g->n].dev = st.st_dev;
            g->file[g->n].ino = st.st_ino;
            g->file[g->n++].what = files[i].what;
        }
    }
}

const char *mg_static_guard_match(const struct mg_static_guard *g, const struct stat *st)
{
    for (unsigned i = 0; i < g->n; i++)
        if (g->file[i].ino == st->st_ino && g->file[i].dev == st->st_dev)
            return g->file[i].what;
    return NULL;
}

/* How long a worker trusts the identities it read: a side file that appears (a -journal)
 * or a file replaced under its name is known within this. */
#define GUARD_RELOAD_NS MG_NS_PER_SEC

static const struct mg_static_guard *worker_guard(const struct mg_config *cfg)
{
    static struct mg_static_guard guard;
    static int64_t loaded_ns;
    static bool loaded;
    int64_t now = mg_monotonic_ns();
    if (!loaded || now - loaded_ns >= GUARD_RELOAD_NS) {
        mg_static_guard_load(&guard, cfg);
        loaded_ns = now;
        loaded = true;
    }
    return &guard;
}

/* NAME-wal, NAME-shm or NAME-journal with a NAME beside it: a database's side file. */
static bool side_file_name(int dirfd, const char *rel)
{
    static const char *const suffixes[] = {"-wal", "-shm", "-journal"};
    size_t n = strlen(rel);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t k = strlen(suffixes[i]);
        if (n <= k || strcmp(rel + n - k, suffixes[i]) != 0 || rel[n - k - 1] == '/')
            continue;
        char *stem = strndup(rel, n - k);
        struct stat st;
        bool beside = stem && fstatat(dirfd, stem, &st, AT_SYMLINK_NOFOLLOW) == 0;
        free(stem);
        return beside || !stem;
    }
    return false;
}

/* open_beneath, but a guarded file fails with ENOENT unopened. */
static int open_served(int dirfd, const char *rel, const struct mg_config *cfg)
{
    struct stat st;
    if ((fstatat(dirfd, rel, &st, 0) == 0 && mg_static_guard_match(worker_guard(cfg), &st)) ||
        side_file_name(dirfd, rel)) {
        errno = ENOENT;
        return -1;
    }
    return open_beneath(dirfd, rel);
}

#define SCAN_ENTRIES_MAX 100000
#define SCAN_DEPTH_MAX 32

struct scan {
    struct mg_static_guard guard;
    void (*found)(const char *path, const char *what, void *arg);
    void *arg;
    unsigned seen, hits;
    char path[2 * MG_PATH_MAX];
};

/* The directory fd (taken over), whose path is s->path[0..len). */
static void scan_dir(struct scan *s, int fd, size_t len, int depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    while (s->seen < SCAN_ENTRIES_MAX && (e = readdir(d))) {
        if (e->d_name[0] == '.') /* never served */
            continue;
        s->seen++;
        int n = snprintf(s->path + len, sizeof s->path - len, "/%s", e->d_name);
        if (n < 0 || (size_t)n >= sizeof s->path - len)
            continue;
        struct stat st;
        const char *what = fstatat(dirfd(d), e->d_name, &st, 0) == 0
                               ? mg_static_guard_match(&s->guard, &st)
                               : NULL;
        if (what) {
            s->hits++;
            s->found(s->path, what, s->arg);
        } else if (depth < SCAN_DEPTH_MAX &&
                   fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                   S_ISDIR(st.st_mode)) {
            int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                scan_dir(s, sub, len + (size_t)n, depth + 1);
        }
    }
    closedir(d);
}

unsigned mg_static_guard_scan(const struct mg_config *cfg,
                              void (*found)(const char *path, const char *what, void *arg),
                              void *arg)
{
    if (!cfg->public_dir[0])
        return 0;
    struct scan *s = calloc(1, sizeof *s);
    if (!s)
        return 0;
    mg_static_guard_load(&s->guard, cfg);
    s->found = found;
    s->arg = arg;
    int n = snprintf(s->path, sizeof s->path, "%s", cfg->public_dir);
    int fd = open(cfg->public_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0 && s->guard.n > 0)
        scan_dir(s, fd, (size_t)n, 0);
    else if (fd >= 0)
        close(fd);
    unsigned hits = s->hits;
    free(s);
    return hits;
}

/*
 * Turns the decoded path into a path relative to the public directory (rel, at least
 * strlen(path) + sizeof INDEX_FILE + 1 bytes). Returns 0, or the status to answer with a
 * message in *why.
 */
static int relative_path(const char *path, char *rel, const char **why)
{
    size_t n = 0;
    const char *p = path;
    bool dir_path = true; /* ends in '/' (or is "/"): names a directory */
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *end = strchrnul(p, '/');
        size_t len = (size_t)(end - p);
        if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.')) {
            *why = "the path must not contain \".\" or \"..\" segments";
            return 400;
        }
        if (p[0] == '.') {
            *why = "Not found"; /* hidden files (.git, .env) are never served */
            return 404;
        }
        if (n)
            rel[n++] = '/';
        memcpy(rel + n, p, len);
        n += len;
        dir_path = *end == '/';
        p = end;
    }
    if (n == 0 || dir_path) {
        if (n)
            rel[n++] = '/';
        memcpy(rel + n, INDEX_FILE, sizeof INDEX_FILE);
        n += sizeof INDEX_FILE - 1;
    }
    rel[n] = '\0';
    return 0;
}

/* The answer to a failed openat2 (errno in err). */
static void open_failed(struct mg_response *res, int err, const char *rel)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR:
    case ENAMETOOLONG:
        mg_response_error(res, 404, "Not found");
        return;
    case ELOOP:
    case EXDEV:
        mg_response_error(res, 403,
                          "symbolic links and paths leading outside the public directory are "
                          "not served");
        return;
    case EACCES:
        mg_response_error(res, 403, "this file is not readable by the server");
        return;
    case ENOSYS:
    case EPERM: {
        /* EPERM: a seccomp filter that does not know openat2 answers so. */
        static bool logged;
        if (!logged)
            mg_error("static files: openat2() is not available (%s): MESHGATE_PUBLIC_DIR "
                     "needs Linux 5.6 or later, without a seccomp filter that blocks openat2",
                     strerror(err));
        logged = true;
        mg_response_error(res, 500,
                          "static files need openat2() (Linux 5.6 or later), which this "
                          "system refuses; see the server log");
        return;
    }
    default:
        mg_error("static files: cannot open %s in MESHGATE_PUBLIC_DIR: %s", rel, strerror(err));
        mg_response_error(res, 500, "the file could not be opened; see the server log");
        return;
    }
}

/* Reads the whole regular file fd (size bytes by fstat) into body; false on a read error. */
static bool read_file(int fd, size_t size, struct mg_buf *body)
{
    if (!mg_buf_reserve(body, size + 1))
        return false;
    size_t have = 0;
    while (have < size) {
        ssize_t got = read(fd, body->data + body->len + have, size - have);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return false;
        if (got == 0)
            break; /* the file shrank meanwhile: serve what is there */
        have += (size_t)got;
    }
    body->len += have;
    return true;
}

/*
 * Compressed once (docs/architecture.md, "Static files"): a compressed body is looked for in
 * this order, and the first found is answered:
 *   1. NAME.gz beside the file, a regular file as the file itself is opened (beneath the
 *      directory, no symbolic link), modified no earlier than the file: streamed as it is;
 *   2. the group's result cache, keyed by the file's version (device, inode, size,
 *      modification time: a file written or replaced has another key);
 *   3. compressed here, once for the group: a request that claims the key compresses and
 *      stores it; one that finds another worker compressing it gets the file as it is
 *      (never a wait on the loop).
 * A body the cache cannot store (more than a quarter of its pool) is served compressed that
 * once, and its version remembered in the worker (TOO_LARGE_MEMO of them): from then on that
 * worker streams the file as it is. So each version of a file costs one compression per group
 * while the cache keeps it, and at most one per worker when it cannot.
 */
enum gz { GZ_PLAIN = 0, GZ_BODY, GZ_FAILED };

#define TOO_LARGE_MEMO 16
static struct version {
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
} too_large[TOO_LARGE_MEMO];
static unsigned too_large_next;

static struct version version_of(const struct stat *st)
{
    return (struct version){st->st_dev, st->st_ino, st->st_size,
                            (int64_t)st->st_mtim.tv_sec * MG_NS_PER_SEC + st->st_mtim.tv_nsec};
}

static bool known_too_large(const struct stat *st)
{
    struct version v = version_of(st);
    for (unsigned i = 0; i < TOO_LARGE_MEMO; i++)
        if (too_large[i].ino == v.ino && too_large[i].dev == v.dev && too_large[i].size == v.size &&
            too_large[i].mtime_ns == v.mtime_ns)
            return true;
    return false;
}

/* NAME.gz beside rel (relative to dirfd), when it may stand for the file st describes. */
static int open_precompressed(int dirfd, const char *rel, const struct stat *st, struct stat *gz_st,
                              const struct mg_config *cfg)
{
    size_t n = strlen(rel);
    char *gz = malloc(n + sizeof ".gz");
    if (!gz)
        return -1;
    memcpy(gz, rel, n);
    memcpy(gz + n, ".gz", sizeof ".gz");
    int fd = open_served(dirfd, gz, cfg);
    free(gz);
    if (fd < 0)
        return -1;
    int64_t file_mtime = version_of(st).mtime_ns;
    if (fstat(fd, gz_st) < 0 || !S_ISREG(gz_st->st_mode) ||
        version_of(gz_st).mtime_ns < file_mtime) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Steps 2 and 3 above for the open file fd: GZ_BODY with the compressed body in res->body;
 * GZ_PLAIN (serve the file as it is); GZ_FAILED with the error answered. */
static enum gz cached_gzip(struct mg_env *env, int fd, const struct stat *st, const char *name,
                           struct mg_response *res)
{
    if (known_too_large(st))
        return GZ_PLAIN;
    struct version v = version_of(st);
    char key[MG_CACHE_KEY_MAX];
    snprintf(key, sizeof key, "static-gz:%llx:%llx:%llx:%llx", (unsigned long long)v.dev,
             (unsigned long long)v.ino, (unsigned long long)v.size, (unsigned long long)v.mtime_ns);
    struct mg_cache_view *cache = &env->seg->cache;
    uint64_t build_id = 0;
    mg_buf_reset(&res->body);
    enum mg_cache_outcome o = mg_result_cache_relook(cache, env->pid, env->slot, key,
                                                     mg_monotonic_ns(), &res->body, &build_id);
    if (o == MG_CACHE_HIT && !res->body.failed) {
        atomic_fetch_add(&cache->cache->static_gzip_hits, 1);
        return GZ_BODY;
    }
    mg_buf_reset(&res->body);
    if (o != MG_CACHE_CLAIMED)
        return GZ_PLAIN; /* another worker compresses it now, or out of memory */
    struct mg_buf plain;
    mg_buf_init(&plain);
    if (!read_file(fd, (size_t)st->st_size, &plain)) {
        mg_error("static files: reading %s: %s", name, strerror(errno));
        mg_buf_free(&plain);
        mg_result_cache_abandon(cache, env->pid, build_id);
        mg_response_error(res, 500, "the file could not be read; see the server log");
        return GZ_FAILED;
    }
    bool zipped = mg_gzip(&plain, &res->body);
    mg_buf_free(&plain);
    if (!zipped) {
        mg_buf_reset(&res->body);
        mg_result_cache_abandon(cache, env->pid, build_id);
        return GZ_PLAIN;
    }
    atomic_fetch_add(&cache->cache->static_gzips, 1);
    if (res->body.len > mg_result_cache_max_body(cache->cache)) {
        too_large[too_large_next++ % TOO_LARGE_MEMO] = v;
        mg_result_cache_abandon(cache, env->pid, build_id);
    } else {
        mg_result_cache_store_uncounted(cache, env->pid, build_id, res->body.data, res->body.len,
                                        mg_monotonic_ns());
    }
    return GZ_BODY;
}

/* A decimal number at *p, advancing it; saturates at UINT64_MAX (a position past any file). */
static bool range_number(const char **p, const char *end, uint64_t *out)
{
    const char *q = *p;
    uint64_t n = 0;
    while (q < end && *q >= '0' && *q <= '9') {
        unsigned d = (unsigned)(*q - '0');
        n = n > (UINT64_MAX - d) / 10 ? UINT64_MAX : n * 10 + d;
        q++;
    }
    if (q == *p)
        return false;
    *p = q;
    *out = n;
    return true;
}

int mg_static_parse_range(const char *value, size_t len, uint64_t size, uint64_t *first,
                          uint64_t *last)
{
    const char *p = value, *end = value + len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (end - p < 6 || strncasecmp(p, "bytes=", 6) != 0 || memchr(p, ',', (size_t)(end - p)))
        return MG_RANGE_IGNORED; /* another unit, or several ranges: the whole file */
    p += 6;
    uint64_t a = 0, b = 0;
    if (size == 0)
        return MG_RANGE_IGNORED; /* no byte of an empty file can be named: 200, empty */
    if (p < end && *p == '-') {
        p++;
        if (!range_number(&p, end, &b) || p != end)
            return MG_RANGE_IGNORED;
        if (b == 0)
            return MG_RANGE_UNSATISFIABLE;
        *first = b >= size ? 0 : size - b;
        *last = size - 1;
        return MG_RANGE_OK;
    }
    if (!range_number(&p, end, &a) || p == end || *p != '-')
        return MG_RANGE_IGNORED;
    p++;
    if (p == end) {
        b = size - 1;
    } else {
        if (!range_number(&p, end, &b) || p != end || b < a)
            return MG_RANGE_IGNORED;
    }
    if (a >= size)
        return MG_RANGE_UNSATISFIABLE;
    *first = a;
    *last = b >= size ? size - 1 : b;
    return MG_RANGE_OK;
}

/*
 * Answers with the open regular file fd (size from st), which it takes over; rel is its path
 * beneath dirfd. A Range the server honours is streamed; a compressible file for a client
 * that takes gzip gets a body compressed once (see cached_gzip; files past
 * MG_STATIC_GZIP_MAX_BYTES only from a NAME.gz); everything else is streamed as it is, so no
 * file costs more memory per connection than that bound.
 */
static void serve_file(struct mg_env *env, const struct mg_request *req, struct mg_response *res,
                       int dirfd, const char *rel, int fd, const struct stat *st, const char *name)
{
    uint64_t size = (uint64_t)st->st_size;
    const char *type = mg_static_content_type(name);
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const struct mg_str *range = mg_http_header_get(req->http, "Range");
    /* If-Range names a validator this server never sends: the range is ignored (RFC 9110
     * 13.1.5), the whole file goes out. */
    if (range && mg_http_header_get(req->http, "If-Range"))
        range = NULL;
    uint64_t first = 0, last = size ? size - 1 : 0;
    int r = range ? mg_static_parse_range(range->ptr, range->len, size, &first, &last)
                  : MG_RANGE_IGNORED;
    if (r == MG_RANGE_UNSATISFIABLE) {
        close(fd);
        mg_response_error(res, 416, "the range is outside the file's %llu bytes",
                          (unsigned long long)size);
        mg_response_header(res, "Content-Range: bytes */%llu", (unsigned long long)size);
        return;
    }
    int gzip_min = env->cfg->gzip_min_bytes;
    enum gz gz = GZ_PLAIN;
    struct stat gz_st;
    int gz_fd = -1;
    if (r == MG_RANGE_IGNORED && req->accepts_gzip && mg_response_compressible(type) &&
        gzip_min > 0 && size >= (uint64_t)gzip_min) {
        gz_fd = open_precompressed(dirfd, rel, st, &gz_st, env->cfg);
        if (gz_fd < 0 && size <= MG_STATIC_GZIP_MAX_BYTES)
            gz = cached_gzip(env, fd, st, name, res);
    }
    if (gz == GZ_FAILED) {
        close(fd);
        return;
    }
    if (gz_fd >= 0) {
        close(fd);
        mg_response_file(res, gz_fd, 0, (uint64_t)gz_st.st_size);
        res->gzipped = true;
    } else if (gz == GZ_BODY) {
        close(fd);
        res->gzipped = true;
    } else if (r == MG_RANGE_OK) {
        mg_response_file(res, fd, first, last - first + 1);
    } else {
        mg_response_file(res, fd, 0, size);
    }
    res->status = r == MG_RANGE_OK ? 206 : 200;
    res->content_type = type;
    res->no_store = false;
    if (r == MG_RANGE_OK)
        mg_response_header(res, "Content-Range: bytes %llu-%llu/%llu", (unsigned long long)first,
                           (unsigned long long)last, (unsigned long long)size);
    mg_response_header(res, "Accept-Ranges: bytes");
    if (strcmp(base, INDEX_FILE) == 0)
        mg_response_header(res, "Cache-Control: no-cache");
    else
        mg_response_header(res, "Cache-Control: public, max-age=%d", MG_STATIC_MAX_AGE_S);
}

enum mg_turn mg_static_serve(struct mg_env *env, const struct mg_request *req,
                             struct mg_response *res)
{
    const char *why = NULL;
    if (mg_path_has_encoded_slash(&req->http->path)) {
        mg_response_error(res, 400, "an encoded \"/\" (%%2F) is not allowed in a file path");
        return MG_DONE;
    }
    char *rel = malloc(strlen(req->path) + sizeof INDEX_FILE + 2);
    if (!rel) {
        mg_response_error(res, 500, "the server ran out of memory");
        return MG_DONE;
    }
    int status = relative_path(req->path, rel, &why);
    if (status) {
        mg_response_error(res, status, "%s", why);
        free(rel);
        return MG_DONE;
    }
    int dirfd = public_dir(env->cfg->public_dir);
    if (dirfd < 0) {
        mg_error("static files: MESHGATE_PUBLIC_DIR=%s: %s", env->cfg->public_dir, strerror(errno));
        mg_response_error(res, 500, "the public directory cannot be opened; see the server log");
        free(rel);
        return MG_DONE;
    }

    const char *name = rel; /* the name whose extension gives the type */
    char *served = rel;     /* the file's path beneath the directory */
    int fd = open_served(dirfd, rel, env->cfg);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) < 0) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0 && S_ISDIR(st.st_mode)) {
        /* A directory named without its trailing slash: its index.html. */
        int index_fd = open_served(fd, INDEX_FILE, env->cfg);
        int saved = errno;
        close(fd);
        fd = index_fd;
        errno = saved;
        name = INDEX_FILE;
        served = NULL;
        if (asprintf(&served, "%s/%s", rel, INDEX_FILE) < 0)
            served = NULL;
        if (fd >= 0 && fstat(fd, &st) < 0) {
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0) {
        open_failed(res, errno, rel);
        if (served != rel)
            free(served);
        free(rel);
        return MG_DONE;
    }
    if (!S_ISREG(st.st_mode)) {
        mg_response_error(res, 403, "only regular files are served");
        close(fd);
    } else {
        serve_file(env, req, res, dirfd, served ? served : rel, fd, &st, name);
    }
    if (served != rel)
        free(served);
    free(rel);
    return MG_DONE;
}
