#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""Records how a server answers each request of a parameter walk (tests/params-corescope.tsv).

usage: tools/params-record.py FILE BASE_URL [--check]

FILE's lines are "PATH?QUERY<TAB>COUNT[<TAB>STATUS<TAB>SHAPE[<TAB>MESHGATE]]"; '#' lines are
comments. For each, the request is sent to BASE_URL and STATUS (the HTTP status) and SHAPE are
written back: SHAPE is the number of entries of the answer's COUNT (a top-level key, or "."
for the whole answer: an array's length or an object's key count), "-" when COUNT is "-" or
the status is not 200; STATUS is "closed" when the server closed the connection without an
answer (CoreScope's handler panicked). A fifth column (meshgate's deliberate difference, "STATUS SHAPE: why")
is kept. With --check nothing is written: each line whose answer differs is printed, and the
exit status is 1 when any does.
"""
import json
import sys
import urllib.error
import urllib.request


def answer(base, target, count):
    try:
        with urllib.request.urlopen(base + target, timeout=60) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    except (ConnectionError, OSError):  # the server closed the connection: its handler panicked
        return "closed", "-"
    if status != 200 or count == "-":
        return str(status), "-"
    doc = json.loads(body)
    if count != ".":
        doc = doc.get(count) if isinstance(doc, dict) else None
    return str(status), str(len(doc)) if isinstance(doc, (list, dict)) else "-"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, base, check = sys.argv[1], sys.argv[2].rstrip("/"), "--check" in sys.argv[3:]
    out, differ = [], 0
    for line in open(path, encoding="utf-8").read().splitlines():
        if not line or line.startswith("#"):
            out.append(line)
            continue
        cols = line.split("\t")
        status, shape = answer(base, cols[0], cols[1])
        if check:
            want = cols[4].split(":")[0].split() if len(cols) > 4 else cols[2:4]
            if [status, shape] != want:
                print(f"{cols[0]}: {status} {shape}, recorded {' '.join(want)}")
                differ = 1
            continue
        out.append("\t".join(cols[:2] + [status, shape] + cols[4:5]))
    if not check:
        open(path, "w", encoding="utf-8").write("\n".join(out) + "\n")
    sys.exit(differ)


if __name__ == "__main__":
    main()
