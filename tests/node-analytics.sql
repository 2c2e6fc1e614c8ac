-- SPDX-License-Identifier: ISC
-- What CoreScope's end-to-end fixture lacks for node analytics, added to a test's copy by
-- tests/test_rx_coverage.c and to the copy its recording of CoreScope's answers read
-- (tests/corescope-rx-coverage.json): a second observation of every third transmission (the next
-- observer, half a minute earlier, its path one hop longer by repeating its first hop, so that
-- it is the "best" one and the node's packets stay the same), and SNR and RSSI for every
-- observation (the fixture has none): values from the row's id (no random), every fifth
-- observation without SNR and every seventh without RSSI.
INSERT INTO observations (transmission_id, observer_idx, direction, snr, rssi, score, path_json,
                          timestamp, resolved_path, raw_hex)
SELECT transmission_id,
       coalesce((SELECT min(rowid) FROM observers WHERE rowid > coalesce(o.observer_idx, 0)),
                (SELECT min(rowid) FROM observers)),
       direction, NULL, NULL, score,
       CASE WHEN json_valid(path_json) AND json_type(path_json) = 'array'
                 AND json_array_length(path_json) > 0
            THEN json_insert(path_json, '$[#]', json_extract(path_json, '$[0]'))
            ELSE path_json END,
       timestamp - 30, resolved_path, raw_hex
FROM observations o WHERE id % 3 = 0;
UPDATE observations
SET snr = CASE WHEN id % 5 = 0 THEN NULL ELSE ((id * 7) % 41) / 4.0 - 3 END,
    rssi = CASE WHEN id % 7 = 0 THEN NULL ELSE -40 - (id * 3) % 70 END;
