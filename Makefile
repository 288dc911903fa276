# MongoFerry — see README.md. Every tool and test server is built into bin/
# from the Go module proxy when missing.

SHELL := /usr/bin/env bash -o pipefail
BIN   := $(CURDIR)/bin
GO    ?= go
GOLANGCI_LINT_VERSION ?= v2.6.2

export PATH := $(BIN):$(PATH)

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Build

.PHONY: build
build: ## Build the ferry CLI into bin/.
	$(GO) build -o $(BIN)/ferry ./cmd/ferry

##@ Development

.PHONY: fmt
fmt: ## Run gofmt.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: lint
lint: $(BIN)/golangci-lint ## Run golangci-lint.
	$(BIN)/golangci-lint run ./...

.PHONY: test
test: ferretdb $(BIN)/golangci-lint ## Run every check and test: gofmt, vet, golangci-lint, unit, fuzz seeds, end-to-end on FerretDB.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed on:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(BIN)/golangci-lint run ./...
	$(GO) test -count=1 -timeout 40m ./...

.PHONY: demo
demo: build ferretdb ## Run a full sync end to end on two embedded servers.
	$(BIN)/ferry demo

.PHONY: bench
bench: build ferretdb ## Run the benchmarks (figures go to docs/benchmarks.md).
	$(BIN)/ferry bench full

##@ Test servers and tools

.PHONY: ferretdb
ferretdb: $(BIN)/ferretdb ## Build FerretDB v1.24.0 (test server) into bin/.
$(BIN)/ferretdb:
	hack/build-ferretdb.sh $@

$(BIN)/golangci-lint:
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
