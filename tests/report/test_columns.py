"""The vectorised session walk against a plain per-record reference, on random runs."""

from __future__ import annotations

import math
import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvharness.report.metrics import BREAKDOWN_PARTS, record_end, session_times, summarise
from kvharness.report.records import TurnRecord


def reference(recs: list[TurnRecord]) -> tuple[float, float, bool, dict[str, float]]:
    """The walk of the metrics docstring, one record at a time: (start, end, completed, parts)."""
    recs = sorted(recs, key=lambda r: (r.turn, r.attempt, r.intended))
    parts = dict.fromkeys(BREAKDOWN_PARTS, 0.0)
    start = cursor = recs[0].intended
    prev_turn: int | None = None
    succeeded: set[int] = set()
    for r in recs:
        if prev_turn is not None:
            parts["tool" if r.turn != prev_turn else "failed"] += r.intended - cursor
        parts["lag"] += r.sent - r.intended
        end = record_end(r)
        if r.ok:
            assert r.done is not None
            first = r.first_token if r.first_token is not None else r.done
            if r.scheduled is not None:
                parts["queue"] += r.scheduled - r.sent
                parts["prefill"] += first - r.scheduled
            else:
                parts["queue_prefill"] += first - r.sent
            parts["decode"] += r.done - first
            succeeded.add(r.turn)
        else:
            parts["failed"] += end - r.sent
        cursor = end
        prev_turn = r.turn
    seen = {r.turn for r in recs}
    return start, cursor, succeeded == seen and len(seen) == max(seen) + 1, parts


_t = st.floats(min_value=0.0, max_value=50.0, allow_nan=False)


@st.composite
def runs(draw: st.DrawFn) -> list[TurnRecord]:
    """Several sessions of turns, retries, faults, skipped turns, in a shuffled order."""
    out = []
    for s in range(draw(st.integers(1, 4))):
        t = draw(_t)
        turns = sorted(draw(st.sets(st.integers(0, 5), min_size=1, max_size=5)))
        for turn in turns:
            for attempt in range(draw(st.integers(1, 3))):
                sent = t + draw(_t)
                sched = sent + draw(_t) if draw(st.booleans()) else None
                first = (sched or sent) + draw(_t)
                done = first + draw(_t)
                fail = draw(st.booleans())
                out.append(
                    TurnRecord(
                        f"s{s}", turn, f"r{draw(st.integers(0, 2))}", t, sent,
                        None if fail and draw(st.booleans()) else first, None if fail else done,
                        draw(st.integers(0, 100)), draw(st.one_of(st.none(), st.integers(0, 50))),
                        draw(st.integers(0, 50)), draw(st.integers(0, 9)), scheduled=sched,
                        attempt=attempt, error="timeout" if fail else None,
                    )
                )  # fmt: skip
                t = (first if fail else done) + draw(_t)
                if not fail:
                    break
    random.Random(draw(st.integers(0, 99))).shuffle(out)
    return out


@settings(max_examples=300, deadline=None)
@given(runs())
@example(  # a run spanning 5e-324 s: a positive span but zero hours, so no goodput
    [
        TurnRecord(
            session="s0",
            turn=0,
            replica="r0",
            intended=0.0,
            sent=0.0,
            first_token=0.0,
            done=5e-324,
            prompt_tokens=0,
            cached_tokens=None,
            ideal_cached_tokens=0,
            output_tokens=0,
            gap=0.0,
        )
    ]
)
def test_vectorised_walk_matches_reference(records: list[TurnRecord]) -> None:
    got = {t.session: t for t in session_times(records)}
    by_session: dict[str, list[TurnRecord]] = {}
    for r in records:
        by_session.setdefault(r.session, []).append(r)
    assert set(got) == set(by_session)
    for name, recs in by_session.items():
        start, end, completed, parts = reference(recs)
        t = got[name]
        assert (t.start, t.end, t.completed, t.turns) == (
            start,
            end,
            completed,
            len({r.turn for r in recs}),
        )
        for k, v in parts.items():
            assert math.isclose(getattr(t.breakdown, k), v, rel_tol=1e-12, abs_tol=1e-9), k
        assert math.isclose(t.breakdown.total, t.makespan, rel_tol=1e-12, abs_tol=1e-9)
    s = summarise(records)
    assert s.goodput is None or math.isfinite(s.goodput)
    assert s.sessions_completed == sum(t.completed for t in got.values())
    assert s.records == len(records) and s.turns_ok == sum(r.ok for r in records)
    assert sum(s.errors.values()) == sum(not r.ok for r in records)
    assert sum(x.prompt_tokens for x in s.replicas) == sum(r.prompt_tokens for r in records)
