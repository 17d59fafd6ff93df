"""``kvharness bench --reset-cache`` through a router: the engines behind it (the run's
``--metrics-url``) are the ones reset, so the run starts cold, as its twin assumes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from kvharness.cli import main
from kvharness.report.records import read_records
from kvharness.testing import VllmReplica

from .conftest import GatewayThread

pytestmark = pytest.mark.vllm

SPEC = (
    "synthetic:sessions=1,repos=1,steps_median=2,steps_max=2,system_tokens=200,"
    "repo_tokens_median=300,task_tokens=20,append_median=20,output_median=4,max_context=2000,"
    "seed=5"
)


def test_reset_cache_behind_a_router_resets_the_engines(
    tmp_path: Path,
    vllm_replicas: Sequence[VllmReplica],
    gateway_thread: Callable[..., GatewayThread],
) -> None:
    rep = vllm_replicas[0]
    gw = gateway_thread(backends=(rep.url,), policy="round_robin")
    base = ["bench", "--backend", gw.url, "--workload", SPEC, "--metrics-url", rep.url,
            "--time-scale", "0.01", "--no-progress"]  # fmt: skip

    def first_turn_cached(run: str, *extra: str) -> int:
        assert main([*base, *extra, "--out", str(tmp_path / run)]) == 0
        first = [r for r in read_records(tmp_path / run / "records.jsonl") if r.turn == 0]
        assert len(first) == 1 and first[0].ok
        return first[0].cached_tokens or 0

    first_turn_cached("warm-up")
    assert first_turn_cached("warm") > 0  # the same prompt again: served from the cache
    assert first_turn_cached("cold", "--reset-cache") == 0
