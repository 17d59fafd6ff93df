# kvharness — `make run` and `make test` are the two commands a new user needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Extra prerequisites of `make test` (the vLLM engine, Debian packages); mk/*.mk add to them.
TEST_DEPS :=
APT_PACKAGES :=
-include $(sort $(wildcard mk/*.mk))

.PHONY: setup run test lint typecheck unit system-deps clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

run: setup
	$(BIN)/kvharness bench

system-deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: setup
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest -m "not vllm"

test: setup system-deps lint typecheck $(TEST_DEPS)
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .venv-vllm .cache build dist
