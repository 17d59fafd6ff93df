"""Metrics computed from per-turn records alone (pure functions, no I/O, no clock).

Definitions. All times are seconds on the records' clock; every percentile is numpy's default
(linear interpolation between the two closest ranks, so p50 of ``[1, 2, 3, 4]`` is 2.5).

* **Attempt.** One :class:`~kvharness.report.records.TurnRecord`. A turn retried after a fault has
  several attempts (``attempt`` 0, 1, ...); a turn *succeeded* if one of its attempts is ``ok``.
* **Per-turn latency** (successful attempts only): TTFT = ``first_token - sent``; end-to-end =
  ``done - sent``; inter-token latency = ``(done - first_token) / (output_tokens - 1)``, the turn's
  mean, defined for turns of 2 or more output tokens. TTFT from intended = ``first_token -
  intended``: the wait counted from when the turn should have gone out, so a late send counts
  too (free of coordinated omission). Client (send) lag = ``sent - intended`` over all attempts.
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
* **Goodput** (sessions per hour) = sessions completed with makespan <= their deadline, divided
  by the run's span in hours; the span runs from the earliest ``intended`` to the latest record
  end of the whole run. A session's deadline is ``session_deadlines[session]`` when given (e.g.
  1.5 x the session's unloaded lower bound, from the simulator), else ``deadline`` seconds, else
  none (every completed session counts). A relative slack of 1e-9 absorbs float rounding.
* **Cache hits** over successful attempts whose server reported ``cached_tokens``: achieved =
  sum(cached) / sum(prompt), ideal = sum(ideal_cached) / sum(prompt) over the same attempts,
  and achieved / ideal.
* **Request throughput** (what every serving benchmark reports, :class:`Throughput`): over the
  run's *duration*, from its first ``sent`` to its last record end, requests per second =
  successful attempts / duration, input (output) tokens per second = their prompt (output)
  tokens / duration. These are AIPerf's and vLLM's ``bench serve`` definitions; the per-turn
  inter-token latency above is their ITL / TPOT (a request's decode time over its output
  tokens after the first), not the gap between two streamed chunks.
* **Session view.** A run is reported as agent sessions when it has multi-turn sessions sent
  closed loop; a run of single-turn sessions, or one whose turns overlapped within sessions
  (isolated mode), is a run of *requests*: its makespan, goodput and breakdown describe nothing
  and the report leaves them out (:attr:`Summary.session_view`).
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
import numpy.typing as npt

from kvharness.report._columns import PARTS, Columns, session_arrays
from kvharness.report.records import TurnRecord

__all__ = [
    "BREAKDOWN_PARTS",
    "Breakdown",
    "CacheStats",
    "Dist",
    "ReplicaLoad",
    "SessionTime",
    "Summary",
    "Throughput",
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


def dist(values: Iterable[float] | npt.NDArray[np.float64]) -> Dist:
    a = values if isinstance(values, np.ndarray) else np.fromiter(values, dtype=np.float64)
    if a.size == 0:
        return Dist(0)
    p50, p90, p99 = (float(x) for x in np.percentile(a, [50, 90, 99]))
    return Dist(int(a.size), float(a.mean()), p50, p90, p99, float(a.max()))


BREAKDOWN_PARTS = PARTS
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


class Throughput(msgspec.Struct, frozen=True):
    """The run as a stream of requests (see the module docstring)."""

    duration: float
    """Seconds from the first ``sent`` to the last record end."""
    requests_per_s: float | None
    input_tokens_per_s: float | None
    output_tokens_per_s: float | None
    input_tokens: int
    """Prompt tokens of the successful attempts."""


class ReplicaLoad(msgspec.Struct, frozen=True):
    replica: str
    requests: int
    prompt_tokens: int
    cached_tokens: int


class Summary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything the report says about one run; JSON via :meth:`to_json` / :meth:`from_json`."""

    label: str
    deadline: float | None
    """Seconds a session may take to count towards goodput; None = no deadline (or per-session
    deadlines, see ``deadline_rule``)."""
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
    ttft_intended: Dist
    """TTFT counted from ``intended`` instead of ``sent`` (see the module docstring)."""
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
    overlapping_turns: int = 0
    """Turns sent before their session's previous turn ended: the run was not closed-loop within
    sessions (e.g. isolated-turn mode), so makespan, goodput and breakdown do not describe agent
    sessions (the breakdown's ``tool`` part goes negative)."""
    deadline_rule: str | None = None
    """How per-session deadlines were set (``"1.5x lower bound"``); None when not per session."""
    throughput: Throughput | None = None
    """None in a summary written before it was reported."""
    version: int = 1
    """Layout of this JSON; bumped when a field changes meaning."""

    @property
    def deadline_text(self) -> str:
        if self.deadline_rule is not None:
            return self.deadline_rule
        return "none" if self.deadline is None else f"{self.deadline:g} s"

    @property
    def session_view(self) -> bool:
        """Whether the run is one of agent sessions: some session has more than one turn and
        no turn overlapped its predecessor (see the module docstring)."""
        return len(self.by_turn) > 1 and not self.overlapping_turns

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


def session_times(
    records: Sequence[TurnRecord] | Columns, expected_turns: Mapping[str, int] | None = None
) -> list[SessionTime]:
    """Per-session span, completion and breakdown, in order of session start.

    ``expected_turns`` (session id -> number of turns the workload has) marks sessions whose run
    stopped early as not completed; without it a session is judged by the turns it has.
    """
    c = records if isinstance(records, Columns) else Columns(records)
    a = session_arrays(c, expected_turns)
    parts = [a.parts[k].tolist() for k in BREAKDOWN_PARTS]
    out = [
        SessionTime(
            name, start, end, turns, completed, Breakdown(*(p[i] for p in parts))
        )
        for i, (name, start, end, turns, completed) in enumerate(
            zip(c.session_names, a.start.tolist(), a.end.tolist(), a.turns.tolist(),
                a.completed.tolist(), strict=True)
        )
    ]  # fmt: skip
    out.sort(key=lambda t: (t.start, t.session))
    return out


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _cache(c: Columns, idx: npt.NDArray[np.intp]) -> CacheStats:
    """Cache figures over the successful attempts at positions ``idx`` of the columns."""
    reported = idx[c.cached[idx] >= 0]
    prompt = int(c.prompt[reported].sum())
    cached = int(c.cached[reported].sum())
    ideal = int(c.ideal[reported].sum())
    return CacheStats(
        prompt_tokens=prompt,
        cached_tokens=cached,
        ideal_cached_tokens=ideal,
        unreported=int(idx.size - reported.size),
        achieved_ratio=_ratio(cached, prompt),
        ideal_ratio=_ratio(ideal, prompt),
        achieved_vs_ideal=_ratio(cached, ideal),
    )


def _by_turn(c: Columns) -> list[TurnIndexStats]:
    ok = np.flatnonzero(c.ok)
    ok = ok[np.argsort(c.turn[ok], kind="stable")]
    out = []
    for g in np.split(ok, np.flatnonzero(np.diff(c.turn[ok])) + 1) if ok.size else []:
        has = g[~np.isnan(c.first[g])]
        d = dist(c.first[has] - c.sent[has])
        ch = _cache(c, g)
        out.append(
            TurnIndexStats(
                int(c.turn[g[0]]), int(g.size), d.p50, d.p90, ch.achieved_ratio, ch.ideal_ratio
            )
        )
    return out


def _replicas(c: Columns) -> tuple[list[ReplicaLoad], float | None]:
    m = len(c.replica_names)
    requests = np.bincount(c.replica, minlength=m)
    prompt = np.bincount(c.replica, weights=c.prompt, minlength=m)
    cached = np.bincount(c.replica, weights=np.maximum(c.cached, 0), minlength=m)
    loads = sorted(
        (
            ReplicaLoad(name, int(requests[i]), int(prompt[i]), int(cached[i]))
            for i, name in enumerate(c.replica_names)
        ),
        key=lambda x: x.replica,
    )
    if not loads:
        return loads, None
    mean = float(prompt.mean())
    return loads, (float(prompt.max()) / mean if mean else None)


def _per_hour(count: int, span: float) -> float | None:
    """``count`` per hour of ``span`` seconds; None for a span too short to give a finite rate
    (zero, or so small that the rate overflows)."""
    hours = span / 3600.0
    rate = count / hours if hours > 0 else math.inf
    return rate if math.isfinite(rate) else None


def summarise(
    records: Sequence[TurnRecord],
    *,
    deadline: float | None = None,
    label: str = "run",
    expected_turns: Mapping[str, int] | None = None,
    session_deadlines: Mapping[str, float] | None = None,
    deadline_rule: str | None = None,
) -> Summary:
    """Compute every metric of a run from its records (see the module docstring for definitions).

    ``deadline`` is in seconds of session makespan, ``session_deadlines`` (session id -> seconds)
    overrides it per session, described by ``deadline_rule``; ``expected_turns`` is as in
    :func:`session_times`. Empty input gives a summary of zeros and Nones.
    """
    if deadline is not None and not deadline > 0:
        raise ValueError(f"deadline must be > 0 seconds, got {deadline}")
    c = Columns(records)
    a = session_arrays(c, expected_turns)
    makespan = a.makespan[a.completed]
    fallback = math.inf if deadline is None else deadline
    limit = np.array(
        [fallback if session_deadlines is None else session_deadlines.get(x, fallback)
         for x in c.session_names],
        dtype=np.float64,
    )  # fmt: skip
    within = int((a.makespan <= limit * (1 + 1e-9))[a.completed].sum())
    span = float(c.end.max() - c.intended.min()) if c.n else 0.0
    errors: dict[str, int] = defaultdict(int)
    for e in c.errors:
        errors[error_cause(e)] += 1
    errors["no answer"] += int((~c.ok).sum()) - len(c.errors)  # no error text, yet no done
    breakdown = None
    if makespan.size:
        breakdown = Breakdown(
            **{k: float(a.parts[k][a.completed].sum()) / makespan.size for k in BREAKDOWN_PARTS}
        )
    ok = c.ok
    with_first = ok & ~np.isnan(c.first)
    itl_mask = with_first & (c.output >= 2)
    replicas, imbalance = _replicas(c)
    return Summary(
        label=label,
        deadline=deadline,
        deadline_rule=deadline_rule,
        overlapping_turns=a.overlaps,
        records=c.n,
        turns_ok=int(ok.sum()),
        sessions=len(c.session_names),
        sessions_completed=int(makespan.size),
        sessions_within_deadline=within,
        span=span,
        goodput=_per_hour(within, span),
        ttft=dist(c.first[with_first] - c.sent[with_first]),
        ttft_intended=dist(c.first[with_first] - c.intended[with_first]),
        itl=dist((c.done[itl_mask] - c.first[itl_mask]) / (c.output[itl_mask] - 1)),
        e2e=dist(c.done[ok] - c.sent[ok]),
        lag=dist(c.sent - c.intended),
        makespan=dist(makespan),
        breakdown=breakdown,
        by_turn=_by_turn(c),
        cache=_cache(c, np.flatnonzero(ok)),
        errors={k: v for k, v in sorted(errors.items()) if v},
        replicas=replicas,
        imbalance=imbalance,
        output_tokens=int(c.output[ok].sum()),
        throughput=_throughput(c),
    )


def _throughput(c: Columns) -> Throughput:
    duration = float(c.end.max() - c.sent.min()) if c.n else 0.0
    ok = c.ok
    n_in, n_out = int(c.prompt[ok].sum()), int(c.output[ok].sum())

    def rate(x: float) -> float | None:
        return x / duration if duration > 0 else None

    return Throughput(
        duration=duration,
        requests_per_s=rate(float(ok.sum())),
        input_tokens_per_s=rate(n_in),
        output_tokens_per_s=rate(n_out),
        input_tokens=n_in,
    )
