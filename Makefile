# Granary build. Every tool the targets need is installed here, at a pinned
# version, into ./bin: a fresh machine needs only Go.

GO                    ?= go
BIN                   := $(CURDIR)/bin
STATICCHECK           := $(BIN)/staticcheck
BENCHSTAT             := $(BIN)/benchstat
BUF                   := $(BIN)/buf
PROTOC_GEN_GO         := $(BIN)/protoc-gen-go
PROTOC_GEN_GO_GRANARY := $(BIN)/protoc-gen-go-granary
GRPCURL               := $(BIN)/grpcurl

STATICCHECK_VERSION := v0.8.2
BENCHSTAT_VERSION   := v0.0.0-20260908200009-22c9c6c9d4da
BUF_VERSION         := v1.75.0
GRPCURL_VERSION     := v1.9.3
# protoc-gen-go is the version of google.golang.org/protobuf in go.mod, so
# the generated code matches the runtime it is compiled against.
PROTOC_GEN_GO_VERSION = $(shell $(GO) list -m -f '{{.Version}}' google.golang.org/protobuf)

# The generator's own sources: bin/protoc-gen-go-granary is rebuilt when one
# of them changes, options.proto too, which it embeds for -print-options.
PROTOC_GEN_GO_GRANARY_SRCS := $(wildcard cmd/protoc-gen-go-granary/*.go proto/granary/v1/*.go) proto/granary/v1/options.proto go.mod go.sum

# The example silo's container image (deploy/Dockerfile), built FROM
# scratch on a static binary, and the compose cluster that runs it. COMPOSE
# is the Docker CLI plugin when it answers, else the standalone
# docker-compose.
IMAGE           ?= granary/example-silo:dev
IMAGE_CONTEXT   := $(BIN)/image
COMPOSE         ?= $(shell docker compose version >/dev/null 2>&1 && echo 'docker compose' || echo docker-compose)
COMPOSE_FILE    := deploy/compose.yaml
CLUSTER_PROJECT ?= granary
# The silos' stop_grace_period in deploy/compose.yaml.
CLUSTER_GRACE   := 35
# Flags for the chaos test, e.g. E2E_FLAGS='-hold 20s'.
E2E_FLAGS       ?=
# The compose cluster's certificates, tokens and gossip key (make certs):
# git-ignored, made by deploy/mksecrets with granaryctl certs.
SECRETS_DIR     := deploy/secrets
GRANARYCTL      := $(BIN)/granaryctl

# The scenario benchmarks (make bench): flags for both commands, e.g.
# BENCH_FLAGS='-rounds 3' or BENCH_FLAGS='-scenario ping -duration 5s'.
BENCH_FLAGS ?=
# The peer frameworks' module, with its own go.mod.
PEERS       := bench/peers

# Micro-benchmarks (make microbench): which, how often, and for how long.
BENCH       ?= .
BENCH_COUNT ?= 6
BENCH_TIME  ?= 1s
BENCH_PKGS  ?= ./activation/ ./silo/

.PHONY: all build test fmt-check vet lint race fuzz peers-check bench microbench run generate generate-check tools clean postgres-up postgres-down \
	image certs cluster-up cluster-down e2e soak chromium python-example

all: build

build:
	$(GO) build ./...

## test: everything CI checks: formatting, vet, lint, fresh generated code, the race-enabled tests, the fuzz targets of what parses untrusted input, and the peers' module.
test: fmt-check vet lint generate-check race fuzz peers-check

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint: $(STATICCHECK)
	$(STATICCHECK) ./...

# The tests of silo/grpcapi drive the gateway with grpcurl, a client that
# knows nothing of Granary; GRANARY_GRPCURL tells them where it is.
race: $(GRPCURL)
	GRANARY_GRPCURL=$(GRPCURL) $(GO) test -race -count=1 -timeout 20m ./...

# The fuzz targets of the parsers that take what a stranger sends: the
# gateway's metadata, keys and bearer tokens, the admin API's query, and
# the token file. Each runs for a count of inputs, sized to about ten
# seconds here; an input that fails is kept under the package's
# testdata/fuzz, where go test replays it from then on. A count, not a
# duration: Go 1.26's fuzzer can fail a run bounded by time with "context
# deadline exceeded" as the time runs out (go.dev/issue/75804), with no
# failing input. FUZZ_TIME=1m (say) runs each target for that long instead.
# Minimising each new input is bounded to a second: its default of a
# minute would spend a short run minimising instead of fuzzing.
FUZZ_TIME    ?=
FUZZ_TARGETS := FuzzMetadata:./silo/grpcapi:30000x FuzzAdminQuery:./silo/admin:20000x \
	FuzzParseTokens:./security/auth:250000x FuzzBearerToken:./security/auth:250000x \
	FuzzCompoundKeys:./grain:100000x FuzzStatusOf:./internal/transport:50000x \
	FuzzEnvelopeDecoding:./internal/transport:100000x

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; rest=$${t#*:}; pkg=$${rest%%:*}; budget=$${rest#*:}; \
		if [ -n "$(FUZZ_TIME)" ]; then budget="$(FUZZ_TIME)"; fi; \
		echo "fuzz $$name ($$pkg) for $$budget"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $$budget -fuzzminimizetime 1s $$pkg; \
	done

# peers-check: the benchmark peers' module (its own go.mod): formatting is
# fmt-check's; here vet, lint and its race-enabled tests.
peers-check: $(STATICCHECK)
	cd $(PEERS) && $(GO) vet ./... && $(STATICCHECK) ./... && $(GO) test -race -count=1 -timeout 10m ./...

## bench: every benchmark scenario on Granary, then on Granary and its peers side by side; rewrites the tables of docs/benchmarks.md.
bench:
	$(GO) run ./bench/cmd/granary-bench -docs docs/benchmarks.md $(BENCH_FLAGS)
	cd $(PEERS) && $(GO) run ./cmd/peer-bench -docs ../../docs/benchmarks.md $(BENCH_FLAGS)

## microbench: the packages' Go benchmarks with allocations, BENCH_COUNT runs each, summarised by benchstat and bench/ratios.
microbench: $(BENCHSTAT)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) $(BENCH_PKGS) | tee bench.out
	$(BENCHSTAT) bench.out
	$(GO) run ./bench/ratios bench.out

## postgres-up: start a local PostgreSQL for the pgstore tests (installing it if missing); prints the DSN to export as GRANARY_TEST_POSTGRES_DSN.
postgres-up:
	scripts/postgres-test.sh up

## postgres-down: stop the local PostgreSQL that postgres-up started.
postgres-down:
	scripts/postgres-test.sh down

## chromium: install Debian's Chromium if missing, for the dashboard's browser test; prints its path.
chromium:
	scripts/chromium.sh

## image: the example silo's container image $(IMAGE): a static binary (CGO_ENABLED=0) in an image FROM scratch.
image:
	rm -rf $(IMAGE_CONTEXT) && mkdir -p $(IMAGE_CONTEXT)/data
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(IMAGE_CONTEXT)/granary-silo ./examples/silo
	docker build -f deploy/Dockerfile -t $(IMAGE) $(IMAGE_CONTEXT)

## certs: the compose cluster's CA and certificates (granaryctl certs), admin and gateway tokens and gossip key, in deploy/secrets/ (git-ignored); kept when present and valid.
certs:
	$(GO) build -o $(GRANARYCTL) ./cmd/granaryctl
	$(GO) run ./deploy/mksecrets -dir $(SECRETS_DIR) -granaryctl $(GRANARYCTL)

## cluster-up: three silos in Docker (deploy/compose.yaml) with mTLS between them, TLS and tokens on gateways and admin servers; dashboard at https://127.0.0.1:8081/.
cluster-up: image certs
	scripts/postgres-test.sh up --docker >/dev/null
	GRANARY_IMAGE=$(IMAGE) $(COMPOSE) -f $(COMPOSE_FILE) -p $(CLUSTER_PROJECT) up -d

## cluster-down: stop and remove the cluster of cluster-up.
cluster-down:
	GRANARY_IMAGE=$(IMAGE) $(COMPOSE) -f $(COMPOSE_FILE) -p $(CLUSTER_PROJECT) down --remove-orphans -t $(CLUSTER_GRACE)

# E2E_NICE runs the chaos test's load generator ahead of the silos and
# PostgreSQL, which share its cores on one machine: a generator starved of
# CPU starts its calls late and reads their replies late, and the soak
# would charge those delays to the cluster. Without the privilege to raise
# its priority, GNU nice warns and runs it as it is.
E2E_NICE ?= nice -n -10

## e2e: the chaos test: kills, partitions and restarts silos of the secured compose cluster under load; writes docs/resilience.md.
e2e: image certs
	scripts/postgres-test.sh up --docker >/dev/null
	GRANARY_CHROMIUM="$${GRANARY_CHROMIUM:-$$(scripts/chromium.sh | tail -n1)}" && export GRANARY_CHROMIUM && \
	$(E2E_NICE) $(GO) run ./deploy/e2e -compose $(COMPOSE_FILE) -secrets $(SECRETS_DIR) -image $(IMAGE) -grace $(CLUSTER_GRACE)s $(E2E_FLAGS)

## soak: make e2e, then the overload soak: twice the cluster's capacity for two minutes, a hot counter and new keys; writes its report, faults and soak, to docs/soak.md.
soak:
	$(MAKE) e2e E2E_FLAGS="-overload -out docs/soak.md $(E2E_FLAGS)"

## python-example: a Python client (examples/python) calls a grain through a silo's TLS gateway with a bearer token, and decodes an error's details; needs Debian's python3-grpcio python3-protobuf protobuf-compiler libprotobuf-dev golang-github-gogo-googleapis-dev.
python-example:
	GO=$(GO) examples/python/run.sh

## run: the bank example: concurrent transfers, a refused overdraft and a deadlock refused at once.
run:
	$(GO) run ./examples/bank

## generate: regenerate the Go code beside the .proto files under proto/.
generate: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRANARY)
	$(BUF) generate

## generate-check: fail if the generated Go code under proto/ is stale.
generate-check: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRANARY)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(BUF) generate -o "$$tmp" && \
	(cd "$$tmp/proto" && find . -name '*.pb.go' | sed 's|^\./||' | sort) > "$$tmp/fresh" && \
	(cd proto && find . -name '*.pb.go' | sed 's|^\./||' | sort) > "$$tmp/present" && \
	stale=0 && \
	{ diff -u "$$tmp/present" "$$tmp/fresh" || stale=1; } && \
	for f in $$(cat "$$tmp/fresh"); do \
		if [ -f "proto/$$f" ]; then diff -u "proto/$$f" "$$tmp/proto/$$f" || stale=1; fi; \
	done && \
	if [ $$stale -ne 0 ]; then echo "generated code under proto/ is stale: run 'make generate'"; exit 1; fi

tools: $(STATICCHECK) $(BENCHSTAT) $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRANARY) $(GRPCURL)

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(BENCHSTAT):
	GOBIN=$(BIN) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

$(BUF):
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)

$(GRPCURL):
	GOBIN=$(BIN) $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

# Reinstalled when go.mod changes, which may change the protobuf version;
# touched because go install leaves an up-to-date binary as it was.
$(PROTOC_GEN_GO): go.mod
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@touch $@

$(PROTOC_GEN_GO_GRANARY): $(PROTOC_GEN_GO_GRANARY_SRCS)
	$(GO) build -o $@ ./cmd/protoc-gen-go-granary

clean:
	rm -rf $(BIN) bench.out
