#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""A parked request's cost, A/B between two builds (issue 25, item 3: the gates' hand-off).

  tools/bench-handoff.py BUILD_DIR [DB]    (DB: default ../shared/data/...-migrated.db)

Starts BUILD_DIR/meshgate on 127.0.0.1 with one worker, one cold permit and the test hooks
(MESHGATE_TEST_HOOKS=park: X-Test-Hold-Ms holds a reach build on its helper), every reach
request a cold build (MESHGATE_REACH_CACHE_TTL_MS=0), signed in; then measures
  1. a wait's added latency: a build holds the permit 100 ms, a second request joins the line
     30 ms in; the second's answer minus the first's, ROUNDS times (default 40), beside the
     same second requests alone;
  2. a worker with 50 parked requests: its CPU time (all its threads, /proc) over 5 s while
     one build holds the permit.
Stops the server by its pid; everything ends by itself.
"""
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

build = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
db = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    here, '..', '..', 'shared', 'data', 'corescope-e2e-fixture-migrated.db')
rounds = int(os.environ.get('ROUNDS', '40'))
KEY = 'bench-handoff-0123456789abcdef'
tmp = tempfile.mkdtemp()
with open(f'{tmp}/keys', 'w') as f:
    f.write(KEY + '\n')
os.chmod(f'{tmp}/keys', 0o600)
nodes = [r[0] for r in sqlite3.connect(f'file:{db}?mode=ro', uri=True).execute(
    'select public_key from nodes limit 60')]
s = socket.socket()
s.bind(('127.0.0.1', 0))
port = s.getsockname()[1]
s.close()
env = dict(os.environ, MESHGATE_DB=db, MESHGATE_LISTEN=f'127.0.0.1:{port}',
           MESHGATE_SHM_NAME=f'/mg-bench-handoff-{os.getpid()}', MESHGATE_WORKERS='1',
           MESHGATE_REACH_COLD_MAX='1', MESHGATE_REACH_COLD_QUEUE='64',
           MESHGATE_REACH_COLD_WAIT_MS='60000', MESHGATE_REACH_CACHE_TTL_MS='0',
           MESHGATE_TX_SUMMARIES='0', MESHGATE_TEST_HOOKS='park',
           MESHGATE_API_KEYS_FILE=f'{tmp}/keys', MESHGATE_LOG_LEVEL='warn')
server = subprocess.Popen([f'{build}/meshgate'], env=env, stdout=subprocess.DEVNULL,
                          stderr=open(f'{tmp}/log', 'w'))


def send(path, hold_ms=0):
    c = socket.create_connection(('127.0.0.1', port))
    c.sendall((f'GET {path} HTTP/1.1\r\nHost: b\r\nX-Test-Hold-Ms: {hold_ms}\r\n'
               f'Authorization: Bearer {KEY}\r\nConnection: close\r\n\r\n').encode())
    return c


def reach(i, hold_ms=0):
    return send(f'/api/nodes/{nodes[i % len(nodes)]}/reach?days={1 + i % 50}', hold_ms)


def status(c):
    data = b''
    while True:
        d = c.recv(65536)
        if not d:
            break
        data += d
    c.close()
    return int(data.split(b' ', 2)[1]) if data else -1


def quantile(v, q):
    return sorted(v)[int(q * (len(v) - 1))]


try:
    for _ in range(1200):
        try:
            if status(send('/api/healthz')) == 200:
                break
        except OSError:
            pass
        time.sleep(0.05)
    time.sleep(1.0)
    with open(f'/proc/{server.pid}/task/{server.pid}/children') as f:
        worker = int(f.read().split()[0])
    after, alone = [], []
    for i in range(rounds):
        holder = reach(i, 100)
        time.sleep(0.03)
        waiter = reach(i + 7)
        assert status(holder) == 200
        held_end = time.monotonic()
        assert status(waiter) == 200
        after.append((time.monotonic() - held_end) * 1000)
    for i in range(rounds):
        t0 = time.monotonic()
        assert status(reach(i + 7)) == 200
        alone.append((time.monotonic() - t0) * 1000)
    print(f'1. the waiter answered after the holder: median {statistics.median(after):.2f} ms, '
          f'p90 {quantile(after, .9):.2f} ms; the same requests alone: median '
          f'{statistics.median(alone):.2f} ms, p90 {quantile(alone, .9):.2f} ms ({rounds} rounds)')

    def cpu_ticks():
        with open(f'/proc/{worker}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return int(fields[11]) + int(fields[12])

    holder = reach(0, 12000)
    time.sleep(0.2)
    waiters = [reach(1 + i) for i in range(50)]
    time.sleep(1.5)
    c0, t0 = cpu_ticks(), time.monotonic()
    time.sleep(5)
    c1, t1 = cpu_ticks(), time.monotonic()
    tick = os.sysconf('SC_CLK_TCK')
    print(f'2. a worker with 50 parked requests: {100.0 * (c1 - c0) / tick / (t1 - t0):.2f} % '
          f'of a core over {t1 - t0:.1f} s')
    for c in waiters + [holder]:
        c.close()
finally:
    server.terminate()
    server.wait(timeout=60)
    shutil.rmtree(tmp)
