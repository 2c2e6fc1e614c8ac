/* SPDX-License-Identifier: ISC */
#include "envfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A growing string: the name or value being read. */
struct text {
    char *s;
    size_t len, cap;
};

static bool text_add(struct text *t, char c)
{
    if (t->len + 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char *s = realloc(t->s, cap);
        if (!s)
            return false;
        t->s = s;
        t->cap = cap;
    }
    t->s[t->len++] = c;
    t->s[t->len] = '\0';
    return true;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* What systemd accepts in the environment it passes on: a letter or '_', then letters, digits
 * and '_'. */
static bool valid_name(const char *s)
{
    if (!*s || (*s >= '0' && *s <= '9'))
        return false;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
              (*s >= '0' && *s <= '9')))
            return false;
    return true;
}

/* Keeps name=value; a later assignment of the same name replaces an earlier one. */
static bool push(struct mg_envfile *f, struct text *name, struct text *value, unsigned line)
{
    char *v = value->s ? value->s : strdup("");
    if (!v)
        return false;
    for (size_t i = 0; i < f->count; i++) {
        if (strcmp(f->vars[i].name, name->s) == 0) {
            free(f->vars[i].value);
            f->vars[i].value = v;
            f->vars[i].line = line;
            free(name->s);
            *name = (struct text){0};
            *value = (struct text){0};
            return true;
        }
    }
    if (f->count == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 32;
        struct mg_envfile_var *vars = realloc(f->vars, cap * sizeof *vars);
        if (!vars) {
            free(v);
            return false;
        }
        f->vars = vars;
        f->cap = cap;
    }
    f->vars[f->count++] = (struct mg_envfile_var){name->s, v, line};
    *name = (struct text){0};
    *value = (struct text){0};
    return true;
}

static int parse_fail(struct mg_envfile *f, struct text *name, struct text *value, char *err,
                      size_t errlen, unsigned line, const char *why)
{
    snprintf(err, errlen, "line %u: %s", line, why);
    free(name->s);
    free(value->s);
    mg_envfile_free(f);
    return -1;
}

int mg_envfile_parse(struct mg_envfile *f, const char *text, size_t len, char *err, size_t errlen)
{
    enum { PRE_NAME, NAME, COMMENT, PRE_VALUE, VALUE, VALUE_ESCAPE, SINGLE, DOUBLE, DOUBLE_ESCAPE };
    int state = PRE_NAME;
    struct text name = {0}, value = {0};
    unsigned line = 1, start_line = 1, quote_line = 1;
    size_t trailing = (size_t)-1; /* where the blanks that end an unquoted value begin */
    char why[200];
    for (size_t i = 0; i <= len; i++) {
        /* The end of the text ends the last line. */
        char c = i < len ? text[i] : '\n';
        bool at_end = i == len;
        if (!at_end && c == '\0')
            return parse_fail(f, &name, &value, err, errlen, line,
                              "a NUL byte: the file must be text");
        bool ok = true;
        switch (state) {
        case PRE_NAME:
            if (c == '#' || c == ';')
                state = COMMENT;
            else if (c == '=')
                return parse_fail(f, &name, &value, err, errlen, line,
                                  "\"\" is not a variable name (a line starts with '=')");
            else if (c != '\n' && !is_blank(c)) {
                state = NAME;
                start_line = line;
                ok = text_add(&name, c);
            }
            break;
        case COMMENT:
            if (c == '\n')
                state = PRE_NAME;
            break;
        case NAME:
            if (c == '=') {
                while (name.len && is_blank(name.s[name.len - 1]))
                    name.s[--name.len] = '\0';
                if (!valid_name(name.s)) {
                    snprintf(why, sizeof why,
                             "\"%.60s\" is not a variable name (letters, digits and '_', not "
                             "starting with a digit)",
                             name.s);
                    return parse_fail(f, &name, &value, err, errlen, start_line, why);
                }
                state = PRE_VALUE;
                trailing = (size_t)-1;
            } else if (c == '\n') {
                snprintf(why, sizeof why,
                         "\"%.60s\" is not NAME=value (comments start with '#' or ';')", name.s);
                return parse_fail(f, &name, &value, err, errlen, start_line, why);
            } else {
                ok = text_add(&name, c);
            }
            break;
        case PRE_VALUE:
            if (c == '\n') {
                ok = push(f, &name, &value, start_line);
                state = PRE_NAME;
            } else if (c == '\'') {
                state = SINGLE;
                quote_line = line;
            } else if (c == '"') {
                state = DOUBLE;
                quote_line = line;
            } else if (c == '\\') {
                state = VALUE_ESCAPE;
            } else if (!is_blank(c)) {
                state = VALUE;
                ok = text_add(&value, c);
            }
            break;
        case VALUE:
            if (c == '\n') {
                if (trailing != (size_t)-1 && value.s) {
                    value.s[trailing] = '\0';
                    value.len = trailing;
                }
                ok = push(f, &name, &value, start_line);
                state = PRE_NAME;
            } else if (c == '\\') {
                state = VALUE_ESCAPE;
                trailing = (size_t)-1;
            } else {
                if (!is_blank(c))
                    trailing = (size_t)-1;
                else if (trailing == (size_t)-1)
                    trailing = value.len;
                ok = text_add(&value, c);
            }
            break;
        case VALUE_ESCAPE:
            /* A backslash before the newline joins the lines; before anything else it keeps
             * that character. At the very end of the file there is nothing to keep. */
            state = VALUE;
            if (c != '\n')
                ok = text_add(&value, c);
            else if (at_end) {
                ok = push(f, &name, &value, start_line);
                state = PRE_NAME;
            }
            break;
        case SINGLE:
            if (at_end)
                return parse_fail(f, &name, &value, err, errlen, quote_line,
                                  "the single quote opened here is never closed");
            if (c == '\'')
                state = PRE_VALUE;
            else
                ok = text_add(&value, c);
            break;
        case DOUBLE:
            if (at_end)
                return parse_fail(f, &name, &value, err, errlen, quote_line,
                                  "the double quote opened here is never closed");
            if (c == '"')
                state = PRE_VALUE;
            else if (c == '\\')
                state = DOUBLE_ESCAPE;
            else
                ok = text_add(&value, c);
            break;
        case DOUBLE_ESCAPE:
            if (at_end)
                return parse_fail(f, &name, &value, err, errlen, quote_line,
                                  "the double quote opened here is never closed");
            state = DOUBLE;
            if (strchr("\"\\`$", c))
                ok = text_add(&value, c);
            else if (c != '\n')
                ok = text_add(&value, '\\') && text_add(&value, c);
            break;
        }
        if (!ok)
            return parse_fail(f, &name, &value, err, errlen, line, "out of memory");
        if (c == '\n')
            line++;
    }
    free(name.s);
    free(value.s);
    return 0;
}

int mg_envfile_read(struct mg_envfile *f, const char *path, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, errlen, "MESHGATE_ENV_FILE=%s: cannot read it (%s)", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > MG_ENVFILE_MAX_BYTES) {
        snprintf(err, errlen, "MESHGATE_ENV_FILE=%s: must be a regular file of at most %d bytes",
                 path, MG_ENVFILE_MAX_BYTES);
        close(fd);
        return -1;
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t len = 0;
    ssize_t n = 0;
    while (text && len < (size_t)st.st_size &&
           ((n = read(fd, text + len, (size_t)st.st_size - len)) > 0 || (n < 0 && errno == EINTR)))
        if (n > 0)
            len += (size_t)n;
    int saved = errno;
    close(fd);
    if (!text || n < 0) {
        snprintf(err, errlen, "MESHGATE_ENV_FILE=%s: cannot read it (%s)", path,
                 text ? strerror(saved) : "out of memory");
        free(text);
        return -1;
    }
    char why[300];
    int rc = mg_envfile_parse(f, text, len, why, sizeof why);
    free(text);
    if (rc < 0)
        snprintf(err, errlen, "MESHGATE_ENV_FILE=%s: %s", path, why);
    return rc;
}

const char *mg_envfile_get(const struct mg_envfile *f, const char *name)
{
    for (size_t i = 0; f && i < f->count; i++)
        if (strcmp(f->vars[i].name, name) == 0)
            return f->vars[i].value;
    return NULL;
}

void mg_envfile_free(struct mg_envfile *f)
{
    for (size_t i = 0; i < f->count; i++) {
        free(f->vars[i].name);
        free(f->vars[i].value);
    }
    free(f->vars);
    memset(f, 0, sizeof *f);
}
