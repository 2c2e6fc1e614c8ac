/* SPDX-License-Identifier: ISC */
/*
 * Tests for shm/netaddr.c: numeric addresses, lists of trusted networks, which address a
 * request comes from behind proxies (X-Forwarded-For believed only from a trusted peer, walked
 * from the right), and the rate key that makes one IPv6 /64 one client.
 */
#include <criterion/criterion.h>

#include "netaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

TestSuite(netaddr);

/* The address of a text that must parse. */
static void addr(const char *text, uint8_t out[MG_ADDR_BYTES])
{
    cr_assert(mg_addr_parse(text, strlen(text), out), "\"%s\" did not parse", text);
}

static bool parses(const char *text)
{
    uint8_t a[MG_ADDR_BYTES];
    return mg_addr_parse(text, strlen(text), a);
}

/* An address as text; a few at a time stay valid. */
static const char *show(const uint8_t a[MG_ADDR_BYTES])
{
    static char ring[4][INET6_ADDRSTRLEN];
    static unsigned next;
    char *out = ring[next++ % 4];
    mg_addr_format(a, out, INET6_ADDRSTRLEN);
    return out;
}

static struct mg_cidr_list list;
static char why[512];

static int parse_list(const char *text)
{
    why[0] = '\0';
    return mg_cidr_list_parse(text, &list, why, sizeof why);
}

/* Asserts that text is refused with a message naming entry and saying what is accepted. */
static void assert_list_refused(const char *text, const char *entry)
{
    cr_assert_eq(parse_list(text), -1, "\"%s\" was accepted", text);
    cr_assert_eq(list.count, 0, "a refused list kept entries");
    char quoted[256];
    snprintf(quoted, sizeof quoted, "\"%s\"", entry);
    cr_assert(strstr(why, quoted), "the message for \"%s\" does not name %s: %s", text, quoted,
              why);
    cr_assert(strstr(why, "must"), "the message for \"%s\" does not say what is accepted: %s", text,
              why);
}

/* ---- addresses ----------------------------------------------------------------------- */

Test(netaddr, ipv4_is_stored_ipv4_mapped)
{
    uint8_t a[MG_ADDR_BYTES];
    addr("192.0.2.7", a);
    const uint8_t expected[MG_ADDR_BYTES] = {0, 0, 0,    0,    0,   0, 0, 0,
                                             0, 0, 0xff, 0xff, 192, 0, 2, 7};
    cr_expect_arr_eq(a, expected, MG_ADDR_BYTES);
    cr_expect(mg_addr_is_v4(a));
    cr_expect_str_eq(show(a), "192.0.2.7");
    addr("0.0.0.0", a);
    cr_expect_str_eq(show(a), "0.0.0.0");
    addr("255.255.255.255", a);
    cr_expect_str_eq(show(a), "255.255.255.255");
}

Test(netaddr, ipv6_parses_and_mapped_ipv6_is_the_ipv4_address)
{
    uint8_t a[MG_ADDR_BYTES], b[MG_ADDR_BYTES];
    addr("2001:db8::1", a);
    const uint8_t expected[MG_ADDR_BYTES] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0,
                                             0,    0,    0,    0,    0, 0, 0, 1};
    cr_expect_arr_eq(a, expected, MG_ADDR_BYTES);
    cr_expect_not(mg_addr_is_v4(a));
    cr_expect_str_eq(show(a), "2001:db8::1");
    addr("::1", a);
    cr_expect_str_eq(show(a), "::1");
    cr_expect_not(mg_addr_is_v4(a), "::1 taken for IPv4");
    addr("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", a);
    addr("::ffff:1.2.3.4", a);
    addr("1.2.3.4", b);
    cr_expect_arr_eq(a, b, MG_ADDR_BYTES, "::ffff:1.2.3.4 is not 1.2.3.4");
    cr_expect(mg_addr_is_v4(a));
    cr_expect_str_eq(show(a), "1.2.3.4");
    addr("::FFFF:102:304", a);
    cr_expect_arr_eq(a, b, MG_ADDR_BYTES, "the hex form of a mapped address differs");
}

Test(netaddr, only_len_bytes_are_read)
{
    uint8_t a[MG_ADDR_BYTES], b[MG_ADDR_BYTES];
    cr_assert(mg_addr_parse("10.1.2.3trailing", 8, a), "the text past len was read");
    addr("10.1.2.3", b);
    cr_expect_arr_eq(a, b, MG_ADDR_BYTES);
    cr_assert(mg_addr_parse("fd00::1]:443", 7, a));
    addr("fd00::1", b);
    cr_expect_arr_eq(a, b, MG_ADDR_BYTES);
}

Test(netaddr, what_is_not_a_numeric_address_is_refused)
{
    static const char *bad[] = {"1.2.3",      "1.2.3.4.5",    "fe80::1%eth0",      "host",
                                "",           " 1.2.3.4",     "1.2.3.4 ",          "256.1.1.1",
                                "1.2.3.-4",   "2001:db8",     "1:2:3:4:5:6:7:8:9", "[2001:db8::1]",
                                "1.2.3.4:80", "::ffff:1.2.3", "localhost"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_not(parses(bad[i]), "\"%s\" parsed", bad[i]);
    uint8_t a[MG_ADDR_BYTES];
    cr_expect_not(mg_addr_parse("1.2.3.4\0.5", 10, a), "an embedded NUL cut the text short");
    cr_expect_not(mg_addr_parse("::1\0", 4, a), "a NUL within len was accepted");
    char overlong[4096];
    memset(overlong, '0', sizeof overlong);
    memcpy(overlong, "1.2.3.4", 7);
    cr_expect_not(mg_addr_parse(overlong, sizeof overlong, a), "an overlong text parsed");
    memset(a, 0xee, sizeof a);
    cr_expect_not(mg_addr_parse("nope", 4, a));
    const uint8_t zero[MG_ADDR_BYTES] = {0};
    cr_expect_arr_eq(a, zero, MG_ADDR_BYTES, "a refused address left bytes behind");
}

Test(netaddr, socket_addresses_of_both_families_and_mapped_agree)
{
    struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons(80)};
    cr_assert_eq(inet_pton(AF_INET, "198.51.100.9", &in4.sin_addr), 1);
    uint8_t a[MG_ADDR_BYTES], b[MG_ADDR_BYTES], c[MG_ADDR_BYTES];
    cr_assert(mg_addr_from_sockaddr((struct sockaddr *)&in4, a));
    cr_expect_str_eq(show(a), "198.51.100.9");

    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    cr_assert_eq(inet_pton(AF_INET6, "::ffff:198.51.100.9", &in6.sin6_addr), 1);
    cr_assert(mg_addr_from_sockaddr((struct sockaddr *)&in6, b));
    cr_expect_arr_eq(a, b, MG_ADDR_BYTES, "a v4-mapped socket address is not the IPv4 one");

    cr_assert_eq(inet_pton(AF_INET6, "2001:db8:5::42", &in6.sin6_addr), 1);
    cr_assert(mg_addr_from_sockaddr((struct sockaddr *)&in6, c));
    cr_expect_str_eq(show(c), "2001:db8:5::42");
    cr_expect_not(mg_addr_is_v4(c));
}

Test(netaddr, a_socket_address_of_another_family_is_refused)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    snprintf(un.sun_path, sizeof un.sun_path, "/run/meshgate.sock");
    uint8_t a[MG_ADDR_BYTES];
    memset(a, 0xee, sizeof a);
    cr_expect_not(mg_addr_from_sockaddr((struct sockaddr *)&un, a));
    const uint8_t zero[MG_ADDR_BYTES] = {0};
    cr_expect_arr_eq(a, zero, MG_ADDR_BYTES, "out was not zeroed");
    cr_expect_not(mg_addr_from_sockaddr(NULL, a));
}

/* ---- lists of networks --------------------------------------------------------------- */

Test(netaddr, a_list_separated_by_commas_and_blanks)
{
    cr_assert_eq(parse_list("127.0.0.1, 10.0.0.0/8 ::1\tfd00::/8,,192.168.0.0/16 , "), 0, "%s",
                 why);
    cr_assert_eq(list.count, 5);
    uint8_t a[MG_ADDR_BYTES];
    addr("127.0.0.1", a);
    cr_expect_arr_eq(list.cidr[0].addr, a, MG_ADDR_BYTES);
    cr_expect_eq(list.cidr[0].bits, 128, "an IPv4 address alone is not /32 (128 over all)");
    addr("10.0.0.0", a);
    cr_expect_arr_eq(list.cidr[1].addr, a, MG_ADDR_BYTES);
    cr_expect_eq(list.cidr[1].bits, 96 + 8);
    addr("::1", a);
    cr_expect_arr_eq(list.cidr[2].addr, a, MG_ADDR_BYTES);
    cr_expect_eq(list.cidr[2].bits, 128);
    addr("fd00::", a);
    cr_expect_arr_eq(list.cidr[3].addr, a, MG_ADDR_BYTES);
    cr_expect_eq(list.cidr[3].bits, 8);
    cr_expect_eq(list.cidr[4].bits, 96 + 16);
}

Test(netaddr, prefix_edges_and_the_empty_list)
{
    cr_assert_eq(parse_list("0.0.0.0/0 1.2.3.4/32 ::/0 2001:db8::1/128 ::ffff:10.0.0.0/104"), 0,
                 "%s", why);
    cr_assert_eq(list.count, 5);
    cr_expect_eq(list.cidr[0].bits, 96);
    cr_expect_eq(list.cidr[1].bits, 128);
    cr_expect_eq(list.cidr[2].bits, 0);
    cr_expect_eq(list.cidr[3].bits, 128);
    cr_expect_eq(list.cidr[4].bits, 104, "a mapped IPv6 text does not count over 128 bits");
    cr_assert_eq(parse_list(""), 0, "%s", why);
    cr_expect_eq(list.count, 0);
    cr_assert_eq(parse_list(" ,\t, "), 0, "%s", why);
    cr_expect_eq(list.count, 0, "separators alone made entries");
}

Test(netaddr, a_prefix_too_long_for_its_family_is_refused)
{
    assert_list_refused("127.0.0.1, 10.0.0.0/33", "10.0.0.0/33");
    cr_expect(strstr(why, "IPv4") && strstr(why, "0 to 32"), "%s", why);
    assert_list_refused("::1 fd00::/129", "fd00::/129");
    cr_expect(strstr(why, "IPv6") && strstr(why, "0 to 128"), "%s", why);
    assert_list_refused("10.0.0.0/", "10.0.0.0/");
    assert_list_refused("10.0.0.0/x", "10.0.0.0/x");
    assert_list_refused("10.0.0.0/-1", "10.0.0.0/-1");
    assert_list_refused("10.0.0.0/8/8", "10.0.0.0/8/8");
    assert_list_refused("10.0.0.0/0008", "10.0.0.0/0008");
}

Test(netaddr, host_bits_under_the_prefix_name_the_network_meant)
{
    assert_list_refused("10.0.0.1/8", "10.0.0.1/8");
    cr_expect(strstr(why, "10.0.0.0/8"), "the network meant is not named: %s", why);
    cr_expect(strstr(why, "10.0.0.1 alone"), "the single address is not offered: %s", why);
    assert_list_refused("127.0.0.1 2001:db8::1/32", "2001:db8::1/32");
    cr_expect(strstr(why, "2001:db8::/32"), "%s", why);
    assert_list_refused("192.168.1.128/24", "192.168.1.128/24");
    cr_expect(strstr(why, "192.168.1.0/24"), "%s", why);
    assert_list_refused("::ffff:10.0.0.0/8", "::ffff:10.0.0.0/8");
    cr_expect(strstr(why, "::/8"), "%s", why);
}

Test(netaddr, an_entry_that_is_not_an_address_is_named)
{
    assert_list_refused("10.0.0.0/8, proxy.example.org", "proxy.example.org");
    cr_expect(strstr(why, "not an address") && strstr(why, "host names"), "%s", why);
    assert_list_refused("10.0.0.0/8;192.168.0.0/16", "10.0.0.0/8;192.168.0.0/16");
    assert_list_refused("fe80::1%eth0", "fe80::1%eth0");
    assert_list_refused("/8", "/8");
    assert_list_refused("1.2.3", "1.2.3");
    /* A refusal leaves nothing of the entries that came before. */
    cr_expect_eq(list.count, 0);
}

Test(netaddr, too_many_entries_and_too_long_a_text_are_refused)
{
    char text[MG_CIDRS_TEXT_MAX * 2] = "";
    for (int i = 0; i < MG_CIDRS_MAX; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "10.0.%d.0/24 ", i);
    cr_assert_eq(parse_list(text), 0, "%d entries refused: %s", MG_CIDRS_MAX, why);
    cr_expect_eq(list.count, MG_CIDRS_MAX);
    strcat(text, "10.9.9.0/24");
    assert_list_refused(text, "10.9.9.0/24");
    cr_expect(strstr(why, "more than 32 entries") && strstr(why, "at most 32"), "%s", why);

    memset(text, ' ', MG_CIDRS_TEXT_MAX - 1);
    memcpy(text + MG_CIDRS_TEXT_MAX - 9, "10.0.0.1", 8);
    text[MG_CIDRS_TEXT_MAX - 1] = '\0';
    cr_assert_eq(parse_list(text), 0, "%d characters refused: %s", MG_CIDRS_TEXT_MAX - 1, why);
    cr_expect_eq(list.count, 1);
    text[MG_CIDRS_TEXT_MAX - 1] = ' ';
    text[MG_CIDRS_TEXT_MAX] = '\0';
    cr_expect_eq(parse_list(text), -1, "a text of %d characters was accepted", MG_CIDRS_TEXT_MAX);
    cr_expect(strstr(why, "longer than 1023 characters") && strstr(why, "must"), "%s", why);
    cr_expect_eq(list.count, 0);
}

Test(netaddr, contains_matches_by_prefix)
{
    cr_assert_eq(parse_list("10.0.0.0/8, 192.168.1.7, fd00::/8, 2001:db8:0:2::/63"), 0, "%s", why);
    static const char *in[] = {"10.0.0.0",       "10.255.255.255", "192.168.1.7",
                               "fd12:3456::1",   "2001:db8:0:2::", "2001:db8:0:3:ffff::1",
                               "::ffff:10.1.2.3"};
    static const char *out[] = {"11.0.0.0",       "9.255.255.255",  "192.168.1.8", "fe00::1",
                                "2001:db8:0:4::", "2001:db8:0:1::", "::a00:1",     "::1",
                                "0.0.0.0"};
    uint8_t a[MG_ADDR_BYTES];
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        addr(in[i], a);
        cr_expect(mg_cidr_list_contains(&list, a), "%s not found", in[i]);
    }
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) {
        addr(out[i], a);
        cr_expect_not(mg_cidr_list_contains(&list, a), "%s found", out[i]);
    }
    cr_assert_eq(parse_list("0.0.0.0/0"), 0);
    addr("203.0.113.5", a);
    cr_expect(mg_cidr_list_contains(&list, a), "0.0.0.0/0 does not hold every IPv4 address");
    addr("2001:db8::1", a);
    cr_expect_not(mg_cidr_list_contains(&list, a), "0.0.0.0/0 holds IPv6");
    cr_assert_eq(parse_list(""), 0);
    cr_expect_not(mg_cidr_list_contains(&list, a), "the empty list holds something");
    cr_expect_not(mg_cidr_list_contains(NULL, a));
}

Test(netaddr, format_gives_a_list_that_parses_back_the_same)
{
    cr_assert_eq(parse_list("127.0.0.1 10.0.0.0/8,::1 fd00::/8 0.0.0.0/0 ::/0 ::ffff:10.0.0.0/104"),
                 0, "%s", why);
    char text[MG_CIDRS_TEXT_MAX * 2];
    mg_cidr_list_format(&list, text, sizeof text);
    cr_expect_str_eq(text, "127.0.0.1/32, 10.0.0.0/8, ::1/128, fd00::/8, 0.0.0.0/0, ::/0, "
                           "10.0.0.0/8");
    struct mg_cidr_list first = list;
    cr_assert_eq(parse_list(text), 0, "%s", why);
    cr_expect_eq(memcmp(&first, &list, sizeof list), 0, "\"%s\" parsed to another list", text);
    cr_assert_eq(parse_list(""), 0);
    mg_cidr_list_format(&list, text, sizeof text);
    cr_expect_str_eq(text, "");
    cr_assert_eq(parse_list("10.0.0.0/8 192.168.0.0/16"), 0);
    char small[12];
    mg_cidr_list_format(&list, small, sizeof small);
    cr_expect_str_eq(small, "10.0.0.0/8,", "a short buffer was not cut cleanly");
}

/* ---- the client of a request --------------------------------------------------------- */

struct client {
    char addr[INET6_ADDRSTRLEN];
    bool from_xff;
};

/* The client of a request from peer through proxies trusted, with X-Forwarded-For lines. */
static struct client client_of(const char *peer, const char *trusted, const char *const *lines,
                               size_t nlines)
{
    struct mg_cidr_list t;
    char err[512];
    cr_assert_eq(mg_cidr_list_parse(trusted, &t, err, sizeof err), 0, "%s", err);
    uint8_t p[MG_ADDR_BYTES], out[MG_ADDR_BYTES];
    addr(peer, p);
    struct mg_xff_part parts[8];
    cr_assert_leq(nlines, 8);
    for (size_t i = 0; i < nlines; i++)
        parts[i] = (struct mg_xff_part){lines[i], strlen(lines[i])};
    struct client c;
    c.from_xff = mg_client_address(p, parts, nlines, &t, out);
    mg_addr_format(out, c.addr, sizeof c.addr);
    return c;
}

#define LINES(...)                                                                                 \
    (const char *[]){__VA_ARGS__}, sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)

#define TRUSTED "127.0.0.1, 10.0.0.0/8, fd00::/8"

Test(netaddr, an_untrusted_peer_is_the_client_whatever_it_forwards)
{
    struct client c = client_of("203.0.113.9", TRUSTED, LINES("1.2.3.4"));
    cr_expect_str_eq(c.addr, "203.0.113.9", "X-Forwarded-For believed from an untrusted peer");
    cr_expect_not(c.from_xff);
    c = client_of("2001:db8::9", TRUSTED, LINES("10.0.0.1, 1.2.3.4"));
    cr_expect_str_eq(c.addr, "2001:db8::9");
    c = client_of("10.0.0.1", "", LINES("1.2.3.4"));
    cr_expect_str_eq(c.addr, "10.0.0.1", "believed with no trusted proxies at all");
    cr_expect_not(c.from_xff);
}

Test(netaddr, no_forwarded_header_gives_the_peer)
{
    struct client c = client_of("10.0.0.1", TRUSTED, NULL, 0);
    cr_expect_str_eq(c.addr, "10.0.0.1");
    cr_expect_not(c.from_xff);
}

Test(netaddr, a_trusted_peer_gives_the_forwarded_client)
{
    struct client c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4"));
    cr_expect_str_eq(c.addr, "1.2.3.4");
    cr_expect(c.from_xff);
    c = client_of("fd00::5", TRUSTED, LINES("2001:db8::77"));
    cr_expect_str_eq(c.addr, "2001:db8::77");
    c = client_of("::ffff:127.0.0.1", TRUSTED, LINES("::ffff:198.51.100.1"));
    cr_expect_str_eq(c.addr, "198.51.100.1", "a v4-mapped peer is not the IPv4 one");
}

Test(netaddr, a_client_cannot_forge_past_itself_by_prepending)
{
    struct client c = client_of("10.0.0.1", TRUSTED, LINES("6.6.6.6, 1.2.3.4"));
    cr_expect_str_eq(c.addr, "1.2.3.4", "the leftmost, forged entry was believed");
    c = client_of("10.0.0.1", TRUSTED, LINES("10.0.0.2, 1.2.3.4"));
    cr_expect_str_eq(c.addr, "1.2.3.4", "a forged trusted entry left of the client won");
    c = client_of("10.0.0.1", TRUSTED, LINES("garbage, 1.2.3.4"));
    cr_expect_str_eq(c.addr, "1.2.3.4", "garbage left of the client changed it");
}

Test(netaddr, a_chain_of_trusted_proxies_is_skipped)
{
    struct client c = client_of("10.0.0.1", TRUSTED, LINES("6.6.6.6, 1.2.3.4, 10.1.1.1, fd00::7"));
    cr_expect_str_eq(c.addr, "1.2.3.4");
    cr_expect(c.from_xff);
    c = client_of("127.0.0.1", TRUSTED, LINES("2001:db8::1, 10.0.0.3, 127.0.0.1"));
    cr_expect_str_eq(c.addr, "2001:db8::1");
}

Test(netaddr, an_entry_that_does_not_parse_stops_at_the_last_trusted_hop)
{
    struct client c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4, unknown"));
    cr_expect_str_eq(c.addr, "10.0.0.1", "the walk went past garbage");
    cr_expect_not(c.from_xff, "the peer was reported as forwarded");
    c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4, proxy.example.org"));
    cr_expect_str_eq(c.addr, "10.0.0.1");
    c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4, _hidden, 10.0.0.2"));
    cr_expect_str_eq(c.addr, "10.0.0.2", "not the nearest trusted proxy reached");
    cr_expect(c.from_xff);
    c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4, 1.2.3.4:99999, 10.0.0.2"));
    cr_expect_str_eq(c.addr, "10.0.0.2", "a port past 65535 was read as one");
}

Test(netaddr, when_every_entry_is_trusted_the_leftmost_is_the_client)
{
    struct client c = client_of("10.0.0.1", TRUSTED, LINES("10.0.0.9, 127.0.0.1, fd00::3"));
    cr_expect_str_eq(c.addr, "10.0.0.9");
    cr_expect(c.from_xff);
}

Test(netaddr, entries_may_carry_ports_and_brackets)
{
    struct client c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4:5678"));
    cr_expect_str_eq(c.addr, "1.2.3.4");
    c = client_of("10.0.0.1", TRUSTED, LINES("[2001:db8::1]:443"));
    cr_expect_str_eq(c.addr, "2001:db8::1");
    c = client_of("10.0.0.1", TRUSTED, LINES("[2001:db8::2]"));
    cr_expect_str_eq(c.addr, "2001:db8::2");
    c = client_of("10.0.0.1", TRUSTED, LINES("  2001:db8::3  "));
    cr_expect_str_eq(c.addr, "2001:db8::3");
    c = client_of("10.0.0.1", TRUSTED, LINES("5.6.7.8, [fd00::1]:80 ,\t10.0.0.2:1"));
    cr_expect_str_eq(c.addr, "5.6.7.8", "a trusted hop with a port was not skipped");
    c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4, [2001:db8::1"));
    cr_expect_str_eq(c.addr, "10.0.0.1", "an unclosed bracket was read");
    c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4, 5.6.7.8:"));
    cr_expect_str_eq(c.addr, "10.0.0.1", "an empty port was read");
    c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4, [5.6.7.8]:80"));
    cr_expect_str_eq(c.addr, "10.0.0.1", "IPv4 in brackets was read");
}

Test(netaddr, several_header_lines_are_one_list_in_order)
{
    struct client c = client_of("10.0.0.1", TRUSTED, LINES("6.6.6.6", "1.2.3.4, 10.0.0.5"));
    cr_expect_str_eq(c.addr, "1.2.3.4", "the last line is not the nearest hop");
    c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4, 10.0.0.5", "10.0.0.6"));
    cr_expect_str_eq(c.addr, "1.2.3.4", "the walk did not go on into the earlier line");
    c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4", "5.6.7.8"));
    cr_expect_str_eq(c.addr, "5.6.7.8", "an earlier line was taken as nearer");
}

Test(netaddr, empty_entries_and_lines_are_skipped)
{
    struct client c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4,, ,10.0.0.5,"));
    cr_expect_str_eq(c.addr, "1.2.3.4");
    c = client_of("10.0.0.1", TRUSTED, LINES("1.2.3.4", "", " , "));
    cr_expect_str_eq(c.addr, "1.2.3.4");
    c = client_of("10.0.0.1", TRUSTED, LINES("", ","));
    cr_expect_str_eq(c.addr, "10.0.0.1");
    cr_expect_not(c.from_xff, "empty lines counted as forwarded");
    uint8_t peer[MG_ADDR_BYTES], out[MG_ADDR_BYTES];
    addr("10.0.0.1", peer);
    cr_assert_eq(parse_list(TRUSTED), 0);
    struct mg_xff_part none[] = {{NULL, 0}, {"1.2.3.4", 7}, {NULL, 0}};
    cr_expect(mg_client_address(peer, none, 3, &list, out));
    cr_expect_str_eq(show(out), "1.2.3.4");
}

/* ---- the rate key -------------------------------------------------------------------- */

Test(netaddr, ipv4_is_its_own_key)
{
    uint8_t a[MG_ADDR_BYTES], k[MG_ADDR_BYTES];
    addr("198.51.100.77", a);
    mg_client_key(a, k);
    cr_expect_arr_eq(a, k, MG_ADDR_BYTES);
    addr("198.51.100.78", a);
    uint8_t k2[MG_ADDR_BYTES];
    mg_client_key(a, k2);
    cr_expect_arr_neq(k, k2, MG_ADDR_BYTES, "neighbouring IPv4 addresses share a key");
}

Test(netaddr, one_ipv6_64_is_one_key)
{
    uint8_t a[MG_ADDR_BYTES], b[MG_ADDR_BYTES], c[MG_ADDR_BYTES];
    uint8_t ka[MG_ADDR_BYTES], kb[MG_ADDR_BYTES], kc[MG_ADDR_BYTES];
    addr("2001:db8:1:2:a:b:c:d", a);
    addr("2001:db8:1:2:ffff:ffff:ffff:ffff", b);
    addr("2001:db8:1:3:a:b:c:d", c);
    mg_client_key(a, ka);
    mg_client_key(b, kb);
    mg_client_key(c, kc);
    cr_expect_str_eq(show(ka), "2001:db8:1:2::");
    cr_expect_arr_eq(ka, kb, MG_ADDR_BYTES, "two addresses of one /64 are two clients");
    cr_expect_arr_neq(ka, kc, MG_ADDR_BYTES, "two /64s are one client");
    mg_client_key(a, a);
    cr_expect_arr_eq(a, ka, MG_ADDR_BYTES, "keying in place differs");
}

/* ---- HOST:PORT ----------------------------------------------------------------------- */

Test(netaddr, host_port_takes_a_name_an_ipv6_in_brackets_or_no_host)
{
    char host[64];
    uint16_t port = 0;
    cr_assert_eq(mg_addr_parse_host_port("localhost:8080", host, sizeof host, &port), 0);
    cr_expect_str_eq(host, "localhost");
    cr_expect_eq(port, 8080);
    cr_assert_eq(mg_addr_parse_host_port("[::1]:1", host, sizeof host, &port), 0);
    cr_expect_str_eq(host, "::1");
    cr_expect_eq(port, 1);
    cr_assert_eq(mg_addr_parse_host_port(":65535", host, sizeof host, &port), 0);
    cr_expect_str_eq(host, "");
    cr_expect_eq(port, 65535);
}

Test(netaddr, host_port_refuses_what_is_not_one)
{
    static const char *const bad[] = {
        "localhost",  "::1:80",  "[]:80",    "[::1]80",  "[::1",     "a b:80", "a/b:80",  "host:0",
        "host:65536", "host:-1", "host:+80", "host: 80", "host:80x", "host:",  "host:-0",
    };
    char host[64];
    uint16_t port;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(mg_addr_parse_host_port(bad[i], host, sizeof host, &port), -1, "\"%s\"",
                     bad[i]);
    char small[4];
    cr_expect_eq(mg_addr_parse_host_port("abcd:80", small, sizeof small, &port), -1);
    cr_expect_eq(mg_addr_parse_host_port("abc:80", small, sizeof small, &port), 0);
    char longest[300];
    memset(longest, 'a', 256);
    snprintf(longest + 256, sizeof longest - 256, ":80");
    char big[512];
    cr_expect_eq(mg_addr_parse_host_port(longest, big, sizeof big, &port), -1, "a 256-byte host");
    snprintf(longest + 255, sizeof longest - 255, ":80");
    cr_expect_eq(mg_addr_parse_host_port(longest, big, sizeof big, &port), 0, "a 255-byte host");
}
