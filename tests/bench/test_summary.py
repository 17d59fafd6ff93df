"""Client-side figures: a late send's TTFT counts from when it should have gone out, too."""

from __future__ import annotations

import pytest
from rich.console import Console

from kvharness.bench.summary import quick_stats, render_side_by_side
from kvharness.report.records import TurnRecord


def _rec(
    intended: float, sent: float, first: float, cached: int, error: str | None = None
) -> TurnRecord:
    return TurnRecord(session="s", turn=0, replica="r", intended=intended, sent=sent,
                      first_token=first, done=None if error else first + 0.1, prompt_tokens=1000,
                      cached_tokens=cached, ideal_cached_tokens=cached, output_tokens=8,
                      error=error)  # fmt: skip


def test_lag_is_reported_and_counted_from_intended() -> None:
    recs = [_rec(0.0, 0.0, 0.05, 512), _rec(1.0, 1.5, 1.55, 0), _rec(2.0, 2.0, 2.01, 0, "http 500")]
    q = quick_stats(recs)
    assert q.turns_ok == 2 and q.attempts_failed == 1
    assert q.ttft_mean == pytest.approx(0.05)
    assert q.ttft_intended_p50 == pytest.approx(0.3)  # (0.05 + 0.55) / 2
    assert q.lag_max == pytest.approx(0.5)
    assert q.cached_ratio == pytest.approx(512 / 2000)


def test_side_by_side_states_the_difference() -> None:
    a = [_rec(0.0, 0.0, 0.1, 500)]
    b = [_rec(0.0, 0.0, 0.3, 250)]
    con = Console(width=200, record=True)
    con.print(render_side_by_side(["session", "isolated"], [a, b], [None, None], [{}, {}]))
    text = con.export_text()
    assert "isolated vs session: mean TTFT 300.0 ms vs 100.0 ms (+200.0 ms)" in text
    assert "cached ratio 25.0% vs 50.0%" in text
