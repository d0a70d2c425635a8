# Two entry points: `make run` and `make test` (lint, types, layers, then the tests). Each sets up .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-slow lint bench clean

$(STAMP): pyproject.toml ci/constraints.txt
	@# resilience.fusefs mounts through libfuse3: installed with apt-get only as root, only when missing;
	@# never fails the install (without it the FUSE tests are skipped, and fail under CI=true)
	-@if ! command -v fusermount3 >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq fuse3 libfuse3-3 >/dev/null 2>&1 \
		|| { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq fuse3 libfuse3-3 >/dev/null 2>&1; } \
		|| echo "fuse3 could not be installed with apt-get: the FUSE tests will be skipped"; \
	fi
	@# the report tests render report.html in headless Chromium: the same rule (without it they are skipped,
	@# and fail under CI=true)
	-@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq chromium >/dev/null 2>&1 \
		|| { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } \
		|| echo "chromium could not be installed with apt-get: the browser tests will be skipped"; \
	fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c ci/constraints.txt -e ".[megatron,nvrx,s3,dev]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/resilience matrix

# lint and format (ruff), types (mypy) and layers (import-linter), each must pass; settings in pyproject.toml
lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

test: lint
	$(BIN)/python -m pytest -n auto -q --durations=15  # the slowest tests, in every CI log: candidates for `slow`

# the long runs: fuzzing and every combination of the sampled families (tests/conftest.py SAMPLED)
test-slow: $(STAMP)
	$(BIN)/python -m pytest -n auto -q -m slow --durations=15

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) runs
