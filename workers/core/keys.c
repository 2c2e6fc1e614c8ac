/* SPDX-License-Identifier: ISC */
#include "keys.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct mg_keys mg_api_keys;

static bool label_valid(const char *label)
{
    size_t n = strlen(label);
    if (n == 0 || n > MG_KEY_LABEL_MAX)
        return false;
    for (const char *p = label; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
            return false;
    return true;
}

int mg_keys_load(struct mg_keys *keys, const char *path, char *err, size_t errlen)
{
    memset(keys, 0, sizeof *keys);
    if (!path || !*path)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(err, errlen, "MESHGATE_API_KEYS_FILE=%s: cannot open it: %s", path,
                 strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "MESHGATE_API_KEYS_FILE=%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if (st.st_mode & 077) {
        snprintf(err, errlen,
                 "MESHGATE_API_KEYS_FILE=%s: mode %04o lets group or others read or write it; "
                 "it must be readable by meshgate alone (chmod 600)",
                 path, (unsigned)(st.st_mode & 07777));
        close(fd);
        return -1;
    }
    FILE *f = fdopen(fd, "r");
    char line[4096];
    unsigned lineno = 0;
    int rc = 0;
    while (rc == 0 && f && fgets(line, sizeof line, f)) {
        lineno++;
        char *s = line, *e = line + strlen(line);
        while (*s && isspace((unsigned char)*s))
            s++;
        while (e > s && isspace((unsigned char)e[-1]))
            *--e = '\0';
        if (!*s || *s == '#')
            continue;
        /* "LABEL KEY": the label ends at the first blank; "KEY" alone has none. */
        char *label = NULL, *blank = s;
        while (blank < e && !isspace((unsigned char)*blank))
            blank++;
        if (blank < e) {
            label = s;
            *blank = '\0';
            for (s = blank + 1; s < e && isspace((unsigned char)*s);)
                s++;
        }
        size_t n = (size_t)(e - s);
        bool printable = true;
        for (char *p = s; p < e; p++)
            printable &= *p > ' ' && *p < 0x7f;
        if (!printable || n < MG_KEY_MIN || n > MG_KEY_MAX) {
            snprintf(err, errlen,
                     "MESHGATE_API_KEYS_FILE=%s: line %u is not a key: a line is KEY or LABEL "
                     "KEY, a key is %d to %d printable characters without blanks",
                     path, lineno, MG_KEY_MIN, MG_KEY_MAX);
            rc = -1;
        } else if (label && !label_valid(label)) {
            snprintf(err, errlen,
                     "MESHGATE_API_KEYS_FILE=%s: line %u: the label must be 1 to %d letters, "
                     "digits, '.', '_' or '-'",
                     path, lineno, MG_KEY_LABEL_MAX);
            rc = -1;
        } else if (keys->count == MG_KEYS_MAX) {
            snprintf(err, errlen, "MESHGATE_API_KEYS_FILE=%s: more than %d keys", path,
                     MG_KEYS_MAX);
            rc = -1;
        } else {
            char *own = keys->label[keys->count];
            if (label)
                memcpy(own, label, strlen(label) + 1); /* label_valid bounds it */
            else
                snprintf(own, MG_KEY_LABEL_MAX + 1, "key-%u", lineno);
            for (unsigned k = 0; k < keys->count && rc == 0; k++) {
                if (strcmp(keys->label[k], own) == 0) {
                    snprintf(err, errlen,
                             "MESHGATE_API_KEYS_FILE=%s: line %u: the label %s is taken by "
                             "another key; each key needs its own, for the access log",
                             path, lineno, own);
                    rc = -1;
                }
            }
            memcpy(keys->key[keys->count], s, n);
            keys->len[keys->count] = (unsigned char)n;
            keys->count++;
        }
    }
    if (f)
        fclose(f);
    else
        close(fd);
    /* Nothing of a refused file stays in memory. */
    if (rc != 0)
        memset(keys, 0, sizeof *keys);
    memset(line, 0, sizeof line);
    return rc;
}

int mg_keys_find(const struct mg_keys *keys, const char *presented, size_t len)
{
    unsigned found = 0; /* the index + 1 of the match; 0: none */
    for (unsigned k = 0; k < keys->count; k++) {
        size_t klen = keys->len[k];
        unsigned diff = klen != len;
        for (size_t i = 0; i < MG_KEY_MAX; i++) {
            unsigned char a = i < klen ? (unsigned char)keys->key[k][i] : 0;
            unsigned char b = i < len ? (unsigned char)presented[i] : 0;
            diff |= (unsigned)(a ^ b);
        }
        /* No branch on the comparison: all ones when diff is 0, else 0. */
        unsigned equal = ((diff | (0u - diff)) >> (sizeof diff * 8 - 1)) ^ 1u;
        found |= (0u - equal) & (k + 1);
    }
    return found != 0 && len <= MG_KEY_MAX ? (int)found - 1 : -1;
}

bool mg_keys_match(const struct mg_keys *keys, const char *presented, size_t len)
{
    return mg_keys_find(keys, presented, len) >= 0;
}
