/* SPDX-License-Identifier: ISC */
/*
 * text: character helpers that every layer uses, with no state and no allocation (so a signal
 * handler may use them too).
 */
#ifndef MESHGATE_TEXT_H
#define MESHGATE_TEXT_H

/* The value of one hexadecimal digit, either case; -1 for any other character. */
static inline int mg_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The byte two hexadecimal digits at s spell; -1 when either is not one (s[1] is read only
 * when s[0] is a digit, so a string of one character is safe). */
static inline int mg_hex_byte(const char *s)
{
    int hi = mg_hex_digit((unsigned char)s[0]),
        lo = hi < 0 ? -1 : mg_hex_digit((unsigned char)s[1]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

#endif
