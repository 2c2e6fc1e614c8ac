/* SPDX-License-Identifier: ISC */
/*
 * netaddr: network addresses. Parsing numeric addresses and lists of networks
 * (MESHGATE_TRUSTED_PROXIES), deciding which address a request comes from when it reaches
 * meshgate through reverse proxies, and the key under which a per-client rate limit counts it.
 *
 * An address is 16 bytes in network order. IPv4 is stored IPv4-mapped (::ffff:a.b.c.d), so
 * one form covers both families, a socket that accepts both gives the same bytes for the same
 * client, and a prefix length is always over the 128-bit form (IPv4 /n is /96+n). Addresses
 * and lists hold no pointer: a parsed list lives in struct mg_config, which is copied as it
 * is into the shared segment (only struct mg_xff_part, which lives for one call, points into
 * a request).
 *
 * X-Forwarded-For is only believed from a trusted proxy. Anyone can send the header; if it
 * were believed from every peer, a client could name any address it likes as its own, to
 * slip out of its rate limit or to spend someone else's. A peer in the trusted list is a
 * proxy we run, and only what such a proxy wrote is evidence.
 *
 * The list is walked from the right. Each proxy appends the address that connected to it, so
 * the rightmost entry was written by the peer and each entry further left by the hop named
 * just right of it; the leftmost was written by whoever spoke first, which may be the client
 * itself making things up. An entry is as good as the hop that wrote it: walking from the
 * right, while the entries name trusted proxies the next one is still believable, and the
 * first entry that is not a trusted proxy is the address our outermost trusted proxy saw
 * connecting to it: the client. Whatever stands further left was written by the client or by
 * proxies we do not know, and is ignored, so prepending entries forges nothing. An entry that
 * does not parse ends the walk at the last trusted hop reached: the limit then falls on that
 * proxy, never on text a client chose.
 *
 * The rate key groups IPv6 by /64. A home network or a host is usually given a whole /64 and
 * picks its addresses in it freely (privacy addresses change every day, and a host can take
 * millions), so counting single IPv6 addresses would let one client be millions of clients.
 * IPv4 addresses are scarce and count one by one.
 */
#ifndef MESHGATE_NETADDR_H
#define MESHGATE_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sockaddr;

#define MG_ADDR_BYTES 16
#define MG_CIDRS_MAX 32
#define MG_CIDRS_TEXT_MAX 1024 /* the longest list text accepted, with its NUL */

/* A network: addr with every bit past the prefix zero. */
struct mg_cidr {
    uint8_t addr[MG_ADDR_BYTES];
    uint8_t bits; /* prefix length over the 128-bit form: IPv4 /n is 96+n */
    uint8_t reserved[7];
};

struct mg_cidr_list {
    uint32_t count;
    uint32_t reserved;
    struct mg_cidr cidr[MG_CIDRS_MAX];
};

/* A numeric IPv4 or IPv6 address in len bytes of text (not necessarily NUL-terminated): no
 * zone ("%eth0"), no host name, no blanks. An IPv4-mapped IPv6 text (::ffff:1.2.3.4) gives
 * the same bytes as the IPv4 address. False (and out zeroed) for anything else. */
bool mg_addr_parse(const char *text, size_t len, uint8_t out[MG_ADDR_BYTES]);

/* The address of an AF_INET or AF_INET6 socket address (an IPv4-mapped one gives the same
 * bytes as the IPv4 address); false (and out zeroed) for any other family. */
bool mg_addr_from_sockaddr(const struct sockaddr *sa, uint8_t out[MG_ADDR_BYTES]);

/* HOST:PORT, [IPV6]:PORT or :PORT (empty host: every address) into host and port, as the
 * variables that name one read it (MESHGATE_LISTEN, MESHGATE_UPSTREAM); the host, at most 255
 * bytes, is not resolved, but has no blank or '/'; the port is 1 to 65535 in decimal. -1 when
 * it is none of these, or the host does not fit in host_cap. */
int mg_addr_parse_host_port(const char *s, char *host, size_t host_cap, uint16_t *port);

/* "1.2.3.4" or "2001:db8::1"; an IPv4-mapped address is shown as IPv4. 46 bytes always do. */
void mg_addr_format(const uint8_t addr[MG_ADDR_BYTES], char *out, size_t outlen);

/* True for an IPv4(-mapped) address. */
bool mg_addr_is_v4(const uint8_t addr[MG_ADDR_BYTES]);

/*
 * A list such as "127.0.0.1, 10.0.0.0/8 ::1 fd00::/8": entries separated by commas and/or
 * blanks (spaces, tabs), each an address or ADDRESS/BITS (0..32 for IPv4, 0..128 for IPv6;
 * an address alone is /32 or /128). An entry with bits set past its prefix (10.0.0.1/8) is
 * refused, with the network that was probably meant. Empty text: an empty list. Returns 0, or
 * -1 with out emptied and a sentence in why naming the offending entry and saying what is
 * accepted; the caller puts "MESHGATE_TRUSTED_PROXIES=<value>: " before it. More than
 * MG_CIDRS_MAX entries, or text longer than MG_CIDRS_TEXT_MAX - 1 bytes, is refused too.
 */
int mg_cidr_list_parse(const char *text, struct mg_cidr_list *out, char *why, size_t whylen);

/* True when addr is in one of the networks of l. */
bool mg_cidr_list_contains(const struct mg_cidr_list *l, const uint8_t addr[MG_ADDR_BYTES]);

/* The list back as text, normalized: "127.0.0.1/32, 10.0.0.0/8, ::1/128" (an empty list is
 * ""); what mg_cidr_list_parse reads back into the same list. */
void mg_cidr_list_format(const struct mg_cidr_list *l, char *out, size_t outlen);

/* One X-Forwarded-For header line's value (a request may carry several lines; they are read
 * in order as one list). */
struct mg_xff_part {
    const char *ptr;
    size_t len;
};

/*
 * The address a request comes from. It is the peer, unless the peer is in trusted: then the
 * X-Forwarded-For entries are walked from the right (the nearest hop first): each entry that
 * is itself a trusted proxy is skipped; the first untrusted entry is the client. An entry that
 * does not parse (garbage, "unknown", a host name) stops the walk: the client is then the last
 * address reached (the nearest proxy that was trusted), never the garbage. When every entry is
 * trusted, the leftmost one is the client. No X-Forwarded-For at all (nparts 0): the peer.
 *
 * Entries may carry a port: "1.2.3.4:5678", "[2001:db8::1]:443"; IPv6 may be in brackets
 * without a port; surrounding blanks are ignored; empty entries (",,") are skipped. Writes the
 * address to out and returns true when it came from X-Forwarded-For, false when it is the peer.
 */
bool mg_client_address(const uint8_t peer[MG_ADDR_BYTES], const struct mg_xff_part *parts,
                       size_t nparts, const struct mg_cidr_list *trusted,
                       uint8_t out[MG_ADDR_BYTES]);

/* The key of a client in the rate table: an IPv4 address as it is; an IPv6 address with its
 * low 64 bits zeroed (one /64 is one client). */
void mg_client_key(const uint8_t addr[MG_ADDR_BYTES], uint8_t key[MG_ADDR_BYTES]);

#endif
