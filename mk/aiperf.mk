# NVIDIA AIPerf, the real third-party benchmark client whose own trace loader reads the
# Mooncake-style trace files kvharness writes (tests/workload/aiperf_probe.py runs it in-process: no
# server), in its own virtual environment: its dependencies (transformers, datasets, pandas...) must
# not enter kvharness's. Installed from its hash-checked lock (requirements/aiperf.txt, made from
# requirements/aiperf.in by `make lock`), with --no-deps as for vLLM (mk/vllm.mk): the lock names
# every package, so nothing is resolved.
AIPERF_VENV  := .venv-aiperf
AIPERF_STAMP := $(AIPERF_VENV)/.installed

TEST_DEPS += aiperf

.PHONY: aiperf

aiperf: $(AIPERF_STAMP)

# HF_HUB_OFFLINE: the import check reaches no network.
$(AIPERF_STAMP): mk/aiperf.mk $(LOCKS)/aiperf.txt
	$(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/pip install -q --no-deps --require-hashes -r $(LOCKS)/aiperf.txt
	HF_HUB_OFFLINE=1 $(AIPERF_VENV)/bin/python -c "import aiperf.dataset.loader.mooncake_trace"
	touch $@
