#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""Records CoreScope's server's answers to requests with a method and a body, for a test to
compare with (tests/corescope-post-tools.json).

usage: tools/corescope-record-post.py [--text] OUT.json BASE_URL NOW COMMENT REQUESTS.json

REQUESTS.json is {SET: [[METHOD, PATH, BODY or null], ...], ...}. Each request is sent once,
with its body (Content-Type: application/json) and no API key; OUT holds {"_comment": COMMENT,
"now": NOW, SET: [{"method", "path", "body", "status", "answer", "asked"}, ...]}, where answer is
the response body as JSON when it is JSON, else as text, and asked the Unix time (seconds, a
fraction) it was sent. NOW is the time the server's copy was freshened to (a test freshens its
own copy to the same time, or, for an answer that depends on the time it is asked, to as long
before its own asking). --text: each entry also holds
"text", the response body exactly as sent, for a test that compares bytes.
"""
import json
import sys
import time
import urllib.error
import urllib.request


def ask(base, method, path, body, keep_text):
    data = body.encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    asked = time.time()
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    text = text.decode("utf-8", "replace")
    try:
        answer = json.loads(text)
    except ValueError:
        answer = text
    entry = {"method": method, "path": path, "body": body, "status": status, "answer": answer,
             "asked": round(asked, 3)}
    if keep_text:
        entry["text"] = text
    return entry


def main():
    args = sys.argv[1:]
    keep_text = bool(args) and args[0] == "--text"
    if keep_text:
        args = args[1:]
    if len(args) != 5:
        sys.exit(__doc__)
    out, base, now, comment = args[0], args[1].rstrip("/"), int(args[2]), args[3]
    with open(args[4], encoding="utf-8") as f:
        sets = json.load(f)
    result = {"_comment": comment, "now": now}
    for name, requests in sets.items():
        result[name] = [ask(base, m, p, b, keep_text) for m, p, b in requests]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
