#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""bench-analytics.py: every analytics route cold and warm, meshgate against CoreScope's
server in one run (docs/benchmarks.md, issue 26).

usage: bench-analytics.py [--warm N] [--conns C] [--peer-wait S] [--freshen] DB [DB...]

For each DB: a copy (freshened to now first with --freshen: build/meshgate-fixture --freshen),
migrated by CoreScope's own tool (PEER_DIR/corescope-migrate) as its ingestor does, with two
tables a site with those features has added (the fixtures have neither): observer_metrics (a
sample of every observer every 15 minutes over the last 2 days, as CoreScope's ingestor writes
them) and client_receptions with client_observers (mobile RX coverage: one reception per 10
observations, 20 companions, the last 6 days, heard as the nodes' keys). Both servers read that
one copy, with the same config.json ({"clientRxCoverage": {"enabled": true}}; CoreScope's
defaults otherwise), one after the other: meshgate (MESHGATE_BUILD, default build/; 2 workers,
C signed-in keys) first, then CoreScope's server (PEER_DIR; skipped, and said so, when it is
unset or not ready within --peer-wait seconds, default 900).

Each server is started, and when it is ready (meshgate: /api/healthz and /api/nodes?limit=1
answer 200; CoreScope: /api/healthz says "ready":true) each route is asked once, in the
order below: its cold answer (the first after a start; CoreScope's {"status":"building"}
answer, 202 or 503 with Retry-After, is asked again every 0.2 s until the answer comes, the
whole time counted and the retries noted). Right after it, the route warm (while
its cold answer is still the one kept): N requests (default 20) over C kept-alive connections
(default 4), the median and p90 of their times. Every answer must be 200: any other is named
at once, marks the route FAILED in the table, and fails the run at the end (exit 2), except a
404 of meshgate's on a route it does not serve yet (the subpaths family before its branch is
merged), which is listed as skipped. The load average is printed beside every phase.
"""
import http.client
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import corescope_argv, free_port, group_memory, loadavg, meshgate_env, stop

BUILD = os.environ.get('MESHGATE_BUILD', 'build')
PEER = os.environ.get('PEER_DIR', '')
NOT_YET = ('/api/analytics/subpaths', '/api/analytics/subpaths-bulk',
           '/api/analytics/subpath-detail')


class Failed(Exception):
    pass


def routes(pk, hops):
    """(name, path): the Analytics page's requests as CoreScope's front end makes them."""
    r = [(p, p) for p in ('/api/analytics/roles', '/api/analytics/rf', '/api/analytics/topology',
                          '/api/analytics/channels', '/api/analytics/distance',
                          '/api/analytics/hash-sizes', '/api/analytics/hash-collisions')]
    r += [('/api/analytics/subpaths', '/api/analytics/subpaths?minLen=2&maxLen=8&limit=100'),
          ('/api/analytics/subpaths-bulk',
           '/api/analytics/subpaths-bulk?groups=2-2:50,3-3:30,4-4:20,5-8:15'),
          ('/api/analytics/subpath-detail', None if hops is None else
           '/api/analytics/subpath-detail?hops=' + ','.join(hops)),
          ('/api/analytics/relay-airtime-share', '/api/analytics/relay-airtime-share'),
          ('/api/analytics/neighbor-graph', '/api/analytics/neighbor-graph?min_count=1&min_score=0'),
          ('/api/nodes/{pk}/analytics', f'/api/nodes/{pk}/analytics?days=7'),
          ('/api/audio-lab/buckets', '/api/audio-lab/buckets'),
          ('/api/rx-coverage', '/api/rx-coverage?bbox=-90,-180,90,180&z=10&days=7'),
          ('/api/rx-leaderboard', '/api/rx-leaderboard?days=7'),
          ('/api/observers/metrics/summary', '/api/observers/metrics/summary?window=24h')]
    return r


class Conn:
    def __init__(self, port, key):
        self.port, self.key = port, key
        self.c = None

    def get(self, path, timeout=900):
        """(status, body, headers, seconds) on a kept-alive connection (reopened if closed)."""
        for attempt in (1, 2):
            if self.c is None:
                self.c = http.client.HTTPConnection('127.0.0.1', self.port, timeout=timeout)
            h = {'Authorization': 'Bearer ' + self.key} if self.key else {}
            t = time.monotonic()
            try:
                self.c.request('GET', path, headers=h)
                r = self.c.getresponse()
                body = r.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.c.close()
                self.c = None
                if attempt == 2:
                    raise
                continue
            dt = time.monotonic() - t
            if r.getheader('Connection', '').lower() == 'close':
                self.c.close()
                self.c = None
            return r.status, body, r, dt

    def close(self):
        if self.c:
            self.c.close()


def prepare(src, work, freshen):
    """The copy both servers read: freshened, migrated, with the two feature tables."""
    db = os.path.join(work, 'db.sqlite')
    if freshen:
        subprocess.run([os.path.join(BUILD, 'meshgate-fixture'), '--freshen', src, '--out', db],
                       check=True, stdout=subprocess.DEVNULL)
    else:
        subprocess.run(['sqlite3', src, f".backup '{db}'"], check=True)
    if PEER:
        subprocess.run([os.path.join(PEER, 'corescope-migrate'), '-db', db], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c = sqlite3.connect(db)
    c.execute('PRAGMA journal_mode=WAL')
    now = time.time()
    c.executescript(f"""
CREATE TABLE IF NOT EXISTS observer_metrics (
    observer_id TEXT NOT NULL, timestamp TEXT NOT NULL, noise_floor REAL, tx_air_secs INTEGER,
    rx_air_secs INTEGER, recv_errors INTEGER, battery_mv INTEGER, packets_sent INTEGER,
    packets_recv INTEGER, PRIMARY KEY (observer_id, timestamp));
CREATE INDEX IF NOT EXISTS idx_observer_metrics_timestamp ON observer_metrics(timestamp);
WITH RECURSIVE s(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM s WHERE k < 191)
INSERT OR IGNORE INTO observer_metrics
SELECT o.id, strftime('%Y-%m-%dT%H:%M:%SZ', {int(now) // 900 * 900} - s.k * 900, 'unixepoch'),
       -120.0 + (o.rowid * 7 + s.k) % 15, 100 * (192 - s.k) + o.rowid % 50,
       300 * (192 - s.k) + o.rowid % 70, (192 - s.k) / 4, 3700 + (o.rowid + s.k) % 400,
       10 * (192 - s.k), 40 * (192 - s.k)
FROM observers o, s;
CREATE TABLE IF NOT EXISTS client_receptions (
    id INTEGER PRIMARY KEY, rx_pubkey TEXT NOT NULL, heard_key TEXT, heard_keylen INTEGER,
    lat REAL NOT NULL, lon REAL NOT NULL, snr REAL, rssi INTEGER, rx_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS idx_client_receptions_heard ON client_receptions(heard_key, lat, lon);
CREATE TABLE IF NOT EXISTS client_observers (pubkey TEXT PRIMARY KEY, name TEXT);
WITH RECURSIVE m(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM m WHERE k < 19)
INSERT OR IGNORE INTO client_observers
SELECT printf('c0ffee%058x', k), 'Mobile ' || k FROM m;
""")
    nodes = [r[0] for r in c.execute('SELECT public_key FROM nodes ORDER BY rowid')]
    n = c.execute('SELECT count(*) FROM observations').fetchone()[0] // 10
    if c.execute('SELECT count(*) FROM client_receptions').fetchone()[0] == 0:
        c.executemany(
            'INSERT INTO client_receptions (rx_pubkey, heard_key, heard_keylen, lat, lon, snr, '
            'rssi, rx_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
            ((f'c0ffee{i % 20:058x}', nodes[i % len(nodes)], 32,
              37.2 + (i * 37 % 1000) / 1000 * 0.6, -122.5 + (i * 53 % 1000) / 1000 * 0.7,
              -10 + i % 20 if i % 9 else None, -120 + i % 50,
              time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now - (i * 518400 // n))))
             for i in range(n)))
    c.commit()
    pk = c.execute('SELECT public_key FROM nodes ORDER BY advert_count DESC, public_key '
                   'LIMIT 1').fetchone()[0]
    c.close()
    return db, pk


class Server:
    def __init__(self, kind, work, db, keys):
        self.kind = kind
        self.port = free_port()
        self.log = open(os.path.join(work, kind + '.log'), 'w')
        cfgdir = os.path.join(work, 'config')
        os.makedirs(cfgdir, exist_ok=True)
        with open(os.path.join(cfgdir, 'config.json'), 'w') as f:
            json.dump({'clientRxCoverage': {'enabled': True}}, f)
        t0 = time.monotonic()
        if kind == 'meshgate':
            keyfile = os.path.join(work, 'keys')
            with open(keyfile, 'w') as f:
                f.write(''.join(k + '\n' for k in keys))
            os.chmod(keyfile, 0o600)
            env = meshgate_env(BUILD, db, self.port, 'bench-analytics',
                               MESHGATE_API_KEYS_FILE=keyfile, MESHGATE_MAX_CONNS_PER_CLIENT='0',
                               MESHGATE_CORESCOPE_CONFIG=os.path.join(cfgdir, 'config.json'))
            self.proc = subprocess.Popen([os.path.join(BUILD, 'meshgate')], env=env,
                                         stdout=self.log, stderr=self.log)
            self.key = keys[0]
        else:
            self.proc = subprocess.Popen(corescope_argv(PEER, db, self.port, cfgdir),
                                         env=dict(os.environ, CORESCOPE_LISTEN_HOST='127.0.0.1'),
                                         stdout=self.log, stderr=self.log)
            self.key = None
        self.t0 = t0

    def wait_ready(self, limit):
        c = Conn(self.port, self.key)
        while True:
            if self.proc.poll() is not None:
                raise Failed(f"{self.kind} exited at start (see {self.log.name})")
            try:
                st, body, _, _ = c.get('/api/healthz', timeout=10)
                if self.kind == 'meshgate':
                    ok = st == 200 and c.get('/api/nodes?limit=1', timeout=600)[0] == 200
                else:
                    ok = st == 200 and b'"ready":true' in body
                if ok:
                    c.close()
                    return time.monotonic() - self.t0
            except OSError:
                c.close()
                c = Conn(self.port, self.key)
            if time.monotonic() - self.t0 > limit:
                c.close()
                return None
            time.sleep(0.2)

    def stop(self):
        stop(self.proc, self.log)


def cold(srv, path, name):
    """The first answer: (seconds, bytes, note); 503s with Retry-After followed."""
    c = Conn(srv.port, srv.key)
    t0 = time.monotonic()
    retries = 0
    codes = set()
    try:
        while True:
            st, body, r, _ = c.get(path)
            if st in (202, 503) and (r.getheader('Retry-After') or b'"building"' in body) \
                    and retries < 3000:
                # CoreScope's "being built" answer: asked again every 0.2 s (its front end
                # waits Retry-After), so the time is the build's, to within 0.2 s.
                retries += 1
                codes.add(st)
                time.sleep(0.2)
                continue
            break
    finally:
        c.close()
    dt = time.monotonic() - t0
    if st != 200:
        return st, dt, body
    return 200, dt, (len(body), f"{'/'.join(map(str, sorted(codes)))} building, asked {retries}x"
                     if retries else '')


def warm(srv, path, name, n, conns, keys):
    """n answers over conns kept-alive connections: sorted seconds. Fails on any non-200."""
    times, errors = [], []
    lock = threading.Lock()
    left = [n]

    def worker(i):
        c = Conn(srv.port, keys[i] if srv.key else None)
        try:
            while True:
                with lock:
                    if left[0] == 0 or errors:
                        return
                    left[0] -= 1
                st, body, _, dt = c.get(path)
                with lock:
                    if st != 200:
                        errors.append(f"{st} {body[:200]!r}")
                    times.append(dt)
        except Exception as e:  # noqa: BLE001: any failure of a client fails the run
            with lock:
                errors.append(repr(e))
        finally:
            c.close()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise Failed(f"warm: {len(errors)} of {len(times)} answers not 200, first: {errors[0]}")
    return sorted(times)


FAILURES = []


def fail(res, kind, name, path, why):
    """A route that answered something other than 200: named now and at the end (exit 2)."""
    res['routes'][name] = {'failed': why[:200]}
    FAILURES.append(f"{kind}: {name} ({path}) {why}")
    print(f"  {name}: FAILED: {why}", flush=True)


def cells(r):
    """A server's cold and warm cells of a route."""
    if 'failed' in r:
        return ('FAILED: ' + r['failed'][:80],) * 2
    if 'skipped' in r:
        return ('skipped: ' + r['skipped'],) * 2
    return (fmt(r.get('cold')) + (f" ({r['note']})" if r.get('note') else ''),
            f"{fmt(r.get('warm'))} / {fmt(r.get('p90'))}")


def fmt(s):
    if s is None:
        return '-'
    return f'{s * 1000:.1f} ms' if s < 1 else f'{s:.2f} s'


def ratio(a, b):
    if a is None or b is None or a <= 0:
        return '-'
    r = b / a
    return f'{r:.0f}×' if r >= 10 else f'{r:.1f}×' if r >= 0.1 else f'{r:.3f}×'


def bench_db(src, args, keys):
    work = tempfile.mkdtemp(prefix='bench-analytics-')
    out = {}
    try:
        t = time.monotonic()
        db, pk = prepare(src, work, args['freshen'])
        print(f"\n## {src}: copy prepared in {time.monotonic() - t:.0f} s "
              f"({os.path.getsize(db) / 1e6:.0f} MB); node {pk[:16]}...; load {loadavg()}",
              flush=True)
        kinds = ['meshgate'] + (['corescope'] if PEER else [])
        if not PEER:
            print("PEER_DIR is unset: CoreScope's server is skipped", flush=True)
        for kind in kinds:
            srv = Server(kind, work, db, keys)
            try:
                ready = srv.wait_ready(args['peer_wait'] if kind == 'corescope' else 900)
                if ready is None:
                    print(f"{kind}: not ready within {args['peer_wait']} s: skipped "
                          f"(load {loadavg()})", flush=True)
                    out[kind] = None
                    continue
                mem = group_memory(srv.proc.pid)
                print(f"{kind}: ready in {ready:.1f} s (PSS {mem[0]:.0f} MiB); cold, load "
                      f"{loadavg()}", flush=True)
                res = out[kind] = {'ready': ready, 'routes': {}}
                hops = None
                rs = routes(pk, None)
                i = 0
                while i < len(rs):
                    name, path = rs[i]
                    i += 1
                    if name == '/api/analytics/subpath-detail':
                        path = routes(pk, hops)[i - 1][1]
                        if path is None:
                            if res['routes'].get('/api/analytics/subpaths', {}).get('skipped'):
                                res['routes'][name] = {'skipped': '404 (subpaths not served)'}
                                print(f"  {name}: skipped: /api/analytics/subpaths answered 404",
                                      flush=True)
                                continue
                            fail(res, kind, name, '-', 'no subpath in the subpaths answer')
                            continue
                    st, dt, info = cold(srv, path, name)
                    if st == 404 and kind == 'meshgate' and name in NOT_YET:
                        res['routes'][name] = {'skipped': '404 (not served natively yet)'}
                        print(f"  {name}: SKIPPED: meshgate answers 404 (not served natively "
                              f"yet)", flush=True)
                        continue
                    if st != 200:
                        fail(res, kind, name, path, f"cold: {st} {info[:300]!r}")
                        continue
                    if name == '/api/analytics/subpaths':
                        body = json.loads(Conn(srv.port, srv.key).get(path)[1])
                        sp = body.get('subpaths') or []
                        hops = sp[0].get('rawHops') if sp else None
                    r = res['routes'][name] = {'path': path, 'cold': dt, 'bytes': info[0],
                                               'note': info[1], 'load': loadavg()}
                    # Warm at once, while the cold answer is still the one kept.
                    try:
                        ts = warm(srv, path, name, args['warm'], args['conns'], keys)
                    except Failed as e:
                        fail(res, kind, name, path, str(e))
                        continue
                    r['warm'] = ts[len(ts) // 2]
                    r['p90'] = ts[min(len(ts) - 1, int(len(ts) * 0.9))]
                    print(f"  {name}: cold {fmt(dt)}, {info[0]} bytes {info[1]}; warm median "
                          f"{fmt(r['warm'])}, p90 {fmt(r['p90'])}; load {r['load']}", flush=True)
                mem = group_memory(srv.proc.pid)
                res['pss'] = mem[0]
                res['load'] = loadavg()
                print(f"{kind}: done, PSS {mem[0]:.0f} MiB, RSS {mem[1]:.0f} MiB, load "
                      f"{res['load']}", flush=True)
            finally:
                srv.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m, p = out.get('meshgate'), out.get('corescope')
    print(f"\n### {src}\n")
    print(f"Ready after start: meshgate {fmt(m['ready'])}, CoreScope "
          f"{fmt(p['ready']) if p else 'not run'}; PSS after the run: meshgate "
          f"{m['pss']:.0f} MiB, CoreScope {(str(round(p['pss'])) + ' MiB') if p else '-'}.\n")
    print("| route | bytes | meshgate cold | CoreScope cold | cold ratio | meshgate warm "
          "(p50 / p90) | CoreScope warm (p50 / p90) | warm ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    names = list(m['routes'])
    for name in (p['routes'] if p else []):
        if name not in names:
            names.append(name)
    for name in names:
        a = m['routes'].get(name, {})
        b = (p or {}).get('routes', {}).get(name, {}) if p else {}
        mc, mw = cells(a)
        bc, bw = cells(b) if p else ('not run', 'not run')
        size = a.get('bytes') or b.get('bytes') or '-'
        print(f"| `{name}` | {size} | {mc} | {bc} | {ratio(a.get('cold'), b.get('cold'))} | {mw} "
              f"| {bw} | {ratio(a.get('warm'), b.get('warm'))} |")
    skipped = [n for n in names if 'skipped' in m['routes'].get(n, {})]
    if skipped:
        print(f"\nSkipped on meshgate (answer 404): {', '.join(skipped)}")
    print("\n(ratio: CoreScope's time / meshgate's; above 1, meshgate is faster)", flush=True)


def main(argv):
    args = {'warm': 20, 'conns': 4, 'peer_wait': 900, 'freshen': False}
    dbs = []
    a = list(argv)
    while a:
        x = a.pop(0)
        if x == '--warm':
            args['warm'] = int(a.pop(0))
        elif x == '--conns':
            args['conns'] = int(a.pop(0))
        elif x == '--peer-wait':
            args['peer_wait'] = int(a.pop(0))
        elif x == '--freshen':
            args['freshen'] = True
        elif x.startswith('-'):
            sys.exit(__doc__)
        else:
            dbs.append(x)
    if not dbs:
        sys.exit(__doc__)
    keys = ['bench-' + os.urandom(16).hex() for _ in range(max(1, args['conns']))]
    print(f"# bench-analytics.py {' '.join(argv)}: "
          f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {loadavg()}",
          flush=True)
    try:
        for db in dbs:
            bench_db(db, args, keys)
    except Failed as e:
        print(f"bench-analytics.py: FAILED: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    print(f"\nload average at the end: {loadavg()}")
    if FAILURES:
        for f in FAILURES:
            print(f"bench-analytics.py: FAILED: {f}", file=sys.stderr)
        sys.exit(2)


if __name__ == '__main__':
    main(sys.argv[1:])
