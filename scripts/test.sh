#!/usr/bin/env bash
# test.sh: what `make test` and CI run. Installs what the tests need from
# outside Go (install-deps.sh: as root it installs what is missing, else it
# fails naming each piece and its command), starts a throwaway PostgreSQL
# (see with-postgres.sh), then vets and runs every test with the race
# detector. OWED_TEST_REQUIRE_ALL=1 makes a test that would skip for want of
# such a piece fail instead (internal/testenv), so no suite goes missing
# from a green run. Extra arguments go to `go test`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
export OWED_TEST_REQUIRE_ALL=1
# The upgrade test builds the pinned release N from git history; a shallow
# clone lacks it, and that test skips (a plain git clone, as CI makes, has it).
if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
  echo "test.sh: this clone is shallow, so the upgrade test (internal/upgrade) skips: git fetch --unshallow runs it" >&2
fi

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
# Alert rules and their unit tests.
scripts/promtool-test.sh
exec scripts/with-postgres.sh go test -race -count=1 -timeout 20m ./... "$@"
