# Countersign — durable human approval for AI agent tool calls.
GO      ?= go
BIN     := bin/countersign
DATA    ?= ./data
ADDR    ?= 127.0.0.1:8080

.PHONY: all build run test browser test-short bench vet fmt clean chaos

all: build

build:
	$(GO) build -o $(BIN) ./services/countersign

## run: build and start every role with an embedded NATS server, data under ./data
## (the recipe execs the server: its process is serve itself, a child of make;
## to kill -9 the server, kill serve — pkill -9 -f 'countersign serve' — not make)
run: build
	exec $(BIN) serve --data $(DATA) --addr $(ADDR) --config deploy/countersign.yaml --policy deploy/policy.yaml

## test: every test, with the race detector, against real embedded NATS servers
## (installs Debian's headless Chromium first, for the web inbox's browser tests)
test: browser
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

browser:
	@sh test/browser/install-chromium.sh

## chaos: the long fault run (3-node NATS cluster, two replicas of every role,
## kill -9 and node restarts on a seeded schedule), then the invariants
CHAOS_DURATION ?= 5m
CHAOS_SEED     ?= 1
chaos:
	$(GO) test -tags chaos -race -count=1 -timeout 60m -run '^TestChaosLong$$' -v ./test/chaos \
		-chaos.duration=$(CHAOS_DURATION) -chaos.seed=$(CHAOS_SEED)

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(BIN) bench

fmt:
	gofmt -w .

clean:
	rm -rf bin
