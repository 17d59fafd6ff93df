# The peers' routers (sglang-router, vllm-router) that benchmarks/gateway_compare.py compares the
# gateway with, in their own environment .cache/routers (the script's --routers-venv default),
# from their hash-checked lock (requirements/routers.txt, made from requirements/routers.in by
# `make lock`). No test needs them, so `make test` does not install them.
ROUTERS_VENV  := .cache/routers
ROUTERS_STAMP := $(ROUTERS_VENV)/.installed

.PHONY: routers

routers: $(ROUTERS_STAMP)

$(ROUTERS_STAMP): mk/routers.mk $(LOCKS)/routers.txt
	$(PYTHON) -m venv $(ROUTERS_VENV)
	$(ROUTERS_VENV)/bin/pip install -q --no-deps --require-hashes -r $(LOCKS)/routers.txt
	$(ROUTERS_VENV)/bin/sglang-router --help >/dev/null
	$(ROUTERS_VENV)/bin/vllm-router --help >/dev/null
	touch $@
