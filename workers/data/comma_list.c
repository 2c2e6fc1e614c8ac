/* SPDX-License-Identifier: ISC */
#include "comma_list.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

int mg_param_list_split(const char *list, unsigned flags, struct mg_list_item *items, int cap)
{
    int n = 0;
    const char *p = list;
    while (p && *p) {
        const char *end = strchr(p, ',');
        const char *next = end ? end + 1 : NULL;
        if (!end)
            end = p + strlen(p);
        while (p < end && is_blank(*p))
            p++;
        while (end > p && is_blank(end[-1]))
            end--;
        size_t len = (size_t)(end - p);
        bool skip =
            len == 0 || ((flags & MG_LIST_SKIP_ALL) && len == 3 && strncasecmp(p, "ALL", 3) == 0);
        if (!skip) {
            if (n < cap)
                items[n] = (struct mg_list_item){p, len};
            n++;
        }
        p = next;
    }
    return n;
}
