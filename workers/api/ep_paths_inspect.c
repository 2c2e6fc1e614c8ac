/* SPDX-License-Identifier: ISC */
/*
 * POST /api/paths/inspect: the path inspector (the Tools page and the map's panel). A body of
 * hop prefixes gets the likeliest paths of relays, scored as CoreScope's handlePathInspect
 * scores them: a beam search over the hops.
 *
 * The body, as CoreScope's decoder reads it: at most its first 4096 bytes (its MaxBytesReader;
 * a value that ends within them is taken whatever follows), the first JSON value, an object or
 * null; keys match their field in any case (Go's folding: also "ſ" for s); the last of a field
 * wins; "prefixes" an array of strings or null entries ("") or null, "limit" an integer or
 * null, "context" an object of strings or nulls ({observerId, since, until}, read and unused:
 * CoreScope keys its cache with it) or null; anything else, or a value of another type, is 400
 * "invalid JSON". Each byte of invalid UTF-8 in it is U+FFFD, as Go's decoder makes it, and so is
 * an escaped surrogate that is not half of a pair. Then, as CoreScope checks them, in order: no
 * prefix 400 "prefixes required", more than 64 400 "too many prefixes (max 64)"; each prefix
 * trimmed of white space (Unicode's) and lowercased: empty or of an odd length "prefixes must be
 * even-length hex", not hex "prefixes must be valid hex", over 3 bytes "prefix exceeds 3 bytes", of
 * another length than the first "mixed prefix lengths not allowed". limit: 10 below 1, at most 50.
 *
 * The search (CoreScope's beam search, width 20): a hop's candidates are the nodes that can
 * relay (a role containing "repeater" or "room_server", or "room") whose lowercased key starts
 * with its prefix, in the nodes table's order (CoreScope's prefix map: listeners that do not
 * relay are candidates here); a hop without any ends the search with no candidate. Each path
 * of the beam is extended by each candidate, scored 0.35 edge + 0.20 geo + 0.15 recency + 0.30
 * selectivity (at least 0.05): on the first hop edge, geo and recency are 1; after it, from the
 * edge between the path's last node and the candidate, edge is min(1, count/100) x
 * exp(-ln2/168 x hours since it was last seen), recency 1 within 24 hours, else
 * max(0.1, 24/hours) (no edge: both 0); geo is max(0.1, 50/km) when both nodes have a position
 * (the last node's as the last nodes row of its key has it) more than 50 km apart, else 1;
 * selectivity 1/candidates. A path's score is the product of its hops' scores; the beam keeps
 * the 20 best, sorted as Go's sort.Slice sorts (go_sort below: its pattern-defeating quicksort,
 * so that equal scores come in CoreScope's order). The answer: the best `limit` paths, each with
 * its score (the geometric mean of its hops', rounded to 3 places; speculative below 0.7
 * unrounded), each hop's evidence (its score unrounded as edgeWeight) and up to 5 alternatives
 * (the hop's other candidates scored after the path's earlier hops, unfloored, rounded, best
 * first); the input and CoreScope's stats (elapsedMs: this request's search).
 *
 * The edges are those of the graph CoreScope's server has: with a row in neighbor_edges (the
 * table its ingestor keeps), that table as its server loads it (each row an edge of its two
 * keys as stored, (a, b) and (b, a) one edge with their counts summed and the later time; a
 * last_seen not in CoreScope's formats the year 1; found from a node whose lowercased key is one
 * end, the other end equal to the candidate's key in any case); without, the neighbour graph
 * CoreScope builds from the observations (neighbor_graph.h; the group's copy), whose edges
 * CoreScope's server would swap for the empty table's every minute.
 *
 * Cost: one pass over nodes; with two hops or more, one over neighbor_edges or the group's
 * graph (parked while the worker's helper takes or makes it): heavy. The search itself is
 * bounded whatever the body: at most 64 hops x 20 paths x the hop's candidates scorings, each
 * a walk of the edges between candidates of the path's last node, and as many for the
 * alternatives of at most 20 paths. One hop (no edge is read) and refused bodies are light.
 *
 * Where it is not CoreScope's: it caches an answer 30 s by the prefixes and context, whatever
 * the limit (a second request with another limit gets the first one's paths); meshgate answers
 * each request. Keys and roles are lowercased as ASCII; a prefix whose Unicode lowercase has
 * another length in UTF-8 (U+0130, U+212A ...) may be refused for its length where CoreScope
 * refuses it as not hex (both 400); a number past a double's range or an integer past 64 bits in a
 * field CoreScope does not read is "invalid JSON" (jansson refuses it) where CoreScope skips the
 * field; a duplicate key in the body
 * spelled the same counts where it first stands.
 */
#include "json.h"
#include "neighbor_graph.h"
#include "router.h"
#include "time_parse.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define BODY_READ 4096 /* CoreScope's inspectBodyLimit */
#define PREFIXES_MAX 64
#define PREFIX_BYTES_MAX 3
#define BEAM_WIDTH 20
#define LIMIT_DEFAULT 10
#define LIMIT_MAX 50
#define ALTERNATIVES_MAX 5
#define GEO_MAX_KM 50.0
#define HOP_SCORE_FLOOR 0.05
#define SPECULATIVE_BELOW 0.7
#define W_EDGE 0.35
#define W_GEO 0.20
#define W_RECENCY 0.15
#define W_SELECTIVITY 0.30
#define SATURATION 100.0
#define HALF_LIFE_HOURS 168.0
/* Go's time.Duration saturates: the hours from the year 1 to now. */
#define YEAR_ONE_HOURS 2562047.7880152157

/* ---- the body --------------------------------------------------------------------------- */

struct inspect_body {
    size_t n;
    char prefix[PREFIXES_MAX][2 * PREFIX_BYTES_MAX + 1]; /* trimmed, lowercased */
    size_t len;                                          /* of each (all alike) */
    int64_t limit;
};

/* Go's utf8.DecodeRune: the rune at s (n bytes left) and its length, or -1 with length 1 for
 * a byte that does not start a valid sequence. */
static long decode_rune(const unsigned char *s, size_t n, size_t *len)
{
    *len = 1;
    unsigned char c = s[0];
    if (c < 0x80)
        return c;
    size_t need = c >= 0xC2 && c <= 0xDF   ? 2
                  : c >= 0xE0 && c <= 0xEF ? 3
                  : c >= 0xF0 && c <= 0xF4 ? 4
                                           : 0;
    if (!need || n < need)
        return -1;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (s[1] < lo || s[1] > hi)
        return -1;
    for (size_t i = 2; i < need; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return -1;
    long r = need == 2 ? c & 0x1F : need == 3 ? c & 0x0F : c & 0x07;
    for (size_t i = 1; i < need; i++)
        r = r << 6 | (s[i] & 0x3F);
    *len = need;
    return r;
}

/* The body as Go's decoder sees it: each byte of invalid UTF-8 as U+FFFD (out: 3 x n bytes). */
static size_t valid_utf8(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len;
        if (decode_rune(in + i, n - i, &len) < 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        } else {
            memcpy(out + o, in + i, len);
            o += len;
        }
        i += len;
    }
    return o;
}

static long hex4(const char *s)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int c = tolower((unsigned char)s[i]);
        if (!isxdigit(c))
            return -1;
        v = v * 16 + (isdigit(c) ? c - '0' : c - 'a' + 10);
    }
    return v;
}

/* Go's decoder reads an escaped surrogate that is not half of a pair as U+FFFD, where jansson
 * refuses it: each such escape in a string becomes \ufffd (as long: in place). */
static void repair_surrogates(char *t, size_t n)
{
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '"') {
            in_string = !in_string;
        } else if (in_string && t[i] == '\\' && i + 1 < n) {
            long v = t[i + 1] == 'u' && i + 6 <= n ? hex4(t + i + 2) : -1;
            if (v >= 0xD800 && v <= 0xDBFF && i + 12 <= n && t[i + 6] == '\\' && t[i + 7] == 'u' &&
                hex4(t + i + 8) >= 0xDC00 && hex4(t + i + 8) <= 0xDFFF) {
                i += 11; /* a pair */
            } else if (v >= 0xD800 && v <= 0xDFFF) {
                memcpy(t + i + 2, "fffd", 4);
                i += 5;
            } else {
                i++; /* the escaped character */
            }
        }
    }
}

/* Whether a JSON key names a field as Go's decoder matches them: ASCII in any case, and the
 * two runes that fold to an ASCII letter (U+017F to s, U+212A to k). */
static bool key_is(const char *key, const char *field)
{
    const unsigned char *k = (const unsigned char *)key;
    for (; *field; field++) {
        char f = (char)tolower((unsigned char)*field);
        if (f == 's' && k[0] == 0xC5 && k[1] == 0xBF)
            k += 2;
        else if (f == 'k' && k[0] == 0xE2 && k[1] == 0x84 && k[2] == 0xAA)
            k += 3;
        else if (tolower(*k) == f)
            k++;
        else
            return false;
    }
    return *k == '\0';
}

/* A string field (or null) of an object: anything else is a decoding error. */
static bool context_ok(json_t *context)
{
    if (json_is_null(context))
        return true;
    if (!json_is_object(context))
        return false;
    const char *key;
    json_t *value;
    json_object_foreach(context, key, value)
    {
        bool field = key_is(key, "observerId") || key_is(key, "since") || key_is(key, "until");
        if (field && !json_is_string(value) && !json_is_null(value))
            return false;
    }
    return true;
}

/* Go's unicode.IsSpace. */
static bool is_space(long r)
{
    return (r >= 0x09 && r <= 0x0D) || r == 0x20 || r == 0x85 || r == 0xA0 || r == 0x1680 ||
           (r >= 0x2000 && r <= 0x200A) || r == 0x2028 || r == 0x2029 || r == 0x202F ||
           r == 0x205F || r == 0x3000;
}

/* The rune that ends s[0..n) (its length in *len), or -1. */
static long last_rune(const unsigned char *s, size_t n, size_t *len)
{
    size_t start = n - 1;
    while (start > 0 && n - start < 4 && (s[start] & 0xC0) == 0x80)
        start--;
    long r = decode_rune(s + start, n - start, len);
    if (r < 0 || start + *len != n) {
        *len = 1;
        return -1;
    }
    return r;
}

/* One prefix as CoreScope checks it: NULL, or the refusal. */
static const char *check_prefix(struct inspect_body *b, const char *text, size_t n)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t len;
    while (n > 0 && is_space(decode_rune(s, n, &len)))
        s += len, n -= len;
    while (n > 0 && is_space(last_rune(s, n, &len)))
        n -= len;
    if (n == 0 || n % 2 != 0)
        return "prefixes must be even-length hex";
    for (size_t i = 0; i < n; i++)
        if (!isxdigit(s[i]))
            return "prefixes must be valid hex";
    if (n / 2 > PREFIX_BYTES_MAX)
        return "prefix exceeds 3 bytes";
    if (b->n == 0)
        b->len = n;
    else if (n != b->len)
        return "mixed prefix lengths not allowed";
    for (size_t i = 0; i < n; i++)
        b->prefix[b->n][i] = (char)tolower(s[i]);
    b->prefix[b->n][n] = '\0';
    b->n++;
    return NULL;
}

/* The body read as CoreScope reads it: NULL, or the refusal (400). */
static const char *parse_body(const char *data, size_t size, struct inspect_body *b)
{
    memset(b, 0, sizeof *b);
    size_t take = size < BODY_READ ? size : BODY_READ;
    char *text = malloc(3 * take + 1);
    if (!text)
        return "invalid JSON";
    size_t n = valid_utf8((const unsigned char *)(data ? data : ""), take, text);
    repair_surrogates(text, n);
    json_error_t err;
    json_t *root =
        json_loadb(text, n, JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, &err);
    free(text);
    const char *refusal = root ? NULL : "invalid JSON";
    json_t *list = NULL;
    if (root && !json_is_null(root) && !json_is_object(root))
        refusal = "invalid JSON";
    const char *key;
    json_t *value;
    if (json_is_object(root)) {
        json_object_foreach(root, key, value)
        {
            if (key_is(key, "prefixes")) {
                if (!json_is_null(value) && !json_is_array(value))
                    refusal = "invalid JSON";
                list = value;
            } else if (key_is(key, "limit")) {
                if (json_is_integer(value))
                    b->limit = json_integer_value(value);
                else if (!json_is_null(value))
                    refusal = "invalid JSON";
            } else if (key_is(key, "context") && !context_ok(value)) {
                refusal = "invalid JSON";
            }
        }
    }
    size_t count = json_is_array(list) ? json_array_size(list) : 0, i;
    json_array_foreach(json_is_array(list) ? list : NULL, i,
                       value) if (!json_is_string(value) && !json_is_null(value)) refusal =
        "invalid JSON";
    if (!refusal && count == 0)
        refusal = "prefixes required";
    if (!refusal && count > PREFIXES_MAX)
        refusal = "too many prefixes (max 64)";
    for (i = 0; !refusal && i < count; i++) {
        value = json_array_get(list, i);
        refusal = json_is_string(value)
                      ? check_prefix(b, json_string_value(value), json_string_length(value))
                      : check_prefix(b, "", 0);
    }
    json_decref(root);
    if (b->limit <= 0)
        b->limit = LIMIT_DEFAULT;
    if (b->limit > LIMIT_MAX)
        b->limit = LIMIT_MAX;
    return refusal;
}

/* ---- Go's sort.Slice: the same swaps, so that equal scores end where CoreScope's do ------ */

struct go_sort {
    size_t *v;
    bool (*less)(const void *ctx, size_t x, size_t y);
    const void *ctx;
};

static bool gs_less(const struct go_sort *s, size_t i, size_t j)
{
    return s->less(s->ctx, s->v[i], s->v[j]);
}

static void gs_swap(struct go_sort *s, size_t i, size_t j)
{
    size_t t = s->v[i];
    s->v[i] = s->v[j];
    s->v[j] = t;
}

static void gs_insertion(struct go_sort *s, size_t a, size_t b)
{
    for (size_t i = a + 1; i < b; i++)
        for (size_t j = i; j > a && gs_less(s, j, j - 1); j--)
            gs_swap(s, j, j - 1);
}

static void gs_sift_down(struct go_sort *s, size_t lo, size_t hi, size_t first)
{
    size_t root = lo;
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= hi)
            return;
        if (child + 1 < hi && gs_less(s, first + child, first + child + 1))
            child++;
        if (!gs_less(s, first + root, first + child))
            return;
        gs_swap(s, first + root, first + child);
        root = child;
    }
}

static void gs_heap(struct go_sort *s, size_t a, size_t b)
{
    size_t hi = b - a;
    for (size_t i = (hi - 1) / 2 + 1; i-- > 0;)
        gs_sift_down(s, i, hi, a);
    for (size_t i = hi; i-- > 0;) {
        gs_swap(s, a, a + i);
        gs_sift_down(s, 0, i, a);
    }
}

static unsigned bit_len(size_t x)
{
    unsigned n = 0;
    for (; x; x >>= 1)
        n++;
    return n;
}

static void gs_break_patterns(struct go_sort *s, size_t a, size_t b)
{
    size_t length = b - a;
    if (length < 8)
        return;
    uint64_t r = length;
    size_t modulus = (size_t)1 << bit_len(length);
    size_t idx = a + (length / 4) * 2 - 1;
    for (size_t i = 0; i < 3; i++) {
        r ^= r << 13;
        r ^= r >> 17;
        r ^= r << 5;
        size_t other = (size_t)r & (modulus - 1);
        if (other >= length)
            other -= length;
        gs_swap(s, idx + i, a + other);
    }
}

static void gs_order2(struct go_sort *s, size_t *a, size_t *b, int *swaps)
{
    if (gs_less(s, *b, *a)) {
        size_t t = *a;
        *a = *b;
        *b = t;
        (*swaps)++;
    }
}

static size_t gs_median(struct go_sort *s, size_t a, size_t b, size_t c, int *swaps)
{
    gs_order2(s, &a, &b, swaps);
    gs_order2(s, &b, &c, swaps);
    gs_order2(s, &a, &b, swaps);
    return b;
}

enum { HINT_UNKNOWN, HINT_INCREASING, HINT_DECREASING };

static size_t gs_pivot(struct go_sort *s, size_t a, size_t b, int *hint)
{
    size_t l = b - a;
    int swaps = 0;
    size_t i = a + l / 4 * 1, j = a + l / 4 * 2, k = a + l / 4 * 3;
    if (l >= 8) {
        if (l >= 50) {
            i = gs_median(s, i - 1, i, i + 1, &swaps);
            j = gs_median(s, j - 1, j, j + 1, &swaps);
            k = gs_median(s, k - 1, k, k + 1, &swaps);
        }
        j = gs_median(s, i, j, k, &swaps);
    }
    *hint = swaps == 0 ? HINT_INCREASING : swaps == 12 ? HINT_DECREASING : HINT_UNKNOWN;
    return j;
}

static bool gs_partial_insertion(struct go_sort *s, size_t a, size_t b)
{
    size_t i = a + 1;
    for (int step = 0; step < 5; step++) {
        while (i < b && !gs_less(s, i, i - 1))
            i++;
        if (i == b)
            return true;
        if (b - a < 50)
            return false;
        gs_swap(s, i, i - 1);
        if (i - a >= 2)
            for (size_t j = i - 1; j >= 1 && gs_less(s, j, j - 1); j--)
                gs_swap(s, j, j - 1);
        if (b - i >= 2)
            for (size_t j = i + 1; j < b && gs_less(s, j, j - 1); j++)
                gs_swap(s, j, j - 1);
    }
    return false;
}

static size_t gs_partition_equal(struct go_sort *s, size_t a, size_t b, size_t pivot)
{
    gs_swap(s, a, pivot);
    size_t i = a + 1, j = b - 1;
    for (;;) {
        while (i <= j && !gs_less(s, a, i))
            i++;
        while (i <= j && gs_less(s, a, j))
            j--;
        if (i > j)
            break;
        gs_swap(s, i, j);
        i++;
        j--;
    }
    return i;
}

static size_t gs_partition(struct go_sort *s, size_t a, size_t b, size_t pivot, bool *already)
{
    gs_swap(s, a, pivot);
    size_t i = a + 1, j = b - 1;
    while (i <= j && gs_less(s, i, a))
        i++;
    while (i <= j && !gs_less(s, j, a))
        j--;
    if (i > j) {
        gs_swap(s, j, a);
        *already = true;
        return j;
    }
    gs_swap(s, i, j);
    i++;
    j--;
    for (;;) {
        while (i <= j && gs_less(s, i, a))
            i++;
        while (i <= j && !gs_less(s, j, a))
            j--;
        if (i > j)
            break;
        gs_swap(s, i, j);
        i++;
        j--;
    }
    gs_swap(s, j, a);
    *already = false;
    return j;
}

static void gs_pdq(struct go_sort *s, size_t a, size_t b, unsigned limit)
{
    bool balanced = true, partitioned = true;
    for (;;) {
        size_t length = b - a;
        if (length <= 12) {
            gs_insertion(s, a, b);
            return;
        }
        if (limit == 0) {
            gs_heap(s, a, b);
            return;
        }
        if (!balanced) {
            gs_break_patterns(s, a, b);
            limit--;
        }
        int hint;
        size_t pivot = gs_pivot(s, a, b, &hint);
        if (hint == HINT_DECREASING) {
            for (size_t i = a, j = b - 1; i < j; i++, j--)
                gs_swap(s, i, j);
            pivot = (b - 1) - (pivot - a);
            hint = HINT_INCREASING;
        }
        if (balanced && partitioned && hint == HINT_INCREASING && gs_partial_insertion(s, a, b))
            return;
        if (a > 0 && !gs_less(s, a - 1, pivot)) {
            a = gs_partition_equal(s, a, b, pivot);
            continue;
        }
        size_t mid = gs_partition(s, a, b, pivot, &partitioned);
        size_t left = mid - a, right = b - mid;
        if (left < right) {
            balanced = left >= length / 8;
            gs_pdq(s, a, mid, limit);
            a = mid + 1;
        } else {
            balanced = right >= length / 8;
            gs_pdq(s, mid + 1, b, limit);
            b = mid;
        }
    }
}

/* Sorts v[0..n) as Go's sort.Slice(v, less) does. */
static void go_sort(size_t *v, size_t n, bool (*less)(const void *, size_t, size_t),
                    const void *ctx)
{
    struct go_sort s = {v, less, ctx};
    if (n > 1)
        gs_pdq(&s, 0, n, bit_len(n));
}

/* ---- the nodes and edges the search reads ------------------------------------------------ */

struct inode {
    char *key, *lower, *name;
    double lat, lon;
    bool gps, relay;
    size_t gps_of; /* the last row of its lowercased key: the position CoreScope's map has */
    size_t *adj;   /* edges (indexes) whose stored end is lower, to other candidates */
    size_t n_adj, cap_adj;
};

struct iedge {
    char *a, *b; /* as stored, a <= b */
    int64_t count, last_ms;
    bool has_last;
};

struct search {
    const struct inspect_body *body;
    struct inode *nodes; /* rows whose key starts with a prefix, in table order */
    size_t n_nodes, cap_nodes;
    size_t *by_lower; /* node indexes by lowercased key, then row */
    size_t **cands;   /* by hop: relay nodes of its prefix */
    size_t *n_cands;
    struct iedge *edges;
    size_t n_edges, cap_edges;
    bool graph; /* no neighbor_edges row: the group's neighbour graph */
    int64_t now_ms;
    bool oom;
};

static bool grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    void *more = realloc(*v, c * size);
    if (!more)
        return false;
    *v = more;
    *cap = c;
    return true;
}

static char *lower_dup(const char *s)
{
    char *d = strdup(s);
    for (char *p = d; p && *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return d;
}

static bool can_relay(const char *role)
{
    char *r = lower_dup(role ? role : "");
    bool yes = r && (strstr(r, "repeater") || strstr(r, "room_server") || !strcmp(r, "room"));
    free(r);
    return yes;
}

static int by_text(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* Whether lower (a lowercased key) starts with one of the body's prefixes (sorted). */
static bool named(const struct search *s, char *const *sorted, const char *lower)
{
    size_t len = s->body->len;
    if (strlen(lower) < len)
        return false;
    char head[2 * PREFIX_BYTES_MAX + 1];
    memcpy(head, lower, len);
    head[len] = '\0';
    const char *h = head;
    return s->body->n && bsearch(&h, sorted, s->body->n, sizeof *sorted, by_text) != NULL;
}

/* The end of a pass over st: its result (out of memory when the pass ran out). */
static int pass_done(const struct search *s, sqlite3_stmt *st, int rc)
{
    sqlite3_finalize(st);
    return s->oom ? SQLITE_NOMEM : rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Node indexes by lowercased key, then row. */
static int by_lower(const void *x, const void *y, void *arg)
{
    const struct inode *n = arg;
    size_t p = *(const size_t *)x, q = *(const size_t *)y;
    int c = strcmp(n[p].lower, n[q].lower);
    return c ? c : (p > q) - (p < q);
}

/* The nodes rows any prefix names (CoreScope's node list, read whole: its prefix map and its
 * positions by key). */
static int load_nodes(struct search *s, struct mg_db *db)
{
    char *sorted[PREFIXES_MAX];
    for (size_t i = 0; i < s->body->n; i++)
        sorted[i] = (char *)s->body->prefix[i];
    qsort(sorted, s->body->n, sizeof *sorted, by_text);
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT public_key, name, role, lat, lon FROM nodes");
    if (!st)
        return SQLITE_ERROR;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        if (!key)
            continue; /* CoreScope's scan of the row fails: a key "" names no prefix */
        char *lower = lower_dup(key);
        if (lower && !named(s, sorted, lower)) {
            free(lower);
            continue;
        }
        if (!lower || !grow((void **)&s->nodes, &s->cap_nodes, s->n_nodes, sizeof *s->nodes)) {
            free(lower);
            s->oom = true;
            break;
        }
        const char *name = (const char *)sqlite3_column_text(st, 1);
        struct inode *n = &s->nodes[s->n_nodes++];
        memset(n, 0, sizeof *n);
        n->key = strdup(key);
        n->lower = lower;
        n->name = strdup(name ? name : "");
        n->relay = can_relay((const char *)sqlite3_column_text(st, 2));
        if (sqlite3_column_type(st, 3) != SQLITE_NULL &&
            sqlite3_column_type(st, 4) != SQLITE_NULL) {
            n->lat = sqlite3_column_double(st, 3);
            n->lon = sqlite3_column_double(st, 4);
            n->gps = !(n->lat == 0 && n->lon == 0);
        }
        if (!n->key || !n->name) {
            s->oom = true;
            break;
        }
    }
    if ((rc = pass_done(s, st, rc)) != SQLITE_OK)
        return rc;
    /* positions by key: the last row of each lowercased key */
    s->by_lower = malloc((s->n_nodes ? s->n_nodes : 1) * sizeof *s->by_lower);
    if (!s->by_lower)
        return SQLITE_NOMEM;
    for (size_t i = 0; i < s->n_nodes; i++)
        s->by_lower[i] = i;
    qsort_r(s->by_lower, s->n_nodes, sizeof *s->by_lower, by_lower, s->nodes);
    for (size_t i = s->n_nodes; i-- > 0;) {
        size_t at = s->by_lower[i];
        bool last = i + 1 == s->n_nodes ||
                    strcmp(s->nodes[s->by_lower[i + 1]].lower, s->nodes[at].lower) != 0;
        s->nodes[at].gps_of = last ? at : s->nodes[s->by_lower[i + 1]].gps_of;
    }
    /* each hop's candidates */
    s->cands = calloc(s->body->n, sizeof *s->cands);
    s->n_cands = calloc(s->body->n, sizeof *s->n_cands);
    if (!s->cands || !s->n_cands)
        return SQLITE_NOMEM;
    for (size_t h = 0; h < s->body->n; h++) {
        s->cands[h] = malloc((s->n_nodes ? s->n_nodes : 1) * sizeof **s->cands);
        if (!s->cands[h])
            return SQLITE_NOMEM;
        for (size_t i = 0; i < s->n_nodes; i++)
            if (s->nodes[i].relay && !strncmp(s->nodes[i].lower, s->body->prefix[h], s->body->len))
                s->cands[h][s->n_cands[h]++] = i;
    }
    return SQLITE_OK;
}

/* The first node (in by_lower) whose lowercased key is text, or SIZE_MAX. */
static size_t first_lower(const struct search *s, const char *text)
{
    size_t lo = 0, hi = s->n_nodes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(s->nodes[s->by_lower[mid]].lower, text) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n_nodes && !strcmp(s->nodes[s->by_lower[lo]].lower, text) ? lo : SIZE_MAX;
}

/* Whether some candidate (a relay a prefix names) has the lowercased key text. */
static bool candidate_lower(const struct search *s, const char *text)
{
    size_t at = first_lower(s, text);
    for (; at < s->n_nodes && !strcmp(s->nodes[s->by_lower[at]].lower, text); at++)
        if (s->nodes[s->by_lower[at]].relay)
            return true;
    return false;
}

/* CoreScope's parseTimestamp: RFC 3339, or "YYYY-MM-DD HH:MM:SS" (a fraction allowed) in UTC. */
static bool edge_time(const char *t, int64_t *ms)
{
    if (!t)
        return false;
    size_t n = strlen(t);
    struct mg_rfc3339_shape shape;
    if (n > 10 && t[10] == 'T')
        return mg_rfc3339_parse_shaped(t, n, ms, &shape) && shape.zone != 'z';
    if (n < 19 || n > 40 || t[10] != ' ')
        return false;
    char zulu[48];
    int z = snprintf(zulu, sizeof zulu, "%.10sT%sZ", t, t + 11);
    return mg_rfc3339_parse_shaped(zulu, (size_t)z, ms, &shape);
}

struct edge_row {
    size_t edge, row;
};

static int by_pair(const void *x, const void *y, void *arg)
{
    const struct iedge *e = arg;
    const struct edge_row *p = x, *q = y;
    int c = strcmp(e[p->edge].a, e[q->edge].a);
    if (!c)
        c = strcmp(e[p->edge].b, e[q->edge].b);
    return c ? c : (p->row > q->row) - (p->row < q->row);
}

static void edge_free(struct iedge *e)
{
    free(e->a);
    free(e->b);
}

/* Files edge e under each candidate node whose lowercased key is end (CoreScope's byNode). */
static bool file_edge(struct search *s, size_t e, const char *end)
{
    size_t at = first_lower(s, end);
    for (; at < s->n_nodes && !strcmp(s->nodes[s->by_lower[at]].lower, end); at++) {
        struct inode *n = &s->nodes[s->by_lower[at]];
        if (!grow((void **)&n->adj, &n->cap_adj, n->n_adj, sizeof *n->adj))
            return false;
        n->adj[n->n_adj++] = e;
    }
    return true;
}

/*
 * The rows of neighbor_edges between candidates, merged as CoreScope's server loads them, and
 * filed under their ends: of each row, only one whose stored end is a candidate's lowercased
 * key and whose other end is one in any case can ever be found. *none when the table has no
 * row (or is not there).
 */
static int load_edges(struct search *s, struct mg_db *db, bool *none)
{
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT 1 FROM sqlite_master WHERE type = 'table'"
                                         " AND name = 'neighbor_edges'");
    bool table = st && sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    *none = true;
    if (!table)
        return SQLITE_OK;
    st = mg_db_prepare(db, "SELECT node_a, node_b, count, last_seen FROM neighbor_edges");
    if (!st)
        return SQLITE_ERROR;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        *none = false;
        if (sqlite3_column_type(st, 0) == SQLITE_NULL ||
            sqlite3_column_type(st, 1) == SQLITE_NULL || sqlite3_column_type(st, 2) == SQLITE_NULL)
            continue; /* CoreScope's scan of the row fails */
        const char *a = (const char *)sqlite3_column_text(st, 0);
        const char *b = (const char *)sqlite3_column_text(st, 1);
        if (strcmp(a, b) > 0) {
            const char *t = a;
            a = b, b = t;
        }
        char *la = lower_dup(a), *lb = lower_dup(b);
        bool keep = la && lb &&
                    ((candidate_lower(s, a) && candidate_lower(s, lb)) ||
                     (candidate_lower(s, b) && candidate_lower(s, la)));
        free(la);
        free(lb);
        if (!keep)
            continue;
        if (!grow((void **)&s->edges, &s->cap_edges, s->n_edges, sizeof *s->edges)) {
            s->oom = true;
            break;
        }
        struct iedge *e = &s->edges[s->n_edges++];
        e->a = strdup(a);
        e->b = strdup(b);
        e->count = sqlite3_column_int64(st, 2);
        e->has_last = edge_time((const char *)sqlite3_column_text(st, 3), &e->last_ms);
        if (!e->a || !e->b) {
            s->oom = true;
            break;
        }
    }
    if ((rc = pass_done(s, st, rc)) != SQLITE_OK)
        return rc;
    /* (a, b) met again: one edge, counts summed, the later time, where it was first met */
    struct edge_row *order = malloc((s->n_edges ? s->n_edges : 1) * sizeof *order);
    if (!order)
        return SQLITE_NOMEM;
    for (size_t i = 0; i < s->n_edges; i++)
        order[i] = (struct edge_row){i, i};
    qsort_r(order, s->n_edges, sizeof *order, by_pair, s->edges);
    bool *gone = calloc(s->n_edges ? s->n_edges : 1, sizeof *gone);
    if (!gone) {
        free(order);
        return SQLITE_NOMEM;
    }
    for (size_t i = 1; i < s->n_edges; i++) {
        struct iedge *first = &s->edges[order[i - 1].edge], *e = &s->edges[order[i].edge];
        if (strcmp(first->a, e->a) || strcmp(first->b, e->b))
            continue;
        first->count += e->count;
        if (e->has_last && (!first->has_last || e->last_ms > first->last_ms))
            first->last_ms = e->last_ms, first->has_last = true;
        gone[order[i].edge] = true;
        order[i].edge = order[i - 1].edge; /* the next duplicate merges into the first too */
    }
    free(order);
    size_t kept = 0;
    for (size_t i = 0; i < s->n_edges; i++) {
        if (gone[i]) {
            edge_free(&s->edges[i]);
            continue;
        }
        s->edges[kept++] = s->edges[i];
    }
    s->n_edges = kept;
    free(gone);
    for (size_t i = 0; i < s->n_edges; i++)
        if (!file_edge(s, i, s->edges[i].a) ||
            (strcmp(s->edges[i].a, s->edges[i].b) && !file_edge(s, i, s->edges[i].b)))
            return SQLITE_NOMEM;
    return SQLITE_OK;
}

/* The edge between the path's last node and a candidate: whether there is one. */
static bool edge_between(const struct search *s, const struct inode *last, const struct inode *cand,
                         int64_t *count, int64_t *last_ms, bool *has_last)
{
    if (s->graph) {
        *has_last = true;
        return mg_neighbor_graph_edge_seen(last->lower, cand->lower, count, last_ms);
    }
    for (size_t i = 0; i < last->n_adj; i++) {
        const struct iedge *e = &s->edges[last->adj[i]];
        const char *peer = strcasecmp(e->a, last->key) == 0 ? e->b : e->a;
        if (strcasecmp(peer, cand->key) == 0) {
            *count = e->count;
            *last_ms = e->last_ms;
            *has_last = e->has_last;
            return true;
        }
    }
    return false;
}

static double haversine_km(double lat1, double lon1, double lat2, double lon2)
{
    double d_lat = (lat2 - lat1) * M_PI / 180, d_lon = (lon2 - lon1) * M_PI / 180;
    double a = sin(d_lat / 2) * sin(d_lat / 2) +
               cos(lat1 * M_PI / 180) * cos(lat2 * M_PI / 180) * sin(d_lon / 2) * sin(d_lon / 2);
    return 6371.0 * 2 * atan2(sqrt(a), sqrt(1 - a));
}

/* A hop's score: cand after the node last (none: the first hop), among candidates. */
static double hop_score(const struct search *s, const struct inode *last, const struct inode *cand,
                        size_t candidates)
{
    double edge = 1, geo = 1, recency = 1;
    if (last) {
        int64_t count = 0, seen = 0;
        bool has_last = false;
        if (edge_between(s, last, cand, &count, &seen, &has_last)) {
            double hours = YEAR_ONE_HOURS;
            if (has_last) {
                int64_t d = s->now_ms - seen;
                hours = (double)(d / 3600000) + (double)(d % 3600000) / 3.6e6;
            }
            double count_factor = fmin(1.0, (double)count / SATURATION);
            edge = count_factor * exp(-(M_LN2 / HALF_LIFE_HOURS) * (hours < 0 ? 0 : hours));
            recency = hours <= 24 ? 1.0 : fmax(0.1, 24.0 / hours);
        } else {
            edge = 0;
            recency = 0;
        }
        const struct inode *prev = &s->nodes[last->gps_of];
        if (prev->gps && cand->gps) {
            double km = haversine_km(prev->lat, prev->lon, cand->lat, cand->lon);
            if (km > GEO_MAX_KM)
                geo = fmax(0.1, GEO_MAX_KM / km);
        }
    }
    double selectivity = 1.0 / (double)candidates;
    return W_EDGE * edge + W_GEO * geo + W_RECENCY * recency + W_SELECTIVITY * selectivity;
}

/* ---- the beam search ---------------------------------------------------------------------- */

struct path {
    size_t hops;
    size_t node[PREFIXES_MAX];
    double hop[PREFIXES_MAX]; /* each hop's score, floored */
    double score;             /* their product */
};

struct step {
    size_t from, cand; /* the path extended (its index in the beam), the candidate */
    double hop, score;
};

static bool step_better(const void *ctx, size_t x, size_t y)
{
    const struct step *v = ctx;
    return v[x].score > v[y].score;
}

static bool path_better(const void *ctx, size_t x, size_t y)
{
    const struct path *v = ctx;
    return v[x].score > v[y].score;
}

/* The beam after the last hop, best first, into beam (BEAM_WIDTH paths); how many. */
static size_t beam_search(const struct search *s, struct path *beam, bool *oom)
{
    struct path *next = malloc(BEAM_WIDTH * sizeof *next);
    if (!next) {
        *oom = true;
        return 0;
    }
    memset(&beam[0], 0, sizeof beam[0]);
    beam[0].score = 1;
    size_t n = 1;
    for (size_t h = 0; h < s->body->n && n; h++) {
        size_t c = s->n_cands[h];
        struct step *steps = c ? malloc(n * c * sizeof *steps) : NULL;
        size_t *order = c ? malloc(n * c * sizeof *order) : NULL;
        if (!c || !steps || !order) {
            *oom = c != 0;
            free(steps);
            free(order);
            n = 0;
            break;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < c; j++) {
                const struct path *p = &beam[i];
                const struct inode *last = p->hops ? &s->nodes[p->node[p->hops - 1]] : NULL;
                double hs = hop_score(s, last, &s->nodes[s->cands[h][j]], c);
                if (hs < HOP_SCORE_FLOOR)
                    hs = HOP_SCORE_FLOOR;
                steps[k] = (struct step){i, s->cands[h][j], hs, p->score * hs};
                order[k] = k;
                k++;
            }
        go_sort(order, k, step_better, steps);
        size_t kept = k < BEAM_WIDTH ? k : BEAM_WIDTH;
        for (size_t i = 0; i < kept; i++) {
            const struct step *st = &steps[order[i]];
            next[i] = beam[st->from];
            next[i].node[next[i].hops] = st->cand;
            next[i].hop[next[i].hops] = st->hop;
            next[i].hops++;
            next[i].score = st->score;
        }
        memcpy(beam, next, kept * sizeof *beam);
        n = kept;
        free(steps);
        free(order);
    }
    free(next);
    return n;
}

struct alternative {
    size_t node;
    double score; /* rounded */
};

static bool alternative_better(const void *ctx, size_t x, size_t y)
{
    const struct alternative *v = ctx;
    return v[x].score > v[y].score;
}

static double round3(double v)
{
    return round(v * 1000) / 1000;
}

/* A hop's other candidates, scored after the path's earlier hops, best first (at most 5). */
static bool write_alternatives(struct mg_json *j, const struct search *s, const struct path *p,
                               size_t h)
{
    size_t c = s->n_cands[h];
    struct alternative *alt = malloc((c ? c : 1) * sizeof *alt);
    size_t *order = malloc((c ? c : 1) * sizeof *order);
    if (!alt || !order) {
        free(alt);
        free(order);
        return false;
    }
    const struct inode *chosen = &s->nodes[p->node[h]];
    const struct inode *last = h ? &s->nodes[p->node[h - 1]] : NULL;
    size_t n = 0;
    for (size_t i = 0; i < c; i++) {
        const struct inode *cand = &s->nodes[s->cands[h][i]];
        if (!strcmp(cand->key, chosen->key))
            continue;
        alt[n] = (struct alternative){s->cands[h][i], round3(hop_score(s, last, cand, c))};
        order[n] = n;
        n++;
    }
    go_sort(order, n, alternative_better, alt);
    if (n) {
        mg_json_key(j, "alternatives");
        mg_json_array_begin(j);
        for (size_t i = 0; i < n && i < ALTERNATIVES_MAX; i++) {
            const struct inode *a = &s->nodes[alt[order[i]].node];
            mg_json_object_begin(j);
            mg_json_kv_string(j, "publicKey", a->key);
            mg_json_kv_string(j, "name", a->name);
            mg_json_kv_double(j, "score", alt[order[i]].score);
            mg_json_object_end(j);
        }
        mg_json_array_end(j);
    }
    free(alt);
    free(order);
    return true;
}

static void write_candidate(struct mg_json *j, const struct search *s, const struct path *p,
                            bool *oom)
{
    double score = p->hops ? pow(p->score, 1.0 / (double)p->hops) : 0;
    mg_json_object_begin(j);
    mg_json_key(j, "path");
    mg_json_array_begin(j);
    for (size_t h = 0; h < p->hops; h++)
        mg_json_string(j, s->nodes[p->node[h]].key);
    mg_json_array_end(j);
    mg_json_key(j, "names");
    mg_json_array_begin(j);
    for (size_t h = 0; h < p->hops; h++)
        mg_json_string(j, s->nodes[p->node[h]].name);
    mg_json_array_end(j);
    mg_json_kv_double(j, "score", round3(score));
    mg_json_kv_bool(j, "speculative", score < SPECULATIVE_BELOW);
    mg_json_key(j, "evidence");
    mg_json_object_begin(j);
    mg_json_key(j, "perHop");
    mg_json_array_begin(j);
    for (size_t h = 0; h < p->hops; h++) {
        mg_json_object_begin(j);
        mg_json_kv_string(j, "prefix", s->body->prefix[h]);
        mg_json_kv_uint(j, "candidatesConsidered", s->n_cands[h]);
        mg_json_kv_string(j, "chosen", s->nodes[p->node[h]].key);
        mg_json_kv_double(j, "edgeWeight", p->hop[h]);
        if (!write_alternatives(j, s, p, h))
            *oom = true;
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    mg_json_object_end(j);
    mg_json_object_end(j);
}

static void search_free(struct search *s)
{
    for (size_t i = 0; i < s->n_nodes; i++) {
        free(s->nodes[i].key);
        free(s->nodes[i].lower);
        free(s->nodes[i].name);
        free(s->nodes[i].adj);
    }
    free(s->nodes);
    free(s->by_lower);
    for (size_t h = 0; s->cands && h < s->body->n; h++)
        free(s->cands[h]);
    free(s->cands);
    free(s->n_cands);
    for (size_t i = 0; i < s->n_edges; i++)
        edge_free(&s->edges[i]);
    free(s->edges);
}

static int64_t monotonic_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Reads the nodes, and the edges when a path of two hops or more can be made; *graph: a
 * path needs the group's neighbour graph (no edge is stored), not held yet. */
static int load(struct search *s, struct mg_env *env, bool *graph)
{
    int rc = load_nodes(s, env->db);
    bool every_hop = rc == SQLITE_OK && s->body->n > 1;
    for (size_t h = 0; every_hop && h < s->body->n; h++)
        every_hop = s->n_cands[h] > 0;
    if (!every_hop)
        return rc;
    bool none = false;
    rc = load_edges(s, env->db, &none);
    if (rc != SQLITE_OK || !none)
        return rc;
    s->graph = *graph = true;
    return rc;
}

/* The neighbour graph a path needs, held (*held) unless the helper fetches it now (*busy:
 * the request parks, woken when the fetch is done). An SQLite code. */
static int hold_graph(struct search *s, struct mg_env *env, bool *held, bool *busy)
{
    int rc = mg_neighbor_graph_hold(env, s->now_ms, env->jobs ? busy : NULL);
    *held = rc == SQLITE_OK && !*busy;
    return rc;
}

/* The answer from what s read (rc: how that went; held: the graph, released here). s is not
 * freed. */
static void inspect_answer(struct mg_response *res, struct search *s, int rc, bool held)
{
    const struct inspect_body *b = s->body;
    int64_t start = monotonic_ms();
    struct path *beam = rc == SQLITE_OK ? malloc(BEAM_WIDTH * sizeof *beam) : NULL;
    bool oom = rc == SQLITE_OK && !beam;
    size_t n = beam ? beam_search(s, beam, &oom) : 0;
    if (held)
        mg_neighbor_graph_release();
    if (rc == SQLITE_OK && !oom) {
        size_t *order = malloc((n ? n : 1) * sizeof *order);
        for (size_t i = 0; order && i < n; i++)
            order[i] = i;
        if (order)
            go_sort(order, n, path_better, beam);
        oom = !order;
        mg_response_json(res, 200);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j);
        mg_json_key(&j, "candidates");
        mg_json_array_begin(&j);
        for (size_t i = 0; order && i < n && i < (size_t)b->limit; i++)
            write_candidate(&j, s, &beam[order[i]], &oom);
        mg_json_array_end(&j);
        mg_json_key(&j, "input");
        mg_json_object_begin(&j);
        mg_json_kv_uint(&j, "hops", b->n);
        mg_json_key(&j, "prefixes");
        mg_json_array_begin(&j);
        for (size_t h = 0; h < b->n; h++)
            mg_json_string(&j, b->prefix[h]);
        mg_json_array_end(&j);
        mg_json_object_end(&j);
        mg_json_key(&j, "stats");
        mg_json_object_begin(&j);
        mg_json_kv_int(&j, "beamWidth", BEAM_WIDTH);
        mg_json_kv_int(&j, "elapsedMs", monotonic_ms() - start);
        mg_json_kv_uint(&j, "expansionsRun", b->n * BEAM_WIDTH);
        mg_json_object_end(&j);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
        free(order);
    }
    free(beam);
    if (rc != SQLITE_OK) {
        mg_response_db_failure(res, s->graph ? "the neighbour graph" : "the nodes", rc);
    } else if (oom) {
        mg_buf_reset(&res->body);
        mg_response_error(res, 500, "out of memory");
    }
}

/* What a request parked for the neighbour graph keeps: its body and the rows it read. */
struct inspect_kept {
    struct inspect_body body;
    struct search s;
};

static void inspect_kept_drop(void *kept)
{
    search_free(&((struct inspect_kept *)kept)->s);
}

/* A later turn of a request parked for the graph: the rows as read on its first turn. */
static enum mg_turn inspect_step(struct mg_env *env, const struct mg_request *req,
                                 struct mg_response *res)
{
    struct inspect_kept *k = req->park->kept;
    k->s.body = &k->body; /* moved with it */
    bool held = false, busy = false;
    int rc = hold_graph(&k->s, env, &held, &busy);
    if (busy)
        return mg_park_at(req, inspect_step, 0);
    inspect_answer(res, &k->s, rc, held);
    return MG_DONE;
}

enum mg_turn mg_handle_paths_inspect(struct mg_env *env, const struct mg_request *req,
                                     struct mg_response *res)
{
    struct inspect_body b;
    const char *refusal = parse_body(req->body.ptr, req->body.len, &b);
    if (refusal) {
        mg_response_error(res, 400, "%s", refusal);
        return MG_DONE;
    }
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    struct search s = {.body = &b, .now_ms = (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000};
    bool in_transaction = sqlite3_exec(env->db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    bool graph = false, held = false, busy = false;
    int rc = load(&s, env, &graph);
    if (rc == SQLITE_OK && graph)
        rc = hold_graph(&s, env, &held, &busy);
    if (in_transaction)
        sqlite3_exec(env->db->conn, "COMMIT", NULL, NULL, NULL);
    if (!busy)
        inspect_answer(res, &s, rc, held);
    /* Parked: its later turns continue at inspect_step with what it read. */
    struct inspect_kept k = {.body = b, .s = s};
    bool kept;
    enum mg_turn turn = mg_park_keep_at(req, busy ? mg_park_until(req, 0) : MG_DONE, inspect_step,
                                        &k, sizeof k, inspect_kept_drop, &kept);
    if (!kept)
        search_free(&s);
    return turn;
}

bool mg_paths_inspect_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    (void)env;
    struct inspect_body b;
    return !parse_body(req->body.ptr, req->body.len, &b) && b.n > 1;
}
