/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: address and proxy parsing (shm/netaddr.c). The input is three parts
 * separated by newlines: a trusted-proxies list (MESHGATE_TRUSTED_PROXIES), the peer's
 * address, and X-Forwarded-For header lines (each further line is one more header). Checks:
 * a list that parses formats to text that parses back to the same list; an address that
 * parses formats to text that parses back to the same bytes; the client is the peer unless
 * the peer is trusted, and is never an address that appears nowhere.
 */
#include "netaddr.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define XFF_LINES_MAX 8

static void check_address_round_trip(const uint8_t addr[MG_ADDR_BYTES])
{
    char text[64];
    uint8_t again[MG_ADDR_BYTES];
    mg_addr_format(addr, text, sizeof text);
    if (!mg_addr_parse(text, strlen(text), again) || memcmp(addr, again, MG_ADDR_BYTES) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';

    char *line[2 + XFF_LINES_MAX];
    size_t len[2 + XFF_LINES_MAX], lines = 0;
    for (char *p = text; lines < 2 + XFF_LINES_MAX;) {
        char *nl = memchr(p, '\n', (size_t)(text + size - p));
        line[lines] = p;
        len[lines++] = nl ? (size_t)(nl - p) : (size_t)(text + size - p);
        if (!nl)
            break;
        *nl = '\0';
        p = nl + 1;
    }

    struct mg_cidr_list trusted;
    char why[256];
    memset(&trusted, 0, sizeof trusted);
    /* The list is a C string (an environment value): it ends at its first NUL. */
    if (mg_cidr_list_parse(line[0], &trusted, why, sizeof why) == 0) {
        if (trusted.count > MG_CIDRS_MAX)
            abort();
        char back[MG_CIDRS_MAX * 64];
        struct mg_cidr_list again;
        mg_cidr_list_format(&trusted, back, sizeof back);
        if (mg_cidr_list_parse(back, &again, why, sizeof why) != 0 ||
            again.count != trusted.count ||
            memcmp(again.cidr, trusted.cidr, trusted.count * sizeof trusted.cidr[0]) != 0)
            abort();
    } else {
        memset(&trusted, 0, sizeof trusted);
        if (!why[0])
            abort();
    }

    uint8_t peer[MG_ADDR_BYTES] = {0};
    if (lines > 1 && mg_addr_parse(line[1], len[1], peer))
        check_address_round_trip(peer);
    else
        memcpy(
            peer,
            (const uint8_t[MG_ADDR_BYTES]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1},
            MG_ADDR_BYTES);

    struct mg_xff_part parts[XFF_LINES_MAX];
    size_t nparts = 0;
    for (size_t i = 2; i < lines; i++)
        parts[nparts++] = (struct mg_xff_part){line[i], len[i]};
    uint8_t client[MG_ADDR_BYTES], key[MG_ADDR_BYTES];
    bool forwarded = mg_client_address(peer, parts, nparts, &trusted, client);
    if (forwarded && (nparts == 0 || !mg_cidr_list_contains(&trusted, peer)))
        abort(); /* X-Forwarded-For counts only behind a trusted peer */
    if (!forwarded && memcmp(client, peer, MG_ADDR_BYTES) != 0)
        abort();
    check_address_round_trip(client);
    mg_client_key(client, key);
    free(text);
    return 0;
}
