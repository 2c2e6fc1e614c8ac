#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""bench-live.py PORT DB CLIENTS ROWS: the live feed's delay (docs/benchmarks.md, issue 26).
CLIENTS WebSocket clients on 127.0.0.1:PORT (meshgate's own feed or CoreScope's server); a
writer (its own SQLite connection, busy timeout 60 s) commits ROWS transmissions, each heard
once by the database's first observer, 0.3 s apart; prints the delay from each commit to each
client's frame of it (p50, p99, max) and how many frames came. Run by hand (no smoke mode)."""
import os, socket, sqlite3, struct, sys, time, base64, select, json
port, db, nclients, rows = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
socks = []
for i in range(nclients):
    s = socket.create_connection(('127.0.0.1', port), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n".encode())
    buf = b''
    while b'\r\n\r\n' not in buf:
        d = s.recv(4096)
        if not d: sys.exit("connection %d closed before the handshake answer" % i)
        buf += d
    head, buf = buf.split(b'\r\n\r\n', 1)
    assert b' 101 ' in head.split(b'\r\n')[0], head
    s.setblocking(False)
    socks.append([s, buf])
time.sleep(2)
c = sqlite3.connect(db, timeout=60)
committed = {}
delays = []
got = 0
next_write = time.time()
written = 0
deadline = None
tag = 'bench%d-' % os.getpid()
def frames(st):
    out = []
    buf = st[1]
    while len(buf) >= 2:
        op = buf[0] & 15; n = buf[1] & 127; h = 2
        if n == 126:
            if len(buf) < 4: break
            n = struct.unpack('>H', buf[2:4])[0]; h = 4
        elif n == 127:
            if len(buf) < 10: break
            n = struct.unpack('>Q', buf[2:10])[0]; h = 10
        if len(buf) < h + n: break
        out.append((op, buf[h:h+n])); buf = buf[h+n:]
    st[1] = buf
    return out
while True:
    now = time.time()
    if written < rows and now >= next_write:
        h = tag + str(written)
        c.execute("INSERT INTO transmissions (raw_hex, hash, first_seen, route_type, payload_type, decoded_json) VALUES ('1100aabb', ?, '2026-12-06T06:00:00.000Z', 1, 5, '{\"text\":\"x\"}')", (h,))
        c.execute("INSERT INTO observations (transmission_id, observer_idx, snr, rssi, path_json, timestamp) SELECT last_insert_rowid(), (SELECT MIN(rowid) FROM observers), 1, -90, '[]', 1796536800")
        c.commit()
        committed[h] = time.time()
        written += 1
        next_write = now + 0.3
        if written == rows:
            deadline = time.time() + 30
    if deadline and (got >= rows * nclients or time.time() > deadline):
        break
    r, _, _ = select.select([st[0] for st in socks], [], [], 0.05)
    rs = set(r)
    for st in socks:
        if st[0] in rs:
            try:
                d = st[0].recv(1 << 20)
            except BlockingIOError:
                continue
            st[1] += d
            t = time.time()
            for op, p in frames(st):
                if op == 1:
                    m = json.loads(p)
                    h = m['data']['hash']
                    if h in committed:
                        delays.append((t - committed[h]) * 1000); got += 1
delays.sort()
def q(p): return delays[min(len(delays) - 1, int(p * len(delays)))] if delays else float('nan')
print(f"clients {nclients} rows {rows} frames {got}/{rows*nclients} delay ms p50 {q(0.5):.0f} p99 {q(0.99):.0f} max {delays[-1] if delays else 0:.0f}")
