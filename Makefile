# hotpath: build, run and test. Run as root on Debian (eBPF needs it).
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(HOME)/go/bin:$(PATH)
GO ?= go
# Tool versions: pinned here and nowhere else. A tool in $(HOME)/go/bin of
# another version is replaced (go version -m tells what it was built from).
OCB_VERSION := v0.162.0
STATICCHECK_VERSION := v0.7.0# staticcheck 2026.1 (honnef.co/go/tools)
BENCHSTAT_VERSION := v0.0.0-20260908200009-22c9c6c9d4da# golang.org/x/perf
# What `hotpath --version` prints: the distribution's version (ocb's
# dist.version), the commit, and the collector release it is built on.
VERSION := $(shell awk '$$1 == "version:" { print $$2; exit }' builder-config.yaml)
COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
CLI_LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.collectorVersion=$(OCB_VERSION)
# mdatagen generates each component's internal/metadata, its component and
# goleak tests and documentation.md from metadata.yaml. v0.159.0 is the
# newest the module proxy serves whole: v0.160.0 and v0.162.0 are not
# served, and v0.161.0 needs internal/schemagen v0.161.0, which is refused.
MDATAGEN_VERSION := v0.159.0
MDATAGEN := $(HOME)/go/bin/mdatagen-$(MDATAGEN_VERSION)
BIN := bin
COLLECTOR := $(BIN)/otelcol-hotpath
RUN_DIR ?= var/run
DEPS_STAMP := .deps-installed

APT_PACKAGES := bash-completion clang llvm lld libbpf-dev bpftool gcc g++ make git libstdc++6 libc6-dbg ca-certificates util-linux chromium nodejs openjdk-17-jdk-headless curl gpgv xz-utils debian-archive-keyring debuginfod python3.11
# CPYTHON_ROOTS holds Debian's CPython 3.9 (Debian 11's), 3.14 and 3.15, each
# in a root of its own (scripts/cpython-roots.sh), whose frames the
# receiver's tests walk.
CPYTHON_ROOTS ?= $(HOME)/.cache/hotpath/cpython

.PHONY: all deps build collector generate check-generated run stop test test-unit test-race test-deploy lint bench soak clean

all: build

# deps installs what build and test need on a fresh Debian machine (again
# whenever this Makefile, and so the package list, changes).
deps: $(DEPS_STAMP)
$(DEPS_STAMP): Makefile scripts/apt-install.sh scripts/go-install-tool.sh
	@command -v $(GO) >/dev/null || { echo "Go 1.26 is required at /usr/local/go/bin (see README)"; exit 1; }
	@./scripts/apt-install.sh $(APT_PACKAGES)
	@$(call install-tool,builder,go.opentelemetry.io/collector/cmd/builder,$(OCB_VERSION))
	@$(call install-tool,staticcheck,honnef.co/go/tools/cmd/staticcheck,$(STATICCHECK_VERSION))
	@touch $@

# build-lock makes the rest of a recipe's shell line wait for, and hold,
# this checkout's build lock. The README has make run and make test in two
# terminals of one checkout: make test's generate rewrites the generated
# sources (BPF objects, mdatagen's files) in place, and a build reading one
# half-written would fail. Generating and building take turns.
build-lock = exec 9>$(CURDIR)/.build.lock && flock 9

# install-tool BINARY,PACKAGE,VERSION: go install PACKAGE@VERSION unless
# $(HOME)/go/bin/BINARY was built from exactly that version (one install
# at a time: scripts/go-install-tool.sh).
install-tool = GO=$(GO) ./scripts/go-install-tool.sh $(1) $(2) $(3)

# $(MDATAGEN) is built in a scratch module: "go install ...@version" fails
# here because the proxy does not serve mdatagen's version list, which go
# install reads to check for deprecation.
$(MDATAGEN):
	@mkdir -p $(dir $@)
	d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && cd "$$d" && \
		$(GO) mod init mdatagen-build >/dev/null 2>&1 && \
		$(GO) get go.opentelemetry.io/collector/cmd/mdatagen@$(MDATAGEN_VERSION) && \
		$(GO) build -o $@ go.opentelemetry.io/collector/cmd/mdatagen

# GENERATED is every file make generate writes (all committed): the BPF
# objects and bindings, and what mdatagen makes of each metadata.yaml.
GENERATED := '*_bpfel.go' '*_bpfel.o' '*generated_*.go' '*documentation.md' '*/internal/metadata/*' '*/internal/metadatatest/*'

# generate rebuilds the BPF objects and their Go bindings (committed, so a
# build needs no clang) and runs mdatagen on every metadata.yaml: the
# components' metadata, telemetry builder, component tests and
# documentation.md, and every package's goleak TestMain.
generate: deps $(MDATAGEN)
	@$(build-lock); set -e; \
	echo "$(GO) generate ./receiver/..."; $(GO) generate ./receiver/...; \
	for f in $$(find . -name metadata.yaml -not -path './build/*' -not -path './var/*' -not -path './.git/*' | sort); do \
		(cd "$$(dirname "$$f")" && $(MDATAGEN) metadata.yaml) || { echo "mdatagen failed on $$f"; exit 1; }; \
	done

# check-generated fails when a committed generated file is not what make
# generate writes (changed, missing or new), or when a package with tests
# has no goleak TestMain (add a metadata.yaml there; mdatagen's own
# internal/metadata* packages are exempt).
check-generated: generate
	@out=$$(git status --porcelain -- $(GENERATED)); if [ -n "$$out" ]; then echo "$$out"; echo "generated files are stale: run 'make generate' and commit"; exit 1; fi
	@missing=$$(for d in $$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.Dir}}{{end}}' ./... | grep -Ev '/internal/metadata(test)?$$'); do grep -qs 'goleak.VerifyTestMain' "$$d"/*_test.go || echo "$$d"; done); \
		if [ -n "$$missing" ]; then echo "packages without a goleak TestMain:"; echo "$$missing"; exit 1; fi

build: collector $(BIN)/hotpath

collector: deps
	@$(build-lock); set -ex; \
	mkdir -p build; \
	builder --config=builder-config.yaml --skip-compilation; \
	cp distributions/otelcol-hotpath/*.go build/otelcol-hotpath/; \
	cd build/otelcol-hotpath && CGO_ENABLED=1 $(GO) build -tags hotpath_dist -trimpath -o ../../$(COLLECTOR) .

$(BIN)/hotpath: deps FORCE
	@$(build-lock); set -x; CGO_ENABLED=1 $(GO) build -ldflags "$(CLI_LDFLAGS)" -o $@ ./cmd/hotpath
FORCE:

# run starts the agent (and the gateway) on this machine with the shipped
# configs; Ctrl-C stops both.
run: build
	./scripts/run.sh

# stop ends a make run started from another shell (or in the background):
# its script stops both collectors and waits for them.
stop:
	@state=$${HOTPATH_STATE_DIR:-$(CURDIR)/var}; pid=$$(cat "$$state/run.pid" 2>/dev/null) || { echo "make run is not running (no $$state/run.pid)"; exit 0; }; \
	kill -TERM $$pid 2>/dev/null || { echo "make run (pid $$pid) is gone"; rm -f "$$state/run.pid"; exit 0; }; \
	while kill -0 $$pid 2>/dev/null; do sleep 0.2; done; echo "stopped make run (pid $$pid)"

# SDK_MODULES are modules of their own that applications import (not part of
# ./...); TEST_APP_MODULES are test applications that use them as a user would.
SDK_MODULES := sdk/go/tracectx
TEST_APP_MODULES := receiver/ebpfprofilereceiver/testdata/tracesvc test/e2e/testdata/tracechain receiver/ebpfprofilereceiver/internal/processcontext/processcontexttest/testdata/gopublisher

# lint: gofmt, go mod tidy (go.mod/go.sum must be what tidy makes of the
# imports), go vet and staticcheck, for the main module and the SDK modules.
lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_bpfel.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in . $(SDK_MODULES) $(TEST_APP_MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "go.mod/go.sum in $$m are not tidy: run 'go mod tidy' there and commit"; exit 1; }; done
	$(GO) vet -tags privileged ./...
	staticcheck -tags privileged ./...
	@for m in $(SDK_MODULES); do (cd $$m && $(GO) vet ./... && staticcheck ./...) || exit 1; done

# test-unit: the tests any user can run, no root, no built collector. Tests
# that load BPF programs, mount file systems or run the built collector as
# root are in files with `//go:build privileged`; make test runs them.
test-unit: deps test-deploy
	$(GO) test -count=1 ./...
	@for m in $(SDK_MODULES); do (cd $$m && $(GO) test -count=1 ./...) || exit 1; done

# test-deploy decodes the Kubernetes manifests strictly with the API types
# and checks they mount the shipped configs (its own module: the Kubernetes
# types stay out of the collector's dependencies).
test-deploy:
	cd deploy/kubernetes && $(GO) vet ./... && $(GO) test -count=1 ./...

# test-race runs the race detector on the processors, the exporter, the CLI
# and the internal packages (symbolizer, caches, query layer), where
# concurrent use is the norm, and on the receiver's sampler, whose event
# reader runs beside Close (a race there was found by the exporter's Python
# test, which runs the receiver).
test-race: deps
	$(GO) test -race -tags privileged -count=1 -timeout 30m ./processor/... ./exporter/... ./internal/... ./cmd/... ./receiver/ebpfprofilereceiver/internal/sampler/

# test is what CI runs: generated code up to date, lint, the race detector on
# the packages without BPF, all tests including the privileged ones (eBPF
# tests need root and fail, not skip, without it), then the collector end to
# end.
test: check-generated lint build test-race test-deploy
	@[ "$$(id -u)" = 0 ] || { echo "make test must run as root: the eBPF tests load real BPF programs"; exit 1; }
	./scripts/cpython-roots.sh $(CPYTHON_ROOTS)
	HOTPATH_COLLECTOR=$(CURDIR)/$(COLLECTOR) HOTPATH_CLI=$(CURDIR)/$(BIN)/hotpath HOTPATH_CPYTHON_ROOTS=$(CPYTHON_ROOTS) $(GO) test -tags privileged -count=1 -timeout 30m ./...
	@for m in $(SDK_MODULES); do (cd $$m && $(GO) test -count=1 ./...) || exit 1; done
	BENCH_SMOKE=1 ./scripts/bench.sh

bench: build
	@$(call install-tool,benchstat,golang.org/x/perf/cmd/benchstat,$(BENCHSTAT_VERSION))
	./scripts/bench.sh

# soak: 10 minutes of process churn against the real agent (not part of test).
soak: build
	./scripts/soak.sh

clean:
	rm -rf $(BIN) build $(RUN_DIR) $(DEPS_STAMP) .build.lock
