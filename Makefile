# Two commands for a newcomer: `make demo` and `make test`. Both set themselves up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml | head -n 1)
IMAGE ?= ghcr.io/inference-autoscaler/inference-autoscaler

.PHONY: venv demo test lint unit faults prometheus bench bench-quick image push lock clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: venv
	$(BIN)/autoscaler demo

# Integration tests start a real Prometheus server; Debian's package provides it.
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
	  echo "installing Debian's prometheus package"; \
	  SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# Policy quality (docs/benchmark.md): ours against HPA, KEDA, Knative KPA and a perfect-foresight
# oracle on every scenario, warm and cold start-up. Prints one Markdown table and writes results.md,
# results.json and a plot per scenario into bench-out/ (under 10 minutes on 2 cores).
bench: venv
	$(BIN)/python -m bench.run --out bench-out
	$(BIN)/python -m bench.bad_pod --out bench-out/bad-pod
	$(BIN)/python -m bench.placement --out bench-out/placement

# The same in about a minute: 4 scenarios cut to 30 minutes, cold start-up, a coarser sweep.
bench-quick: venv
	$(BIN)/python -m bench.run --quick --out bench-out/quick

lint: venv
	$(BIN)/ruff check autoscaler tests bench
	$(BIN)/ruff format --check autoscaler tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: venv
	$(BIN)/pytest

test: venv prometheus lint unit

# The fault-injection suite (docs/reliability.md): hostile annotations and metric names, API and
# Prometheus failures, leader kills at every ramp step, a churn soak. Long, so not in `test`;
# prints its tables and writes them to faults-out/.
faults: venv prometheus
	$(BIN)/pytest -m faults tests/faults
	$(BIN)/python tests/faults/figures.py

# The controller's image, tagged with the project's version (the tag manifests/base deploys).
# The dev extras bring what tests/deploy checks without Docker: hadolint, kubectl (kustomize)
# and the Kubernetes schemas.
# Nobody publishes it: build it, push it to a registry your nodes pull from, and point your
# kustomization at it (docs/operations.md, "Installing"):
#   make image push IMAGE=registry.example.com/platform/inference-autoscaler
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .

push:
	docker push $(IMAGE):$(VERSION)

# Pins every runtime dependency, with hashes, for the image (requirements.lock). Run it after
# changing `dependencies` in pyproject.toml; pip-tools lives in its own virtualenv under build/.
lock:
	$(PYTHON) -m venv build/lock
	build/lock/bin/pip install --quiet pip-tools==7.6.2
	build/lock/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	  --no-emit-index-url --no-emit-find-links --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
