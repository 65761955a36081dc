# Build, test and generate. Every target works on a fresh clone with only the Rust toolchain installed.
CARGO ?= cargo

.PHONY: build test crds fmt lint

build: ## Build the mcm binary (target/debug/mcm)
	$(CARGO) build

test: ## Run every test: unit, integration and doc tests
	$(CARGO) test

crds: ## Regenerate crds/ from the API types (a test fails when crds/ drifts)
	$(CARGO) run --quiet -- crds --output-dir crds

fmt: ## Format the code
	$(CARGO) fmt

lint: ## Formatting and clippy, warnings as errors
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets --all-features -- -D warnings
