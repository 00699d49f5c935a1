# Countersign — durable human approval for AI agent tool calls.
GO      ?= go
BIN     := bin/countersign
DATA    ?= ./data
ADDR    ?= 127.0.0.1:8080
NATS    ?= 127.0.0.1:4222

.PHONY: all build run test browser screenshots test-short test-ts test-py bench compare vet lint fmt clean chaos fuzz

all: build

build:
	$(GO) build -o $(BIN) ./services/countersign

## run: build and start every role with an embedded NATS server, data under ./data
## (ADDR=host:port moves the API and inbox, NATS=host:port or NATS=off the NATS port)
## (the recipe execs the server: its process is serve itself, a child of make;
## bin/countersign stop [--kill] stops the serve of ./data and no other)
run: build
	exec $(BIN) serve --data $(DATA) --addr $(ADDR) --nats-listen $(NATS) --config deploy/countersign.yaml --policy deploy/policy.yaml

## test: every test, with the race detector, against real embedded NATS servers
## (installs Debian's headless Chromium first, for the web inbox's browser tests)
test: browser
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) test-ts
	$(MAKE) test-py

browser:
	@sh test/browser/install-chromium.sh

## screenshots: the docs' screenshots of the web inbox (docs/*.png), written by
## the browser test that checks every page's looks (TestBrowserLooks)
screenshots: browser
	COUNTERSIGN_SCREENSHOTS=$(abspath docs) $(GO) test -count=1 -run '^TestBrowserLooks$$' ./test/browser/

## test-ts: the TypeScript client's tests (contracts/typescript) against a real
## countersign serve: installs Debian's nodejs and npm first if node is missing,
## then npm ci from the committed lockfile and npm test (needs Go, like test)
test-ts:
	@sh contracts/typescript/scripts/install-node.sh
	cd contracts/typescript && npm ci --no-audit --no-fund && npm test

## test-short: the packages' own tests, without the race detector, the
## end-to-end processes (test/) and the browser (test/browser)
test-short:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v -e '/test$$' -e '/test/')

## test-py: the Python client (contracts/python): mypy --strict (Debian's
## python3-mypy, installed if missing), then its tests against real
## `countersign serve` processes built from this tree
PYTHON ?= python3
test-py:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "test-py: $(PYTHON) is missing: install Debian's python3 (apt-get install python3), or set PYTHON" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "test-py: $(PYTHON) is older than 3.10" >&2; exit 1; }
	sh contracts/python/typecheck.sh
	cd contracts/python && $(PYTHON) -m unittest discover -v

## vet: go vet over every package
vet:
	$(GO) vet ./...

## lint: staticcheck (pinned, installed into ./bin from the Go module proxy).
## Its defaults less ST1005: configuration errors start with the field they
## name, as it is spelled (From, Secrets[0], Timeout).
STATICCHECK_VERSION := v0.8.2
STATICCHECK_CHECKS  := all,-ST1000,-ST1003,-ST1005,-ST1016,-ST1020,-ST1021,-ST1022,-ST1023
lint:
	GOBIN=$(abspath bin) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	bin/staticcheck -checks '$(STATICCHECK_CHECKS)' ./...

## chaos: the long fault run (3-node NATS cluster, two replicas of every role,
## kill -9 and node restarts on a seeded schedule), then the invariants
CHAOS_DURATION ?= 5m
CHAOS_SEED     ?= 1
chaos:
	$(GO) test -tags chaos -race -count=1 -timeout 60m -run '^TestChaosLong$$' -v ./test/chaos \
		-chaos.duration=$(CHAOS_DURATION) -chaos.seed=$(CHAOS_SEED)

## fuzz: run each fuzz target in turn for FUZZTIME (their seed corpora run in
## every `go test`); a failing input is written to the package's testdata/fuzz
FUZZTIME     ?= 30s
FUZZMINIMIZE ?= 100x
FUZZ_TARGETS := \
	./contracts:FuzzCheckDuplicateKeys ./contracts:FuzzCanonicalize \
	./services/api:FuzzHandler \
	./services/arbiter:FuzzBusMessages ./services/arbiter:FuzzVoteInterleavings \
	./notifier/slack:FuzzInteractions \
	./orchestrator/policy:FuzzParse ./orchestrator/policy:FuzzParseCases ./orchestrator/policy:FuzzCondition \
	./orchestrator/policy:FuzzDecodeArgs ./orchestrator/policy:FuzzMatch \
	./orchestrator/policy:FuzzCovers ./orchestrator/policy:FuzzCompiledGlob
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; echo "== $$pkg $$name"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg; \
	done

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(BIN) bench

## compare: Countersign beside a Temporal dev server in the same run, the same
## workload (wait for a human's approval, then resume): resume latency and
## burst cycles/s, medians of COMPARE_COUNT repetitions. Its own Go module
## (test/compare); installs the Temporal CLI with go install into COMPARE_DIR
## once (a few minutes). Not part of test; about three minutes after that.
COMPARE_DIR      ?= $(abspath $(or $(TMPDIR),/tmp)/countersign-compare)
COMPARE_COUNT    ?= 3
COMPARE_DURATION ?= 3s
COMPARE_AGENTS   ?= 64
COMPARE_TEMPORAL_DURATION ?= 10s
compare:
	mkdir -p $(COMPARE_DIR)
	cd test/compare && $(GO) build -o $(COMPARE_DIR)/countersign-compare .
	GO=$(GO) $(COMPARE_DIR)/countersign-compare -dir $(COMPARE_DIR) -count $(COMPARE_COUNT) \
		-duration $(COMPARE_DURATION) -temporal-duration $(COMPARE_TEMPORAL_DURATION) -agents $(COMPARE_AGENTS)

fmt:
	gofmt -w .

clean:
	rm -rf bin
