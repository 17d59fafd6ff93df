"""NVIDIA AIPerf's exports read as a run (kvharness.report.aiperf), `report show` / `compare` on them.

The exports are REAL: AIPerf itself (its own environment, `make aiperf`) runs as a subprocess
against kvharness's FAKE OpenAI-compatible server (kvharness.testing.fake_openai: canned " tok"
answers, no model) on loopback. The fake is a stand-in, named as such: the subject is AIPerf's
file format, not an engine. AIPerf gets the tests' tiny-model tokenizer offline, as a Hub repo in a
Hub cache (it refuses a bare directory offline, see tests/workload/aiperf_probe.py). Each AIPerf run
sends a handful of requests; most of its ~15 s is AIPerf starting its services. The checked-in
sample (samples/aiperf, made by the command in its README) is read without AIPerf.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvharness.cli import main
from kvharness.errors import FormatError, UserError
from kvharness.report.aiperf import AGGREGATE, RECORDS, AIPerfRun, load_any
from kvharness.report.compare import fmt_value
from kvharness.report.io import write_run_report
from kvharness.report.records import TurnRecord
from kvharness.testing.aiperf import hub_cache
from kvharness.testing.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
AIPERF = ROOT / ".venv-aiperf" / "bin" / "aiperf"
SAMPLE = Path(__file__).with_name("samples") / "aiperf"
TOKENIZER = "local/tokenizer"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A Hub cache holding the tiny model's tokenizer as the repo ``local/tokenizer``."""
    hub = tmp_path_factory.mktemp("hub")
    assert hub_cache(tiny_model_dir, hub) == TOKENIZER
    return hub


def _profile(hub: Path, out: Path, port: int, *extra: str) -> Path:
    """``aiperf profile`` of the fake on ``port``, its artifacts in ``out``."""
    assert AIPERF.exists(), f"no AIPerf environment at {AIPERF}: run `make aiperf`"
    cmd = [
        str(AIPERF), "profile", "--model", "tiny-llama", "--url", f"http://127.0.0.1:{port}",
        "--endpoint-type", "chat", "--streaming", "--tokenizer", TOKENIZER, "--isl", "32",
        "--osl", "8", "--random-seed", "1", "--ui", "none", "--no-server-metrics",
        "--artifact-dir", str(out), *extra,
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def single(hub: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Single-turn: 1 warmup request, then 5 profiled, the third of which gets an HTTP 503;
    token counts from the server's usage (``--use-server-token-count``)."""
    out = tmp_path_factory.mktemp("aiperf") / "single"
    # The plan counts completion requests from 0, the warmup request included.
    with FakeOpenAI(token_ms=1.0, plan=lambda n, _: "http 503" if n == 3 else None) as fake:
        yield _profile(hub, out, fake.port, "--request-count", "5", "--warmup-request-count",
                       "1", "--concurrency", "1", "--use-server-token-count")  # fmt: skip


@pytest.fixture(scope="module")
def multi(hub: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two conversations of three turns, 50 ms between a turn's answer and the next turn."""
    out = tmp_path_factory.mktemp("aiperf") / "multi"
    with FakeOpenAI(token_ms=1.0) as fake:
        yield _profile(
            hub, out, fake.port, "--conversation-num", "2", "--conversation-turn-mean", "3",
            "--conversation-turn-stddev", "0", "--conversation-turn-delay-mean", "50",
            "--conversation-turn-delay-stddev", "0", "--request-count", "6", "--concurrency", "2",
        )  # fmt: skip


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (path / RECORDS).read_text().splitlines() if x.strip()]


def _ms(metric: dict[str, Any]) -> float:
    assert metric["unit"] == "ms"
    return float(metric["value"]) / 1e3


def _same_dist(ours: Any, doc: dict[str, Any]) -> None:
    """A kvharness Dist (seconds) against an aggregate metric of AIPerf's (ms)."""
    assert doc["unit"] == "ms"
    assert ours.n == doc["count"]
    for mine, theirs in (("mean", "avg"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99")):
        assert getattr(ours, mine) == pytest.approx(doc[theirs] / 1e3, rel=1e-6, abs=1e-9)


@pytest.mark.slow
def test_a_single_turn_run_is_read_request_for_request(single: Path) -> None:
    lines = _lines(single)
    profiled = [x for x in lines if x["metadata"]["benchmark_phase"] == "profiling"]
    assert len(lines) == 6 and len(profiled) == 5  # the warmup request is in the file, not the run
    run = load_any(single)
    assert isinstance(run, AIPerfRun) and run.label == "aiperf:single"
    assert len(run.records) == 5
    t0 = min(min(x["metadata"]["credit_issued_ns"], x["metadata"]["request_start_ns"])
             for x in profiled)  # fmt: skip
    for r, x in zip(run.records, profiled, strict=True):
        m, v = x["metadata"], x["metrics"]
        assert (r.session, r.turn) == (m["conversation_id"], m["turn_index"])
        assert r.sent == pytest.approx((m["request_start_ns"] - t0) / 1e9, abs=1e-9)
        assert r.intended == pytest.approx((m["credit_issued_ns"] - t0) / 1e9, abs=1e-9)
        if x.get("error"):
            assert r.error is not None and r.error.startswith("http 503: ") and r.done is None
            continue
        assert r.ttft == pytest.approx(_ms(v["time_to_first_token"]), abs=1e-9)
        assert r.e2e == pytest.approx(_ms(v["request_latency"]), abs=1e-9)
        assert r.prompt_tokens == v["usage_prompt_tokens"]["value"]
        assert r.output_tokens == v["usage_completion_tokens"]["value"] == 8
        assert r.cached_tokens == v["usage_prompt_cache_read_tokens"]["value"]
    # Every figure recomputed from the records is AIPerf's own, request for request.
    doc = json.loads((single / AGGREGATE).read_text())
    s = run.summarise()
    assert s.turns_ok == 4 == doc["request_count"]["avg"]
    assert s.errors == {"http 503": 1} and run.figures is not None
    assert run.figures.errors == {"http 503": 1} and run.figures.failed == 1
    _same_dist(s.ttft, doc["time_to_first_token"])
    _same_dist(s.itl, doc["inter_token_latency"])
    _same_dist(s.e2e, doc["request_latency"])
    assert s.output_tokens == doc["total_osl"]["avg"] == 32
    assert s.sessions == 5 and not s.session_view  # a run of requests, not of agent sessions


@pytest.mark.slow
def test_a_multi_turn_run_keeps_aiperfs_conversations_as_sessions(multi: Path) -> None:
    run = load_any(multi)
    s = run.summarise()
    by_session: dict[str, list[TurnRecord]] = {}
    for r in sorted(run.records, key=lambda r: r.turn):
        by_session.setdefault(r.session, []).append(r)
    assert sorted(by_session) == ["session_000000", "session_000001"]
    assert run.expected_turns == {"session_000000": 3, "session_000001": 3}  # from inputs.json
    for turns in by_session.values():
        assert [r.turn for r in turns] == [0, 1, 2]
        for prev, nxt in itertools.pairwise(turns):
            assert prev.done is not None and nxt.intended - prev.done >= 0.045  # the 50 ms delay
    assert s.session_view and s.sessions_completed == 2 and s.errors == {}
    assert s.breakdown is not None and s.breakdown.tool >= 2 * 0.045
    # Token counts are the server's (as kvharness bench records them), not AIPerf's tokenizer's.
    usage = {(x["metadata"]["conversation_id"], x["metadata"]["turn_index"]): x["metrics"]
             for x in _lines(multi)}  # fmt: skip
    for r in run.records:
        assert r.prompt_tokens == usage[r.session, r.turn]["usage_prompt_tokens"]["value"]
        assert r.output_tokens == usage[r.session, r.turn]["usage_completion_tokens"]["value"]
    doc = json.loads((multi / AGGREGATE).read_text())
    _same_dist(s.ttft, doc["time_to_first_token"])
    _same_dist(s.e2e, doc["request_latency"])


@pytest.mark.slow
def test_only_the_aggregate_gives_aiperfs_figures_and_leaves_the_rest_empty(
    hub: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeOpenAI(token_ms=1.0) as fake:
        out = _profile(hub, tmp_path / "summary", fake.port, "--request-count", "4",
                       "--concurrency", "2", "--export-level", "summary")  # fmt: skip
    assert not (out / RECORDS).exists() and (out / AGGREGATE).exists()
    doc = json.loads((out / AGGREGATE).read_text())
    for given in (out, out / AGGREGATE):
        run = load_any(given)
        assert isinstance(run, AIPerfRun) and run.records == [] and not run.has_records
        s = run.summarise()
        _same_dist(s.ttft, doc["time_to_first_token"])
        _same_dist(s.itl, doc["inter_token_latency"])
        _same_dist(s.e2e, doc["request_latency"])
        assert s.turns_ok == 4 and s.records == 4 and s.errors == {}
        assert s.throughput is not None
        assert s.throughput.requests_per_s == pytest.approx(doc["request_throughput"]["avg"])
        assert s.span == pytest.approx(doc["benchmark_duration"]["avg"])
        # What the aggregate cannot say: sessions, lag, TTFT from intended, ideal cache.
        assert s.goodput is None and s.makespan.n == 0 and s.breakdown is None
        assert s.lag.n == 0 and s.ttft_intended.n == 0 and s.cache.ideal_ratio is None
        assert not s.session_view
    assert main(["report", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "no record export" in shown
    assert fmt_value(doc["time_to_first_token"]["p50"] / 1e3, "s") in shown


@pytest.mark.slow
def test_compare_lays_a_kvharness_run_beside_an_aiperf_run(
    single: Path, tmp_path: Path, records: list[TurnRecord], capsys: pytest.CaptureFixture[str]
) -> None:
    kv = tmp_path / "kv"
    write_run_report(kv, records, {"label": "kv"})
    assert main(["report", "compare", str(kv), str(single)]) == 0
    out = capsys.readouterr().out
    doc = json.loads((single / AGGREGATE).read_text())
    assert "aiperf:single" in out and "AIPerf's own figures (aiperf:single)" in out
    assert "AIPerf 0.13.0" in out
    for key in ("time_to_first_token", "request_latency"):
        assert fmt_value(doc[key]["p50"] / 1e3, "s") in out
    assert f"{doc['request_throughput']['avg']:.2f}" in out  # AIPerf's, beside kvharness's


def test_the_checked_in_sample_reads_without_aiperf(capsys: pytest.CaptureFixture[str]) -> None:
    run = load_any(SAMPLE)
    assert isinstance(run, AIPerfRun) and run.label == "aiperf:aiperf"
    s = run.summarise()
    assert len(run.records) == 4 and s.sessions == 2 and s.sessions_completed == 2
    assert {r.session for r in run.records} == {"session_000000", "session_000001"}
    assert run.expected_turns == {"session_000000": 2, "session_000001": 2}
    assert all(r.replica == "http://127.0.0.1:18471" for r in run.records)
    doc = json.loads((SAMPLE / AGGREGATE).read_text())
    _same_dist(s.ttft, doc["time_to_first_token"])
    _same_dist(s.itl, doc["inter_token_latency"])
    _same_dist(s.e2e, doc["request_latency"])
    assert run.config["aiperf_version"] == "0.13.0"
    for given in (SAMPLE / RECORDS, SAMPLE / AGGREGATE):  # either file stands for the run
        assert load_any(given).records == run.records
    assert main(["report", "show", str(SAMPLE / RECORDS)]) == 0
    assert "AIPerf's own figures (aiperf:aiperf)" in capsys.readouterr().out


def _copy(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(SAMPLE, out)
    return out


def _rewrite_line(path: Path, lineno: int, edit: Any) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[lineno - 1] = edit(lines[lineno - 1])
    path.write_text("".join(lines))


def test_a_malformed_line_is_named_by_file_and_line(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    _rewrite_line(run / RECORDS, 2, lambda _: "{not json\n")
    with pytest.raises(FormatError, match=r"profile_export\.jsonl:2: not an AIPerf record"):
        load_any(run)


def test_times_that_run_backwards_are_refused_with_their_line(tmp_path: Path) -> None:
    run = _copy(tmp_path)

    def late_first_token(line: str) -> str:
        x = json.loads(line)
        x["metrics"]["time_to_first_token"]["value"] = 1e6  # after the request's end
        return json.dumps(x) + "\n"

    _rewrite_line(run / RECORDS, 3, late_first_token)
    with pytest.raises(FormatError, match=r"profile_export\.jsonl:3: bad record: time runs back"):
        load_any(run)


def test_a_metric_in_an_unknown_unit_is_refused(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    _rewrite_line(run / RECORDS, 1, lambda s: s.replace('"unit":"ms"', '"unit":"fortnights"'))
    with pytest.raises(FormatError, match=r"profile_export\.jsonl:1: metric \w+: bad value"):
        load_any(run)


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    text = (run / RECORDS).read_text()
    (run / RECORDS).write_text(text + text.splitlines()[0][:50])  # AIPerf killed mid-write
    assert len(load_any(run).records) == 4


def test_a_damaged_aggregate_is_named_by_file_and_line(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    agg = run / AGGREGATE
    agg.write_text(agg.read_text().replace('"unit": "ms"', '"unit": 7', 1))
    with pytest.raises(FormatError, match=r"profile_export_aiperf\.json:\d+: \w+: Expected `str`"):
        load_any(run)
    agg.write_text("{")
    with pytest.raises(FormatError, match=r"profile_export_aiperf\.json:1: bad JSON"):
        load_any(run)


def test_what_is_not_an_aiperf_export_says_so(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a run directory"):
        load_any(tmp_path)
    raw = tmp_path / "profile_export_raw.jsonl"
    raw.write_text("{}\n")
    with pytest.raises(UserError, match=r"AIPerf's raw\.jsonl export"):
        load_any(raw)
    kv = tmp_path / "kv"
    write_run_report(kv, [], {})
    with pytest.raises(UserError, match="a file of a kvharness run; give its directory"):
        load_any(kv / "summary.json")
    other = tmp_path / "other.json"
    other.write_text('{"x": 1}')
    with pytest.raises(FormatError, match=r"other\.json:1: not AIPerf's aggregate export"):
        load_any(other)
