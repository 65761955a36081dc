# Build, test and generate. Every target works on a fresh clone with the Rust toolchain; `make test` also builds
# upstream clusterctl and CAPI core with Go (without Go those tests are skipped, loudly; see docs/testing.md).
CARGO ?= cargo

VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
IMG ?= ghcr.io/gardener/cluster-api-provider-mcm:v$(VERSION)
# The CRDs the infrastructure provider's components install (a test keeps config/crd/bases equal to crds/), and
# MCM's MachineClass CRD, released apart (config/machineclass; docs/clusterctl.md says why).
PROVIDER_CRDS := infrastructure.cluster.x-k8s.io_mcmclusters infrastructure.cluster.x-k8s.io_mcmclustertemplates \
	infrastructure.cluster.x-k8s.io_mcmclusteridentities infrastructure.cluster.x-k8s.io_mcmmachines infrastructure.cluster.x-k8s.io_mcmmachinetemplates

.PHONY: dev build test test-kube crds fmt lint fuzz bench release-manifests docker-build upstream-tools \
	protobuf-descriptors proto-go adapters test-adapters mcm-peer bench-peer kubectl-plugin

dev: ## Run `mcm dev`: a local control plane on 127.0.0.1 with a kubeconfig in .mcm/kubeconfig (Ctrl-C stops it)
	$(CARGO) run --quiet --no-default-features -- dev

build: ## Build the mcm binary (target/debug/mcm)
	$(CARGO) build

# Where `make kubectl-plugin` links kubectl-mcm (a directory on your PATH).
PLUGIN_DIR ?= $(HOME)/.local/bin

kubectl-plugin: ## Build mcm without cloud SDKs and link it as $(PLUGIN_DIR)/kubectl-mcm, for `kubectl mcm status` (docs/status.md)
	$(CARGO) build --no-default-features
	mkdir -p $(PLUGIN_DIR)
	ln -sf $(CURDIR)/target/debug/mcm $(PLUGIN_DIR)/kubectl-mcm

test: upstream-tools adapters test-adapters mcm-peer ## Run every test: unit, integration and doc tests (with upstream clusterctl, CAPI core, the Go adapters and upstream MCM)
	$(CARGO) test

# The areas `make test-kube` runs against the real kube-apiserver (docs/testing.md says why these).
KUBE_SUITE ?= machines:: sets:: run:: infra:: migrate:: capi:: apiserver::backends::

test-kube: upstream-tools ## Run the integration suite's lifecycle areas against a real kube-apiserver, etcd and RBAC
	MCM_TEST_APISERVER=kube $(CARGO) test --test integration -- $(KUBE_SUITE)

upstream-tools: ## Build clusterctl, CAPI core's manager, kube-apiserver, kube-controller-manager and etcd (docs/testing.md)
	hack/upstream-tools.sh

protobuf-descriptors: ## Regenerate third_party/kubernetes-protobuf/ after a Kubernetes bump (needs go and protoc)
	hack/kube-protobuf-descriptors.sh

# The Go adapters of the driver protocol (adapters/mcm-go) and MCM as a benchmark peer (hack/mcm-peer), built with
# Go caches under target/adapters/go, as hack/upstream-tools.sh does for its tools.
ADAPTERS_GO := GOMODCACHE=$(CURDIR)/target/adapters/go/mod GOCACHE=$(CURDIR)/target/adapters/go/build \
	GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0 go

adapters: ## Build the Go driver relay (target/adapters/bin/mcm-driver-relay: MCM's Go types between two protocol ends)
	cd adapters/mcm-go && $(ADAPTERS_GO) build -trimpath -o $(CURDIR)/target/adapters/bin/mcm-driver-relay ./cmd/mcm-driver-relay

test-adapters: ## Run the Go adapters' tests (adapters/mcm-go: MCM driver <-> driver protocol, every machine code)
	cd adapters/mcm-go && $(ADAPTERS_GO) vet ./... && $(ADAPTERS_GO) test ./...

mcm-peer: ## Build upstream MCM's controllers on the driver protocol, for benchmarks and the in-place interop test (target/adapters/bin/mcm-peer)
	cd hack/mcm-peer && $(ADAPTERS_GO) build -trimpath -o $(CURDIR)/target/adapters/bin/mcm-peer .

proto-go: ## Regenerate adapters/mcm-go/driverpb after editing proto/mcm/driver/v1/driver.proto (needs go and protoc)
	hack/proto-go.sh

crds: ## Regenerate crds/ from the API types, and config/crd/bases from crds/ (tests fail when either drifts)
	$(CARGO) run --quiet --no-default-features -- crds --output-dir crds
	for crd in $(PROVIDER_CRDS); do cp crds/$$crd.yaml config/crd/bases/; done
	cp crds/machine.sapcloud.io_machineclasses.yaml config/machineclass/

release-manifests: ## clusterctl assets in out/: components, metadata, templates, a local repository and clusterctl.yaml
	hack/release-manifests.sh out

docker-build: ## Build the manager image $(IMG) (needs a Docker daemon)
	docker build -t $(IMG) .

fmt: ## Format the code
	$(CARGO) fmt

bench: ## Measure the embedded API server and the controllers (release build; see docs/benchmarks.md)
	$(CARGO) run --release --quiet -- bench apiserver
	$(CARGO) run --release --quiet --no-default-features -- bench machines
	$(CARGO) run --release --quiet --no-default-features -- bench machines --controllers-process --rest 30s

bench-peer: mcm-peer ## The machines scenario with upstream MCM's controllers, then ours, side by side (docs/benchmarks.md)
	$(CARGO) run --release --quiet -- bench machines --peer $(CURDIR)/target/adapters/bin/mcm-peer $(BENCH_ARGS)

lint: ## Formatting and clippy (with every feature, and with none), warnings as errors; the fuzz targets compile
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets --all-features -- -D warnings
	$(CARGO) clippy --all-targets --no-default-features -- -D warnings
	$(CARGO) check --manifest-path fuzz/Cargo.toml --target-dir $${CARGO_TARGET_DIR:-$(CURDIR)/target}

# `make fuzz` runs each target this many seconds (FUZZ_SECONDS=600 make fuzz for the 10-minute runs).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := apiserver_request apiserver_patch field_validation provider_spec migrate_plan convert_roundtrip
# Where the fuzzer keeps what it finds: the committed corpora (fuzz/corpus) are only read, and stay small.
FUZZ_WORK ?= $(CURDIR)/target/fuzz
# More libFuzzer flags, e.g. FUZZ_ARGS="-fork=1 -ignore_crashes=1" to go on after a crash (how docs/reliability.md's runs were made).
FUZZ_ARGS ?=

fuzz: ## Run every fuzz target for FUZZ_SECONDS (default 60) each, one after the other (nightly and cargo-fuzz; docs/reliability.md#fuzzing)
	for t in $(FUZZ_TARGETS); do \
		mkdir -p $(FUZZ_WORK)/corpus/$$t && \
		$(CARGO) +nightly fuzz run --sanitizer none $$t $(FUZZ_WORK)/corpus/$$t fuzz/corpus/$$t \
			-- -max_total_time=$(FUZZ_SECONDS) -timeout=10 $(FUZZ_ARGS) || exit 1; \
	done
