# wasmreconcile — run `make help` for the targets.
#
# Versions of the control plane live in hack/controlplane.sh (K8S_VERSION,
# ETCD_VERSION); Go module versions live in the go.mod files.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO       ?= go
BIN      := $(CURDIR)/bin
GOMODS   := . guest-sdk guest-sdk/k8s/apicheck modules hack/tools
# go.work joins the modules for development; the Makefile builds each module
# on its own go.mod, as its users do.
export GOWORK := off

# Every main package under modules/ (including test guests) becomes
# bin/modules/<name>.wasm, or bin/modules/testguests/<name>.wasm.
MODULE_DIRS := $(patsubst modules/%/main.go,%,$(shell find modules -name main.go -not -path '*/testdata/*'))

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "; printf "Usage: make <target>\n\nTargets:\n"} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: controlplane
controlplane: ## Build kube-apiserver, kube-controller-manager, kubectl and etcd into ~/.cache/wasmreconcile (once; minutes).
	@hack/controlplane.sh >/dev/null

.PHONY: registry
registry: ## Build the CNCF distribution registry, for the OCI tests, into ~/.cache/wasmreconcile (once; a few minutes).
	@hack/registry.sh >/dev/null

.PHONY: modules
modules: ## Build every module under modules/ to bin/modules/*.wasm.
	@mkdir -p $(BIN)/modules/testguests
	@for d in $(MODULE_DIRS); do \
	  name=$$(basename $$d); out=$(BIN)/modules/$$name.wasm; \
	  case $$d in internal/testguests/*) out=$(BIN)/modules/testguests/$$name.wasm;; esac; \
	  echo "wasm    modules/$$d -> $${out#$(CURDIR)/}"; \
	  (cd modules && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o $$out ./$$d); \
	done

# The C conformance guest (modules/tck-c), built with Debian's clang and wasi-libc.
CLANG       ?= clang-19
WASI_CFLAGS := --target=wasm32-wasi -isystem /usr/include/wasm32-wasi -L/usr/lib/wasm32-wasi -O2 -Wall -Wextra -Werror -mexec-model=reactor

.PHONY: toolchain-c
toolchain-c: ## Install the C guest toolchain (clang-19, lld-19, wasi-libc) with apt-get if it is missing.
	@if ! command -v $(CLANG) >/dev/null || [ ! -f /usr/lib/wasm32-wasi/libc.a ] || [ ! -f /usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a ]; then \
	  echo "installing clang-19, lld-19, wasi-libc and libclang-rt-19-dev-wasm32 with apt-get (once)"; \
	  command -v apt-get >/dev/null || { echo "error: apt-get not found; install clang-19, lld-19 and wasi-libc for wasm32 by hand"; exit 1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32 >/dev/null; \
	fi

.PHONY: modules-c
modules-c: toolchain-c ## Build the C guests (modules/tck-c, modules/widget-c) to bin/modules/*.wasm.
	@mkdir -p $(BIN)/modules
	@echo "wasm    modules/tck-c -> bin/modules/tck-c.wasm"
	@$(CLANG) $(WASI_CFLAGS) -o $(BIN)/modules/tck-c.wasm modules/tck-c/tck.c modules/tck-c/json.c
	@echo "wasm    modules/widget-c -> bin/modules/widget-c.wasm"
	@$(CLANG) $(WASI_CFLAGS) -o $(BIN)/modules/widget-c.wasm modules/widget-c/native/widget.c modules/widget-c/wasm.c

# The Rust SDK (guest-sdk/rust) and the Rust guests, built with Debian's
# rustc (1.63) and its wasm32-wasi standard library, without cargo: the SDK
# has no dependency.
RUSTC        ?= /usr/bin/rustc
# bulk-memory: copies are one memory.copy, not a loop of checked loads.
RUST_FLAGS   := --edition 2021 --target wasm32-wasi -C opt-level=s -C panic=abort -C target-feature=+bulk-memory
RUST_RELEASE := -C lto -C strip=symbols -C codegen-units=1

.PHONY: toolchain-rust
toolchain-rust: ## Install the Rust guest toolchain (Debian's rustc, libstd-rust-dev-wasm32) with apt-get if it is missing.
	@if [ ! -x $(RUSTC) ] || [ ! -d /usr/lib/rustlib/wasm32-wasi ]; then \
	  echo "installing rustc and libstd-rust-dev-wasm32 with apt-get (once)"; \
	  command -v apt-get >/dev/null || { echo "error: apt-get not found; install rustc with the wasm32-wasi standard library by hand and set RUSTC"; exit 1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustc libstd-rust-dev-wasm32 >/dev/null; \
	fi

.PHONY: modules-rust
modules-rust: toolchain-rust ## Build the Rust SDK and the Rust guests (modules/tck-rust, modules/widget-rust) to bin/modules/*.wasm.
	@mkdir -p $(BIN)/modules $(BIN)/rust
	@echo "rlib    guest-sdk/rust -> bin/rust/libwasmreconcile.rlib"
	@$(RUSTC) $(RUST_FLAGS) --crate-type rlib --crate-name wasmreconcile -o $(BIN)/rust/libwasmreconcile.rlib guest-sdk/rust/src/lib.rs
	@echo "wasm    modules/tck-rust -> bin/modules/tck-rust.wasm"
	@$(RUSTC) $(RUST_FLAGS) $(RUST_RELEASE) --crate-type cdylib --extern wasmreconcile=$(BIN)/rust/libwasmreconcile.rlib -o $(BIN)/modules/tck-rust.wasm modules/tck-rust/tck.rs
	@echo "wasm    modules/widget-rust -> bin/modules/widget-rust.wasm"
	@$(RUSTC) $(RUST_FLAGS) $(RUST_RELEASE) --crate-type cdylib --extern wasmreconcile=$(BIN)/rust/libwasmreconcile.rlib -o $(BIN)/modules/widget-rust.wasm modules/widget-rust/widget.rs
	@# The widget's logic natively, for BenchmarkRustGuestVsNative (cgo, -tags rustnative).
	@mkdir -p $(BIN)/rust/native
	@echo "native  modules/widget-rust -> bin/rust/native/libwidget_rust.a"
	@$(RUSTC) --edition 2021 -C opt-level=3 -C panic=abort --crate-type rlib --crate-name wasmreconcile -o $(BIN)/rust/native/libwasmreconcile.rlib guest-sdk/rust/src/lib.rs
	@$(RUSTC) --edition 2021 -C opt-level=3 -C panic=abort --crate-type staticlib --crate-name widget_rust --extern wasmreconcile=$(BIN)/rust/native/libwasmreconcile.rlib -o $(BIN)/rust/native/libwidget_rust.a modules/widget-rust/widget.rs

# The programs the build runs, pinned in hack/tools/go.mod.
TOOLS := $(BIN)/tools

.PHONY: tools
tools: ## Build the pinned tools (staticcheck, goimports, gotestsum) into bin/tools.
	@mkdir -p $(TOOLS)
	$(GO) build -modfile=hack/tools/go.mod -o $(TOOLS)/ honnef.co/go/tools/cmd/staticcheck golang.org/x/tools/cmd/goimports gotest.tools/gotestsum

.PHONY: operator
operator: sdk-zip ## Build the operator binary to bin/operator (static: CGO_ENABLED=0, as the image and the tests build it, so they share its compiled packages), carrying the guest SDK for operator init.
	CGO_ENABLED=0 $(GO) build -o $(BIN)/operator ./cmd/operator

# The guest SDK's source as the operator binary carries it: `operator
# init` unpacks it into a module made outside a checkout. Written only when
# the SDK changed.
SDK_ZIP := cmd/operator/internal/scaffold/sdk/guest-sdk.zip
.PHONY: sdk-zip
sdk-zip: ## Pack the guest SDK into the archive the operator binary carries (hack/sdkzip).
	@$(GO) run ./hack/sdkzip -o $(SDK_ZIP) guest-sdk

.PHONY: operator-run
operator-run: ## Build the run build of the operator to bin/operator-run, as the image ships it: only run and version (-tags runonly; ~20 MiB less resident).
	CGO_ENABLED=0 $(GO) build -tags runonly -o $(BIN)/operator-run ./cmd/operator

.PHONY: image
image: ## Build the operator image without Docker (go-containerregistry) into bin/image, an OCI layout, with the run build of the operator; IMAGE=oci://REGISTRY/REPO:TAG pushes it instead.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -tags runonly -o $(BIN)/operator-static ./cmd/operator
	$(GO) run ./hack/image --binary $(BIN)/operator-static $(if $(IMAGE),--push $(IMAGE),--layout $(BIN)/image)

.PHONY: test
test: controlplane registry modules modules-c modules-rust operator tools ## Run all tests: unit, wasm guests, module cases, the C and Rust conformance guests, envtest integration tests and a real OCI registry.
	@echo "== guest-sdk (native, then vet for wasip1)"
	cd guest-sdk && $(GO) test ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	@echo "== guest-sdk/k8s against k8s.io/api (a module of its own: the SDK has no dependency)"
	cd guest-sdk/k8s/apicheck && $(GO) test ./...
	@echo "== modules (native logic tests)"
	cd modules && $(GO) test ./...
	@echo "== module cases (operator test, offline, on the built .wasm, with the example CRDs' schemas)"
	@for d in $(MODULE_DIRS); do \
	  [ -d modules/$$d/testdata/cases ] || continue; \
	  name=$$(basename $$d); wasm=$(BIN)/modules/$$name.wasm; \
	  case $$d in internal/testguests/*) wasm=$(BIN)/modules/testguests/$$name.wasm;; esac; \
	  echo "-- modules/$$d"; \
	  $(BIN)/operator test --crds examples/crds --memory-limit 64Mi $$wasm modules/$$d/testdata/cases || exit 1; \
	done
	@echo "-- modules/tck-c (the C guest, on the conformance cases of modules/internal/tck)"
	@$(BIN)/operator test --memory-limit 64Mi $(BIN)/modules/tck-c.wasm modules/internal/tck/testdata/cases
	@echo "-- modules/tck-c (responses only a guest writing its own JSON can emit)"
	@$(BIN)/operator test --memory-limit 64Mi $(BIN)/modules/tck-c.wasm modules/tck-c/testdata/cases
	@echo "-- modules/widget-c (the widget's logic in C, on the Go widget's cases)"
	@$(BIN)/operator test --memory-limit 64Mi $(BIN)/modules/widget-c.wasm modules/widget/testdata/cases
	@echo "== guest-sdk/rust (native unit tests)"
	@$(RUSTC) --edition 2021 --test -o $(BIN)/rust/sdk-test guest-sdk/rust/src/lib.rs && $(BIN)/rust/sdk-test -q
	@echo "-- modules/tck-rust (the Rust guest, on the conformance cases of modules/internal/tck and those of tck-c)"
	@$(BIN)/operator test --memory-limit 64Mi $(BIN)/modules/tck-rust.wasm modules/internal/tck/testdata/cases
	@$(BIN)/operator test --memory-limit 64Mi $(BIN)/modules/tck-rust.wasm modules/tck-c/testdata/cases
	@echo "-- modules/widget-rust (the widget's logic in Rust, on the Go widget's cases)"
	@$(BIN)/operator test --crds examples/crds --memory-limit 64Mi $(BIN)/modules/widget-rust.wasm modules/widget/testdata/cases
	@echo "-- modules/widget-rust/native (the native build answers as the wasm one)"
	cd modules && $(GO) test -tags rustnative ./widget-rust/native/
	@echo "== the WebAssembly spec suite through the instrumenter (without -race: it is single-threaded; host/internal/instrument/spectest)"
	$(GO) test $(SPEC_PKG)
	@echo "== host (with a real kube-apiserver and etcd: one shared, and one for each package that needs its own)"
	@# The test processes share built guests, the test compile worker and
	@# compiled code (internal/testshare); the builds are redone every run,
	@# compiled code is keyed by its bytes and kept. Metered rewrites are
	@# keyed by the test binary too, which every change rebuilds: kept
	@# across runs they would only pile up.
	@# One control plane serves every package but those that kill its
	@# components or create cluster-scoped objects (testenv/testcluster).
	@# Compiled guests are kept outside the checkout (TEST_COMPILED), so
	@# that a fresh clone starts with what earlier runs compiled; the cache
	@# is emptied when it grows past $(TEST_COMPILED_MAX_MB) MiB.
	@rm -rf $(TEST_SHARE)/guests $(TEST_SHARE)/bin $(TEST_COMPILED)/wasmreconcile-rewrites && mkdir -p $(TEST_SHARE) $(TEST_COMPILED)
	@if [ "$$(du -sm $(TEST_COMPILED) | cut -f1)" -gt $(TEST_COMPILED_MAX_MB) ]; then \
	  echo "the tests' compilation cache $(TEST_COMPILED) is over $(TEST_COMPILED_MAX_MB) MiB: emptying it"; rm -rf $(TEST_COMPILED) && mkdir -p $(TEST_COMPILED); fi
	@$(GO) build -o $(TEST_SHARE)/bin/testcluster ./host/internal/testenv/testcluster
	@rc=0; KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" WASMRECONCILE_REGISTRY="$$(hack/registry.sh)/registry" WASMRECONCILE_TEST_SHARE=$(TEST_SHARE) WASMRECONCILE_TEST_COMPILED=$(TEST_COMPILED) \
	  $(TEST_SHARE)/bin/testcluster -- $(TOOLS)/gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg --jsonfile $(TEST_SHARE)/host-tests.json -- \
	  -race -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(TEST_PKGS) || rc=$$?; \
	  echo "== the 10 slowest tests (all of them: $(TEST_SHARE)/host-tests.json)"; \
	  $(TOOLS)/gotestsum tool slowest --jsonfile $(TEST_SHARE)/host-tests.json --num 10 --threshold 0s; \
	  exit $$rc

# The per-package limit of go test: a package that hangs fails loudly
# (go test prints every goroutine) rather than stretching the run. It
# guards against hangs, not slowness: under two busy loops on 2 cores the
# slowest package, host/engine, took 207-271 s, and past 300 s when other
# work ran beside the run (README, Tests), so 5m was too tight.
TEST_TIMEOUT ?= 10m
# Parallel tests per package: most wait on the API server, not the CPU.
# Packages run two at a time (go test's -p defaults to the CPU count):
# -p 3 took the host's race run from 576 s to 464 s idle, but under two
# busy loops it stretched the slowest packages past 10 minutes.
TEST_FLAGS   ?= -parallel 3
# The host packages, the slowest first (by a loaded run): go test starts
# packages in the order given (ok lines print in that order too), and the
# longest one started last ends the run alone.
# The spec suite is left out: it runs without -race, before.
SPEC_PKG     := ./host/internal/instrument/spectest/
TEST_PKGS    ?= ./host/engine/ ./host/operator/internal/wholeprocess/ ./host/operator/internal/clusterscoped/ ./host/operator/ ./host/operator/internal/clusterhardening/ ./cmd/operator/ ./host/operator/internal/faults/ ./internal/image/ ./host/internal/reconciler/ $(shell $(GO) list ./... | grep -v '/host/internal/instrument/spectest$$')
# Where the test processes of one run share what is costly to make.
TEST_SHARE   := $(BIN)/test-share
# Where they keep compiled guests across runs and clones: beside the
# control plane's binaries (hack/controlplane.sh's cache). wazero keys each
# file by the module's bytes and its own version.
TEST_COMPILED ?= $(or $(WASMRECONCILE_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/wasmreconcile)/test-compiled
TEST_COMPILED_MAX_MB ?= 3072

.PHONY: test-short
test-short: sdk-zip ## The inner loop: unit tests only (go test -short starts no control plane), no -race.
	$(GO) test -short ./...
	cd guest-sdk && $(GO) test ./...
	cd modules && $(GO) test ./...

.PHONY: test-faults
test-faults: controlplane ## Longer fault tests: lists 10,000 objects in pages (about a minute more than make test's 1,201).
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" WASMRECONCILE_PAGING_OBJECTS=10000 $(GO) test -count=1 -run TestPaginatedListAndEvents -v ./host/informer/

.PHONY: generate
generate: ## Write the generated files: host/abi (copied from guest-sdk/abi), deepcopy and the ReconcileModule CRD (controller-gen).
	hack/generate.sh

.PHONY: verify-generated
verify-generated: ## Fail when a generated file differs from what `make generate` writes.
	@hack/generate.sh
	@if ! git diff --quiet -- host/abi api config/crd || [ -n "$$(git ls-files --others --exclude-standard -- host/abi api config/crd)" ]; then \
	  echo "generated files are stale; run make generate and commit the result:"; git status --short -- host/abi api config/crd; exit 1; fi

.PHONY: lint
lint: verify-generated tools ## Generated files up to date, gofmt, goimports, go vet and staticcheck (native and wasip1) and a go mod tidy diff for every Go module.
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	@bad=$$($(TOOLS)/goimports -local github.com/wasmreconcile -l $$(git ls-files '*.go' ':!:*zz_generated*')); \
	  if [ -n "$$bad" ]; then echo "goimports -local github.com/wasmreconcile needed:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags runonly ./cmd/operator
	cd guest-sdk && $(GO) vet ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd modules && $(GO) vet ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	$(TOOLS)/staticcheck ./...
	$(TOOLS)/staticcheck -tags runonly ./cmd/operator
	cd guest-sdk && $(TOOLS)/staticcheck ./... && cd k8s/apicheck && $(TOOLS)/staticcheck ./...
	cd modules && $(TOOLS)/staticcheck ./...
	@for m in $(GOMODS); do (cd $$m && $(GO) mod tidy -diff) || { echo "go mod tidy needed in $$m"; exit 1; }; done
	@# Metrics are written, never read back to decide anything, and no collector is registered in init().
	@bad=$$(git grep -nE 'prometheus/client_model|prometheus/testutil|\.Write\(&' -- '*.go' ':!*_test.go' || true); \
	  if [ -n "$$bad" ]; then echo "a package reads a Prometheus collector:"; echo "$$bad"; exit 1; fi
	@bad=$$(git grep -nE -A3 '^func init\(\)' -- '*.go' | grep -E 'MustRegister|Registry\.Register|[rR]egisterer' || true); \
	  if [ -n "$$bad" ]; then echo "a collector is registered in init():"; echo "$$bad"; exit 1; fi

.PHONY: bench
bench: modules modules-rust ## Run the benchmarks behind docs/benchmarks.md (ratios are measured within one run).
	$(GO) test -run '^$$' -bench 'ComputeLoop|Deadline|FourSpinners|FuelSlice' -benchtime=30x ./host/engine/
	$(GO) test -run '^$$' -bench 'RoundTrip' -benchtime=3s ./host/engine/
	$(GO) test -run '^$$' -bench 'JSONReconcile' -benchtime=400x ./host/engine/
	$(GO) test -run '^$$' -bench 'LoadCompilerVsInterpreter' -benchtime=3x ./host/engine/
	$(GO) test -run '^$$' -bench 'AdversarialTimeouts|CostModel' -benchtime=1x ./host/engine/
	$(GO) test -run '^$$' -bench 'Soak' -benchtime=1x ./host/engine/
	$(GO) test -run '^$$' -bench 'ModuleMemory' -benchtime=1x ./host/engine/
	$(GO) test -run '^$$' -bench 'IdleModule' -benchtime=1x ./host/engine/
	$(GO) test -run '^$$' -bench 'Reinstantiate' -benchtime=200x ./host/engine/
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" $(GO) test -run '^$$' -bench 'Isolation' -benchtime=1x ./host/operator/internal/wholeprocess/
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" $(GO) test -run '^$$' -bench 'ChildIndex' -benchtime=300x ./host/internal/reconciler/
	cd modules && $(GO) test -tags rustnative -run '^$$' -bench 'RustGuestVsNative' -benchtime=20000x ./widget-rust/native/

.PHONY: bench-e2e
bench-e2e: controlplane ## End to end against a native controller-runtime controller: 2,000 and 10,000 Widgets, 20 modules vs 20 processes (~15 min).
	$(GO) build -o $(BIN)/benche2e ./hack/benche2e
	$(BIN)/benche2e -assets "$$(hack/controlplane.sh)" -objects 2000,10000 -modules 20 $(BENCH_E2E_FLAGS)

.PHONY: bench-shard
bench-shard: controlplane ## Sharding (issue 27): 3 replicas against one on 30,000 Widgets in 300 namespaces, arriving and after a restart, server-side and client-side (~20 min).
	$(GO) build -o $(BIN)/benche2e ./hack/benche2e
	$(BIN)/benche2e -assets "$$(hack/controlplane.sh)" -objects "" -modules 0 -shard-objects 30000 -shard-namespaces 300 -shard-replicas 3 $(BENCH_SHARD_FLAGS)

.PHONY: fuzz
fuzz: ## Fuzz the instrumenter for FUZZTIME (default 2m).
	$(GO) test -run '^$$' -fuzz FuzzInstrument -fuzztime $(or $(FUZZTIME),2m) ./host/internal/instrument/

.PHONY: demo
demo: controlplane modules operator ## Run the operator with the example modules on an embedded real control plane.
	@mkdir -p $(BIN)/modules/demo
	@echo "wasm    modules/widget (Version=2) -> bin/modules/demo/widget-v2.wasm"
	@cd modules && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -ldflags "-X main.Version=2" -o $(BIN)/modules/demo/widget-v2.wasm ./widget
	@echo "wasm    modules/widget (Version=3 Bug=loop) -> bin/modules/demo/widget-v3-loop.wasm"
	@cd modules && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -ldflags "-X main.Version=3 -X main.Bug=loop" -o $(BIN)/modules/demo/widget-v3-loop.wasm ./widget
	@$(GO) build -o $(BIN)/demo ./hack/demo
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" $(BIN)/demo --operator $(BIN)/operator --modules $(BIN)/modules/widget.wasm,$(BIN)/modules/webapp.wasm \
	  --widget-v2 $(BIN)/modules/demo/widget-v2.wasm --widget-buggy $(BIN)/modules/demo/widget-v3-loop.wasm $(DEMO_FLAGS)

.PHONY: demo-check
demo-check: ## Run the whole demo non-interactively: exits 0 at its end, 1 if a step fails.
	$(MAKE) demo DEMO_FLAGS=--exit-when-done

.PHONY: clean
clean: ## Remove build outputs (not the control-plane cache).
	rm -rf $(BIN)
