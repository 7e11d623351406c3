#!/usr/bin/env bash
# with-postgres.sh CMD [ARGS...]
#
# Starts a throwaway PostgreSQL cluster (initdb into a temporary folder, a free
# port, a unix socket), creates the owner role owed_owner (CREATEDB, and
# CREATEROLE because the migrations create owed's group roles; not a
# superuser), the application role owed_app (not a superuser, no BYPASSRLS;
# the migrations make it a member of owed_runtime) and the token
# administrator owed_admin (made a member of owed_token_admin) and on-call's
# login owed_oncall (made a member of owed_operator), runs CMD with
# these variables exported, and stops the cluster on exit, also when CMD
# fails or the script is interrupted:
#
#   OWED_TEST_DATABASE_URL  owner connection to the database "owed"
#   OWED_TEST_APP_USER      the application role's name
#   OWED_TEST_SUPERUSER_URL the cluster superuser (harness use only)
#   OWED_PG_BIN             the folder holding initdb/pg_ctl
#
# The cluster's folder is made in TMPDIR (default /tmp): set it to put the
# cluster on another filesystem (bench/dropcost says why one might).
#
# When OWED_TEST_DATABASE_URL is already set, CMD runs against that server and
# nothing is started.
set -euo pipefail

if [ -n "${OWED_TEST_DATABASE_URL:-}" ]; then
  exec "$@"
fi

find_pg_bin() {
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return; fi
  local d
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ]; then echo "$d"; return; fi
  done
  echo "with-postgres.sh: initdb not found; install PostgreSQL (apt-get install postgresql) or set OWED_TEST_DATABASE_URL" >&2
  exit 1
}
PG_BIN=$(find_pg_bin)
export OWED_PG_BIN=$PG_BIN

# initdb refuses to run as root: run the cluster as the postgres OS user then.
as_pg=()
if [ "$(id -u)" = 0 ]; then
  if ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  fi
  as_pg=(runuser -u postgres --)
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/owed-pg.XXXXXX")
chmod 755 "$dir"
[ "${#as_pg[@]}" -gt 0 ] && chown postgres "$dir"

port=$(python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
)

cleanup() {
  "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"${as_pg[@]}" "$PG_BIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 ||
  { cat "$dir/initdb.log" >&2; exit 1; }
cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
port = $port
max_connections = 300
shared_buffers = 256MB
fsync = ${OWED_TEST_PG_FSYNC:-off}
synchronous_commit = ${OWED_TEST_PG_FSYNC:-off}
full_page_writes = ${OWED_TEST_PG_FSYNC:-off}
CONF
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null ||
  { cat "$dir/server.log" >&2; exit 1; }

psql_su() { psql -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres "$@"; }
psql_su <<SQL
CREATE ROLE owed_owner LOGIN CREATEDB CREATEROLE NOSUPERUSER NOBYPASSRLS;
-- Dropping a test database WITH (FORCE) ends the app role's connections.
GRANT pg_signal_backend TO owed_owner;
CREATE ROLE owed_app LOGIN NOSUPERUSER NOBYPASSRLS;
CREATE ROLE owed_admin LOGIN NOSUPERUSER NOBYPASSRLS;
CREATE ROLE owed_oncall LOGIN NOSUPERUSER NOBYPASSRLS;
CREATE DATABASE owed OWNER owed_owner;
-- No login but the owner may create temporary objects (docs/security.md).
REVOKE TEMPORARY ON DATABASE owed FROM PUBLIC;
SQL

export OWED_TEST_DATABASE_URL="postgres://owed_owner@/owed?host=$dir&port=$port&sslmode=disable"
export OWED_TEST_SUPERUSER_URL="postgres://postgres@/postgres?host=$dir&port=$port&sslmode=disable"
export OWED_TEST_APP_USER=owed_app
export OWED_TEST_PG_DATA="$dir/data"

set +e
"$@"
status=$?
set -e
exit $status
