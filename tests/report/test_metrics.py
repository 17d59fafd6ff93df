"""Every metric on the hand-built run of conftest.py, each figure worked out by hand."""

from __future__ import annotations

import math
from collections.abc import Callable

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvharness.report.metrics import (
    Breakdown,
    Summary,
    dist,
    error_cause,
    session_times,
    summarise,
)
from kvharness.report.records import TurnRecord

Rec = Callable[..., TurnRecord]


def test_turn_latencies(records: list[TurnRecord]) -> None:
    s = summarise(records)
    # TTFT = first - sent over the 5 successful attempts: a 1.0, 1.0, 2.0; b 0.5, 0.75.
    # sorted [0.5, 0.75, 1, 1, 2]: mean 5.25/5 = 1.05; p50 = 1.0;
    # p90 at rank 0.9*4 = 3.6: 1 + 0.6*(2-1) = 1.6; p99 at rank 3.96: 1 + 0.96 = 1.96.
    assert s.ttft.n == 5
    assert s.ttft.mean == pytest.approx(1.05)
    assert (s.ttft.p50, s.ttft.p90, s.ttft.p99, s.ttft.max) == pytest.approx((1.0, 1.6, 1.96, 2.0))
    # TTFT from intended = first - intended: a 1.0, 1.5 (sent 0.5 late), 2.0; b 0.5, 1.0 (the
    # retry sent 0.25 late). sorted [0.5, 1, 1, 1.5, 2]: mean 6/5 = 1.2, p50 1.0,
    # p90 at rank 3.6: 1.5 + 0.6*0.5 = 1.8.
    ti = s.ttft_intended
    assert (ti.n, ti.mean, ti.p50, ti.p90, ti.max) == pytest.approx((5, 1.2, 1.0, 1.8, 2.0))
    # ITL = (done - first)/(out - 1): a0 1/10 = 0.1, a1 1/4 = 0.25, a2 out=1 -> none,
    # b0 1.5/3 = 0.5, b1 0.5/2 = 0.25. sorted [0.1, .25, .25, .5]: mean 1.1/4 = 0.275,
    # p50 = 0.25, p90 at rank 2.7: 0.25 + 0.7*0.25 = 0.425.
    assert s.itl.n == 4
    assert (s.itl.mean, s.itl.p50, s.itl.p90) == pytest.approx((0.275, 0.25, 0.425))
    # E2E = done - sent: a 2.0, 2.0, 2.5; b 2.0, 1.25 -> mean 9.75/5 = 1.95, p50 2.0,
    # p90 at rank 3.6: 2 + 0.6*0.5 = 2.3.
    assert (s.e2e.n, s.e2e.mean, s.e2e.p50, s.e2e.p90) == pytest.approx((5, 1.95, 2.0, 2.3))
    # Lag = sent - intended over all 7 attempts: 0, .5, 0, 0, 0, .25, 0 -> mean .75/7, max .5.
    assert (s.lag.n, s.lag.mean, s.lag.p50, s.lag.max) == pytest.approx((7, 0.75 / 7, 0.0, 0.5))
    assert (s.records, s.turns_ok) == (7, 5)
    # Output tokens of successful attempts: 11 + 5 + 1 + 4 + 3 = 24.
    assert s.output_tokens == 24


def test_sessions_makespan_and_goodput(records: list[TurnRecord]) -> None:
    s = summarise(records)
    # a: 0.0 -> 12.0 = 12.0 s, completed; b: 1.0 -> 6.5 = 5.5 s, completed (turn 1 succeeded on
    # its retry); c: abandoned after its first turn failed.
    assert (s.sessions, s.sessions_completed) == (3, 2)
    # Makespan over completed [5.5, 12]: mean = p50 = 8.75; p90 = 5.5 + 0.9*6.5 = 11.35.
    assert (s.makespan.n, s.makespan.mean, s.makespan.p50) == (2, 8.75, 8.75)
    assert s.makespan.p90 == pytest.approx(11.35)
    # Span: earliest intended 0.0 to latest end 12.0 = 12 s = 1/300 h.
    assert s.span == 12.0
    # No deadline: both completed sessions count: 2 / (12/3600 h) = 600 sessions/h.
    assert s.sessions_within_deadline == 2
    assert s.goodput == pytest.approx(600.0)


def test_goodput_with_deadline(records: list[TurnRecord]) -> None:
    # Deadline 10 s: b (5.5 s) makes it, a (12 s) does not -> 1 / (12/3600) = 300/h.
    s = summarise(records, deadline=10.0)
    assert (s.deadline, s.sessions_within_deadline) == (10.0, 1)
    assert s.goodput == pytest.approx(300.0)
    # Deadline exactly 12 s: a's makespan 12.0 <= 12 counts -> 600/h.
    assert summarise(records, deadline=12.0).goodput == pytest.approx(600.0)
    # Below every makespan: nothing counts.
    assert summarise(records, deadline=5.0).goodput == 0.0
    with pytest.raises(ValueError, match="deadline"):
        summarise(records, deadline=0.0)


def test_goodput_with_per_session_deadlines(records: list[TurnRecord]) -> None:
    # a may take 12 s (took 12.0: in), b 5 s (took 5.5: out) -> 1 / (12/3600 h) = 300/h.
    s = summarise(records, session_deadlines={"a": 12.0, "b": 5.0}, deadline_rule="by hand")
    assert (s.sessions_within_deadline, s.deadline_text) == (1, "by hand")
    assert s.goodput == pytest.approx(300.0)
    # Sessions missing from the mapping fall back to ``deadline``: b gets 6 s -> in.
    s = summarise(records, deadline=6.0, session_deadlines={"a": 12.0})
    assert s.sessions_within_deadline == 2 and s.deadline_text == "6 s"


def test_breakdown_per_session_adds_up_exactly(records: list[TurnRecord]) -> None:
    times = {t.session: t for t in session_times(records)}
    # a: lag 0.5 (turn 1); queue 0.5 + 0.5 + 0 = 1.0; prefill 0.5 + 0.5 + 2.0 = 3.0;
    #    decode 1.0 + 1.0 + 0.5 = 2.5; tool (5.0 - 2.0) + (9.5 - 7.5) = 5.0. Sum 12.0.
    assert times["a"].breakdown == Breakdown(lag=0.5, queue=1.0, prefill=3.0, decode=2.5, tool=5.0)
    # b: lag 0.25 (retry); queue+prefill 0.5 + 0.75 = 1.25; decode 1.5 + 0.5 = 2.0;
    #    tool 4.0 - 3.0 = 1.0; failed: the 503 attempt took 0 s (no answer), then the backoff
    #    5.0 - 4.0 = 1.0. Sum 5.5.
    assert times["b"].breakdown == Breakdown(
        lag=0.25, queue_prefill=1.25, decode=2.0, tool=1.0, failed=1.0
    )
    # c: sent 2.0, cut after its first token at 2.5 -> failed 0.5, makespan 0.5.
    assert times["c"].breakdown == Breakdown(failed=0.5)
    assert [times[k].completed for k in "abc"] == [True, True, False]
    for t in times.values():
        assert t.breakdown.total == t.makespan  # dyadic figures: exact


def test_mean_breakdown_totals_mean_makespan(records: list[TurnRecord]) -> None:
    b = summarise(records).breakdown
    # Mean of a and b per part: lag (0.5+0.25)/2, queue 1/2, prefill 3/2, queue+prefill 1.25/2,
    # decode 4.5/2, tool 6/2, failed 1/2; total 8.75 = mean makespan.
    assert b == Breakdown(
        lag=0.375, queue=0.5, prefill=1.5, queue_prefill=0.625, decode=2.25, tool=3.0, failed=0.5
    )
    assert b.total == 8.75


def test_cache_hits_achieved_vs_ideal(records: list[TurnRecord]) -> None:
    c = summarise(records).cache
    # Successful attempts: prompt 100+200+300+100+200 = 900; cached 0+100+150+0+100 = 350;
    # ideal 0+100+200+0+100 = 400 -> 350/900, 400/900, and 350/400 = 0.875.
    assert (c.prompt_tokens, c.cached_tokens, c.ideal_cached_tokens) == (900, 350, 400)
    assert c.achieved_ratio == pytest.approx(350 / 900)
    assert c.ideal_ratio == pytest.approx(400 / 900)
    assert c.achieved_vs_ideal == 0.875
    assert c.unreported == 0


def test_cache_leaves_out_unreported_turns(rec: Rec) -> None:
    rs = [
        rec("x", 0, first_token=1.0, done=2.0, prompt_tokens=100, cached_tokens=40,
            ideal_cached_tokens=50),
        rec("x", 1, intended=3.0, sent=3.0, first_token=4.0, done=5.0, prompt_tokens=300,
            cached_tokens=None, ideal_cached_tokens=250),
    ]  # fmt: skip
    c = summarise(rs).cache
    # Only the first turn reported: 40/100 achieved, 50/100 ideal, 40/50 = 0.8.
    assert (c.achieved_ratio, c.ideal_ratio, c.achieved_vs_ideal, c.unreported) == (
        0.4, 0.5, 0.8, 1,
    )  # fmt: skip


def test_ttft_and_cache_by_turn_index(records: list[TurnRecord]) -> None:
    by = summarise(records).by_turn
    assert [b.turn for b in by] == [0, 1, 2]
    # Turn 0: a 1.0, b 0.5 -> p50 0.75, p90 0.5 + 0.9*0.5 = 0.95; cached 0/200, ideal 0/200.
    assert (by[0].n, by[0].ttft_p50, by[0].cached_ratio, by[0].ideal_ratio) == (2, 0.75, 0.0, 0.0)
    assert by[0].ttft_p90 == pytest.approx(0.95)
    # Turn 1: a 1.0, b 0.75 -> p50 0.875, p90 0.75 + 0.9*0.25 = 0.975; cached 200/400, ideal 200/400.
    assert (by[1].n, by[1].ttft_p50, by[1].cached_ratio, by[1].ideal_ratio) == (2, 0.875, 0.5, 0.5)
    assert by[1].ttft_p90 == pytest.approx(0.975)
    # Turn 2: a only, 2.0; cached 150/300, ideal 200/300.
    assert (by[2].n, by[2].ttft_p50, by[2].ttft_p90, by[2].cached_ratio) == (1, 2.0, 2.0, 0.5)
    assert by[2].ideal_ratio == pytest.approx(2 / 3)


def test_errors_by_cause(records: list[TurnRecord]) -> None:
    assert summarise(records).errors == {"http 503": 1, "stream cut": 1}
    assert error_cause("HTTP 500: boom: more") == "http 500"
    assert error_cause(" : x") == "unknown"


def test_load_imbalance_across_replicas(records: list[TurnRecord]) -> None:
    s = summarise(records)
    # r0: a0, a1, c0 -> 3 requests, prompt 100+200+100 = 400, cached 0+100 = 100.
    # r1: a2, b0, b1 (both tries) -> 4 requests, prompt 300+100+200+200 = 800, cached 150+100 = 250.
    loads = {x.replica: (x.requests, x.prompt_tokens, x.cached_tokens) for x in s.replicas}
    assert loads == {"r0": (3, 400, 100), "r1": (4, 800, 250)}
    # max / mean = 800 / 600.
    assert s.imbalance == pytest.approx(4 / 3)


def test_empty_input() -> None:
    s = summarise([], label="nothing")
    assert (s.records, s.sessions, s.sessions_completed, s.span, s.goodput) == (0, 0, 0, 0.0, None)
    assert s.ttft.n == 0 and s.ttft.p50 is None and s.makespan.mean is None
    assert s.breakdown is None and s.by_turn == [] and s.errors == {}
    assert s.cache.achieved_ratio is None and s.imbalance is None
    assert Summary.from_json(s.to_json()) == s


def test_error_only_input(rec: Rec) -> None:
    rs = [
        rec("x", 0, intended=0.0, sent=0.0, error="connection refused"),
        rec("x", 0, intended=1.0, sent=1.0, attempt=1, error="connection refused"),
        rec("y", 0, intended=0.5, sent=0.5, first_token=3.5, error="timeout"),
    ]
    s = summarise(rs, deadline=60.0)
    assert s.errors == {"connection refused": 2, "timeout": 1}
    assert (s.turns_ok, s.sessions, s.sessions_completed, s.sessions_within_deadline) == (
        0,
        2,
        0,
        0,
    )
    # Span 0.0 -> 3.5 (y's first token, its last known time): goodput 0/h, defined.
    assert (s.span, s.goodput) == (3.5, 0.0)
    assert s.ttft.n == 0 and s.makespan.n == 0 and s.breakdown is None
    times = {t.session: t for t in session_times(rs)}
    # x: failed 0 + backoff 1.0 + 0 = 1.0 = makespan; y: 3.0 failed.
    assert times["x"].breakdown == Breakdown(failed=1.0) and times["x"].makespan == 1.0
    assert times["y"].breakdown == Breakdown(failed=3.0)


def test_expected_turns_marks_cut_sessions_incomplete(records: list[TurnRecord]) -> None:
    # a has 3 turns, b 2: expecting 3 of b means its run stopped early.
    s = summarise(records, expected_turns={"a": 3, "b": 3, "c": 1})
    assert s.sessions_completed == 1 and s.makespan.mean == 12.0


def test_missing_turn_index_is_not_completed(rec: Rec) -> None:
    rs = [
        rec("x", 0, first_token=1.0, done=2.0),
        rec("x", 2, intended=3.0, sent=3.0, first_token=4.0, done=5.0),
    ]
    assert summarise(rs).sessions_completed == 0


def test_summary_json_round_trip(records: list[TurnRecord]) -> None:
    s = summarise(records, deadline=10.0, label="run-a")
    assert Summary.from_json(s.to_json()) == s


def test_dist_percentiles_by_hand() -> None:
    d = dist([4.0, 1.0, 3.0, 2.0])
    # p50 of [1,2,3,4] = 2.5; p90 at rank 2.7 = 3.7; p99 at rank 2.97 = 3.97.
    assert (d.n, d.mean, d.p50, d.max) == (4, 2.5, 2.5, 4.0)
    assert (d.p90, d.p99) == pytest.approx((3.7, 3.97))


_times = st.floats(min_value=0.0, max_value=50.0, allow_nan=False)


@st.composite
def _session(draw: st.DrawFn) -> list[TurnRecord]:
    """A session of random turns, retries and faults with times that run forwards."""
    out = []
    t = draw(_times)
    for turn in range(draw(st.integers(1, 6))):
        for attempt in range(draw(st.integers(1, 3))):
            sent = t + draw(_times)
            sched = sent + draw(_times) if draw(st.booleans()) else None
            first = (sched or sent) + draw(_times)
            done = first + draw(_times)
            fail = attempt < 2 and draw(st.booleans())
            out.append(
                TurnRecord(
                    "s", turn, "r", t, sent, None if fail and draw(st.booleans()) else first,
                    None if fail else done, 10, None, 0, 2, scheduled=sched, attempt=attempt,
                    error="timeout" if fail else None,
                )
            )  # fmt: skip
            t = (done if not fail else first) + draw(_times)
            if not fail:
                break
    return out


@settings(max_examples=200, deadline=None)
@given(_session())
def test_breakdown_always_adds_up_to_makespan(recs: list[TurnRecord]) -> None:
    (t,) = session_times(recs)
    parts = t.breakdown.parts()
    assert all(v >= 0 for v in parts.values()), parts
    assert math.isclose(t.breakdown.total, t.makespan, rel_tol=1e-12, abs_tol=1e-9)


def test_turns_sent_before_the_previous_ended_are_flagged(rec: Rec) -> None:
    # Isolated-turn mode: turn 1 goes out at 0.5, before turn 0 ended at 2.0: tool = 0.5 - 2.0.
    rs = [
        rec("x", 0, intended=0.0, sent=0.0, first_token=1.0, done=2.0),
        rec("x", 1, intended=0.5, sent=0.5, first_token=1.5, done=3.0),
    ]
    s = summarise(rs)
    assert s.overlapping_turns == 1
    (t,) = session_times(rs)
    assert t.breakdown.tool == -1.5 and t.breakdown.total == t.makespan == 3.0
    assert summarise(rs[:1]).overlapping_turns == 0


def test_throughput_over_the_run(records: list[TurnRecord]) -> None:
    tp = summarise(records).throughput
    assert tp is not None
    # First send 0.0, last end 12.0 (a's turn 2); 5 successful attempts of 900 prompt and
    # 24 output tokens (11 + 5 + 1 + 4 + 3); the failed attempts count for neither.
    assert tp.duration == 12.0 and tp.input_tokens == 900
    assert tp.requests_per_s == pytest.approx(5 / 12)
    assert tp.input_tokens_per_s == pytest.approx(75.0)
    assert tp.output_tokens_per_s == pytest.approx(2.0)
    empty = summarise([]).throughput
    assert empty is not None and empty.duration == 0.0 and empty.requests_per_s is None


def test_session_view_needs_closed_loop_multi_turn_sessions(
    records: list[TurnRecord], rec: Rec
) -> None:
    assert summarise(records).session_view
    single = [rec(f"r{i}", 0, first_token=0.5, done=1.0, output_tokens=4) for i in range(3)]
    assert not summarise(single).session_view
    overlapped = [rec("x", 0, first_token=1.0, done=2.0), rec("x", 1, first_token=1.5, done=2.5)]
    assert not summarise(overlapped).session_view


def test_a_summary_written_before_throughput_still_reads(records: list[TurnRecord]) -> None:
    data = msgspec.json.decode(summarise(records).to_json())
    del data["throughput"]
    old = Summary.from_json(msgspec.json.encode(data))
    assert old.throughput is None and old.turns_ok == 5
