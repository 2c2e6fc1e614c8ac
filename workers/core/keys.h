/* SPDX-License-Identifier: ISC */
/*
 * keys: the API keys of signed-in clients, from the file MESHGATE_API_KEYS_FILE: one key a
 * line, either "KEY" or "LABEL KEY" (blanks between; blank lines and lines starting with '#'
 * are skipped; surrounding blanks trimmed). The label names the key in the access log, which
 * never shows the key itself nor any part of it: a label is 1 to 64 letters, digits, '.',
 * '_' or '-', unique in the file; a key without one is called "key-N", N its line number.
 * The file must be readable by the server and by no one else (mode 0600 or 0400): a file
 * that group or others can read or write is refused, and so the start stops (exit 78).
 *
 * The master loads the keys before it forks, so every worker has them in its own memory
 * (never in the shared segment, which the dump tool reads); SIGHUP loads the file again for
 * the workers that replace the old ones. Keys are compared in constant time and never logged.
 */
#ifndef MESHGATE_KEYS_H
#define MESHGATE_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#define MG_KEYS_MAX 1024
#define MG_KEY_MIN 16
#define MG_KEY_MAX 256
#define MG_KEY_LABEL_MAX 64

struct mg_keys {
    unsigned count;
    char key[MG_KEYS_MAX][MG_KEY_MAX + 1];
    unsigned char len[MG_KEYS_MAX];
    char label[MG_KEYS_MAX][MG_KEY_LABEL_MAX + 1];
};

/* Reads path into keys (an empty path: no keys). Returns 0, or -1 with a message in err
 * naming the variable, the file and what is wrong. */
int mg_keys_load(struct mg_keys *keys, const char *path, char *err, size_t errlen);

/* True when presented (len bytes) is one of the keys; the time taken does not depend on
 * where, or whether, it matches. */
bool mg_keys_match(const struct mg_keys *keys, const char *presented, size_t len);

/* As mg_keys_match, and says which: the key's index, or -1 when none matches. */
int mg_keys_find(const struct mg_keys *keys, const char *presented, size_t len);

/* The process's keys: loaded by the master, inherited by the workers. */
extern struct mg_keys mg_api_keys;

#endif
