#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""bench-live.py: the live feed's delay and memory (docs/benchmarks.md, issue 26).

  bench-live.py PORT DB CLIENTS ROWS
      CLIENTS WebSocket clients on 127.0.0.1:PORT (a server already running over DB);
      a writer commits ROWS transmissions to DB; prints the delay from each commit to each
      client's frame of it (p50, p99, max).

  bench-live.py --run [--rounds R] [--clients 100,1000] [--rows N] [--poll-ms MS] SRC_DB
      the whole comparison in one run: each round starts meshgate (build/, or MESHGATE_BUILD)
      and, when PEER_DIR names CoreScope's server build (corescope-server, corescope-migrate),
      CoreScope's server, alternating which goes first, each over its own freshened, migrated
      copy of SRC_DB; for each CLIENTS count it connects the clients, records the server's
      memory (PSS and RSS summed over the process and its descendants, from
      /proc/PID/smaps_rollup) before and with the clients, then writes ROWS rows and times
      every frame. Prints one line per measurement and a table of the medians over rounds.

The clients are spread over source addresses 127.0.0.1 .. 127.0.0.100 (a few per address,
inside meshgate's default MESHGATE_LIVE_PER_CLIENT and MESHGATE_MAX_CONNS_PER_CLIENT), and the
script raises its own open-file limit to the hard limit. A writer's row is a transmission with
one observation by the database's first observer, 0.3 s apart, on its own SQLite connection
(busy timeout 60 s).

Every client must get every row's frame exactly once: a refused handshake, a client closed by
the server, a frame missing 30 s after the last commit, or a duplicate fails the run (exit 2,
naming the server, the client count and what went wrong). The load average is printed beside
every measurement.
"""
import base64
import json
import multiprocessing
import os
import resource
import select
import shutil
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time

from benchlib import corescope_argv, free_port, group_memory, loadavg, meshgate_env, stop

ADDRESSES = 100  # 127.0.0.1 .. 127.0.0.100


class Failed(Exception):
    pass


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise Failed(f"{need} open files needed, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def connect_clients(port, n, first=0):
    """n WebSocket clients on / (numbered from first); each [socket, unparsed bytes,
    {hash: time read}, why it was closed]."""
    clients = []
    for i in range(first, first + n):
        src = '127.0.0.%d' % (1 + i % ADDRESSES)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(30)
        s.bind((src, 0))
        s.connect(('127.0.0.1', port))
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                  f"Sec-WebSocket-Key: {key}\r\n\r\n".encode())
        buf = b''
        while b'\r\n\r\n' not in buf:
            try:
                d = s.recv(4096)
            except OSError as e:
                raise Failed(f"client {i} (from {src}): no handshake answer ({e}; "
                             f"{len(clients)} connected)")
            if not d:
                raise Failed(f"client {i} (from {src}) closed before the handshake's answer "
                             f"({len(clients)} connected)")
            buf += d
        head, buf = buf.split(b'\r\n\r\n', 1)
        status = head.split(b'\r\n')[0]
        if b' 101 ' not in status:
            raise Failed(f"client {i} (from {src}): handshake answered {status.decode()!r} "
                         f"({len(clients)} connected): {head.decode(errors='replace')[:300]}")
        s.setblocking(False)
        clients.append([s, buf, {}, None])
    return clients


def frames(st):
    out = []
    buf = st[1]
    while len(buf) >= 2:
        op = buf[0] & 15
        n = buf[1] & 127
        h = 2
        if n == 126:
            if len(buf) < 4:
                break
            n = struct.unpack('>H', buf[2:4])[0]
            h = 4
        elif n == 127:
            if len(buf) < 10:
                break
            n = struct.unpack('>Q', buf[2:10])[0]
            h = 10
        if len(buf) < h + n:
            break
        out.append((op, buf[h:h + n]))
        buf = buf[h + n:]
    st[1] = buf
    return out


def pong(st, payload):
    # A masked pong (a client's frames are masked), sent whole or not at all: tiny.
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload[:125]))
    try:
        st[0].send(bytes([0x8A, 0x80 | len(body)]) + mask + body)
    except OSError:
        pass


def reader(port, first, count, rows, tag, pipe):
    """A client process: clients first .. first+count-1; each text frame of a row of tag is
    recorded with the time it was read. Reports ('ready', n) or ('failed', why); then reads
    until every client has rows rows, or the deadline the parent sends ('end', deadline)
    passes; sends its record, and closes its clients when the parent says 'close'."""
    try:
        clients = connect_clients(port, count, first)
    except (Failed, OSError) as e:
        pipe.send(('failed', str(e)))
        return
    pipe.send(('ready', count))
    ep = select.epoll()
    by_fd = {}
    for st in clients:
        ep.register(st[0].fileno(), select.EPOLLIN)
        by_fd[st[0].fileno()] = st
    seen = []  # (hash, time read)
    dup = foreign = complete = 0
    deadline = None
    while complete < count:
        if deadline is None and pipe.poll():
            deadline = pipe.recv()[1]
        if deadline is not None and time.time() > deadline:
            break
        for fd, _ in ep.poll(0.02):
            st = by_fd[fd]
            try:
                d = st[0].recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError as e:
                d = b''
                st[3] = st[3] or 'error %s' % e
            t = time.time()
            if not d:
                st[3] = st[3] or 'closed by the server (no close frame)'
                ep.unregister(fd)
                continue
            st[1] += d
            for op, p in frames(st):
                if op == 1:
                    h = (json.loads(p).get('data') or {}).get('hash') or ''
                    if not h.startswith(tag):
                        foreign += 1
                    elif h in st[2]:
                        dup += 1
                    else:
                        st[2][h] = t
                        seen.append((h, t))
                        if len(st[2]) == rows:
                            complete += 1
                elif op == 8:
                    code = struct.unpack('>H', p[:2])[0] if len(p) >= 2 else None
                    st[3] = st[3] or 'close frame %s %r' % (code, p[2:].decode(errors='replace'))
                elif op == 9:
                    pong(st, p)
    ep.close()
    if deadline is None:
        pipe.recv()
    pipe.send(('done', {'seen': seen, 'dup': dup, 'foreign': foreign,
                        'closed': [st[3] for st in clients if st[3]],
                        'short': sum(1 for st in clients if len(st[2]) < rows)}))
    pipe.recv()  # 'close'
    close_clients(clients)


class Readers:
    """nclients clients over procs reader processes (more processes than the server's workers,
    so that on a loaded machine the clients' reading is not what is measured)."""

    def __init__(self, port, nclients, rows, procs):
        self.tag = 'bench%d-%d-' % (os.getpid(), int(time.time() * 1000))
        self.rows, self.n = rows, nclients
        ctx = multiprocessing.get_context('fork')
        self.kids = []
        per = -(-nclients // procs)
        for first in range(0, nclients, per):
            a, b = ctx.Pipe()
            pr = ctx.Process(target=reader, args=(port, first, min(per, nclients - first), rows,
                                                  self.tag, b))
            pr.start()
            self.kids.append((pr, a))
        for pr, a in self.kids:
            if not a.poll(300):
                self.close()
                raise Failed(f"{nclients} clients: a reader did not connect its clients in 300 s")
            what, info = a.recv()
            if what == 'failed':
                self.close()
                raise Failed(info)

    def measure(self, db):
        """Writes the rows, times every client's frame of each; a result dict. Fails (Failed)
        unless every client got every row exactly once."""
        c = sqlite3.connect(db, timeout=60)
        committed = {}
        try:
            for i in range(self.rows):
                h = self.tag + str(i)
                c.execute("INSERT INTO transmissions (raw_hex, hash, first_seen, route_type, "
                          "payload_type, decoded_json) VALUES ('1100aabb', ?, "
                          "strftime('%Y-%m-%dT%H:%M:%fZ','now'), 1, 5, '{\"text\":\"x\"}')",
                          (h,))
                c.execute("INSERT INTO observations (transmission_id, observer_idx, snr, rssi, "
                          "path_json, timestamp) SELECT last_insert_rowid(), "
                          "(SELECT MIN(rowid) FROM observers), 1, -90, '[]', "
                          "CAST(strftime('%s','now') AS INTEGER)")
                c.commit()
                committed[h] = time.time()
                time.sleep(0.3)
        finally:
            c.close()
        deadline = time.time() + 30
        for pr, a in self.kids:
            a.send(('end', deadline))
        delays, dup, foreign, closed, short = [], 0, 0, [], 0
        for pr, a in self.kids:
            if not a.poll(120):
                raise Failed(f"{self.n} clients: a reader did not report within 120 s")
            r = a.recv()[1]
            delays += [(t - committed[h]) * 1000 for h, t in r['seen'] if h in committed]
            dup += r['dup']
            foreign += r['foreign']
            closed += r['closed']
            short += r['short']
        got = len(delays)
        expected = self.rows * self.n
        delays.sort()

        def q(p):
            return delays[min(len(delays) - 1, int(p * len(delays)))] if delays else float('nan')

        if got != expected or dup or closed:
            why = closed[0] if closed else ''
            raise Failed(f"{self.n} clients: {got}/{expected} frames, {expected - got} missing "
                         f"({short} clients short), {dup} duplicates, {len(closed)} clients "
                         f"closed" + (f" (first: {why})" if why else ''))
        return {'clients': self.n, 'rows': self.rows, 'frames': got, 'expected': expected,
                'p50': q(0.5), 'p99': q(0.99), 'max': delays[-1], 'other_frames': foreign}

    def close(self):
        for pr, a in self.kids:
            try:
                a.send('close')
            except OSError:
                pass
        for pr, a in self.kids:
            pr.join(30)
            if pr.is_alive():
                pr.kill()
                pr.join()


def close_clients(clients):
    for st in clients:
        try:
            st[0].close()
        except OSError:
            pass


# ---- --run: both servers in one alternating run ----

def http_get(port, path, timeout=5):
    s = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        buf = b''
        while True:
            d = s.recv(65536)
            if not d:
                break
            buf += d
    finally:
        s.close()
    head, _, body = buf.partition(b'\r\n\r\n')
    return int(head.split()[1]), body


class Server:
    def __init__(self, kind, work, src, poll_ms):
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix=kind + '-', dir=work)
        self.db = os.path.join(self.dir, 'db.sqlite')
        peer = os.environ.get('PEER_DIR')
        # A freshened copy (the newest rows are now), migrated by CoreScope's own tool as its
        # ingestor does, in WAL mode: what a live site's file looks like.
        subprocess.run([os.path.join(BUILD, 'meshgate-fixture'), '--freshen', src, '--out',
                        self.db], check=True, stdout=subprocess.DEVNULL)
        if peer:
            subprocess.run([os.path.join(peer, 'corescope-migrate'), '-db', self.db], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sqlite3.connect(self.db).execute('PRAGMA journal_mode=WAL').close()
        self.port = free_port()
        self.log = open(os.path.join(self.dir, 'server.log'), 'w')
        if kind == 'meshgate':
            env = meshgate_env(BUILD, self.db, self.port, 'bench-live',
                               MESHGATE_WORKERS=str(WORKERS), MESHGATE_LIVE_POLL_MS=str(poll_ms),
                               # 2 workers x the default 256 hold 512 connections, and live
                               # clients at most 3/4 of them: a live client holds one of its
                               # worker's for as long as it stays.
                               MESHGATE_MAX_CONNS_PER_WORKER='1024')
            for k, v in os.environ.items():  # BENCH_LIVE_MESHGATE_X=v: MESHGATE_X=v
                if k.startswith('BENCH_LIVE_MESHGATE_'):
                    env[k[len('BENCH_LIVE_'):]] = v
            self.env = {k: v for k, v in env.items() if k.startswith('MESHGATE_')}
            self.proc = subprocess.Popen([os.path.join(BUILD, 'meshgate')], env=env,
                                         stdout=self.log, stderr=self.log)
        else:
            cfg = os.path.join(self.dir, 'config')
            os.mkdir(cfg)
            self.proc = subprocess.Popen(
                corescope_argv(peer, self.db, self.port, cfg, '-poll-ms', str(poll_ms)),
                env=dict(os.environ, CORESCOPE_LISTEN_HOST='127.0.0.1'), stdout=self.log,
                stderr=self.log)
        t0 = time.time()
        while True:
            if self.proc.poll() is not None:
                raise Failed(f"{kind} exited at start: see {self.log.name}")
            try:
                st, body = http_get(self.port, '/api/healthz')
                if st == 200 and (kind == 'meshgate' or b'"ready":true' in body):
                    break
            except OSError:
                pass
            if time.time() - t0 > 300:
                raise Failed(f"{kind} was not ready within 300 s")
            time.sleep(0.1)

    def stop(self):
        stop(self.proc, self.log)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def run(argv):
    rounds, counts, rows, poll = 3, [100, 1000], 20, 1000
    args = list(argv)
    src = None
    while args:
        a = args.pop(0)
        if a == '--rounds':
            rounds = int(args.pop(0))
        elif a == '--clients':
            counts = [int(x) for x in args.pop(0).split(',')]
        elif a == '--rows':
            rows = int(args.pop(0))
        elif a == '--poll-ms':
            poll = int(args.pop(0))
        elif src is None:
            src = a
        else:
            sys.exit(__doc__)
    if not src:
        sys.exit(__doc__)
    raise_nofile(max(counts) + 256)
    kinds = ['meshgate']
    peer = os.environ.get('PEER_DIR')
    if peer and os.access(os.path.join(peer, 'corescope-server'), os.X_OK):
        kinds.append('corescope')
    else:
        print("PEER_DIR unset or without corescope-server: meshgate only", flush=True)
    work = tempfile.mkdtemp(prefix='bench-live-')
    results = {}
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, {rounds} rounds, "
          f"clients {counts}, {rows} rows, poll {poll} ms, load {loadavg()}", flush=True)
    try:
        for r in range(rounds):
            order = kinds if r % 2 == 0 else kinds[::-1]
            for kind in order:
                srv = Server(kind, work, src, poll)
                try:
                    if kind == 'meshgate' and r == 0:
                        print(f"# meshgate: {' '.join(f'{k}={v}' for k, v in sorted(srv.env.items()) if k not in ('MESHGATE_DB', 'MESHGATE_LISTEN', 'MESHGATE_SHM_NAME'))}",
                              flush=True)
                    for n in counts:
                        time.sleep(1)
                        pss0, rss0, _ = group_memory(srv.proc.pid)
                        readers = Readers(srv.port, n, rows, READERS)
                        try:
                            time.sleep(2)
                            pss1, rss1, procs = group_memory(srv.proc.pid)
                            load = loadavg()
                            res = readers.measure(srv.db)
                            pss2, rss2, _ = group_memory(srv.proc.pid)
                        except Failed as e:
                            raise Failed(f"{kind}, round {r + 1}: {e}")
                        finally:
                            readers.close()
                        res.update(pss0=pss0, rss0=rss0, pss1=max(pss1, pss2),
                                   rss1=max(rss1, rss2), procs=procs, load=load)
                        results.setdefault((kind, n), []).append(res)
                        print(f"round {r + 1} {kind:9} clients {n:5} frames {res['frames']}/"
                              f"{res['expected']} p50 {res['p50']:.0f} ms p99 {res['p99']:.0f} ms "
                              f"max {res['max']:.0f} ms; PSS {pss0:.1f} -> {res['pss1']:.1f} MiB, "
                              f"RSS {rss0:.1f} -> {res['rss1']:.1f} MiB ({procs} processes); "
                              f"load {load}", flush=True)
                finally:
                    srv.stop()
    except Failed as e:
        print(f"bench-live.py: FAILED: {e}", file=sys.stderr, flush=True)
        print(f"(servers' files kept in {work})", file=sys.stderr)
        sys.exit(2)
    shutil.rmtree(work, ignore_errors=True)
    print(f"\nmedians of {rounds} rounds (every client got every frame once):\n")
    print("| server | clients | frames | p50 | p99 | max | PSS idle | PSS with clients | RSS with clients |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in counts:
        for kind in kinds:
            rs = results[(kind, n)]
            print(f"| {kind} | {n} | {sum(x['frames'] for x in rs)} / {sum(x['expected'] for x in rs)} "
                  f"| {median([x['p50'] for x in rs]):.0f} ms | {median([x['p99'] for x in rs]):.0f} ms "
                  f"| {median([x['max'] for x in rs]):.0f} ms | {median([x['pss0'] for x in rs]):.1f} MiB "
                  f"| {median([x['pss1'] for x in rs]):.1f} MiB | {median([x['rss1'] for x in rs]):.1f} MiB |")
    print(f"\nload average at the end: {loadavg()}")


BUILD = os.environ.get('MESHGATE_BUILD', 'build')
WORKERS = int(os.environ.get('BENCH_LIVE_WORKERS', '2'))
READERS = int(os.environ.get('BENCH_LIVE_READERS', '8'))

if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] == '--run':
        run(sys.argv[2:])
    elif len(sys.argv) == 5:
        port, db, n, rows = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        raise_nofile(n + 256)
        try:
            readers = Readers(port, n, rows, READERS)
            try:
                res = readers.measure(db)
            finally:
                readers.close()
        except Failed as e:
            sys.exit(f"bench-live.py: FAILED: {e}")
        print(f"clients {n} rows {rows} frames {res['frames']}/{res['expected']} delay ms "
              f"p50 {res['p50']:.0f} p99 {res['p99']:.0f} max {res['max']:.0f}; load {loadavg()}")
    else:
        sys.exit(__doc__)
