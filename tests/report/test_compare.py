"""Deltas, verdicts and warnings between runs, and the terminal tables that show them."""

from __future__ import annotations

import io
from collections.abc import Callable

import msgspec
import pytest
from rich.console import Console

from kvharness.report.compare import KEY_METRICS, compare, fmt_value
from kvharness.report.metrics import summarise
from kvharness.report.records import TurnRecord
from kvharness.report.table import render_comparison, render_summary

Rec = Callable[..., TurnRecord]


def _text(renderable: object) -> str:
    buf = io.StringIO()
    Console(file=buf, width=220, color_system=None).print(renderable)
    return buf.getvalue()


def _faster(records: list[TurnRecord]) -> list[TurnRecord]:
    """The same run with every first token 0.25 s earlier (decode 0.25 s longer)."""
    out = []
    for r in records:
        if r.first_token is not None and r.done is not None:
            r = msgspec.structs.replace(r, first_token=r.first_token - 0.25, scheduled=None)
        out.append(r)
    return out


def test_compare_marks_better_worse_same(records: list[TurnRecord]) -> None:
    base = summarise(records, label="base")
    new = summarise(_faster(records), label="new")
    cmp = compare([base, new])
    m = {x.key: x for x in cmp.metrics}
    assert cmp.labels == ["base", "new"] and cmp.baseline == 0
    # TTFT p50: 1.0 -> 0.75 (each TTFT 0.25 lower): delta -0.25, -25%, lower is better.
    ttft = m["ttft_p50"]
    assert ttft.values == [1.0, 0.75]
    assert (ttft.delta, ttft.pct, ttft.verdict) == (
        [None, -0.25],
        [None, -25.0],
        ["baseline", "better"],
    )
    # ITL mean: 0.275 -> decode of each ok turn 0.25 longer: a0 1.25/10, a1 1.25/4, b0 1.75/3,
    # b1 0.75/2 -> higher = worse.
    assert m["itl_mean"].verdict[1] == "worse"
    # Mean session time waiting on the server: base a 1.0 queue + 3.0 prefill, b 1.25 -> 2.625;
    # new: every TTFT 0.25 s shorter: a 0.75 + 0.75 + 1.75, b 0.25 + 0.5 -> (3.25 + 0.75)/2 = 2.0.
    assert m["session_server_wait"].values == [2.625, 2.0]
    assert m["session_server_wait"].verdict[1] == "better"
    assert m["session_decode"].verdict[1] == "worse"  # decode 0.25 s longer per turn
    # Makespan, errors, cache are unchanged -> same.
    for key in ("makespan_p50", "errors", "cached_ratio", "goodput"):
        assert m[key].verdict[1] == "same", key
    assert m["errors"].values == [2.0, 2.0]
    assert cmp.warnings == []


def test_compare_tolerance_and_directions(records: list[TurnRecord]) -> None:
    base = summarise(records, label="base")
    # goodput 600/h vs 300/h with a deadline: within-deadline sessions dropped -> worse.
    tight = summarise(records, deadline=10.0, label="tight")
    cmp = compare([base, tight], tolerance=0.0)
    m = {x.key: x for x in cmp.metrics}
    assert m["goodput"].values == pytest.approx([600.0, 300.0])
    assert m["goodput"].verdict[1] == "worse" and m["goodput"].pct[1] == pytest.approx(-50.0)
    assert any("deadline" in w for w in cmp.warnings)
    # The other way round, goodput is better.
    assert {x.key: x for x in compare([tight, base]).metrics}["goodput"].verdict[1] == "better"
    assert [s.better for s in KEY_METRICS if s.key == "ideal_ratio"] == ["none"]
    with pytest.raises(ValueError, match="baseline"):
        compare([base], baseline=1)


def test_compare_warns_on_different_workloads(rec: Rec) -> None:
    a = summarise(
        [rec("x", 0, done=1.0, first_token=0.5, cached_tokens=0, ideal_cached_tokens=50)], label="a"
    )
    b = summarise(
        [rec("x", 0, done=1.0, first_token=0.5, cached_tokens=0, ideal_cached_tokens=90)], label="b"
    )
    (w,) = compare([a, b]).warnings
    assert "ideal cache ratio 90.0% vs 50.0%" in w


def test_fmt_value() -> None:
    assert fmt_value(0.0123, "s") == "12.3 ms"
    assert fmt_value(12.345, "s") == "12.35 s"
    assert fmt_value(0.875, "ratio") == "87.5%"
    assert fmt_value(3.0, "count") == "3"
    assert fmt_value(600.0, "/h") == "600.0/h"
    assert fmt_value(None, "s") == "-"


def test_render_summary_shows_the_figures(records: list[TurnRecord]) -> None:
    out = _text(render_summary(summarise(records, deadline=10.0, label="run-a")))
    assert "run: run-a" in out
    assert "1,050.0" in out  # TTFT mean, in ms
    assert "8.750" in out  # breakdown total = makespan mean
    assert "300.0/h" in out  # goodput with the 10 s deadline
    assert "38.9%" in out and "44.4%" in out and "87.5%" in out  # 350/900, 400/900, 350/400
    assert "errors: http 503" in out and "errors: stream cut" in out
    assert "1.33x" in out  # replica imbalance 800/600


def test_render_summary_of_nothing() -> None:
    out = _text(render_summary(summarise([], label="empty")))
    assert "no records" in out


def test_render_comparison_columns_and_rows(records: list[TurnRecord]) -> None:
    base, new = summarise(records, label="base"), summarise(_faster(records), label="new")
    cols = _text(render_comparison([base, new]))
    line = next(x for x in cols.splitlines() if "TTFT p50" in x)
    assert "1.00 s" in line and "750.0 ms ↓25.0% better" in line
    assert "worse" in next(x for x in cols.splitlines() if "inter-token" in x)
    rows = _text(render_comparison([base, new], 1, rows_are_runs=True))
    assert "compared against 'new'" in rows
    lines = rows.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("│ base"))
    # The TTFT p50 column (the fifth metric) holds 1.00 s over "↑33.3% worse" (1.0 vs 0.75).
    col = lines[at].split("│")[6]
    assert col.strip() == "1.00 s"
    below = " ".join(lines[at + k].split("│")[6].strip() for k in (1, 2))
    assert below.strip() == "↑33.3% worse"
    assert "= same" in lines[at + 1]


def test_compare_and_table_flag_runs_that_are_not_closed_loop(rec: Rec) -> None:
    closed = [rec("x", 0, first_token=1.0, done=2.0), rec("x", 1, intended=3.0, sent=3.0,
              first_token=4.0, done=5.0)]  # fmt: skip
    isolated = [closed[0], rec("x", 1, intended=0.5, sent=0.5, first_token=1.5, done=3.0)]
    a, b = summarise(closed, label="session"), summarise(isolated, label="isolated")
    (w,) = compare([a, b]).warnings
    assert w.startswith("isolated: 1 turns went out before their session's previous turn ended")
    assert "not closed-loop" in _text(render_summary(b))
    assert "not closed-loop" not in _text(render_summary(a))


def test_a_run_of_requests_shows_no_session_figures(rec: Rec) -> None:
    reqs = [
        rec(f"r{i}", 0, sent=0.1 * i, first_token=0.1 * i + 0.05, done=0.1 * i + 0.5,
            prompt_tokens=1000, output_tokens=32)
        for i in range(4)
    ]  # fmt: skip
    s = summarise(reqs, label="isolated")
    out = _text(render_summary(s))
    assert "request throughput (req/s)" in out and "output token throughput" in out
    assert "goodput" not in out and "makespan" not in out and "Where a completed" not in out
    assert "Cache (a run of requests, not sessions)" in out
    # 4 requests of 32 output tokens over 0.8 s (first send 0.0, last end 0.8): 160 tok/s.
    assert "160.00" in out and "5.00" in out
    by_key = {m.key: m for m in compare([s, s]).metrics}
    assert by_key["goodput"].values == [None, None]
    assert by_key["makespan_p50"].values == [None, None]
    assert by_key["requests_per_s"].values == [pytest.approx(5.0)] * 2
