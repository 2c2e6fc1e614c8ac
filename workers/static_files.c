#include "static_files.h"

#include "log.h"

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

static bool has_encoded_slash(const struct mg_str *raw)
{
    for (size_t i = 0; i + 2 < raw->len; i++)
        if (raw->ptr[i] == '%' && raw->ptr[i + 1] == '2' &&
            (raw->ptr[i + 2] == 'f' || raw->ptr[i + 2] == 'F'))
            return true;
    return false;
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

void mg_static_serve(struct mg_env *env, const struct mg_request *req, struct mg_response *res)
{
    const char *why = NULL;
    if (has_encoded_slash(&req->http->path)) {
        mg_response_error(res, 400, "an encoded \"/\" (%%2F) is not allowed in a file path");
        return;
    }
    char *rel = malloc(strlen(req->path) + sizeof INDEX_FILE + 2);
    if (!rel) {
        mg_response_error(res, 500, "the server ran out of memory");
        return;
    }
    int status = relative_path(req->path, rel, &why);
    if (status) {
        mg_response_error(res, status, "%s", why);
        free(rel);
        return;
    }
    int dirfd = public_dir(env->cfg->public_dir);
    if (dirfd < 0) {
        mg_error("static files: MESHGATE_PUBLIC_DIR=%s: %s", env->cfg->public_dir, strerror(errno));
        mg_response_error(res, 500, "the public directory cannot be opened; see the server log");
        free(rel);
        return;
    }

    const char *name = rel; /* the name whose extension gives the type */
    int fd = open_beneath(dirfd, rel);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) < 0) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0 && S_ISDIR(st.st_mode)) {
        /* A directory named without its trailing slash: its index.html. */
        int index_fd = open_beneath(fd, INDEX_FILE);
        int saved = errno;
        close(fd);
        fd = index_fd;
        errno = saved;
        name = INDEX_FILE;
        if (fd >= 0 && fstat(fd, &st) < 0) {
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0) {
        open_failed(res, errno, rel);
        free(rel);
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        mg_response_error(res, 403, "only regular files are served");
    } else if (st.st_size > MG_STATIC_MAX_BYTES) {
        mg_response_error(res, 403, "this file is larger than the %d MiB that are served",
                          MG_STATIC_MAX_BYTES / (1024 * 1024));
    } else {
        mg_buf_reset(&res->body);
        if (!read_file(fd, (size_t)st.st_size, &res->body)) {
            mg_error("static files: reading %s: %s", rel, strerror(errno));
            mg_response_error(res, 500, "the file could not be read; see the server log");
        } else {
            res->status = 200;
            res->content_type = mg_static_content_type(name);
            res->no_store = false;
            const char *base = strrchr(name, '/');
            base = base ? base + 1 : name;
            if (strcmp(base, INDEX_FILE) == 0)
                mg_response_header(res, "Cache-Control: no-cache");
            else
                mg_response_header(res, "Cache-Control: public, max-age=%d", MG_STATIC_MAX_AGE_S);
        }
    }
    close(fd);
    free(rel);
}
