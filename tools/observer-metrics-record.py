#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""Records CoreScope's answers for tests/test_observer_metrics.c into
tests/corescope-observer-metrics.json.

usage: tools/observer-metrics-record.py PEER_DIR PORT

PEER_DIR holds CoreScope's server and migration (../shared/corescope/peer/build.sh). In a new
temporary directory: ../shared/data/corescope-e2e-fixture-migrated.db is freshened to now
(build/meshgate-fixture --freshen) and migrated (PEER_DIR/corescope-migrate); CoreScope's
server runs over it on 127.0.0.1:PORT (../shared/corescope/peer/run.sh) and answers each
request of "without the table"; then tests/observer-metrics.sql is applied to the file while
it runs, and it answers each request of "with the table". The server is stopped by its pid.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(ROOT, "..", "shared")
A = "D5EF2ED77CEABCB22082F8794D5F9D89F2257E70533863E924DEBE6EBDDA312A"
NODE = "ec3433bb3adf1acaee0ce117600b0ca473705486ec666137379a1e8cbb7e75f4"

WITHOUT = [
    "/api/observers/metrics/summary",
    "/api/observers/metrics/summary?window=7d&region=OAK",
    "/api/observers/metrics/summary?window=bogus",
    "/api/observers/metrics/summary?window=0d",
    f"/api/observers/{A}/metrics",
    f"/api/observers/{A}/metrics?resolution=1h",
    f"/api/observers/{A}/metrics?resolution=2h",
    f"/api/nodes/{NODE}/battery",
    f"/api/nodes/{NODE}/battery?days=abc",
    f"/api/nodes/{NODE.upper()}/battery",
    "/api/nodes/0000000000000000000000000000000000000000000000000000000000000000/battery",
]
WITH = [
    "/api/observers/metrics/summary",
    "/api/observers/metrics/summary?window=36500d",
    "/api/observers/metrics/summary?window=36500d&region=oak",
    "/api/observers/metrics/summary?window=876000h&region=SJC",
    "/api/observers/metrics/summary?region=MRY",
    "/api/observers/metrics/summary?window=bogus",
    f"/api/observers/{A}/metrics",
    f"/api/observers/{A}/metrics?since=2026-05-01T00:00:00Z",
    f"/api/observers/{A}/metrics?since=2026-05-01T00:00:00Z&resolution=1h",
    f"/api/observers/{A}/metrics?since=2026-05-01T00:00:00Z&resolution=1d",
    f"/api/observers/{A}/metrics?since=2026-05-17T10:30:00Z&until=2026-05-17T12:00:00Z",
    f"/api/observers/{A}/metrics?since=2026-05-17T11:00:00Z&until=2026-05-17T11:00:00Z",
    f"/api/observers/{A.lower()}/metrics?since=2026-05-01T00:00:00Z",
    "/api/observers/ZZ-NO-OBSERVER/metrics?since=2026-01-01",
    f"/api/observers/{A}/metrics?resolution=5M",
    f"/api/nodes/{NODE}/battery",
    f"/api/nodes/{NODE}/battery?days=30",
    f"/api/nodes/{NODE}/battery?days=400",
    f"/api/nodes/{NODE}/battery?days=1",
    f"/api/nodes/{NODE.upper()}/battery",
]


def fetch(port, target):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{target}", timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    peer, port = sys.argv[1], int(sys.argv[2])
    tmp = tempfile.mkdtemp(prefix="obsmetrics-record.")
    db = os.path.join(tmp, "fresh.db")
    subprocess.run([os.path.join(ROOT, "build", "meshgate-fixture"), "--freshen",
                    os.path.join(SHARED, "data", "corescope-e2e-fixture-migrated.db"), "--out",
                    db], check=True)
    subprocess.run([os.path.join(peer, "corescope-migrate"), "-db", db], check=True)
    log = open(os.path.join(tmp, "peer.log"), "w")
    server = subprocess.Popen([os.path.join(SHARED, "corescope", "peer", "run.sh"), peer, db,
                               str(port)], stdout=log, stderr=log)
    try:
        for _ in range(600):
            try:
                status, body = fetch(port, "/api/healthz")
                if status == 200 and body.get("ready"):
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        out = {"_comment": " ".join(__doc__.split()) + " Recorded "
               + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "."}
        out["without the table"] = {}
        for t in WITHOUT:
            status, body = fetch(port, t)
            out["without the table"][t] = {"status": status, "body": body}
        subprocess.run(["sqlite3", db], stdin=open(os.path.join(ROOT, "tests",
                                                                "observer-metrics.sql")),
                       check=True)
        out["with the table"] = {}
        for t in WITH:
            status, body = fetch(port, t)
            out["with the table"][t] = {"status": status, "body": body}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    with open(os.path.join(ROOT, "tests", "corescope-observer-metrics.json"), "w",
              encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
