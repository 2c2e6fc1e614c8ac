#!/bin/sh
# SPDX-License-Identifier: ISC
# include-check: the include graph between meshgate's folders (make check runs it).
#
#   tools/include-check.sh [ROOT]      (ROOT: the source tree, default .)
#
# Prints how many #include lines go from each folder to each other folder, then fails (exit 1,
# one line per finding) on
#   - an upward include: the folders are ordered, top to bottom,
#       server -> workers/api -> workers/upstream -> workers/core -> workers/data -> shm
#     and a file includes only its own folder or folders below it (a file in workers/ itself,
#     not yet in a room, sits just below workers/api: a room below that includes it fails, which
#     says it is to be moved); tools/, tests/ and fuzz/ sit above all of them: they may include
#     anything, and nothing else may include them;
#   - an endpoint (workers/api/ep_*) including another endpoint's header;
#   - a circle: modules (a folder's x.c with its x.h) that include each other, directly or
#     through others;
#   - two headers of the same name on the include path (includes are by basename, with one -I
#     per folder, so a name must say which file it means).
# Includes are resolved as the compiler does: a path with a slash from the including file's
# folder; a bare name from that folder first, then from each folder of the include path.
# What is not yet as it should be is listed, one include a line ("FILE HEADER  # why"), in
# ROOT/tools/include-check.allow: such an include is counted, not failed, and is left out of
# the circles; a line that no longer matches an include fails too, so the list only shrinks.
set -eu
root=${1:-.}
cd "$root"
dirs=""
for d in server workers/api workers/upstream workers/core workers/data workers shm tools tests tests/upstream fuzz tools/bench tools/fixture; do
    [ -d "$d" ] && dirs="$dirs $d"
done
# shellcheck disable=SC2086
files=$(for d in $dirs; do ls "$d"/*.c "$d"/*.h 2>/dev/null || true; done)
[ -n "$files" ] || { echo "include-check: no sources under $root" >&2; exit 2; }
allow=tools/include-check.allow
[ -f "$allow" ] || allow=/dev/null
# shellcheck disable=SC2086
grep -H -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $files /dev/null | awk -v FILES="$files" -v ALLOW="$allow" '
function dirof(p) { if (p ~ /\//) { sub(/\/[^\/]*$/, "", p); return p } return "." }
function base(p) { sub(/.*\//, "", p); return p }
function norm(p,    n, i, parts, out, k) {
    n = split(p, parts, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "." || parts[i] == "") continue
        if (parts[i] == ".." && k > 0 && out[k] != "..") { k--; continue }
        out[++k] = parts[i]
    }
    p = ""; for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
    return p
}
# The rank of a folder in the order; -1: may include anything, included by nothing ranked.
function rank(d) {
    if (d == "server") return 0
    if (d == "workers/api") return 1
    if (d == "workers/upstream") return 2
    if (d == "workers/core") return 3
    if (d == "workers/data") return 4
    if (d == "workers") return 1.5
    if (d == "shm") return 5
    return -1
}
# The folders on the include path (one -I each), in order.
BEGIN {
    while ((getline line < ALLOW) > 0) {
        sub(/#.*/, "", line)
        if (split(line, w, " ") >= 2) { allowed[w[1], w[2]] = 1; allow_line[++nallow] = w[1] SUBSEP w[2] }
    }
    npath = split("server shm workers/core workers/data workers/api workers/upstream workers tools tests fuzz", ipath, " ")
    nf = split(FILES, flist, "\n")
    for (i = 1; i <= nf; i++) {
        if (flist[i] == "") continue
        exists[flist[i]] = 1
        d = dirof(flist[i]); b = base(flist[i])
        for (j = 1; j <= npath; j++)
            if (d == ipath[j] && b ~ /\.h$/) {
                if (b in owner && owner[b] != flist[i]) {
                    printf "include-check: two headers named %s on the include path: %s and %s\n", b, owner[b], flist[i]
                    bad++
                } else owner[b] = flist[i]
            }
    }
}
{
    # file:line:#include "name"
    file = $0; sub(/:.*/, "", file)
    rest = substr($0, length(file) + 2); line = rest; sub(/:.*/, "", line)
    name = rest; sub(/^[^"]*"/, "", name); sub(/".*/, "", name)
    d = dirof(file); target = ""
    if (name ~ /\//) { t = norm(d "/" name); if (t in exists) target = t }
    else if ((d "/" name) in exists) target = d "/" name
    else
        for (j = 1; j <= npath; j++)
            if ((ipath[j] "/" name) in exists) { target = ipath[j] "/" name; break }
    if (target == "") next  # a system or generated header
    td = dirof(target)
    if (!((d, td) in fcount)) { fpairs[++np] = d SUBSEP td }
    fcount[d, td]++
    if ((file, target) in allowed) { used[file, target] = 1; lcount[d, td]++; next }
    # modules: the x.c and x.h of a folder are one; the circles are found between modules
    mf = module(file); mt = module(target)
    if (mf != mt && !((mf, mt) in medge)) {
        medge[mf, mt] = 1; mods[mf] = 1; mods[mt] = 1
        nout[mf]++; out[mf, nout[mf]] = mt
    }
    rf = rank(d); rt = rank(td)
    if (rf != -1 && (rt == -1 || rt < rf)) {
        printf "include-check: upward include: %s:%s includes %s (%s is above %s)\n", file, line, target, td, d
        bad++
    }
    if (d == "workers/api" && base(file) ~ /^ep_/ && td == "workers/api" && base(target) ~ /^ep_/) {
        fb = base(file); sub(/\.[ch]$/, "", fb); tb = base(target); sub(/\.h$/, "", tb)
        if (fb != tb) {
            printf "include-check: endpoint includes another endpoint: %s:%s includes %s\n", file, line, target
            bad++
        }
    }
}
function module(p) { sub(/\.[ch]$/, "", p); return p }
# Strongly connected components (Tarjan): each of more than one module is a circle.
function strong(v,    i, w, comp, n) {
    index_of[v] = low[v] = ++counter; stack[++depth] = v; on_stack[v] = 1
    for (i = 1; i <= nout[v]; i++) {
        w = out[v, i]
        if (!(w in index_of)) { strong(w); if (low[w] < low[v]) low[v] = low[w] }
        else if (on_stack[w] && index_of[w] < low[v]) low[v] = index_of[w]
    }
    if (low[v] == index_of[v]) {
        comp = ""; n = 0
        do { w = stack[depth--]; on_stack[w] = 0; comp = w (n++ ? " " : "") comp } while (w != v)
        if (n > 1) { printf "include-check: circle: %s include each other\n", comp; bad++ }
    }
}
END {
    print "include-check: folder graph (#include lines, from -> to; listed: against the order, known)"
    for (i = 1; i <= np; i++) {
        split(fpairs[i], p, SUBSEP)
        lines[i] = sprintf("  %-18s -> %-18s %4d", p[1], p[2], fcount[p[1], p[2]])
        if ((p[1], p[2]) in lcount) lines[i] = lines[i] sprintf("  (%d listed as left to untangle)", lcount[p[1], p[2]])
    }
    # sorted, so the output is stable (insertion sort: a few dozen pairs)
    for (i = 2; i <= np; i++) { v = lines[i]; for (j = i - 1; j >= 1 && lines[j] > v; j--) lines[j + 1] = lines[j]; lines[j + 1] = v }
    for (i = 1; i <= np; i++) print lines[i]
    depth = 0; counter = 0
    for (v in mods) if (!(v in index_of)) strong(v)
    for (i = 1; i <= nallow; i++)
        if (!(allow_line[i] in used)) {
            split(allow_line[i], p, SUBSEP)
            printf "include-check: %s no longer includes %s: remove the line from %s\n", p[1], p[2], ALLOW
            bad++
        }
    for (k in used) left++
    if (left) printf "include-check: %d include(s) still to untangle, listed in %s\n", left, ALLOW
    if (bad) { printf "include-check: %d finding(s)\n", bad; exit 1 }
    print "include-check: no upward include, no endpoint including another, no circle"
}'
