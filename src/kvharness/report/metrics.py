"""Metrics computed from per-turn records alone (pure functions, no I/O, no clock).

Definitions. All times are seconds on the records' clock; every percentile is numpy's default
(linear interpolation between the two closest ranks, so p50 of ``[1, 2, 3, 4]`` is 2.5).

* **Attempt.** One :class:`~kvharness.report.records.TurnRecord`. A turn retried after a fault has
  several attempts (``attempt`` 0, 1, ...); a turn *succeeded* if one of its attempts is ``ok``.
* **Per-turn latency** (successful attempts only): TTFT = ``first_token - sent``; end-to-end =
  ``done - sent``; inter-token latency = ``(done - first_token) / (output_tokens - 1)``, the turn's
  mean, defined for turns of 2 or more output tokens. Client lag = ``sent - intended`` over all
  attempts.
* **Session.** The records sharing a ``session`` id, ordered by (turn, attempt, intended). It
  starts at its first record's ``intended`` and ends at its last record's end, where a record's
  end is ``done``, else ``first_token``, else ``sent`` (an attempt that failed before any answer).
  Its *makespan* is end - start. A session is *completed* when every turn index from 0 to its
  highest is present and succeeded (and, given ``expected_turns``, it has that many turns):
  a turn that succeeded on a retry counts as succeeded; the failed attempts still count as errors.
* **Where a session's time went** (:class:`Breakdown`), walking its records in order:
  ``tool`` = ``intended`` of a turn's first attempt minus the previous record's end (the think /
  tool gap); ``lag`` = ``sent - intended``; for a successful attempt ``queue`` = ``scheduled -
  sent`` and ``prefill`` = ``first_token - scheduled`` when ``scheduled`` is known (simulator), else
  ``queue_prefill`` = ``first_token - sent`` (live, where the two are not separable); ``decode`` =
  ``done - first_token``; for a failed attempt everything from ``sent`` to its end, plus the wait
  before its retry, is ``failed``. The terms telescope, so they add up to the makespan exactly
  (up to floating-point rounding of the differences).
* **Goodput** (sessions per hour) = sessions completed with makespan <= ``deadline`` (every
  completed session when no deadline is given) divided by the run's span in hours; the span runs
  from the earliest ``intended`` to the latest record end of the whole run.
* **Cache hits** over successful attempts whose server reported ``cached_tokens``: achieved =
  sum(cached) / sum(prompt), ideal = sum(ideal_cached) / sum(prompt) over the same attempts,
  and achieved / ideal.
* **Load imbalance** = max / mean over replicas of the prompt tokens sent to each (all attempts);
  1.0 is perfectly even. Replicas that received nothing do not appear in records, so they are not
  counted.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import msgspec
import numpy as np

from kvharness.report.records import TurnRecord

__all__ = [
    "BREAKDOWN_PARTS",
    "Breakdown",
    "CacheStats",
    "Dist",
    "ReplicaLoad",
    "SessionTime",
    "Summary",
    "TurnIndexStats",
    "dist",
    "error_cause",
    "record_end",
    "session_times",
    "summarise",
]


class Dist(msgspec.Struct, frozen=True):
    """Distribution of a quantity (seconds unless said otherwise); statistics are None if n == 0."""

    n: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


def dist(values: Iterable[float]) -> Dist:
    a = np.fromiter(values, dtype=np.float64)
    if a.size == 0:
        return Dist(0)
    p50, p90, p99 = (float(x) for x in np.percentile(a, [50, 90, 99]))
    return Dist(int(a.size), float(a.mean()), p50, p90, p99, float(a.max()))


BREAKDOWN_PARTS = ("lag", "queue", "prefill", "queue_prefill", "decode", "tool", "failed")
"""Order of the parts of a session's time, as shown in tables and plots."""


class Breakdown(msgspec.Struct, frozen=True):
    """Where a session's time went, seconds per part (see the module docstring for definitions)."""

    lag: float = 0.0
    queue: float = 0.0
    prefill: float = 0.0
    queue_prefill: float = 0.0
    decode: float = 0.0
    tool: float = 0.0
    failed: float = 0.0

    @property
    def total(self) -> float:
        return math.fsum(self.parts().values())

    def parts(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in BREAKDOWN_PARTS}


class SessionTime(msgspec.Struct, frozen=True):
    """One session's span and its breakdown; ``breakdown.total`` equals ``makespan``."""

    session: str
    start: float
    end: float
    turns: int
    """Distinct turn indices seen."""
    completed: bool
    breakdown: Breakdown

    @property
    def makespan(self) -> float:
        return self.end - self.start


class TurnIndexStats(msgspec.Struct, frozen=True):
    """Successful turns at one turn index (0 = a session's first turn)."""

    turn: int
    n: int
    ttft_p50: float | None
    ttft_p90: float | None
    cached_ratio: float | None
    ideal_ratio: float | None


class CacheStats(msgspec.Struct, frozen=True):
    prompt_tokens: int
    """Prompt tokens of the successful attempts whose cached tokens were reported."""
    cached_tokens: int
    ideal_cached_tokens: int
    unreported: int
    """Successful attempts whose server did not report cached tokens (left out above)."""
    achieved_ratio: float | None
    ideal_ratio: float | None
    achieved_vs_ideal: float | None


class ReplicaLoad(msgspec.Struct, frozen=True):
    replica: str
    requests: int
    prompt_tokens: int
    cached_tokens: int


class Summary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything the report says about one run; JSON via :meth:`to_json` / :meth:`from_json`."""

    label: str
    deadline: float | None
    """Seconds a session may take to count towards goodput; None = no deadline."""
    records: int
    turns_ok: int
    sessions: int
    sessions_completed: int
    sessions_within_deadline: int
    span: float
    """Seconds from the run's earliest ``intended`` to its latest record end."""
    goodput: float | None
    """Sessions per hour completed within the deadline; None when the span is 0."""
    ttft: Dist
    itl: Dist
    e2e: Dist
    lag: Dist
    makespan: Dist
    """Over completed sessions."""
    breakdown: Breakdown | None
    """Mean over completed sessions (its total is ``makespan.mean``); None if none completed."""
    by_turn: list[TurnIndexStats]
    cache: CacheStats
    errors: dict[str, int]
    """Failed attempts by cause (see :func:`error_cause`)."""
    replicas: list[ReplicaLoad]
    imbalance: float | None
    output_tokens: int

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_json(self) -> bytes:
        return msgspec.json.format(msgspec.json.encode(self), indent=2)

    @classmethod
    def from_json(cls, data: bytes | str) -> Summary:
        return msgspec.json.decode(data, type=cls)


def error_cause(error: str) -> str:
    """The cause of an error string: the text before its first ``:`` (``"http 503: busy"`` ->
    ``"http 503"``), trimmed and lower-cased."""
    cause = error.split(":", 1)[0].strip().lower()
    return cause or "unknown"


def record_end(r: TurnRecord) -> float:
    """The last time known for an attempt: ``done``, else ``first_token``, else ``sent``."""
    if r.done is not None:
        return r.done
    if r.first_token is not None:
        return r.first_token
    return r.sent


def _order(r: TurnRecord) -> tuple[int, int, float]:
    return (r.turn, r.attempt, r.intended)


def _session_time(
    session: str, recs: Sequence[TurnRecord], expected_turns: int | None
) -> SessionTime:
    recs = sorted(recs, key=_order)
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
    top = max(seen)
    completed = succeeded == seen and len(seen) == top + 1
    if expected_turns is not None and len(seen) != expected_turns:
        completed = False
    return SessionTime(session, start, cursor, len(seen), completed, Breakdown(**parts))


def session_times(
    records: Iterable[TurnRecord], expected_turns: Mapping[str, int] | None = None
) -> list[SessionTime]:
    """Per-session span, completion and breakdown, in order of session start.

    ``expected_turns`` (session id -> number of turns the workload has) marks sessions whose run
    stopped early as not completed; without it a session is judged by the turns it has.
    """
    by_session: dict[str, list[TurnRecord]] = defaultdict(list)
    for r in records:
        by_session[r.session].append(r)
    out = [
        _session_time(s, recs, None if expected_turns is None else expected_turns.get(s, 0))
        for s, recs in by_session.items()
    ]
    out.sort(key=lambda t: (t.start, t.session))
    return out


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _cache(ok: Sequence[TurnRecord]) -> CacheStats:
    reported = [r for r in ok if r.cached_tokens is not None]
    prompt = sum(r.prompt_tokens for r in reported)
    cached = sum(r.cached_tokens or 0 for r in reported)
    ideal = sum(r.ideal_cached_tokens for r in reported)
    return CacheStats(
        prompt_tokens=prompt,
        cached_tokens=cached,
        ideal_cached_tokens=ideal,
        unreported=len(ok) - len(reported),
        achieved_ratio=_ratio(cached, prompt),
        ideal_ratio=_ratio(ideal, prompt),
        achieved_vs_ideal=_ratio(cached, ideal),
    )


def _by_turn(ok: Sequence[TurnRecord]) -> list[TurnIndexStats]:
    groups: dict[int, list[TurnRecord]] = defaultdict(list)
    for r in ok:
        groups[r.turn].append(r)
    out = []
    for turn in sorted(groups):
        g = groups[turn]
        d = dist(r.first_token - r.sent for r in g if r.first_token is not None)
        c = _cache(g)
        out.append(TurnIndexStats(turn, len(g), d.p50, d.p90, c.achieved_ratio, c.ideal_ratio))
    return out


def _replicas(records: Sequence[TurnRecord]) -> tuple[list[ReplicaLoad], float | None]:
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in records:
        a = acc[r.replica]
        a[0] += 1
        a[1] += r.prompt_tokens
        a[2] += r.cached_tokens or 0
    loads = [ReplicaLoad(k, *v) for k, v in sorted(acc.items())]
    if not loads:
        return loads, None
    mean = sum(x.prompt_tokens for x in loads) / len(loads)
    return loads, (max(x.prompt_tokens for x in loads) / mean if mean else None)


def summarise(
    records: Sequence[TurnRecord],
    *,
    deadline: float | None = None,
    label: str = "run",
    expected_turns: Mapping[str, int] | None = None,
) -> Summary:
    """Compute every metric of a run from its records (see the module docstring for definitions).

    ``deadline`` is in seconds of session makespan; ``expected_turns`` is as in
    :func:`session_times`. Empty input gives a summary of zeros and Nones.
    """
    if deadline is not None and not deadline > 0:
        raise ValueError(f"deadline must be > 0 seconds, got {deadline}")
    ok = [r for r in records if r.ok]
    sessions = session_times(records, expected_turns)
    done = [s for s in sessions if s.completed]
    within = [s for s in done if deadline is None or s.makespan <= deadline]
    span = max(map(record_end, records)) - min(r.intended for r in records) if records else 0.0
    errors: dict[str, int] = defaultdict(int)
    for r in records:
        if not r.ok:
            errors[error_cause(r.error or "no answer")] += 1
    breakdown = None
    if done:
        breakdown = Breakdown(
            **{
                k: math.fsum(getattr(s.breakdown, k) for s in done) / len(done)
                for k in BREAKDOWN_PARTS
            }
        )
    replicas, imbalance = _replicas(records)
    return Summary(
        label=label,
        deadline=deadline,
        records=len(records),
        turns_ok=len(ok),
        sessions=len(sessions),
        sessions_completed=len(done),
        sessions_within_deadline=len(within),
        span=span,
        goodput=len(within) / (span / 3600.0) if span > 0 else None,
        ttft=dist(r.first_token - r.sent for r in ok if r.first_token is not None),
        itl=dist(x for r in ok if (x := r.itl) is not None),
        e2e=dist(r.done - r.sent for r in ok if r.done is not None),
        lag=dist(r.lag for r in records),
        makespan=dist(s.makespan for s in done),
        breakdown=breakdown,
        by_turn=_by_turn(ok),
        cache=_cache(ok),
        errors=dict(sorted(errors.items())),
        replicas=replicas,
        imbalance=imbalance,
        output_tokens=sum(r.output_tokens for r in ok),
    )
