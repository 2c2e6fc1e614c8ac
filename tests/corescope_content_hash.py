#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""CoreScope's content hash of every transmission's raw_hex, worked out here apart from
meshgate's C (hashlib): SHA-256 over the payload type (header bits 2-5), for TRACE (9) the
path-length byte and a zero byte, then the payload after the transport codes (route 0 or 3)
and the path; the first 16 hex digits. Prints one line per payload type and route class,
"TYPE transport|plain ROWS MISMATCHES", then "total ROWS MISMATCHES"; exits 1 on a mismatch.

usage: corescope_content_hash.py DB
"""
import collections
import hashlib
import sqlite3
import sys


def content_hash(raw_hex):
    try:
        buf = bytes.fromhex(raw_hex)
    except ValueError:
        return raw_hex[:16]
    if len(buf) < 2:
        return raw_hex[:16]
    at = 1 + (4 if buf[0] & 3 in (0, 3) else 0)
    if at >= len(buf):
        return raw_hex[:16]
    path_len = buf[at]
    at += 1 + ((path_len >> 6) + 1) * (path_len & 0x3F)
    if at > len(buf):
        return raw_hex[:16]
    ptype = (buf[0] >> 2) & 0x0F
    lead = bytes([ptype, path_len, 0]) if ptype == 9 else bytes([ptype])
    return hashlib.sha256(lead + buf[at:]).hexdigest()[:16]


def main():
    db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True)
    rows = collections.Counter()
    bad = collections.Counter()
    for raw, h in db.execute("SELECT raw_hex, hash FROM transmissions"):
        buf0 = int(raw[:2], 16)
        key = ((buf0 >> 2) & 0x0F, "transport" if buf0 & 3 in (0, 3) else "plain")
        rows[key] += 1
        if content_hash(raw) != h:
            bad[key] += 1
    for key in sorted(rows):
        print(key[0], key[1], rows[key], bad[key])
    print("total", sum(rows.values()), sum(bad.values()))
    return 1 if sum(bad.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
