/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the configuration loader (server/config.c), which reads MESHGATE_* values
 * through a getter. Each line of the input is one variable: its first byte picks the row of
 * the table, the rest is the value (a line without a row byte sets nothing). Checks: a
 * refusal says why; an accepted configuration resolves, and what it describes
 * ("NAME=value" for every variable) loads back to a configuration that describes the same.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define VALUES_MAX 128

struct table {
    const char *name[VALUES_MAX];
    char *value[VALUES_MAX];
    size_t count;
};

static const char *table_get(const char *name, void *arg)
{
    const struct table *t = arg;
    const char *found = NULL;
    for (size_t i = 0; i < t->count; i++) /* the last setting wins, as in an env file */
        if (strcmp(t->name[i], name) == 0)
            found = t->value[i];
    return found;
}

static size_t rows(void)
{
    size_t n = 0;
    while (mg_config_vars[n].name)
        n++;
    return n;
}

static void collect(const char *line, void *arg)
{
    struct table *t = arg;
    const char *eq = strchr(line, '=');
    if (!eq || t->count >= VALUES_MAX)
        abort();
    char *name = strndup(line, (size_t)(eq - line));
    t->name[t->count] = name;
    t->value[t->count++] = strdup(eq + 1);
}

static void append(const char *line, void *arg)
{
    char **text = arg;
    size_t had = *text ? strlen(*text) : 0, n = strlen(line);
    *text = realloc(*text, had + n + 2);
    memcpy(*text + had, line, n);
    (*text)[had + n] = '\n';
    (*text)[had + n + 1] = '\0';
}

static void free_table(struct table *t, bool names_owned)
{
    for (size_t i = 0; i < t->count; i++) {
        if (names_owned)
            free((char *)t->name[i]);
        free(t->value[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16384)
        return 0;
    size_t n_rows = rows();
    struct table t = {.count = 0};
    for (size_t at = 0; at < size && t.count < VALUES_MAX;) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - data) : size;
        if (end > at) {
            t.name[t.count] = mg_config_vars[data[at] % n_rows].name;
            t.value[t.count++] = strndup((const char *)data + at + 1, end - at - 1);
        }
        at = end + 1;
    }
    struct mg_config cfg;
    char err[1024] = "";
    if (mg_config_load(&cfg, table_get, &t, err, sizeof err) != 0) {
        if (!err[0] || !memchr(err, '\0', sizeof err))
            abort();
        free_table(&t, false);
        return 0;
    }
    char warning[1024];
    mg_config_resolve(&cfg, warning, sizeof warning);

    /* What the start-up log prints reads back as the same configuration. */
    struct table back = {.count = 0};
    char *first = NULL, *second = NULL;
    mg_config_describe(&cfg, collect, &back);
    mg_config_describe(&cfg, append, &first);
    struct mg_config again;
    if (mg_config_load(&again, table_get, &back, err, sizeof err) != 0) {
        fprintf(stderr, "described configuration refused: %s\n%s", err, first);
        abort();
    }
    mg_config_resolve(&again, warning, sizeof warning);
    mg_config_describe(&again, append, &second);
    if (strcmp(first, second) != 0) {
        fprintf(stderr, "described twice, differently:\n%s---\n%s", first, second);
        abort();
    }
    free(first);
    free(second);
    free_table(&back, true);
    free_table(&t, false);
    return 0;
}
