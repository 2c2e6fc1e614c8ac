#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""Issue 23's attacks on the heavy shape, with another client watching (docs/benchmarks.md).

  tools/bench-attack.py [--db DB] [--peer-dir DIR] [--peer-port PORT] [--build DIR]
                        [--seconds S] [--rounds N] [--scenarios LIST] [--json FILE]
                        [--upstream-path PATHS] [--meshgate-env NAME=value]...
                        [--compare LABEL:NAME=value,... [--compare-build DIR]]

  DB: default /tmp/attack/heavy.db, made by
  build/meshgate-fixture --out /tmp/attack/heavy.db --observations 400000 --obs-per-tx 800 \
    --observers 1000

Starts CoreScope's own server (PEER_DIR/corescope-server, through
../shared/corescope/peer/run.sh) on a migrated copy of DB and meshgate (2 workers, every
client anonymous: MESHGATE_ADMIN_NETWORKS elsewhere, everything else default) on the same
copy with MESHGATE_UPSTREAM pointing at it (--peer-port: one already running there, as
CoreScope's server takes minutes to load the heavy shape). Then, ROUNDS times, one scenario after another,
each for SECONDS after 2 s of warm-up, a victim client from 127.0.0.2
  - asks /api/healthz every 10 ms on one kept-alive connection (latency p50 / p95),
  - asks each upstream route (routes meshgate passes to CoreScope: /api/analytics/rf, heavy,
    so an anonymous request of it meets the rate limit, and
    /api/nodes/network-status, not heavy) every second on a new connection, and
  - opens a WebSocket through the tunnel every 2 s (/ws: the 101, then a ping answered by
    CoreScope's pong),
while the attack runs:
  idle       nothing
  slowloris  20 addresses (127.0.0.10-29), each keeping 64 connections (the per-address cap)
             that trickle a header line a second and never end their head; a connection the
             server closes is opened again 100 ms later
  slowbody   6 POSTs from 127.0.0.40 to an upstream route (/api/packets, CoreScope's
             API-key route, which goes to the upstream whenever there is one) announcing 4 KiB
             and sending one byte every 3 s; each one closed is sent again 100 ms later
  websocket  5 addresses (127.0.0.50-54), each keeping 64 connections busy opening
             WebSocket handshakes, holding every tunnel it gets, opening another 10 ms after
             each refusal
  flood:PATH one anonymous client (127.0.0.1) with 16 connections asking PATH in a closed loop
             (build/meshgate-bench)
  floodgz:PATH the same, each request with Accept-Encoding: gzip (as a browser sends it)
Every address is on loopback; every process is started here, stopped by its pid and bounded
in time. The report: per scenario, the medians over the rounds, the CPU that meshgate's
processes and the victim used in the window, and each round's attack counts (with its CPU,
and under "server" what meshgate counted in its segment over the window: connections accepted,
shed, held unread (tarpitted) and refused over the client cap). Exit 2 (and a line saying
which) when a victim's upstream request or WebSocket was refused, when its healthz failed or
measured nothing, or when an attack did nothing.
"""
import argparse
import base64
import json
import os
import resource
import selectors
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VICTIM = '127.0.0.2'


# --- HTTP on raw sockets -------------------------------------------------------------------

def connect(src, port, timeout=10.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(('127.0.0.1', port))
    return s


def read_head(s, buf):
    """Reads until the end of a response head; returns (status, headers, rest) or None."""
    while b'\r\n\r\n' not in buf:
        chunk = s.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, rest = buf.split(b'\r\n\r\n', 1)
    lines = head.decode('latin-1').split('\r\n')
    status = int(lines[0].split(' ', 2)[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(':')
        headers[k.strip().lower()] = v.strip()
    return status, headers, rest


def get_kept_alive(s, path):
    """One GET on a kept-alive connection to meshgate (which always sends Content-Length)."""
    s.sendall(f'GET {path} HTTP/1.1\r\nHost: attack\r\n\r\n'.encode())
    r = read_head(s, b'')
    if r is None:
        raise ConnectionError('closed before the answer')
    status, headers, rest = r
    need = int(headers.get('content-length', '0'))
    while len(rest) < need:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError('closed inside the body')
        rest += chunk
    return status


def get_once(src, port, path, timeout):
    """One GET on a connection of its own, read to its close; returns the status."""
    s = connect(src, port, timeout)
    try:
        s.sendall(f'GET {path} HTTP/1.1\r\nHost: attack\r\nConnection: close\r\n'
                  'Accept-Encoding: gzip\r\n\r\n'.encode())
        r = read_head(s, b'')
        if r is None:
            raise ConnectionError('closed before the answer')
        while s.recv(65536):
            pass
        return r[0]
    finally:
        s.close()


def ws_handshake(path):
    key = base64.b64encode(os.urandom(16)).decode()
    return (f'GET {path} HTTP/1.1\r\nHost: attack\r\nUpgrade: websocket\r\n'
            f'Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n'
            'Sec-WebSocket-Version: 13\r\n\r\n').encode()


def ws_ping_pong(src, port, path, timeout):
    """A WebSocket through the tunnel: 101, a masked ping, its pong. Returns 'ok' or why not."""
    s = connect(src, port, timeout)
    try:
        s.sendall(ws_handshake(path))
        r = read_head(s, b'')
        if r is None:
            return 'closed'
        status, _, rest = r
        if status != 101:
            return str(status)
        mask = os.urandom(4)
        payload = b'victim'
        s.sendall(bytes([0x89, 0x80 | len(payload)]) + mask +
                  bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        buf = rest
        while True:
            while len(buf) < 2:
                chunk = s.recv(65536)
                if not chunk:
                    return 'closed after 101'
                buf += chunk
            op, n = buf[0] & 0x0f, buf[1] & 0x7f
            hdr = 2 + (2 if n == 126 else 8 if n == 127 else 0)
            while len(buf) < hdr:
                buf += s.recv(65536)
            if n >= 126:
                n = int.from_bytes(buf[2:hdr], 'big')
            while len(buf) < hdr + n:
                chunk = s.recv(65536)
                if not chunk:
                    return 'closed in a frame'
                buf += chunk
            # the pong; or our ping echoed (the test upstream, tests/upstream/mg-test-upstream.c,
            # echoes every frame)
            if op == 0xa or (op == 0x9 and buf[hdr:hdr + n] == payload):
                # a close frame of our own, then the socket
                s.sendall(bytes([0x88, 0x80]) + os.urandom(4))
                return 'ok' if buf[hdr:hdr + n] == payload else 'wrong pong'
            buf = buf[hdr + n:]  # a broadcast: skip it
    finally:
        s.close()


# --- the victim ----------------------------------------------------------------------------

def victim(port, seconds, upstream_path):
    end = time.monotonic() + seconds
    out = {'healthz_ms': [], 'healthz_err': 0, 'healthz_not200': 0,
           'upstream': {}, 'upstream_ms': [], 'ws': {}}

    def healthz():
        s = None
        while time.monotonic() < end:
            try:
                if s is None:
                    s = connect(VICTIM, port, 30)
                t = time.perf_counter()
                status = get_kept_alive(s, '/api/healthz')
                out['healthz_ms'].append((time.perf_counter() - t) * 1000)
                if status != 200:
                    out['healthz_not200'] += 1
            except (OSError, ValueError, IndexError):
                out['healthz_err'] += 1
                if s:
                    s.close()
                s = None
            time.sleep(0.01)
        if s:
            s.close()

    def upstream(path):
        while time.monotonic() < end:
            t = time.perf_counter()
            try:
                k = str(get_once(VICTIM, port, path, 30))
                out['upstream_ms'].append((time.perf_counter() - t) * 1000)
            except (OSError, ValueError, IndexError) as e:
                k = 'err:' + type(e).__name__
            k = f'{path} {k}'
            out['upstream'][k] = out['upstream'].get(k, 0) + 1
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - t)))

    def ws():
        while time.monotonic() < end:
            t = time.perf_counter()
            try:
                k = ws_ping_pong(VICTIM, port, '/ws', 30)
            except (OSError, ValueError, IndexError) as e:
                k = 'err:' + type(e).__name__
            out['ws'][k] = out['ws'].get(k, 0) + 1
            time.sleep(max(0.0, 2.0 - (time.perf_counter() - t)))

    threads = [threading.Thread(target=healthz), threading.Thread(target=ws)]
    threads += [threading.Thread(target=upstream, args=(p,)) for p in upstream_path.split(',')]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


# --- the attacks ---------------------------------------------------------------------------

class Holder:
    """Keeps PER connections open from each source address, each driven by callbacks; a
    connection the server closes is opened again after REOPEN seconds."""

    def __init__(self, port, sources, per, reopen):
        self.port, self.per, self.reopen = port, per, reopen
        self.sel = selectors.DefaultSelector()
        self.want = {src: per for src in sources}
        self.retry = []  # (time, src)
        self.stats = {'opened': 0, 'closed_by_server': 0, 'connect_failed': 0}

    def open(self, src):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((src, 0))
            s.connect_ex(('127.0.0.1', self.port))
        except OSError:
            s.close()
            self.stats['connect_failed'] += 1
            self.retry.append((time.monotonic() + self.reopen, src))
            return
        conn = {'sock': s, 'src': src, 'state': 'connecting', 'buf': b'', 'next': 0.0}
        self.sel.register(s, selectors.EVENT_WRITE, conn)
        self.stats['opened'] += 1

    def close(self, conn, by_server, delay=None):
        self.sel.unregister(conn['sock'])
        conn['sock'].close()
        if by_server:
            self.stats['closed_by_server'] += 1
        self.retry.append((time.monotonic() + (self.reopen if delay is None else delay),
                           conn['src']))

    def run(self, seconds, on_connected, on_data, on_tick):
        end = time.monotonic() + seconds
        for src, n in self.want.items():
            for _ in range(n):
                self.open(src)
        while True:
            now = time.monotonic()
            if now >= end:
                break
            due = [r for r in self.retry if r[0] <= now]
            self.retry = [r for r in self.retry if r[0] > now]
            for _, src in due:
                self.open(src)
            for key, ev in self.sel.select(timeout=0.01):
                conn = key.data
                if conn['state'] == 'connecting':
                    err = conn['sock'].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        self.stats['connect_failed'] += 1
                        self.close(conn, False)
                        continue
                    conn['state'] = 'open'
                    self.sel.modify(conn['sock'], selectors.EVENT_READ, conn)
                    on_connected(self, conn)
                    continue
                try:
                    data = conn['sock'].recv(65536)
                except OSError:
                    data = b''
                on_data(self, conn, data)
            on_tick(self, now)
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        return self.stats


def send_some(holder, conn, data):
    try:
        conn['sock'].send(data)
        return True
    except OSError:
        holder.close(conn, True)
        return False


def trickle(port, seconds, sources, per, head, piece, every, counted):
    """PER connections from each of SOURCES send HEAD, then PIECE every EVERY seconds (counted
    as COUNTED); what closes them (an answer's status, or none: shed) is counted, and each
    one closed is opened again 100 ms later."""
    h = Holder(port, sources, per, 0.1)
    h.stats.update({counted: 0, 'answers': {}})

    def connected(h, conn):
        if send_some(h, conn, head):
            conn['next'] = time.monotonic() + every

    def data(h, conn, d):
        k = d[9:12].decode('latin-1') if d.startswith(b'HTTP/1.1 ') else 'closed, no answer'
        h.stats['answers'][k] = h.stats['answers'].get(k, 0) + 1
        h.close(conn, True)

    def tick(h, now):
        for key in list(h.sel.get_map().values()):
            conn = key.data
            if conn['state'] == 'open' and conn['next'] <= now:
                if send_some(h, conn, piece):
                    h.stats[counted] += 1
                    conn['next'] = now + every
    return h.run(seconds, connected, data, tick)


def attack_slowloris(port, seconds):
    """20 addresses, 64 connections each, a header line a second, a head that never ends."""
    return trickle(port, seconds, [f'127.0.0.{i}' for i in range(10, 30)], 64,
                   b'GET /api/healthz HTTP/1.1\r\nHost: attack\r\n', b'X-a: b\r\n', 1.0,
                   'header_lines')


def attack_slowbody(port, seconds):
    """6 POSTs to an upstream route from one address, a byte every 3 s."""
    return trickle(port, seconds, ['127.0.0.40'], 6,
                   b'POST /api/packets HTTP/1.1\r\nHost: attack\r\nContent-Type: '
                   b'application/json\r\nContent-Length: 4096\r\n\r\n{', b' ', 3.0, 'body_bytes')


def attack_websocket(port, seconds):
    """5 addresses, each with 64 connections opening handshakes, holding what they get."""
    h = Holder(port, [f'127.0.0.{i}' for i in range(50, 55)], 64, 0.01)
    h.stats.update({'held_max': 0, 'held': 0, 'answers': {}})

    def connected(h, conn):
        send_some(h, conn, ws_handshake('/ws'))

    def data(h, conn, d):
        if conn['state'] == 'held':
            if not d:
                h.stats['held'] -= 1
                h.close(conn, True)
            return  # frames from the upstream: ignored, the tunnel is held
        conn['buf'] += d
        if not d or b'\r\n\r\n' in conn['buf']:
            k = conn['buf'][9:12].decode('latin-1') if conn['buf'].startswith(b'HTTP/1.1 ') \
                else 'closed'
            h.stats['answers'][k] = h.stats['answers'].get(k, 0) + 1
            if k == '101':
                conn['state'] = 'held'
                h.stats['held'] += 1
                h.stats['held_max'] = max(h.stats['held_max'], h.stats['held'])
            else:
                h.close(conn, True)  # refused: ask again

    return h.run(seconds, connected, data, lambda h, now: None)


# --- the servers ---------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(what, check, limit):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f'bench-attack: FAILED: {what} not ready within {limit} s')


def migrated_copy(db, work, peer_dir):
    out = os.path.join(work, os.path.basename(db) + '.migrated.db')
    if os.path.exists(out) and os.path.getmtime(out) > os.path.getmtime(db):
        return out
    tmp = out + '.tmp'
    for f in (tmp, tmp + '-wal', tmp + '-shm'):
        if os.path.exists(f):
            os.unlink(f)
    src = sqlite3.connect(f'file:{db}?mode=ro', uri=True)
    dst = sqlite3.connect(tmp)
    src.backup(dst)
    src.close()
    dst.close()
    subprocess.run([os.path.join(peer_dir, 'corescope-migrate'), '-db', tmp], check=True,
                   stdout=subprocess.DEVNULL)
    c = sqlite3.connect(tmp)
    c.execute('PRAGMA journal_mode=WAL')
    c.close()
    os.rename(tmp, out)
    for f in ('-wal', '-shm'):
        if os.path.exists(tmp + f):
            os.rename(tmp + f, out + f)
    return out


def http_status(port, path):
    return get_once('127.0.0.1', port, path, 10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--db', default='/tmp/attack/heavy.db')
    ap.add_argument('--peer-dir', default='/work/peer')
    ap.add_argument('--build', default=os.path.join(HERE, '..', 'build'))
    ap.add_argument('--work', default=None, help='where the migrated copy is kept (beside DB)')
    ap.add_argument('--seconds', type=float, default=10)
    ap.add_argument('--warmup', type=float, default=2)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--upstream-path', default='/api/analytics/rf,/api/nodes/network-status',
                    help='routes meshgate passes to CoreScope, comma-separated: each asked '
                    'every second')
    ap.add_argument('--scenarios', default='idle,slowloris,slowbody,websocket,'
                    'flood:/api/packets/396,flood:/api/traces/185419954d604ec0')
    ap.add_argument('--json', default=None)
    ap.add_argument('--peer-port', type=int, default=None,
                    help="CoreScope's server already running on 127.0.0.1:PORT over the "
                    'migrated copy (it takes minutes to load the heavy shape)')
    ap.add_argument('--meshgate-env', action='append', default=[],
                    help='NAME=value for meshgate (repeatable)')
    ap.add_argument('--compare', default=None,
                    help='LABEL:NAME=value[,NAME=value...]: a second meshgate with these '
                    'settings beside the first; each scenario of each round runs against both, '
                    'one after the other (before/after in one run)')
    ap.add_argument('--compare-build', default=None,
                    help="with --compare: the second meshgate's build directory (another "
                    'commit built beside this one), for a before/after of a code change')
    ap.add_argument('mode', nargs='?', default='run')
    ap.add_argument('--port', type=int)
    a = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))

    if a.mode == 'victim':
        print(json.dumps(victim(a.port, a.seconds, a.upstream_path)))
        return
    if a.mode.startswith('attack-'):
        fn = {'attack-slowloris': attack_slowloris, 'attack-slowbody': attack_slowbody,
              'attack-websocket': attack_websocket}[a.mode]
        print(json.dumps(fn(a.port, a.seconds)))
        return

    build = os.path.abspath(a.build)
    work = a.work or os.path.dirname(os.path.abspath(a.db))
    copy = migrated_copy(a.db, work, a.peer_dir)
    procs = []

    def stop_all():
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    try:
        peer_port = a.peer_port
        if not peer_port:
            peer_port = free_port()
            peer_log = open(os.path.join(work, 'peer.log'), 'w')
            procs.append(subprocess.Popen(
                ['bash', os.path.join(HERE, '..', '..', 'shared', 'corescope', 'peer', 'run.sh'),
                 a.peer_dir, copy, str(peer_port)], stdout=peer_log, stderr=subprocess.STDOUT))
        wait_for("CoreScope's server", lambda: b'"ready":true' in subprocess.run(
            ['curl', '-s', '-m', '10', f'http://127.0.0.1:{peer_port}/api/healthz'],
            capture_output=True).stdout, 900)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith('MESHGATE_')}
        env.update({'MESHGATE_DB': copy, 'MESHGATE_LISTEN': f'127.0.0.1:{port}',
                    'MESHGATE_WORKERS': '2', 'MESHGATE_ADMIN_NETWORKS': '10.255.255.0/24',
                    'MESHGATE_UPSTREAM': f'127.0.0.1:{peer_port}',
                    'MESHGATE_SHM_NAME': f'/meshgate-attack-{os.getpid()}',
                    'MESHGATE_LOG_LEVEL': 'error',
                    # The upstream routes are measured as the upstream's: meshgate serves some
                    # of them itself (rf, network-status), so they are preferred to CoreScope.
                    'MESHGATE_UPSTREAM_PREFER': a.upstream_path})
        for kv in a.meshgate_env:
            k, _, v = kv.partition('=')
            env[k] = v
        # (label, port, pid, extra settings): the first as given; --compare a second beside it
        variants = [('', port, {}, build)]
        if a.compare:
            label, _, settings = a.compare.partition(':')
            variants.append((label, free_port(),
                             dict(kv.partition('=')[::2] for kv in settings.split(',') if kv),
                             os.path.abspath(a.compare_build or build)))
        servers = []
        for label, vport, extra, vbuild in variants:
            venv = dict(env, **extra)
            venv['MESHGATE_LISTEN'] = f'127.0.0.1:{vport}'
            venv['MESHGATE_SHM_NAME'] = f'/meshgate-attack-{os.getpid()}{label}'
            mg_log = open(os.path.join(work, f'meshgate{label}.log'), 'w')
            procs.append(subprocess.Popen([os.path.join(vbuild, 'meshgate')], env=venv,
                                          stdout=mg_log, stderr=subprocess.STDOUT))
            servers.append((label, vport, procs[-1].pid,
                            (os.path.join(vbuild, 'meshgate-shm'), venv['MESHGATE_SHM_NAME'])))
            wait_for('meshgate', lambda: http_status(vport, '/api/healthz') == 200, 60)
            # CoreScope computes its analytics once and caches them: the victim measures the
            # cache
            for path in a.upstream_path.split(','):
                wait_for(path, lambda: http_status(vport, path) == 200, 120)
        load = [os.getloadavg()]
        results = {}
        for rnd in range(a.rounds):
            for sc, (label, vport, vpid, shm) in ((sc, v) for sc in a.scenarios.split(',')
                                                   for v in servers):
                key = f'{sc} [{label}]' if label else sc
                results.setdefault(key, []).append(scenario(a, build, vport, sc, vpid, shm))
                sc = key
                r = results[sc][-1]
                v = r['victim']
                print(f'round {rnd + 1} {sc}: healthz p50 {pct(v["healthz_ms"], 50):.2f} '
                      f'p95 {pct(v["healthz_ms"], 95):.2f} ms n {len(v["healthz_ms"])} '
                      f'err {v["healthz_err"]}; upstream {v["upstream"]}; ws {v["ws"]}; '
                      f'meshgate cpu {r["meshgate_cpu_s"]:.2f} s; '
                      f'attack {json.dumps(r["attack"])}', file=sys.stderr, flush=True)
        load.append(os.getloadavg())
    finally:
        stop_all()
    report(a, results, load)


def pct(xs, p):
    if not xs:
        return float('nan')
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(-(-p * len(s) // 100)) - 1))]


def group_cpu_s(pid):
    """CPU seconds (user + system, every thread) of meshgate's master and its workers."""
    tick = os.sysconf('SC_CLK_TCK')
    total = 0
    try:
        with open(f'/proc/{pid}/task/{pid}/children') as f:
            pids = [pid] + [int(x) for x in f.read().split()]
    except OSError:
        return 0.0
    for p in pids:
        try:
            with open(f'/proc/{p}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / tick


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# What the server did with the attack's connections over the window, from its segment.
SERVER_COUNTERS = ('connections_accepted', 'connections_shed', 'connections_tarpitted',
                   'connections_over_client_cap')


def shm_counters(shm):
    """The server's SERVER_COUNTERS, read by its own build's meshgate-shm; {} when it cannot."""
    try:
        out = subprocess.run([shm[0], '--name', shm[1], '--json'], capture_output=True,
                             text=True, timeout=10).stdout
        c = json.loads(out)['counters']
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return {}
    return {k: c.get(k, 0) for k in SERVER_COUNTERS}


def scenario(a, build, port, sc, mg_pid, shm=None):
    me = os.path.abspath(__file__)
    total = a.warmup + a.seconds + 1
    if sc == 'idle':
        atk = None
    elif sc.startswith('flood:') or sc.startswith('floodgz:'):
        path = sc.partition(':')[2]
        gz = ['--header', 'attack:Accept-Encoding: gzip'] if sc.startswith('floodgz:') else []
        atk = subprocess.Popen(
            [os.path.join(build, 'meshgate-bench'), '--target', f'127.0.0.1:{port}',
             '--duration', str(a.seconds + 1), '--warmup', str(a.warmup), '--json',
             '--timeout-ms', '30000', '--stream', f'attack:{path}:closed:16'] + gz,
            stdout=subprocess.PIPE, text=True)
    else:
        atk = subprocess.Popen([sys.executable, me, 'attack-' + sc, '--port', str(port),
                                '--seconds', str(total)], stdout=subprocess.PIPE, text=True)
    if atk:
        time.sleep(a.warmup)
    cpu0 = group_cpu_s(mg_pid)
    srv0 = shm_counters(shm) if shm and atk else {}
    ru0 = children_cpu_s()
    vic = subprocess.run([sys.executable, me, 'victim', '--port', str(port), '--seconds',
                          str(a.seconds), '--upstream-path', a.upstream_path],
                         stdout=subprocess.PIPE, text=True, timeout=a.seconds + 120)
    cpu = group_cpu_s(mg_pid) - cpu0
    srv1 = shm_counters(shm) if srv0 else {}
    ru1 = children_cpu_s()
    attack = {}
    if atk:
        out, _ = atk.communicate(timeout=total + 60)
        attack_cpu = children_cpu_s() - ru1
        attack = json.loads(out) if out.strip() else {'error': f'exit {atk.returncode}'}
        if sc.startswith('flood'):
            st = (attack.get('streams') or [{}])[0]
            attack = {'sent': st.get('sent'), 'rps': st.get('rps'),
                      'errors': st.get('errors', {}).get('total'), **st.get('statuses', {})}
        attack['cpu_cores'] = round(attack_cpu / total, 2)
        if srv1:  # the server's count over the victim's window
            attack['server'] = {k[len('connections_'):]: srv1[k] - srv0[k] for k in srv1}
    # the server settles: the attack's connections are gone before the next scenario
    time.sleep(1)
    return {'victim': json.loads(vic.stdout), 'attack': attack, 'meshgate_cpu_s': cpu,
            'victim_cpu_s': ru1 - ru0}


def report(a, results, load):
    failures = []
    rows = []
    def idle95_of(sc):
        idle = results.get('idle' + (sc[sc.index(' ['):] if ' [' in sc else ''))
        return statistics.median(pct(r['victim']['healthz_ms'], 95) for r in idle) \
            if idle else None
    for sc, runs in results.items():
        idle95 = idle95_of(sc)
        p50 = statistics.median(pct(r['victim']['healthz_ms'], 50) for r in runs)
        p95 = statistics.median(pct(r['victim']['healthz_ms'], 95) for r in runs)
        n = sum(len(r['victim']['healthz_ms']) for r in runs)
        err = sum(r['victim']['healthz_err'] + r['victim']['healthz_not200'] for r in runs)
        up, ws = {}, {}
        for r in runs:
            for k, v in r['victim']['upstream'].items():
                up[k] = up.get(k, 0) + v
            for k, v in r['victim']['ws'].items():
                ws[k] = ws.get(k, 0) + v
        up_ms = [x for r in runs for x in r['victim']['upstream_ms']]
        ratio = p95 / idle95 if idle95 else float('nan')
        cpu = statistics.median(r['meshgate_cpu_s'] for r in runs) / a.seconds
        vcpu = statistics.median(r['victim_cpu_s'] for r in runs) / a.seconds
        rows.append((sc, p50, p95, ratio, cpu, vcpu, n, err, up, pct(up_ms, 50), ws,
                     [r['attack'] for r in runs]))
        if n < 10 * len(runs):
            failures.append(f'{sc}: healthz measured nothing ({n} answers)')
        if err:
            failures.append(f'{sc}: {err} healthz requests failed or not 200')
        if not up or any(not k.endswith(' 200') for k in up):
            failures.append(f'{sc}: upstream requests not all served: {up}')
        if not ws or set(ws) != {'ok'}:
            failures.append(f'{sc}: WebSockets not all served: {ws}')
        if not sc.startswith('idle') and any(not r['attack'] or 'error' in r['attack'] for r in runs):
            failures.append(f'{sc}: the attack reported nothing')
    print(f'load averages (1, 5, 15 min) before: {load[0][0]:.1f} {load[0][1]:.1f} '
          f'{load[0][2]:.1f}; after: {load[-1][0]:.1f} {load[-1][1]:.1f} {load[-1][2]:.1f}')
    print(f'{a.rounds} rounds of {a.seconds:g} s; medians over the rounds\n')
    print('| attack | healthz p50 / p95 ms | p95 / idle | CPU (cores): meshgate, victim '
          '| healthz answers (failed) | upstream answers (p50 ms) | WebSockets '
          '| the attack, each round |')
    print('|---|---|---|---|---|---|---|---|')
    for sc, p50, p95, ratio, cpu, vcpu, n, err, up, up50, ws, atk in rows:
        print(f'| {sc} | {p50:.2f} / {p95:.2f} | {ratio:.2f} | {cpu:.2f}, {vcpu:.2f} '
              f'| {n} ({err}) | '
              f'{", ".join(f"{k}: {v}" for k, v in sorted(up.items()))} ({up50:.0f}) | '
              f'{", ".join(f"{k}: {v}" for k, v in sorted(ws.items()))} | '
              f'{"; ".join(json.dumps(x, sort_keys=True) for x in atk)} |')
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'load': load, 'results': results}, f)
    if failures:
        for f in failures:
            print('bench-attack: FAILED: ' + f, file=sys.stderr)
        sys.exit(2)


if __name__ == '__main__':
    main()
