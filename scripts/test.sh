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
# deploy/check is a module of its own (the Kubernetes libraries stay out of
# owed's go.mod): the manifests rendered, strictly decoded and evaluated
# against the restricted Pod Security standard.
(cd deploy/check && go vet ./... && go test -race -count=1 ./...)
# bench/peers/river is a module of its own too (River and pgx stay out of
# owed's go.mod): built and vetted so the peer benchmark cannot rot; it runs
# under `make bench`.
(cd bench/peers/river && go build -o /dev/null . && go vet ./...)
# Alert rules and their unit tests (installs promtool from Debian when missing).
scripts/promtool-test.sh
exec scripts/with-postgres.sh go test -race -count=1 -timeout 20m ./... "$@"
