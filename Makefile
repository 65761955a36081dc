# Build, test and generate. Every target works on a fresh clone with only the Rust toolchain installed.
CARGO ?= cargo

.PHONY: dev build test crds fmt lint bench

dev: ## Run `mcm dev`: a local control plane on 127.0.0.1 with a kubeconfig in .mcm/kubeconfig (Ctrl-C stops it)
	$(CARGO) run --quiet --no-default-features -- dev

build: ## Build the mcm binary (target/debug/mcm)
	$(CARGO) build

test: ## Run every test: unit, integration and doc tests
	$(CARGO) test

crds: ## Regenerate crds/ from the API types (a test fails when crds/ drifts)
	$(CARGO) run --quiet -- crds --output-dir crds

fmt: ## Format the code
	$(CARGO) fmt

bench: ## Measure the embedded API server and the controllers (release build; see docs/benchmarks.md)
	$(CARGO) run --release --quiet -- bench apiserver
	$(CARGO) run --release --quiet --no-default-features -- bench machines

lint: ## Formatting and clippy (with every feature, and with none), warnings as errors
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets --all-features -- -D warnings
	$(CARGO) clippy --all-targets --no-default-features -- -D warnings
