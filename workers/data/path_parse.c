/* SPDX-License-Identifier: ISC */
#include "path_parse.h"

#include <ctype.h>
#include <string.h>

int mg_path_split(const char *s, char *buf, size_t cap, char **out, int max)
{
    if (!s)
        return -1;
    size_t used = 0;
    int n = 0;
    while (isspace((unsigned char)*s))
        s++;
    if (*s++ != '[')
        return -1;
    for (;;) {
        while (isspace((unsigned char)*s))
            s++;
        if (*s == ']' && n == 0)
            return 0;
        if (n == max)
            return -1;
        if (!strncmp(s, "null", 4)) {
            out[n++] = NULL;
            s += 4;
        } else if (*s == '"') {
            const char *end = strchr(++s, '"');
            size_t len = end ? (size_t)(end - s) : 0;
            if (!end || memchr(s, '\\', len) || used + len + 1 > cap)
                return -1;
            out[n] = buf + used;
            memcpy(buf + used, s, len);
            buf[used + len] = '\0';
            used += len + 1;
            n++;
            s = end + 1;
        } else {
            return -1;
        }
        while (isspace((unsigned char)*s))
            s++;
        if (*s == ']')
            return n;
        if (*s++ != ',')
            return -1;
    }
}
