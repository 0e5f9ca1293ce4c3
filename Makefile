# duet — run `make help` for the targets.
GO      ?= go
BIN     := bin/duet
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
PKGS    := ./...

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
test: ## run every test with the race detector (unit + end-to-end)
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

.PHONY: bench
bench: ## run the Go benchmarks of the hot paths
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./tokenizer/ ./workers/sim/ ./router/...

.PHONY: lint
lint: ## go vet + gofmt check
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: clean
clean: ## remove build output
	rm -rf bin
