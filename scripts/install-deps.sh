#!/usr/bin/env bash
# install-deps.sh: installs what the tests need and a fresh machine may lack
# (PostgreSQL server binaries, headless Chromium for the console's browser
# tests, the local SQS server). Debian and npm packages;
# needs root for apt-get.
set -euo pipefail
need=()
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
# The console's browser tests (internal/console) drive Debian's chromium.
if ! command -v chromium >/dev/null 2>&1; then
  need+=(chromium)
fi
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps.sh: missing ${need[*]}; run as root or: sudo apt-get install ${need[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

# The local SQS-compatible server the sqs backend's contract tests start
# (local-aws-sqs from the npm registry; see scripts/install-sqs.sh).
if ! command -v owed-sqs-server >/dev/null 2>&1; then
  "$(dirname "$0")/install-sqs.sh"
fi

# deploy/check, a module of its own: the Kubernetes libraries its checks of
# the manifests use (kustomize, k8s.io/api, the Pod Security evaluator).
(cd "$(dirname "$0")/../deploy/check" && go mod download)
