# The two commands a new user needs: `make run` and `make test`.
GO ?= go
BIN := bin

.PHONY: all build run test test-go vet fuzz bench clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

## run: the whole system on this machine (throwaway Postgres, queue emulator,
## sandbox provider, sweeper, two workers, a scheduler) with a seeded workload.
run: build
	$(BIN)/owedctl dev $(ARGS)

## test: every test against a throwaway PostgreSQL, as CI runs it.
test:
	scripts/test.sh

## bench: every benchmark against a throwaway PostgreSQL (fsync on), one
## table, issue 15's four among them (burst, immediate, e2e, limitedsweep);
## BENCH_QUICK=1 for smaller sizes, ARGS=-only=burst,immediate to pick.
## See docs/performance.md.
bench:
	scripts/bench.sh $(ARGS)

vet:
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
