#!/usr/bin/env bash
# test.sh: what `make test` and CI run. Starts a throwaway PostgreSQL (see
# with-postgres.sh), then vets and runs every test with the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."

gofmt_out=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$gofmt_out" ]; then
  echo "gofmt would change: $gofmt_out" >&2
  exit 1
fi
go vet ./...
# Alert rules and their unit tests (installs promtool from Debian when missing).
scripts/promtool-test.sh
exec scripts/with-postgres.sh go test -race -count=1 -timeout 20m ./... "$@"
