# sluice — see README.md. Every target fetches what it needs (Go modules, the Node packages of
# the client and engine tests into bench/node/node_modules, git-ignored).
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED ?= 0
BIN := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
# Where the embedded default config expects the simulator (not a setting: the config is fixed).
DEFAULT_LLMSIM_ADDR := 127.0.0.1:8000
# Where make run starts the simulator: another address needs a CONFIG whose upstream it is.
LLMSIM_ADDR := $(DEFAULT_LLMSIM_ADDR)
FUZZTIME ?= 30s
# FUZZMINTIME bounds the minimisation of a failing or newly interesting input, which otherwise
# may take a minute of its own (the default).
FUZZMINTIME ?= 60s
TEST_TIMEOUT ?= 15m

.PHONY: all build run test test-go node-deps bench bench-compare fuzz lint cross image schema clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# run: the bundled LLM simulator on $(LLMSIM_ADDR) and the gateway on its embedded default
# config (gateway 127.0.0.1:8080, admin 127.0.0.1:9090), or on CONFIG, a config whose upstream
# is that one simulator (make run CONFIG=configs/seed-000-aggregated.toml), checked before
# anything starts. Ctrl-C stops both: the gateway drains
# first (streams in flight finish), then the simulator, which runs in a process group of its
# own (set -m) so that the terminal's Ctrl-C does not cut those streams by stopping it first.
run: build
	@if [ -n "$(CONFIG)" ]; then $(BIN)/sluice validate --config "$(CONFIG)" >/dev/null || { echo "make run: $(CONFIG) is refused (above); nothing started"; exit 1; }; fi; \
	if [ -z "$(CONFIG)" ] && [ "$(LLMSIM_ADDR)" != "$(DEFAULT_LLMSIM_ADDR)" ]; then echo "make run: the embedded default config sends to the simulator at $(DEFAULT_LLMSIM_ADDR), not $(LLMSIM_ADDR); give a config whose upstream is $(LLMSIM_ADDR) too: make run LLMSIM_ADDR=$(LLMSIM_ADDR) CONFIG=FILE (docs/config.md). Nothing started."; exit 1; fi; \
	set -m; $(BIN)/llmsim --listen $(LLMSIM_ADDR) --ttft 300ms --itl 60ms --tokens 48 & sim=$$!; set +m; \
	trap 'kill $$sim 2>/dev/null' EXIT INT TERM; \
	for i in $$(seq 50); do kill -0 $$sim 2>/dev/null || break; curl -fsS -m 1 http://$(LLMSIM_ADDR)/health >/dev/null 2>&1 && break; sleep 0.1; done; \
	kill -0 $$sim 2>/dev/null || { echo "make run: llmsim did not start: is $(LLMSIM_ADDR) taken? $(if $(CONFIG),$(CONFIG),The embedded default config) expects the simulator there; free the port, or give both another address: make run LLMSIM_ADDR=HOST:PORT CONFIG=FILE, FILE's upstream being HOST:PORT (docs/config.md)."; exit 1; }; \
	echo; \
	if [ -n "$(CONFIG)" ]; then \
	echo "sluice on $(CONFIG): the requests to try are in its opening comment"; \
	else \
	echo "sluice: gateway http://127.0.0.1:8080  admin http://127.0.0.1:9090/api/gateway/health"; \
	echo "Stream tokens through the gateway:"; \
	echo "  curl -N http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\"; \
	echo "    -d '{\"model\":\"llmsim\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'"; \
	fi; \
	echo; \
	$(BIN)/sluice serve $(if $(CONFIG),--config $(CONFIG))

node-deps:
	@sh bench/node/install.sh

# test: every test with the race detector, including the end-to-end suites (real gateway,
# simulator, OpenAI Node SDK, openai-go and a real llama.cpp engine on loopback).
# The bench smoke compare (about 20 s) runs against the binaries just built.
# internal/gnet is a module of its own, outside ./...: its patched poller's tests are named.
test: node-deps build
	$(GO) vet ./...
	CGO_ENABLED=1 SLUICE_BENCH_BIN=$(BIN) $(GO) test -race -timeout $(TEST_TIMEOUT) ./... github.com/panjf2000/gnet/v2/pkg/netpoll

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./core/... ./sse/... ./pool/...
	$(GO) test -run '^$$' -bench 'TokenEvent|PrefixLookup' -benchmem ./bench/llmsim

bench-compare: build
	$(BIN)/sluice-bench compare --bin $(BIN) --peers nginx,haproxy --md bench-compare.md

# fuzz: every fuzz target for FUZZTIME, after its committed corpus (testdata/fuzz/<Target>/).
# An input that fails is written to that directory: commit it with a test for the fix.
FUZZ_PKGS := ./fuzz ./core/ingress ./core/middleware/jwtauth ./pool ./bench/llmsim ./bench/harness
# A run that fails with only "context deadline exceeded" and writes no failing input is the
# race in Go 1.26's fuzz coordinator at the end of -fuzztime (fixed in Go 1.27), not a finding:
# it is reported and the next target runs. Any other failure, or a new input, fails the target.
fuzz:
	@set -eo pipefail; out=$$(mktemp); trap 'rm -f $$out' EXIT; for p in $(FUZZ_PKGS); do \
		for t in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "== $$p $$t ($(FUZZTIME))"; \
			dir=$$p/testdata/fuzz/$$t; before=$$( (ls $$dir 2>/dev/null || true) | wc -l); \
			if ! $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) $$p 2>&1 | tee $$out; then \
				after=$$( (ls $$dir 2>/dev/null || true) | wc -l); \
				if [ "$$after" = "$$before" ] && grep -q '^    context deadline exceeded$$' $$out && ! grep -q 'Failing input written' $$out; then \
					echo "fuzz: $$t stopped on the Go 1.26 coordinator race at the end of -fuzztime; no failing input"; \
				else exit 1; fi; \
			fi; \
		done; \
	done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@# internal/gnet is a module of its own (a replace in go.mod), outside ./...: vet it as the
	@# gateway builds it, on this module's dependency versions.
	$(GO) vet github.com/panjf2000/gnet/v2/...
	@if command -v staticcheck >/dev/null; then echo "staticcheck ./..."; staticcheck ./...; else echo "staticcheck not installed; skipped"; fi

# cross: the other platforms sluice builds for (static, CGO_ENABLED=0). Vet there too: it
# type-checks every package and test, so code that compiles only on Linux shows up.
CROSS_PLATFORMS ?= darwin/arm64 freebsd/amd64
cross:
	@set -e; for p in $(CROSS_PLATFORMS); do \
		echo "== GOOS=$${p%/*} GOARCH=$${p#*/}"; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build ./cmd/...; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) vet ./...; \
	done

# image: the container image (docs/deploy.md). Needs a Docker engine; nothing else here does.
IMAGE ?= sluice:$(VERSION)
image:
	docker build -f deploy/docker/Dockerfile -t $(IMAGE) --build-arg VERSION=$(VERSION) .

# schema: the configuration's JSON Schema, generated from core/config; a test fails when the
# committed one differs.
schema:
	$(GO) generate ./deploy/schema

clean:
	rm -rf $(BIN)
