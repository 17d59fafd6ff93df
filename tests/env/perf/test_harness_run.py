"""`kvharness env run` over a performance suite, against the real vLLM engine: the oracle's
rollouts and their recorded workload."""

import json

import pytest

from kvharness.cli import main
from kvharness.env.perf.task import SYSTEM_PROMPT
from kvharness.env.task import write_suite_index
from kvharness.workload.format import load

from .conftest import write_task

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_env_run_records_a_performance_episode(vllm_replicas, tmp_path, capsys):
    task = write_task(tmp_path / "suite")
    write_suite_index(tmp_path / "suite", [task.id], {"kind": "perf"})
    out = tmp_path / "run"
    replica = vllm_replicas[0]
    code = main(
        [
            "env", "run", "--backend", replica.url, "--tasks", str(tmp_path / "suite"),
            "--agent", "oracle", "--max-tokens", "8", "--out", str(out),
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    (rollout,) = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert rollout["episode"] == "row_sq/0"
    assert [s["score"] for s in rollout["submissions"]] == [0.0, 1.0]
    assert rollout["reward"] == 1.0
    assert rollout["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert "Score: 1.000" in rollout["messages"][-1]["content"]
    workload = load(out / "workload.jsonl")
    assert workload.num_turns == len(rollout["calls"]) == 5
