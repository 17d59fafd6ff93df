# Gateway (issue 5). Its real-engine tests (tests/gateway/test_vllm.py, marked `vllm`) use the vLLM
# environment that mk/vllm.mk builds; everything else needs only the project's own environment.
.PHONY: gateway-bench

# The gateway's performance figures (printed, never asserted in tests).
gateway-bench: setup
	$(BIN)/python benchmarks/gateway_hashing.py
	$(BIN)/python benchmarks/gateway_overhead.py
