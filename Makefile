# wasmreconcile — run `make help` for the targets.
#
# Versions of the control plane live in hack/controlplane.sh (K8S_VERSION,
# ETCD_VERSION); Go module versions live in the go.mod files.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO       ?= go
BIN      := $(CURDIR)/bin
GOMODS   := . guest-sdk modules
export GOWORK := off

# Every main package under modules/ (including test guests) becomes
# bin/modules/<name>.wasm, or bin/modules/testguests/<name>.wasm.
MODULE_DIRS := $(patsubst modules/%/main.go,%,$(shell find modules -name main.go -not -path '*/testdata/*'))

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "; printf "Usage: make <target>\n\nTargets:\n"} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: controlplane
controlplane: ## Build kube-apiserver, kubectl and etcd into ~/.cache/wasmreconcile (once; minutes).
	@hack/controlplane.sh >/dev/null

.PHONY: modules
modules: ## Build every module under modules/ to bin/modules/*.wasm.
	@mkdir -p $(BIN)/modules/testguests
	@for d in $(MODULE_DIRS); do \
	  name=$$(basename $$d); out=$(BIN)/modules/$$name.wasm; \
	  case $$d in internal/testguests/*) out=$(BIN)/modules/testguests/$$name.wasm;; esac; \
	  echo "wasm    modules/$$d -> $${out#$(CURDIR)/}"; \
	  (cd modules && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o $$out ./$$d); \
	done

.PHONY: operator
operator: ## Build the operator binary to bin/operator.
	$(GO) build -o $(BIN)/operator ./cmd/operator

.PHONY: test
test: controlplane modules operator ## Run all tests: unit, wasm guests, module cases, and envtest integration tests.
	@echo "== guest-sdk (native, then vet for wasip1)"
	cd guest-sdk && $(GO) test ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	@echo "== modules (native logic tests)"
	cd modules && $(GO) test ./...
	@echo "== module cases (operator test, offline, on the built .wasm)"
	@for d in $(MODULE_DIRS); do \
	  [ -d modules/$$d/testdata/cases ] || continue; \
	  name=$$(basename $$d); wasm=$(BIN)/modules/$$name.wasm; \
	  case $$d in internal/testguests/*) wasm=$(BIN)/modules/testguests/$$name.wasm;; esac; \
	  echo "-- modules/$$d"; \
	  $(BIN)/operator test --memory-limit 64Mi $$wasm modules/$$d/testdata/cases || exit 1; \
	done
	@echo "== host (with a real kube-apiserver and etcd)"
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" $(GO) test -race ./...

.PHONY: lint
lint: ## gofmt, go vet (native and wasip1) and a go mod tidy diff for all three Go modules.
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	cd guest-sdk && $(GO) vet ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd modules && $(GO) vet ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	@for m in $(GOMODS); do (cd $$m && $(GO) mod tidy -diff) || { echo "go mod tidy needed in $$m"; exit 1; }; done

.PHONY: bench
bench: modules ## Run the benchmarks behind docs/benchmarks.md (ratios are measured within one run).
	$(GO) test -run '^$$' -bench 'ComputeLoop|Deadline|FourSpinners|FuelSlice' -benchtime=30x ./host/engine/
	$(GO) test -run '^$$' -bench 'RoundTrip' -benchtime=3s ./host/engine/
	$(GO) test -run '^$$' -bench 'JSONReconcile' -benchtime=400x ./host/engine/

.PHONY: fuzz
fuzz: ## Fuzz the instrumenter for FUZZTIME (default 2m).
	$(GO) test -run '^$$' -fuzz FuzzInstrument -fuzztime $(or $(FUZZTIME),2m) ./host/internal/instrument/

.PHONY: demo
demo: controlplane modules operator ## Run the operator with the example modules on an embedded real control plane.
	@$(GO) build -o $(BIN)/demo ./hack/demo
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" $(BIN)/demo --operator $(BIN)/operator --modules $(BIN)/modules/widget.wasm,$(BIN)/modules/webapp.wasm $(DEMO_FLAGS)

.PHONY: demo-check
demo-check: ## Run the demo non-interactively: exits 0 once the Widgets and the WebApp are Ready.
	$(MAKE) demo DEMO_FLAGS=--exit-when-ready

.PHONY: clean
clean: ## Remove build outputs (not the control-plane cache).
	rm -rf $(BIN)
