# The two commands a new user needs: `make run` and `make test`.
GO ?= go
BIN := bin

.PHONY: all build run test test-go vet fuzz bench clean

all: build

# The version and revision the binaries print (--version, owed_build_info):
# the checkout's commit, so they are right even where GOFLAGS has
# -buildvcs=false; override with `make build VERSION=v1.2.3`.
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)
BUILDINFO := github.com/owedhq/owed/internal/buildinfo
LDFLAGS := $(if $(REVISION),-X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).revision=$(REVISION))

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

## run: the whole system on this machine (throwaway Postgres, queue emulator,
## sandbox provider, sweeper, two workers, a scheduler) with a seeded workload.
run: build
	$(BIN)/owedctl dev $(ARGS)

## test: every test against a throwaway PostgreSQL, as CI runs it.
test:
	scripts/test.sh

## bench: every benchmark against a throwaway PostgreSQL (fsync on), one
## table, issue 15's four among them (burst, immediate, e2e, limitedsweep),
## then owed beside River (issue 26: ARGS=-only=e2e,river for that alone);
## BENCH_QUICK=1 for smaller sizes, ARGS=-only=burst,immediate to pick.
## See docs/performance.md.
bench:
	scripts/bench.sh $(ARGS)

vet:
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
