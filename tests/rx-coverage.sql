-- SPDX-License-Identifier: ISC
-- Mobile RX coverage rows for tests/test_rx_coverage.c and its recording of CoreScope's answers
-- (tests/corescope-rx-coverage.json): the two tables CoreScope's ingestor writes when its
-- clientRxCoverage is on, in the columns its server reads, filled from a formula (no random),
-- relative to the time in rx_now(t) (Unix seconds; the caller creates it first and drops it
-- after). Receptions are 2 hours apart, each half an hour off the hour, so that a window of N
-- days (from a now within the hour after t) holds the same rows whenever it is asked.
CREATE TABLE client_receptions (
    id INTEGER PRIMARY KEY,
    rx_pubkey TEXT NOT NULL,
    heard_key TEXT,
    heard_keylen INTEGER,
    lat REAL NOT NULL,
    lon REAL NOT NULL,
    snr REAL,
    rssi INTEGER,
    rx_at TEXT NOT NULL
);
CREATE INDEX idx_client_receptions_heard ON client_receptions(heard_key, lat, lon);
CREATE TABLE client_observers (pubkey TEXT PRIMARY KEY, name TEXT);
-- Four companions: a node of the fixture (its name from nodes), two that named themselves
-- (one with a hidden name), one unknown.
INSERT INTO client_observers VALUES
    ('c0ffee00000000000000000000000000000000000000000000000000000000c0', 'Mobile One'),
    ('abad1dea00000000000000000000000000000000000000000000000000000000', '🚫 Hidden Mobile');
-- 400 receptions around San Jose over 33 days: heard as a node's full key, its 3- and 2-byte
-- prefixes (one upper case, which the per-node query does not match), a 1-byte hop, nothing (''),
-- and a prefix no node has; every ninth without SNR.
WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < 400)
INSERT INTO client_receptions (rx_pubkey, heard_key, heard_keylen, lat, lon, snr, rssi, rx_at)
SELECT CASE n % 4
           WHEN 0 THEN 'ec3433bb3adf1acaee0ce117600b0ca473705486ec666137379a1e8cbb7e75f4'
           WHEN 1 THEN 'c0ffee00000000000000000000000000000000000000000000000000000000c0'
           WHEN 2 THEN 'abad1dea00000000000000000000000000000000000000000000000000000000'
           ELSE 'deadbeef00000000000000000000000000000000000000000000000000000000' END,
       CASE n % 7
           WHEN 0 THEN '1000009e310d729534b70faa33a1abe5cd5e45d594f72f786febccbb770b7e74'
           WHEN 1 THEN 'ec3433'
           WHEN 2 THEN 'ec34'
           WHEN 3 THEN 'EC34'
           WHEN 4 THEN '10'
           WHEN 5 THEN ''
           ELSE 'ffff' END,
       CASE n % 7 WHEN 0 THEN 32 WHEN 1 THEN 3 WHEN 4 THEN 1 WHEN 5 THEN 0 ELSE 2 END,
       37.30 + (n % 13) * 0.0021 + (n % 5) * 0.0003,
       -121.90 + (n % 11) * 0.0027,
       CASE WHEN n % 9 = 0 THEN NULL ELSE ((n * 7) % 31) - 10 + 0.25 END,
       -60 - n % 40,
       strftime('%Y-%m-%dT%H:%M:%SZ', (SELECT t FROM rx_now) - n * 7200 - 1800, 'unixepoch')
FROM i;
-- One spot heard 30 nodes (a cell's list keeps 25), a point past the Mercator limit, and one
-- far away.
WITH RECURSIVE i(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM i WHERE n < 29)
INSERT INTO client_receptions (rx_pubkey, heard_key, heard_keylen, lat, lon, snr, rssi, rx_at)
SELECT 'c0ffee00000000000000000000000000000000000000000000000000000000c0',
       printf('%04x', 40960 + n), 2, 37.5, -121.5, CASE WHEN n % 6 = 0 THEN NULL ELSE n % 5 END,
       -90, strftime('%Y-%m-%dT%H:%M:%SZ', (SELECT t FROM rx_now) - n * 60 - 1800, 'unixepoch')
FROM i;
INSERT INTO client_receptions (rx_pubkey, heard_key, heard_keylen, lat, lon, snr, rssi, rx_at)
VALUES ('deadbeef00000000000000000000000000000000000000000000000000000000', 'ec3433', 3, 89.5,
        12.25, 3.5, -80, strftime('%Y-%m-%dT%H:%M:%SZ', (SELECT t FROM rx_now) - 5400, 'unixepoch')),
       ('c0ffee00000000000000000000000000000000000000000000000000000000c0',
        'ec3433bb3adf1acaee0ce117600b0ca473705486ec666137379a1e8cbb7e75f4', 32, -33.9, 151.2,
        NULL, NULL, strftime('%Y-%m-%dT%H:%M:%SZ', (SELECT t FROM rx_now) - 9000, 'unixepoch'));
