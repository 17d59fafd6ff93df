"""Client-side figures: a late send's TTFT counts from when it should have gone out, too; every
figure is the report's Summary, laid out."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from kvharness.bench import scrape
from kvharness.bench.summary import client_figures, render_result, render_side_by_side
from kvharness.report.metrics import summarise
from kvharness.report.records import TurnRecord


def _rec(
    intended: float, sent: float, first: float, cached: int, error: str | None = None
) -> TurnRecord:
    return TurnRecord(session="s", turn=0, replica="r", intended=intended, sent=sent,
                      first_token=first, done=None if error else first + 0.1, prompt_tokens=1000,
                      cached_tokens=cached, ideal_cached_tokens=cached, output_tokens=8,
                      error=error)  # fmt: skip


RECS = [_rec(0.0, 0.0, 0.05, 512), _rec(1.0, 1.5, 1.55, 0), _rec(2.0, 2.0, 2.01, 0, "http 500")]


def test_lag_is_reported_and_counted_from_intended() -> None:
    q = client_figures(RECS, None)
    assert q == summarise(RECS)
    assert q.turns_ok == 2 and q.records - q.turns_ok == 1
    assert q.ttft.mean == pytest.approx(0.05)
    assert q.ttft_intended.p50 == pytest.approx(0.3)  # (0.05 + 0.55) / 2
    assert q.lag.max == pytest.approx(0.5)
    assert q.cache.achieved_ratio == pytest.approx(512 / 2000)


def test_the_table_shows_the_summarys_figures() -> None:
    con = Console(width=200, record=True)
    con.print(render_result("run", RECS, None, {}))
    text = con.export_text()
    rows = {"turns ok": "2", "failed attempts": "1", "TTFT mean": "50.0 ms",
            "TTFT from intended p50": "300.0 ms", "end-to-end mean": "150.0 ms",
            "cached / prompt tokens": "25.6%", "send lag max": "500.0 ms"}  # fmt: skip
    for label, value in rows.items():
        assert re.search(rf"│ {re.escape(label)} +│ +{re.escape(value)} │", text), label
    written = summarise(RECS, label="written")
    con = Console(width=200, record=True)
    con.print(render_result("run", [], written, {}))  # the figures come from the summary given
    text = con.export_text()
    assert "run: written" in text
    assert re.search(r"│ TTFT from intended p50 +│ +300.0 ms │", text)


def test_side_by_side_states_the_difference() -> None:
    a = [_rec(0.0, 0.0, 0.1, 500)]
    b = [_rec(0.0, 0.0, 0.3, 250)]
    con = Console(width=200, record=True)
    con.print(render_side_by_side(["session", "isolated"], [a, b], [None, None], [{}, {}]))
    text = con.export_text()
    assert "isolated vs session: mean TTFT 300.0 ms vs 100.0 ms (+200.0 ms)" in text
    assert "cached ratio 25.0% vs 50.0%" in text


def test_the_engines_own_means_referee_the_client() -> None:
    deltas = {
        "http://a": {"vllm:time_to_first_token_seconds": 3.0,
                     "vllm:time_to_first_token_seconds_count": 4.0,
                     "vllm:e2e_request_latency_seconds": 8.0,
                     "vllm:e2e_request_latency_seconds_count": 4.0},
        "http://b": {"vllm:time_to_first_token_seconds": 1.0,
                     "vllm:time_to_first_token_seconds_count": 4.0,
                     "vllm:request_time_per_output_token_seconds_count": 0.0},
    }  # fmt: skip
    # TTFT over both engines: (3 + 1) s / 8 requests; end-to-end only from a; no TPOT seen.
    assert scrape.means(deltas) == {
        "vllm:time_to_first_token_seconds": 0.5,
        "vllm:e2e_request_latency_seconds": 2.0,
    }
