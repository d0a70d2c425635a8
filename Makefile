# Two entry points: `make run` and `make test`. Each sets up .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench clean

$(STAMP): pyproject.toml ci/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c ci/constraints.txt -e ".[megatron]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/resilience matrix

test: $(STAMP)
	$(BIN)/python -m pytest -n auto -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) runs
