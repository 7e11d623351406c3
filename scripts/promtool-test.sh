#!/usr/bin/env bash
# promtool-test.sh
#
# Checks deploy/prometheus/alerts.yml (`promtool check rules`) and runs its
# unit tests (`promtool test rules deploy/prometheus/alerts_test.yml`).
#
# When promtool is missing and we run as root, Debian's `prometheus` package
# is installed with apt-get first, so scripts/test.sh can call this before
# `go test` and the Go test that pipes /metrics through `promtool check
# metrics` runs instead of skipping. Without root it fails and says what to
# install.
set -euo pipefail

cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "promtool-test.sh: promtool not found; install it (apt-get install prometheus, or a release tarball from prometheus.io) and re-run" >&2
    exit 1
  fi
  echo "promtool-test.sh: promtool not found; installing Debian's prometheus package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # The package's post-install starts no daemon in a container without
  # systemd; only the promtool binary is wanted here.
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts_test.yml
