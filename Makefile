# kvharness — `make run` and `make test` are the two commands a new user needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LOCKS  := requirements

# Extra prerequisites of `make test` (the vLLM engine, Debian packages); mk/*.mk add to them.
TEST_DEPS :=
APT_PACKAGES :=
-include $(sort $(wildcard mk/*.mk))

.PHONY: setup run test lint typecheck unit system-deps lock clean

setup: $(STAMP)

# Every package from the hash-checked lock (requirements/README.md), then kvharness itself.
$(STAMP): pyproject.toml $(LOCKS)/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes -r $(LOCKS)/dev.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
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

# Regenerate the locks after a dependency changes (pip-tools in a throwaway environment).
PIP_COMPILE = CUSTOM_COMPILE_COMMAND='make lock' .venv-lock/bin/pip-compile -q --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url --no-emit-find-links
lock:
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q pip-tools==7.6.2
	$(PIP_COMPILE) --extra dev -o $(LOCKS)/dev.txt pyproject.toml $(LOCKS)/tools.in
	$(PIP_COMPILE) -o $(LOCKS)/vllm.txt $(LOCKS)/vllm.in $(LOCKS)/tools.in
	$(PIP_COMPILE) -o $(LOCKS)/mini-swe-agent.txt $(LOCKS)/mini-swe-agent.in $(LOCKS)/tools.in
	$(PIP_COMPILE) -o $(LOCKS)/aiperf.txt $(LOCKS)/aiperf.in $(LOCKS)/tools.in
	$(PIP_COMPILE) -o $(LOCKS)/routers.txt $(LOCKS)/routers.in $(LOCKS)/tools.in
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) .venv-vllm .venv-mini-swe-agent .venv-aiperf .venv-lock .cache build dist
