#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""Records CoreScope's server's answers for a test to compare with (tests/corescope-*.json).

usage: tools/corescope-record.py OUT.json BASE_URL NOW COMMENT TARGET...

NOW is the newest time (Unix seconds) of the freshened copy the server reads; each {-N} in a
target stands for NOW minus N seconds (RFC 3339) and is kept as written in OUT, so a test
freshening its own copy to another time puts its own in. An answer CoreScope is still building
(202 or 503 with Retry-After: its warm-up, its lazy builds) is asked again after the wait, for
at most two minutes. OUT holds {"_comment": COMMENT, "now": NOW, "answers": {TARGET: answer}}.
"""
import json
import re
import sys
import time
import urllib.error
import urllib.request


def expand(target, now):
    def at(m):
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - int(m.group(1))))
    return re.sub(r"\{-(\d+)\}", at, target)


def answer(base, target):
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(base + target, timeout=120) as r:
                status, body, retry = r.status, r.read(), r.headers.get("Retry-After")
        except urllib.error.HTTPError as e:
            status, body, retry = e.code, e.read(), e.headers.get("Retry-After")
        if status in (202, 503) and retry and time.monotonic() < deadline:
            time.sleep(int(retry))
            continue
        if status != 200:
            sys.exit(f"{target}: {status} {body[:200]!r}")
        return json.loads(body)


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    out, base, now, comment = sys.argv[1], sys.argv[2].rstrip("/"), int(sys.argv[3]), sys.argv[4]
    answers = {t: answer(base, expand(t, now)) for t in sys.argv[5:]}
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"_comment": comment, "now": now, "answers": answers}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
