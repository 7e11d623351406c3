#!/usr/bin/env bash
# promtool-test.sh
#
# Checks deploy/prometheus/alerts.yml (`promtool check rules`) and runs its
# unit tests (`promtool test rules deploy/prometheus/alerts_test.yml`).
# promtool comes with Debian's prometheus package, which
# scripts/install-deps.sh installs (make test runs it first).
set -euo pipefail

cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool-test.sh: promtool not found: run scripts/install-deps.sh as root, or: sudo apt-get install --no-install-recommends prometheus" >&2
  exit 1
fi

promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts_test.yml
