/* SPDX-License-Identifier: ISC */
#include "state_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sha2.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATE_MAGIC "MGSTATE"
#define STATE_FORMAT 1U
#define NAME_MAX_LEN 32

/* Fixed layout, no padding (every field a multiple of 8 bytes in size and place). */
struct head {
    char magic[8];
    uint32_t format, version;
    char name[NAME_MAX_LEN];
    struct mg_state_key key;
    int64_t built_realtime_ns;
    uint64_t body_len;
    uint8_t sum[SHA256_DIGEST_LENGTH];
};

_Static_assert(sizeof(struct mg_state_key) == 6 * 8 + MG_STATE_HASH_MAX, "key is padded");
_Static_assert(sizeof(struct head) ==
                   8 + 8 + NAME_MAX_LEN + sizeof(struct mg_state_key) + 16 + SHA256_DIGEST_LENGTH,
               "head is padded");

static int64_t one_int(sqlite3 *conn, const char *sql, int *rc)
{
    sqlite3_stmt *st = NULL;
    int64_t v = 0;
    if (*rc != SQLITE_OK)
        return 0;
    *rc = sqlite3_prepare_v2(conn, sql, -1, &st, NULL);
    if (*rc == SQLITE_OK && (*rc = sqlite3_step(st)) == SQLITE_ROW) {
        v = sqlite3_column_int64(st, 0);
        *rc = sqlite3_column_type(st, 0) == SQLITE_NULL ? SQLITE_NOTFOUND : SQLITE_OK;
    } else if (*rc == SQLITE_DONE) {
        *rc = SQLITE_NOTFOUND;
    }
    sqlite3_finalize(st);
    return v;
}

int mg_state_key_read(sqlite3 *conn, struct mg_state_key *k)
{
    memset(k, 0, sizeof *k);
    int rc = SQLITE_OK;
    /* Each an end of a rowid tree: a few pages, whatever the size. */
    k->first_tx_id = one_int(conn, "SELECT min(id) FROM transmissions", &rc);
    k->tx_high = one_int(conn, "SELECT max(id) FROM transmissions", &rc);
    k->first_obs_id = one_int(conn, "SELECT min(id) FROM observations", &rc);
    k->obs_high = one_int(conn, "SELECT max(id) FROM observations", &rc);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(conn,
                            "SELECT (SELECT hash FROM transmissions WHERE id = ?1),"
                            " transmission_id, timestamp FROM observations WHERE id = ?2",
                            -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, k->first_tx_id);
        sqlite3_bind_int64(st, 2, k->first_obs_id);
        rc = sqlite3_step(st);
    }
    if (rc == SQLITE_ROW) {
        const unsigned char *hash = sqlite3_column_text(st, 0);
        snprintf(k->first_tx_hash, sizeof k->first_tx_hash, "%s", hash ? (const char *)hash : "");
        k->first_obs_tx = sqlite3_column_int64(st, 1);
        k->first_obs_time = sqlite3_column_int64(st, 2);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_NOTFOUND; /* a row gone between the reads: no key now */
    }
    sqlite3_finalize(st);
    return rc;
}

static void say(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

static void path_of(char *out, size_t cap, const char *dir, const char *name, unsigned version)
{
    snprintf(out, cap, "%s/%s.v%u", dir, name, version);
}

/* The sum of h (its sum zeroed) and body. */
static void sum_of(const struct head *h, const void *body, size_t len,
                   uint8_t out[SHA256_DIGEST_LENGTH])
{
    struct head copy = *h;
    memset(copy.sum, 0, sizeof copy.sum);
    SHA2_CTX sha;
    SHA256Init(&sha);
    SHA256Update(&sha, (const uint8_t *)&copy, sizeof copy);
    SHA256Update(&sha, body, len);
    SHA256Final(out, &sha);
}

static bool read_all(int fd, void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t got = read(fd, (char *)p + done, n - done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        done += (size_t)got;
    }
    return true;
}

static bool write_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t put = write(fd, (const char *)p + done, n - done);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return false;
        done += (size_t)put;
    }
    return true;
}

/* The header's own fields (not the key): NULL when they are right, else what is wrong. */
static const char *head_wrong(const struct head *h, const char *name, unsigned version,
                              size_t body_len)
{
    if (memcmp(h->magic, STATE_MAGIC, sizeof h->magic) != 0)
        return "not a state file (magic)";
    if (h->format != STATE_FORMAT)
        return "another format";
    if (strncmp(h->name, name, sizeof h->name) != 0)
        return "another table's";
    if (h->version != version)
        return "another version of the table";
    if (h->body_len != body_len)
        return "its length is not the header's";
    return NULL;
}

/* NULL when the file's key k is db's or an earlier state of it, else what is wrong. */
static const char *key_wrong(const struct mg_state_key *k, const struct mg_state_key *db)
{
    if (k->first_tx_id != db->first_tx_id || k->first_obs_id != db->first_obs_id ||
        k->first_obs_tx != db->first_obs_tx || k->first_obs_time != db->first_obs_time ||
        strncmp(k->first_tx_hash, db->first_tx_hash, sizeof k->first_tx_hash) != 0)
        return "another database's (its first rows differ)";
    if (k->tx_high > db->tx_high || k->obs_high > db->obs_high)
        return "the database has fewer rows than the table covers (replaced)";
    return NULL;
}

enum mg_state_outcome mg_state_read(const char *dir, const char *name, unsigned version,
                                    const struct mg_state_key *db, size_t max_body,
                                    struct mg_buf *body, int64_t *built_realtime_ns, char *why,
                                    size_t whylen)
{
    char path[PATH_MAX];
    path_of(path, sizeof path, dir, name, version);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return MG_STATE_NONE;
        say(why, whylen, "%s: %s", path, strerror(errno));
        return errno == ELOOP ? MG_STATE_UNSAFE : MG_STATE_ERROR;
    }
    struct stat st;
    enum mg_state_outcome o = MG_STATE_LOADED;
    struct head h;
    size_t len = 0;
    if (fstat(fd, &st) < 0) {
        say(why, whylen, "%s: %s", path, strerror(errno));
        o = MG_STATE_ERROR;
    } else if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
               (st.st_mode & (S_IWGRP | S_IWOTH))) {
        say(why, whylen, "%s: not a regular file owned by uid %u and writable by it alone", path,
            (unsigned)geteuid());
        o = MG_STATE_UNSAFE;
    } else if ((uint64_t)st.st_size < sizeof h ||
               (uint64_t)st.st_size - sizeof h > (uint64_t)max_body) {
        say(why, whylen, "%s: %lld bytes, not between %zu and %zu", path, (long long)st.st_size,
            sizeof h, sizeof h + max_body);
        o = MG_STATE_BAD;
    } else {
        len = (size_t)st.st_size - sizeof h;
        if (!read_all(fd, &h, sizeof h) || !mg_buf_reserve(body, len) ||
            !read_all(fd, body->data + body->len, len)) {
            say(why, whylen, "%s: cannot be read whole", path);
            o = MG_STATE_ERROR;
        }
    }
    close(fd);
    if (o != MG_STATE_LOADED)
        return o;
    const char *wrong = head_wrong(&h, name, version, len);
    uint8_t sum[SHA256_DIGEST_LENGTH];
    if (!wrong) {
        sum_of(&h, body->data + body->len, len, sum);
        if (memcmp(sum, h.sum, sizeof sum) != 0)
            wrong = "its checksum does not match";
    }
    if (wrong) {
        say(why, whylen, "%s: %s", path, wrong);
        return MG_STATE_BAD;
    }
    if ((wrong = key_wrong(&h.key, db))) {
        say(why, whylen, "%s: %s", path, wrong);
        return MG_STATE_OTHER_DB;
    }
    body->len += len;
    *built_realtime_ns = h.built_realtime_ns;
    return MG_STATE_LOADED;
}

int mg_state_write(const char *dir, const char *name, unsigned version,
                   const struct mg_state_key *k, int64_t built_realtime_ns, const void *body,
                   size_t len, char *why, size_t whylen)
{
    struct head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, STATE_MAGIC, sizeof h.magic);
    h.format = STATE_FORMAT;
    h.version = version;
    snprintf(h.name, sizeof h.name, "%s", name);
    h.key = *k;
    h.built_realtime_ns = built_realtime_ns;
    h.body_len = len;
    sum_of(&h, body, len, h.sum);
    char path[PATH_MAX], tmp[PATH_MAX];
    path_of(path, sizeof path, dir, name, version);
    snprintf(tmp, sizeof tmp, "%s/.%s.v%u.%ld.tmp", dir, name, version, (long)getpid());
    unlink(tmp); /* one this process left, if any */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        say(why, whylen, "%s: %s", tmp, strerror(errno));
        return -1;
    }
    bool ok = write_all(fd, &h, sizeof h) && write_all(fd, body, len) && fsync(fd) == 0;
    int err = errno;
    if (close(fd) < 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && rename(tmp, path) < 0) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        say(why, whylen, "%s: %s", path, strerror(err));
        return -1;
    }
    /* The rename itself, on the disk. */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}
