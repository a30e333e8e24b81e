# The two commands a newcomer runs: `make run` and `make test`.
# Each creates .venv/ and installs the project into it by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint types check bench bench-ha bench-pricing migrate reconcile worker scheduler clean

$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	# The gateway client is its own distribution (httpx alone); the tests import it.
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e clients/python
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/ledger serve --host $${LEDGER_HOST:-127.0.0.1} --port $${LEDGER_PORT:-8000}

test: $(STAMP)
	$(BIN)/python -m pytest -n $${PYTEST_WORKERS:-2} --dist loadfile $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check ledger clients/python pricing workers migrations tests bench
	$(BIN)/ruff format --check ledger clients/python pricing workers migrations tests bench

types: $(STAMP)
	$(BIN)/mypy

check: lint types test

migrate: $(STAMP)
	$(BIN)/ledger migrate

reconcile: $(STAMP)
	$(BIN)/ledger reconcile

worker: $(STAMP)
	$(BIN)/ledger worker

scheduler: $(STAMP)
	$(BIN)/ledger scheduler

bench-pricing: $(STAMP)
	$(BIN)/python bench/bench_pricing.py

bench: $(STAMP)
	$(BIN)/python bench/bench_holds.py --rounds 3 --soak 300

bench-ha: $(STAMP)
	$(BIN)/python bench/bench_ha.py

clean:
	rm -rf $(VENV) build *.egg-info
