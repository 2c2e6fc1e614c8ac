/* SPDX-License-Identifier: ISC */
#include "netaddr.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The longest numeric address text: "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255". */
#define ADDR_TEXT_MAX 45

static const uint8_t v4_mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static void set_v4(uint8_t out[MG_ADDR_BYTES], const void *v4)
{
    memcpy(out, v4_mapped_prefix, sizeof v4_mapped_prefix);
    memcpy(out + sizeof v4_mapped_prefix, v4, 4);
}

bool mg_addr_is_v4(const uint8_t addr[MG_ADDR_BYTES])
{
    return memcmp(addr, v4_mapped_prefix, sizeof v4_mapped_prefix) == 0;
}

bool mg_addr_parse(const char *text, size_t len, uint8_t out[MG_ADDR_BYTES])
{
    memset(out, 0, MG_ADDR_BYTES);
    if (!text || len == 0 || len > ADDR_TEXT_MAX || memchr(text, '\0', len))
        return false;
    char buf[ADDR_TEXT_MAX + 1];
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (memchr(buf, ':', len)) {
        struct in6_addr a6;
        if (inet_pton(AF_INET6, buf, &a6) != 1)
            return false;
        memcpy(out, &a6, MG_ADDR_BYTES);
        return true;
    }
    struct in_addr a4;
    if (inet_pton(AF_INET, buf, &a4) != 1)
        return false;
    set_v4(out, &a4.s_addr);
    return true;
}

bool mg_addr_from_sockaddr(const struct sockaddr *sa, uint8_t out[MG_ADDR_BYTES])
{
    memset(out, 0, MG_ADDR_BYTES);
    if (!sa)
        return false;
    if (sa->sa_family == AF_INET) {
        set_v4(out, &((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, MG_ADDR_BYTES);
        return true;
    }
    return false;
}

void mg_addr_format(const uint8_t addr[MG_ADDR_BYTES], char *out, size_t outlen)
{
    if (!out || outlen == 0)
        return;
    char buf[INET6_ADDRSTRLEN];
    if (mg_addr_is_v4(addr))
        snprintf(buf, sizeof buf, "%u.%u.%u.%u", (unsigned)addr[12], (unsigned)addr[13],
                 (unsigned)addr[14], (unsigned)addr[15]);
    else if (!inet_ntop(AF_INET6, addr, buf, sizeof buf))
        buf[0] = '\0';
    snprintf(out, outlen, "%s", buf);
}

/* ---- networks ------------------------------------------------------------------------ */

/* True when a and b agree in their first bits bits. */
static bool same_prefix(const uint8_t a[MG_ADDR_BYTES], const uint8_t b[MG_ADDR_BYTES],
                        unsigned bits)
{
    unsigned whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, whole) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return ((a[whole] ^ b[whole]) & mask) == 0;
}

/* Clears every bit of a past its first bits bits. */
static void clear_host_bits(uint8_t a[MG_ADDR_BYTES], unsigned bits)
{
    for (unsigned i = 0; i < MG_ADDR_BYTES; i++) {
        unsigned kept = bits > 8 * i ? bits - 8 * i : 0;
        if (kept < 8)
            a[i] &= (uint8_t)(0xff << (8 - kept));
    }
}

/* ADDRESS/BITS in the family's own terms: 10.0.0.0/8, not ::ffff:10.0.0.0/104. Every stored
 * IPv4-mapped network has bits >= 96 (below that the ffff would be host bits). */
static void format_cidr(const uint8_t addr[MG_ADDR_BYTES], unsigned bits, char *out, size_t outlen)
{
    char a[INET6_ADDRSTRLEN];
    mg_addr_format(addr, a, sizeof a);
    bool v4 = mg_addr_is_v4(addr) && bits >= 96;
    snprintf(out, outlen, "%s/%u", a, v4 ? bits - 96 : bits);
}

static bool is_separator(char c)
{
    return c == ',' || c == ' ' || c == '\t';
}

static int refuse(struct mg_cidr_list *out, char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int refuse(struct mg_cidr_list *out, char *why, size_t whylen, const char *fmt, ...)
{
    memset(out, 0, sizeof *out);
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* One entry of a list: len bytes at p, no separators in them. */
static int parse_cidr(const char *p, size_t len, struct mg_cidr *cidr, struct mg_cidr_list *out,
                      char *why, size_t whylen)
{
    int n = (int)len; /* len < MG_CIDRS_TEXT_MAX */
    const char *slash = memchr(p, '/', len);
    size_t alen = slash ? (size_t)(slash - p) : len;
    uint8_t addr[MG_ADDR_BYTES];
    if (!mg_addr_parse(p, alen, addr))
        return refuse(out, why, whylen,
                      "\"%.*s\" is not an address: each entry must be a numeric IPv4 or IPv6 "
                      "address, optionally with /BITS, such as 10.0.0.0/8 or fd00::/8 (no host "
                      "names), and entries must be separated by commas or blanks",
                      n, p);
    /* The family is the text's: an IPv6 text counts bits over all 128 (::ffff:10.0.0.0/104
     * is 10.0.0.0/8). */
    bool v6_text = memchr(p, ':', alen) != NULL;
    unsigned max = v6_text ? 128 : 32, bits = max;
    if (slash) {
        const char *b = slash + 1;
        size_t blen = len - alen - 1;
        bool digits = blen >= 1 && blen <= 3;
        unsigned value = 0;
        for (size_t i = 0; digits && i < blen; i++) {
            digits = b[i] >= '0' && b[i] <= '9';
            value = value * 10 + (unsigned)(b[i] - '0');
        }
        if (!digits || value > max)
            return refuse(out, why, whylen,
                          "\"%.*s\": the prefix length of an %s network must be a whole "
                          "number from 0 to %u",
                          n, p, v6_text ? "IPv6" : "IPv4", max);
        bits = value;
    }
    if (!v6_text)
        bits += 96;
    uint8_t net[MG_ADDR_BYTES];
    memcpy(net, addr, sizeof net);
    clear_host_bits(net, bits);
    if (memcmp(net, addr, sizeof net) != 0) {
        char network[INET6_ADDRSTRLEN + 8], one[INET6_ADDRSTRLEN];
        format_cidr(net, bits, network, sizeof network);
        mg_addr_format(addr, one, sizeof one);
        return refuse(out, why, whylen,
                      "\"%.*s\" has bits set past its prefix: a network must end in zero bits; "
                      "write %s for the network, or %s alone for the one address",
                      n, p, network, one);
    }
    memset(cidr, 0, sizeof *cidr);
    memcpy(cidr->addr, net, sizeof net);
    cidr->bits = (uint8_t)bits;
    return 0;
}

int mg_cidr_list_parse(const char *text, struct mg_cidr_list *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof *out);
    if (why && whylen)
        why[0] = '\0';
    if (!text)
        return 0;
    size_t len = strnlen(text, MG_CIDRS_TEXT_MAX);
    if (len >= MG_CIDRS_TEXT_MAX)
        return refuse(out, why, whylen,
                      "the list is longer than %d characters: it must be at most %d (one "
                      "NETWORK/BITS entry covers a whole range of proxies)",
                      MG_CIDRS_TEXT_MAX - 1, MG_CIDRS_TEXT_MAX - 1);
    const char *p = text, *end = text + len;
    for (;;) {
        while (p < end && is_separator(*p))
            p++;
        if (p == end)
            return 0;
        const char *e = p;
        while (e < end && !is_separator(*e))
            e++;
        if (out->count == MG_CIDRS_MAX)
            return refuse(out, why, whylen,
                          "more than %d entries (\"%.*s\" is one too many): the list must have "
                          "at most %d (one NETWORK/BITS entry covers a whole range of proxies)",
                          MG_CIDRS_MAX, (int)(e - p), p, MG_CIDRS_MAX);
        if (parse_cidr(p, (size_t)(e - p), &out->cidr[out->count], out, why, whylen) != 0)
            return -1;
        out->count++;
        p = e;
    }
}

bool mg_cidr_list_contains(const struct mg_cidr_list *l, const uint8_t addr[MG_ADDR_BYTES])
{
    if (!l)
        return false;
    for (uint32_t i = 0; i < l->count && i < MG_CIDRS_MAX; i++)
        if (same_prefix(l->cidr[i].addr, addr, l->cidr[i].bits))
            return true;
    return false;
}

void mg_cidr_list_format(const struct mg_cidr_list *l, char *out, size_t outlen)
{
    if (!out || outlen == 0)
        return;
    out[0] = '\0';
    size_t used = 0;
    for (uint32_t i = 0; l && i < l->count && i < MG_CIDRS_MAX && used < outlen; i++) {
        char one[INET6_ADDRSTRLEN + 8];
        format_cidr(l->cidr[i].addr, l->cidr[i].bits, one, sizeof one);
        int n = snprintf(out + used, outlen - used, "%s%s", i ? ", " : "", one);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* ---- the client of a request --------------------------------------------------------- */

/* ":PORT" with a port number 0..65535. */
static bool is_port(const char *p, size_t len)
{
    if (len < 2 || len > 6 || p[0] != ':')
        return false;
    unsigned value = 0;
    for (size_t i = 1; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        value = value * 10 + (unsigned)(p[i] - '0');
    }
    return value <= 65535;
}

/* One X-Forwarded-For entry: ADDRESS, IPV4:PORT, [IPV6] or [IPV6]:PORT, blanks around. */
static bool parse_xff_entry(const char *p, size_t len, uint8_t out[MG_ADDR_BYTES])
{
    while (len > 0 && (p[0] == ' ' || p[0] == '\t'))
        p++, len--;
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
        len--;
    if (len > 0 && p[0] == '[') {
        const char *close = memchr(p, ']', len);
        if (!close)
            return false;
        size_t alen = (size_t)(close - p - 1), rest = len - alen - 2;
        if (!memchr(p + 1, ':', alen) || (rest > 0 && !is_port(close + 1, rest)))
            return false;
        return mg_addr_parse(p + 1, alen, out);
    }
    const char *colon = memchr(p, ':', len);
    if (colon && !memchr(colon + 1, ':', len - (size_t)(colon - p) - 1)) {
        /* One colon: IPv4:PORT (an IPv6 address has at least two). */
        if (!is_port(colon, len - (size_t)(colon - p)))
            return false;
        len = (size_t)(colon - p);
    }
    return mg_addr_parse(p, len, out);
}

enum walk { WALK_ON, WALK_DONE };

/* Walks the entries of one header line from the right; cur is the last address reached. */
static enum walk walk_line(const char *s, size_t n, const struct mg_cidr_list *trusted,
                           uint8_t cur[MG_ADDR_BYTES], bool *from_xff)
{
    if (!s)
        return WALK_ON;
    size_t end = n;
    for (;;) {
        size_t start = end;
        while (start > 0 && s[start - 1] != ',')
            start--;
        const char *e = s + start;
        size_t len = end - start;
        while (len > 0 && (e[0] == ' ' || e[0] == '\t'))
            e++, len--;
        if (len > 0) {
            uint8_t a[MG_ADDR_BYTES];
            if (!parse_xff_entry(e, len, a))
                return WALK_DONE;
            memcpy(cur, a, MG_ADDR_BYTES);
            *from_xff = true;
            if (!mg_cidr_list_contains(trusted, a))
                return WALK_DONE;
        }
        if (start == 0)
            return WALK_ON;
        end = start - 1;
    }
}

bool mg_client_address(const uint8_t peer[MG_ADDR_BYTES], const struct mg_xff_part *parts,
                       size_t nparts, const struct mg_cidr_list *trusted,
                       uint8_t out[MG_ADDR_BYTES])
{
    uint8_t cur[MG_ADDR_BYTES];
    memcpy(cur, peer, sizeof cur);
    bool from_xff = false;
    if (parts && mg_cidr_list_contains(trusted, peer))
        for (size_t i = nparts; i-- > 0;)
            if (walk_line(parts[i].ptr, parts[i].len, trusted, cur, &from_xff) == WALK_DONE)
                break;
    memcpy(out, cur, MG_ADDR_BYTES);
    return from_xff;
}

void mg_client_key(const uint8_t addr[MG_ADDR_BYTES], uint8_t key[MG_ADDR_BYTES])
{
    memmove(key, addr, MG_ADDR_BYTES);
    if (!mg_addr_is_v4(addr))
        memset(key + 8, 0, MG_ADDR_BYTES - 8);
}

/* The longest host a HOST:PORT may name (config_values.h's MG_HOST_MAX, with its NUL). */
#define HOST_TEXT_MAX 256

int mg_addr_parse_host_port(const char *s, char *host_out, size_t host_cap, uint16_t *port_out)
{
    const char *colon;
    char host[HOST_TEXT_MAX];
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':' || close == s + 1)
            return -1;
        size_t n = (size_t)(close - s - 1);
        if (n >= sizeof host)
            return -1;
        memcpy(host, s + 1, n);
        host[n] = '\0';
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -1;
        size_t n = (size_t)(colon - s);
        if (n >= sizeof host || memchr(s, ':', n))
            return -1;
        memcpy(host, s, n);
        host[n] = '\0';
    }
    for (const char *p = host; *p; p++)
        if (isspace((unsigned char)*p) || *p == '/')
            return -1;
    /* The port: decimal digits alone, 1 to 65535. */
    const char *digits = colon + 1;
    if (!isdigit((unsigned char)digits[0]))
        return -1;
    errno = 0;
    char *end;
    long long port = strtoll(digits, &end, 10);
    if (errno || *end || port < 1 || port > 65535)
        return -1;
    if (strlen(host) >= host_cap)
        return -1;
    memcpy(host_out, host, strlen(host) + 1);
    *port_out = (uint16_t)port;
    return 0;
}
