# Two commands for a newcomer: `make demo` and `make test`. Both set themselves up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv demo test lint unit prometheus bench bench-quick clean

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

# Policy quality (DESIGN §8): ours against HPA, KEDA, Knative KPA and a perfect-foresight oracle
# on every scenario, warm and cold start-up. Prints one Markdown table and writes results.md,
# results.json and a plot per scenario into bench-out/ (under 10 minutes on 2 cores).
bench: venv
	$(BIN)/python -m bench.run --out bench-out

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

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
