#!/usr/bin/env bash
# What a month's drop after its archive costs the filesystem, not the ledger
# (docs/scale.md, the runs on f78eec0): the same 1.9 GB table (12M rows,
# three indexes) is built and dropped four times, alternating between the
# default tablespace and one in DIR, a folder on another filesystem (say,
# one mounted without `discard`), and each DROP TABLE's time is printed.
# Run as root under scripts/with-postgres.sh, whose server runs as the
# postgres OS user (CREATE TABLESPACE wants its superuser,
# OWED_TEST_SUPERUSER_URL), with DIR on, say, a fresh ext4 on a loop device:
#
#   mkdir -p /mnt/x && truncate -s 8G /tmp/x.img && mkfs.ext4 -q -F /tmp/x.img && mount -o loop /tmp/x.img /mnt/x
#   scripts/with-postgres.sh bash bench/dropcost/dropcost.sh /mnt/x/ts
#   umount /mnt/x && rm /tmp/x.img
#
# To run a whole benchmark's server on that filesystem instead (the retention
# figures of bench/ledgerscale, say), give with-postgres.sh its folder:
# TMPDIR=/mnt/x scripts/with-postgres.sh go run ./bench/ledgerscale …
set -euo pipefail
dir=${1:?usage: dropcost.sh DIR (a folder on the filesystem to compare, created and given to the postgres OS user)}
mkdir -p "$dir" && chown postgres "$dir"
su=${OWED_TEST_SUPERUSER_URL:?run under scripts/with-postgres.sh}
p=(psql -X -q -v ON_ERROR_STOP=1 "$su")
"${p[@]}" -c "CREATE TABLESPACE owed_dropcost LOCATION '$dir'"
trap '"${p[@]}" -c "DROP TABLE IF EXISTS owed_dropcost" -c "DROP TABLESPACE IF EXISTS owed_dropcost"' EXIT
for ts in owed_dropcost pg_default owed_dropcost pg_default; do
  "${p[@]}" -c "CREATE TABLE owed_dropcost TABLESPACE $ts AS
                  SELECT g AS id, md5(g::text) AS a, now() AS t FROM generate_series(1, 12000000) g" \
            -c "CREATE INDEX ON owed_dropcost (id) TABLESPACE $ts" \
            -c "CREATE INDEX ON owed_dropcost (a) TABLESPACE $ts" \
            -c "CREATE INDEX ON owed_dropcost (t) TABLESPACE $ts"
  sync
  size=$("${p[@]}" -At -c "SELECT pg_size_pretty(pg_total_relation_size('owed_dropcost'))")
  echo "tablespace $ts ($([ $ts = pg_default ] && echo "the server's data folder" || echo "$dir")), $size:"
  "${p[@]}" -c '\timing on' -c "DROP TABLE owed_dropcost" | grep Time
done
