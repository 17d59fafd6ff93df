# mini-swe-agent, the real third-party agent harness of `kvharness env run --agent mini-swe-agent`
# (issue 21; src/kvharness/env/harness/mini_swe_agent.py), in its own virtual environment: its
# dependencies (litellm, datasets...) must not enter kvharness's. Installed from its hash-checked
# lock (requirements/mini-swe-agent.txt, made from requirements/mini-swe-agent.in by `make lock`),
# with --no-deps as for vLLM (mk/vllm.mk): the lock names every package, so nothing is resolved.
MSWEA_VENV  := .venv-mini-swe-agent
MSWEA_STAMP := $(MSWEA_VENV)/.installed

TEST_DEPS += mini-swe-agent

.PHONY: mini-swe-agent

mini-swe-agent: $(MSWEA_STAMP)

# MSWEA_SILENT_STARTUP: the import check prints no banner; MSWEA_GLOBAL_CONFIG_DIR: nor does it
# create ~/.config/mini-swe-agent.
$(MSWEA_STAMP): mk/mini_swe_agent.mk $(LOCKS)/mini-swe-agent.txt
	$(PYTHON) -m venv $(MSWEA_VENV)
	$(MSWEA_VENV)/bin/pip install -q --no-deps --require-hashes -r $(LOCKS)/mini-swe-agent.txt
	LITELLM_LOCAL_MODEL_COST_MAP=True MSWEA_SILENT_STARTUP=1 MSWEA_GLOBAL_CONFIG_DIR=$(MSWEA_VENV)/config \
	  $(MSWEA_VENV)/bin/python -c "import minisweagent.agents.default, minisweagent.models.litellm_model"
	touch $@
