#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""The two sides of tools/soak-live.sh, each until SIGTERM, then a one-line JSON summary.

  soak-live.py writer DB OUT     writes DB as CoreScope's ingestor does (WAL): a transmission
                                 and its observations several times a second, node and observer
                                 updates, the autocheckpoint and explicit PASSIVE, FULL, RESTART
                                 and TRUNCATE checkpoints, and connections opened and closed as
                                 a Go database/sql pool does (MaxIdleConns 2, MaxOpenConns 4).
  soak-live.py append DB N [GAP_S]
                                 appends N transmissions (a copy of a recent one under a new
                                 hash, first seen now) with their observations and one more
                                 from another observer, one commit each, GAP_S seconds apart
                                 (default 1); prints the new hashes as a JSON list
                                 (tools/browser-live.js looks for them).
  soak-live.py load PORT DB KEY OUT THREADS INJECT
                                 requests every native route (keys, hashes and observers taken
                                 from DB) on kept-alive connections, half signed in; every
                                 INJECT-th request (0: none) asks for X-Test-Db-Break: 1.
"""
import http.client
import json
import random
import re
import signal
import sqlite3
import sys
import threading
import time

stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
signal.signal(signal.SIGINT, lambda *_: stop.set())


def columns(conn, table):
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def insert_copy(c, tx_cols, obs_cols, src, h, now, k):
    """Inserts a copy of transmission src under hash h, first seen now, and up to k of its
    observations timed now, as CoreScope's ingestor stores a new packet; returns the new
    transmission's id and how many observations were inserted."""
    sel = ", ".join("?" if col in ("hash", "first_seen", "last_seen", "created_at")
                    else col for col in tx_cols)
    args = [h if col == "hash" else iso(now) if col == "first_seen" else now
            if col == "last_seen" else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now))
            for col in tx_cols if col in ("hash", "first_seen", "last_seen", "created_at")]
    cur = c.execute(f"INSERT INTO transmissions ({', '.join(tx_cols)}) "
                    f"SELECT {sel} FROM transmissions WHERE id = {int(src)}", args)
    tid = cur.lastrowid
    if not tid:
        return None, 0
    osel = ", ".join("?" if col in ("transmission_id", "timestamp") else col
                     for col in obs_cols)
    # One of each observer and path: CoreScope's store keeps one observation of each.
    cur = c.execute(f"INSERT INTO observations ({', '.join(obs_cols)}) SELECT {osel} "
                    f"FROM observations WHERE transmission_id = ? "
                    f"GROUP BY observer_idx, path_json LIMIT {int(k)}",
                    [tid if col == "transmission_id" else now
                     for col in obs_cols if col in ("transmission_id", "timestamp")] + [src])
    return tid, max(cur.rowcount, 0)


def append(db, n, gap):
    c = sqlite3.connect(db, timeout=10, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA busy_timeout=10000")
    tx_cols = [col for col in columns(c, "transmissions") if col != "id"]
    obs_cols = [col for col in columns(c, "observations") if col != "id"]
    # Recent transmissions with a decoded payload, each copied with its observations and one
    # more from another observer (the same path, heard twice).
    src = [r[0] for r in c.execute(
        "SELECT t.id FROM transmissions t WHERE t.decoded_json IS NOT NULL AND EXISTS "
        "(SELECT 1 FROM observations o WHERE o.transmission_id = t.id) "
        "ORDER BY t.id DESC LIMIT 50")]
    observers = [r[0] for r in c.execute("SELECT rowid FROM observers ORDER BY rowid")]
    rnd = random.Random()
    hashes = []
    for i in range(n):
        if i:
            time.sleep(gap)
        h = "%016x" % rnd.getrandbits(64)
        now = int(time.time())
        c.execute("BEGIN IMMEDIATE")
        tid, _ = insert_copy(c, tx_cols, obs_cols, src[i % len(src)], h, now, 3)
        if tid:
            sel = ", ".join("?" if col in ("transmission_id", "timestamp", "observer_idx")
                            else col for col in obs_cols)
            heard = {r[0] for r in c.execute(
                "SELECT observer_idx FROM observations WHERE transmission_id = ?", (tid,))}
            other = next((o for o in observers if o not in heard), None)
            if other is not None:
                c.execute(f"INSERT INTO observations ({', '.join(obs_cols)}) SELECT {sel} "
                          f"FROM observations WHERE transmission_id = ? ORDER BY id LIMIT 1",
                          [tid if col == "transmission_id" else now if col == "timestamp"
                           else other for col in obs_cols
                           if col in ("transmission_id", "timestamp", "observer_idx")] + [tid])
        c.execute("COMMIT")
        if tid:
            hashes.append(h)
    c.close()
    print(json.dumps(hashes))


def writer(db, out):
    rnd = random.Random(1)
    stats = {"commits": 0, "transmissions": 0, "observations": 0, "node_updates": 0,
             "checkpoints": {}, "reopens": 0, "errors": 0, "error_samples": []}
    pool = []

    def connect():
        c = sqlite3.connect(db, timeout=10, isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA busy_timeout=10000")
        return c

    def conn():
        # A pool of 1-4: mostly one, now and then two at once (a request and the ingest).
        if not pool:
            pool.append(connect())
            stats["reopens"] += 1
        return pool[0]

    seed = connect()
    tx_cols = [c for c in columns(seed, "transmissions") if c != "id"]
    obs_cols = [c for c in columns(seed, "observations") if c != "id"]
    tx_ids = [r[0] for r in seed.execute("SELECT id FROM transmissions ORDER BY id DESC LIMIT 2000")]
    keys = [r[0] for r in seed.execute("SELECT public_key FROM nodes LIMIT 500")]
    observers = [r[0] for r in seed.execute("SELECT id FROM observers")]
    seed.close()
    modes = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"]
    n = 0
    last_checkpoint = time.monotonic()
    while not stop.is_set():
        n += 1
        now = int(time.time())
        try:
            c = conn()
            c.execute("BEGIN IMMEDIATE")
            src = rnd.choice(tx_ids)
            h = "%016x" % rnd.getrandbits(64)
            tid, nobs = insert_copy(c, tx_cols, obs_cols, src, h, now, rnd.randint(1, 6))
            if tid:
                stats["transmissions"] += 1
                stats["observations"] += nobs
                tx_ids.append(tid)
            if keys and n % 3 == 0:
                c.execute("UPDATE nodes SET last_seen = ?, advert_count = advert_count + 1 "
                          "WHERE public_key = ?", (iso(now), rnd.choice(keys)))
                stats["node_updates"] += 1
            if observers and n % 5 == 0:
                c.execute("UPDATE observers SET last_seen = ?, packet_count = packet_count + 1 "
                          "WHERE id = ?", (iso(now), rnd.choice(observers)))
            c.execute("COMMIT")
            stats["commits"] += 1
            # The pool: a second connection now and then, and idle ones closed.
            if n % 7 == 0 and len(pool) < 4:
                pool.append(connect())
                stats["reopens"] += 1
                pool[-1].execute("SELECT count(*) FROM nodes").fetchone()
            if n % 11 == 0:
                while pool:
                    pool.pop().close()
            if time.monotonic() - last_checkpoint > 2.0:
                last_checkpoint = time.monotonic()
                mode = modes[sum(stats["checkpoints"].values()) % 4]
                conn().execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
                stats["checkpoints"][mode] = stats["checkpoints"].get(mode, 0) + 1
        except sqlite3.Error as e:
            stats["errors"] += 1
            if len(stats["error_samples"]) < 10:
                stats["error_samples"].append(str(e))
            for p in pool:
                try:
                    p.close()
                except sqlite3.Error:
                    pass
            pool.clear()
        stop.wait(rnd.uniform(0.03, 0.15))
    for p in pool:
        p.close()
    with open(out, "w") as f:
        json.dump(stats, f)


def targets(db):
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    keys = [r[0] for r in c.execute("SELECT public_key FROM nodes ORDER BY advert_count DESC LIMIT 20")]
    hashes = [r[0] for r in c.execute("SELECT hash FROM transmissions ORDER BY id DESC LIMIT 20")]
    ids = [r[0] for r in c.execute("SELECT id FROM transmissions ORDER BY id DESC LIMIT 20")]
    obs = [r[0] for r in c.execute("SELECT id FROM observers LIMIT 10")]
    chans = [r[0] for r in c.execute("SELECT DISTINCT channel_hash FROM transmissions "
                                     "WHERE channel_hash IS NOT NULL LIMIT 5")] \
        if "channel_hash" in columns(c, "transmissions") else []
    c.close()
    fixed = ["/api/healthz", "/api/nodes", "/api/nodes?limit=200&sortBy=name",
             "/api/nodes?role=repeater&lastHeard=24h", "/api/nodes/search?q=a",
             "/api/nodes/bulk-health?limit=20", "/api/nodes/clock-skew", "/api/packets",
             "/api/packets?limit=50&offset=50", "/api/packets?groupByHash=true&limit=20",
             "/api/packets?since=2000-01-01T00:00:00Z&limit=100", "/api/packets/timestamps?since=2000-01-01T00:00:00Z",
             "/api/resolve-hops?hops=a1,b2c3", "/api/iata-coords", "/api/observers",
             "/api/observers/clock-skew", "/api/channels", "/api/known-channels", "/api/stats",
             "/api/perf", "/api/config/client", "/api/config/cache", "/api/config/theme",
             "/api/config/map", "/api/config/geo-filter", "/api/config/areas",
             "/api/config/areas/polygons", "/api/config/regions", "/api/health",
             "/api/scope-stats", "/metrics", "/server-status"]
    per_key = ["/api/nodes/%s", "/api/nodes/%s/health", "/api/nodes/%s/clock-skew",
               "/api/nodes/%s/reach", "/api/nodes/%s/paths", "/api/nodes/%s/neighbors"]
    out = list(fixed)
    for k in keys:
        out += [p % k for p in per_key]
    out += ["/api/packets/%s" % h for h in hashes] + ["/api/traces/%s" % h for h in hashes]
    out += ["/api/packets/%d" % i for i in ids]
    out += ["/api/observers/%s" % o for o in obs] + ["/api/observers/%s/analytics" % o for o in obs]
    out += ["/api/channels/%s/messages" % ch for ch in chans if ch]
    return out


# The refusals of a FIFO line (shm/gates.h: anon_line, upstream): the line full, or a wait in it
# that ran out. Both come with Retry-After.
LINE_REFUSAL = re.compile(rb'^\{"error":"the (wait in the )?line for ')


def load(port, db, key, out, threads, inject):
    urls = targets(db)
    lock = threading.Lock()
    stats = {"requests": 0, "status": {}, "conn_errors": 0, "injected": 0, "5xx": [],
             "line_refusals": 0, "routes": len(urls)}

    def client(idx):
        rnd = random.Random(idx)
        conn = None
        n = 0
        while not stop.is_set():
            url = rnd.choice(urls)
            headers = {}
            if idx % 2 == 0:
                headers["Authorization"] = "Bearer " + key
            n += 1
            injected = inject > 0 and n % inject == 0
            if injected:
                headers["X-Test-Db-Break"] = "1"
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("GET", url, headers=headers)
                r = conn.getresponse()
                body = r.read()
                with lock:
                    stats["requests"] += 1
                    stats["injected"] += injected
                    stats["status"][r.status] = stats["status"].get(r.status, 0) + 1
                    samples = stats.setdefault("samples", {}).setdefault(str(r.status), [])
                    if r.status != 200 and len(samples) < 4:
                        samples.append([url, body[:120].decode("utf-8", "replace")])
                    # A line's refusal is load shed as designed (Retry-After, its own message),
                    # counted like the cold gate's 429s; any other 5xx is a failure.
                    refused = (r.status == 503 and r.getheader("Retry-After") is not None and
                               LINE_REFUSAL.search(body) is not None)
                    if refused:
                        stats["line_refusals"] += 1
                    elif r.status >= 500 and len(stats["5xx"]) < 50:
                        stats["5xx"].append([url, r.status, body[:200].decode("utf-8", "replace")])
                    elif r.status >= 500:
                        stats["5xx"].append(None)
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                # A worker killed with -9 mid-request, or drained by a reload.
                with lock:
                    stats["conn_errors"] += 1
                if conn:
                    conn.close()
                conn = None
                stop.wait(0.05)
            stop.wait(rnd.uniform(0.0, 0.02))

    ts = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stats["5xx_count"] = len(stats["5xx"])
    stats["5xx"] = [s for s in stats["5xx"] if s][:20]
    with open(out, "w") as f:
        json.dump(stats, f)


if __name__ == "__main__":
    if sys.argv[1] == "writer":
        writer(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "append":
        append(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 1.0)
    elif sys.argv[1] == "load":
        load(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]),
             int(sys.argv[7]))
    else:
        sys.exit(__doc__)
