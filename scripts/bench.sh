#!/usr/bin/env bash
# bench.sh — every benchmark, one table (make bench).
#
# Builds bin/sweeper, bin/worker and the benchmark programs into a temporary
# folder (so the processes measured are built from this tree), starts a
# throwaway PostgreSQL with fsync and synchronous_commit on (realistic
# commit cost; OWED_TEST_PG_FSYNC=off to compare), loads pg_stat_statements
# in it (statements per delivery), and runs bench/all, which prints the
# combined table. The end-to-end and provider-limited runs repeat on every
# queue backend: rest (the emulator), jetstream (an embedded NATS server) and
# sqs (owed-sqs-server from scripts/install-sqs.sh; skipped when it is not on
# PATH; indicative only), and bench/burst plays a strict once-a-minute cron
# over a 100,000-row burst. bench/river runs River (bench/peers/river, its
# own module) on the e2e work right after owed's e2e runs, with its defaults
# and tuned, and a table of owed beside River follows the main one.
# BENCH_QUICK=1 runs smaller sizes (about 9 minutes instead of about 30).
# Arguments go to bench/all, e.g. -only e2e,limited, -only burst, or owed
# beside River alone: BENCH_QUICK=1 scripts/bench.sh -only e2e,river
# bench/immediate posts rows due now through the API and never calls the cron;
# bench/limitedsweep is the provider-limited run under a minute cron and the
# fast path, with a requeue backlog. Issue 15's four benchmarks alone:
#   scripts/bench.sh -only burst,immediate,e2e,limitedsweep
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(mktemp -d /tmp/owed-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/" ./cmd/... ./bench/...
# River, the peer bench/river runs beside owed's e2e, is a module of its own
# (River and pgx stay out of owed's go.mod).
go build -C bench/peers/river -o "$dir/river-peer" .

export OWED_TEST_PG_FSYNC=${OWED_TEST_PG_FSYNC:-on}
quick=()
[ "${BENCH_QUICK:-0}" != 0 ] && quick=(-quick)

# Runs inside with-postgres.sh: shared_preload_libraries needs a restart,
# which keeps the cluster's folder, socket and port.
inner=$(cat <<'SH'
set -euo pipefail
psql -X -q -d "$OWED_TEST_SUPERUSER_URL" -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
as_pg=(); [ "$(id -u)" = 0 ] && as_pg=(runuser -u postgres --)
"${as_pg[@]}" "$OWED_PG_BIN/pg_ctl" -D "$OWED_TEST_PG_DATA" -l "$OWED_TEST_PG_DATA/../server.log" -w -m fast restart >/dev/null
psql -X -q -d "$OWED_TEST_SUPERUSER_URL" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
echo "bench: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(psql -X -At -d "$OWED_TEST_SUPERUSER_URL" -c "SELECT version()" | cut -d' ' -f1-2)," \
  "fsync=$(psql -X -At -d "$OWED_TEST_SUPERUSER_URL" -c 'SHOW fsync')" \
  "synchronous_commit=$(psql -X -At -d "$OWED_TEST_SUPERUSER_URL" -c 'SHOW synchronous_commit')" \
  "shared_buffers=$(psql -X -At -d "$OWED_TEST_SUPERUSER_URL" -c 'SHOW shared_buffers')" >&2
exec "$@"
SH
)
scripts/with-postgres.sh bash -c "$inner" bench "$dir/all" -dir "$dir" "${quick[@]}" "$@"
