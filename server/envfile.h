/* SPDX-License-Identifier: ISC */
/*
 * envfile: the KEY=value file named by MESHGATE_ENV_FILE, read with the syntax of systemd's
 * EnvironmentFile= (systemd.exec(5)), so that the unit and meshgate read one file alike:
 *
 *   - blank lines are skipped; a line whose first non-blank character is '#' or ';' is a
 *     comment (a '#' later in a line is part of the value);
 *   - NAME=value, with blanks around the name and around an unquoted value dropped and blanks
 *     inside it kept; a backslash keeps the next character ("\\" is one backslash) and a
 *     backslash at the end of a line joins the next line to it;
 *   - a value that starts with ' runs to the next ', verbatim, across lines if need be; one
 *     that starts with " runs to the next unescaped ", where \" \\ \` \$ and a backslash-
 *     newline are escapes and any other backslash is kept; quotes later in an unquoted value
 *     are kept as they are;
 *   - a name given twice takes its last value.
 *
 * meshgate is stricter than systemd where systemd silently drops a line: a line that is
 * neither blank, a comment nor NAME=value with a valid name, and a quote never closed, are
 * errors naming the line, so `meshgate --check` catches the edit before a reload.
 *
 * Library-like: returns a status with a message, never exits or logs. The master reads the
 * file at start and on SIGHUP; nothing here runs in a worker.
 */
#ifndef MESHGATE_ENVFILE_H
#define MESHGATE_ENVFILE_H

#include <stddef.h>

#define MG_ENVFILE_MAX_BYTES (1 << 20)

struct mg_envfile_var {
    char *name;
    char *value;
    unsigned line; /* where the assignment starts, from 1 */
};

struct mg_envfile {
    struct mg_envfile_var *vars;
    size_t count, cap;
};

/* Parses len bytes of text into f (which must be zeroed or freed). Returns 0, or -1 with
 * "line N: what is wrong" in err (f is then empty). */
int mg_envfile_parse(struct mg_envfile *f, const char *text, size_t len, char *err, size_t errlen);

/* Reads and parses the file at path. Returns 0, or -1 with a message that names the file. */
int mg_envfile_read(struct mg_envfile *f, const char *path, char *err, size_t errlen);

/* The value the file gives name (its last assignment), or NULL. */
const char *mg_envfile_get(const struct mg_envfile *f, const char *name);

void mg_envfile_free(struct mg_envfile *f);

#endif
