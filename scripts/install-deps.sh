#!/usr/bin/env bash
# install-deps.sh: installs what the tests need from outside Go and a fresh
# machine may lack, and is quick (a few lookups) when everything is there:
#
#   PostgreSQL's server binaries  initdb, pg_ctl, psql: every database   Debian postgresql
#                                 test
#   headless Chromium             the console's browser tests            Debian chromium
#   promtool                      the alert rules, /metrics lint         Debian prometheus
#   owed-sqs-server               the sqs backend's contract tests,      scripts/install-sqs.sh
#                                 its drill and dev stack                (local-aws-sqs, npm)
#
# plus the Go modules of deploy/check. scripts/test.sh (make test) runs it
# first, and .ci/run too. As root it installs what is missing (apt-get, then
# install-sqs.sh); as anyone else it changes nothing and, when a piece is
# missing, exits 1 naming each one and the command that installs it.
set -euo pipefail
cd "$(dirname "$0")/.."

apt=()     # Debian packages to install
apt_bare=() # ... without their recommended packages
missing=() # what is missing, for the message without root

if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt+=(postgresql)
  missing+=("PostgreSQL's server binaries (initdb)")
elif ! command -v psql >/dev/null 2>&1; then
  # with-postgres.sh and the dev cluster's access test run psql from PATH.
  apt+=(postgresql-client)
  missing+=("psql")
fi
# The console's browser tests (internal/console) look for OWED_CHROMIUM,
# else chromium, chromium-browser or google-chrome on PATH.
if [ -z "${OWED_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1 &&
  ! command -v chromium-browser >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then
  apt+=(chromium)
  missing+=("Chromium (or set OWED_CHROMIUM to a browser binary)")
fi
if ! command -v promtool >/dev/null 2>&1; then
  # Only the promtool binary is wanted, not the server's recommended
  # exporters (its post-install starts no daemon without systemd).
  apt_bare+=(prometheus)
  missing+=("promtool")
fi
# The sqs backend's tests, its drill and dev stack run owed-sqs-server from
# PATH.
need_sqs=
if ! command -v owed-sqs-server >/dev/null 2>&1; then
  need_sqs=1
  missing+=("the local SQS server owed-sqs-server")
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt+=(nodejs npm)
  fi
fi

if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" != 0 ]; then
  {
    echo "install-deps.sh: the tests need what this machine lacks:"
    for m in "${missing[@]}"; do echo "  - $m"; done
    echo "install it with:"
    if [ "${#apt[@]}" -gt 0 ]; then echo "  sudo apt-get install ${apt[*]}"; fi
    if [ "${#apt_bare[@]}" -gt 0 ]; then echo "  sudo apt-get install --no-install-recommends ${apt_bare[*]}"; fi
    if [ -n "$need_sqs" ]; then echo "  sudo scripts/install-sqs.sh   # or, without root: OWED_SQS_PREFIX=\$HOME/.local scripts/install-sqs.sh, with ~/.local/bin on PATH"; fi
    echo "or run this script as root, which installs them all."
  } >&2
  exit 1
fi
if [ "$(( ${#apt[@]} + ${#apt_bare[@]} ))" -gt 0 ]; then
  echo "install-deps.sh: installing ${apt[*]} ${apt_bare[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  if [ "${#apt[@]}" -gt 0 ]; then apt-get install -y -qq "${apt[@]}" >/dev/null; fi
  if [ "${#apt_bare[@]}" -gt 0 ]; then apt-get install -y -qq --no-install-recommends "${apt_bare[@]}" >/dev/null; fi
fi
if [ -n "$need_sqs" ]; then
  scripts/install-sqs.sh
fi

# deploy/check, a module of its own: the Kubernetes libraries its checks of
# the manifests use (kustomize, k8s.io/api, the Pod Security evaluator).
(cd deploy/check && go mod download)
