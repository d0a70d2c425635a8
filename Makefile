# Two entry points: `make run` and `make test` (lint, types, layers, then the tests). Each sets up .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml ci/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c ci/constraints.txt -e ".[megatron,dev]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/resilience matrix

# lint (ruff), types (mypy) and layers (import-linter), each must pass; settings in pyproject.toml
lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

test: lint
	$(BIN)/python -m pytest -n auto -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) runs
