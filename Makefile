# Granary build. Every tool the targets need is installed here, at a pinned
# version, into ./bin: a fresh machine needs only Go.

GO          ?= go
BIN         := $(CURDIR)/bin
STATICCHECK := $(BIN)/staticcheck
BENCHSTAT   := $(BIN)/benchstat

STATICCHECK_VERSION := v0.8.2
BENCHSTAT_VERSION   := v0.0.0-20260908200009-22c9c6c9d4da

# Benchmarks: which, how often, and for how long each run.
BENCH       ?= .
BENCH_COUNT ?= 6
BENCH_TIME  ?= 1s
BENCH_PKGS  ?= ./activation/

.PHONY: all build test fmt-check vet lint race bench run tools clean

all: build

build:
	$(GO) build ./...

## test: everything CI checks: formatting, vet, lint, and the race-enabled tests.
test: fmt-check vet lint race

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint: $(STATICCHECK)
	$(STATICCHECK) ./...

race:
	$(GO) test -race -count=1 -timeout 20m ./...

## bench: benchmarks with allocations, BENCH_COUNT runs each, summarised by benchstat.
bench: $(BENCHSTAT)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) $(BENCH_PKGS) | tee bench.out
	$(BENCHSTAT) bench.out
	$(GO) run ./bench/ratios bench.out

## run: a short demo of the scheduler.
run:
	$(GO) run ./examples/scheduler

tools: $(STATICCHECK) $(BENCHSTAT)

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(BENCHSTAT):
	GOBIN=$(BIN) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

clean:
	rm -rf $(BIN) bench.out
