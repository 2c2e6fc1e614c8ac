#!/bin/sh
# SPDX-License-Identifier: ISC
#
# meshgate-replica-follow: keeps a live copy of a Litestream replica for meshgate to serve
# (docs/scale-out.md). Every INTERVAL seconds it asks the replica for its position (the list
# of its snapshots and WAL segments); when that changed, it restores the replica into
# COPY.next, turns the result into a rollback-journal file (no -wal, no -shm: nothing is left
# beside it that a reader could mistake for pages of the next copy), stamps it with the time
# it began looking, and moves it over COPY in one rename. When nothing changed it stamps COPY
# again. meshgate with MESHGATE_REPLICA_MAX_LAG_MS > 0 reloads when COPY is a new file and
# reads the stamp as "current as of": its lag is now minus the stamp.
#
# usage: meshgate-replica-follow.sh REPLICA_URL COPY [INTERVAL_S]
#   REPLICA_URL  as litestream takes it: file:///path, s3://bucket/path, sftp://host/path
#   COPY         the file MESHGATE_DB names; on the same file system as its directory
#   INTERVAL_S   seconds between looks (default 1; fractions allowed)
# LITESTREAM names the litestream binary (default: litestream on PATH). Stops on SIGTERM.
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 REPLICA_URL COPY [INTERVAL_S]" >&2
    exit 64
fi
url=$1
copy=$2
interval=${3:-1}
ls=${LITESTREAM:-litestream}
next="$copy.next"
trap 'rm -f "$next" "$next".tmp*; exit 0' TERM INT
last=""
while :; do
    # Taken before looking: whatever the replica held then, the copy will hold.
    t0=$(date +%s.%N)
    pos=$({ "$ls" snapshots "$url" && "$ls" wal "$url"; } 2>/dev/null | cksum) || pos=""
    if [ -n "$pos" ] && [ "$pos" != "$last" ]; then
        rm -f "$next" "$next".tmp*
        if err=$("$ls" restore -o "$next" "$url" 2>&1) &&
            sqlite3 "$next" 'PRAGMA journal_mode=DELETE' >/dev/null; then
            touch -d "@$t0" "$next"
            mv -f "$next" "$copy"
            rm -f "$next".tmp*
            last=$pos
        else
            echo "meshgate-replica-follow: cannot restore $url: $err" >&2
        fi
    elif [ -n "$pos" ] && [ -f "$copy" ]; then
        touch -c -d "@$t0" "$copy"
    fi
    sleep "$interval"
done
