"""Records as numpy columns, and the per-session walk of :mod:`kvharness.report.metrics` done on
whole arrays (a simulated cluster writes millions of records; a Python loop per record would make
the report the slow part of a run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from kvharness.report.records import TurnRecord

__all__ = ["PARTS", "Columns", "SessionArrays", "session_arrays"]

F = npt.NDArray[np.float64]
I = npt.NDArray[np.int64]  # noqa: E741
B = npt.NDArray[np.bool_]

PARTS = ("lag", "queue", "prefill", "queue_prefill", "decode", "tool", "failed")


def _codes(names: list[str]) -> tuple[I, list[str]]:
    index = {x: i for i, x in enumerate(dict.fromkeys(names))}
    return np.fromiter(map(index.__getitem__, names), np.int64, len(names)), list(index)


def _column(records: Sequence[TurnRecord], field: str) -> F:
    """A numeric field as float64; None becomes NaN."""
    return np.array(list(map(attrgetter(field), records)), dtype=np.float64).reshape(-1)


class Columns:
    """The records in the order (session, turn, attempt, intended); None times are NaN, an
    unreported ``cached_tokens`` is -1. Read-only after construction."""

    def __init__(self, records: Sequence[TurnRecord]) -> None:
        n = len(records)
        session, self.session_names = _codes(list(map(attrgetter("session"), records)))
        replica, self.replica_names = _codes(list(map(attrgetter("replica"), records)))
        failed_at = [i for i, r in enumerate(records) if r.error is not None]
        error = np.zeros(n, dtype=np.bool_)
        error[failed_at] = True
        self.errors = [records[i].error or "" for i in failed_at]
        intended = _column(records, "intended")
        turn = _column(records, "turn")
        order = np.lexsort((intended, _column(records, "attempt"), turn, session))

        def col(field: str) -> F:
            return _column(records, field)[order]

        def ints(field: str, none: int = 0) -> I:
            x = col(field)
            return np.where(np.isnan(x), none, x).astype(np.int64)

        self.n = n
        self.session: I = session[order]
        self.replica: I = replica[order]
        self.intended: F = intended[order]
        self.sent, self.scheduled, self.first, self.done = (
            col(f) for f in ("sent", "scheduled", "first_token", "done")
        )
        self.turn: I = turn[order].astype(np.int64)
        self.prompt, self.ideal, self.output = (
            ints(f) for f in ("prompt_tokens", "ideal_cached_tokens", "output_tokens")
        )
        self.cached: I = ints("cached_tokens", none=-1)
        self.ok: B = ~error[order] & ~np.isnan(self.done)
        self.end: F = np.where(
            ~np.isnan(self.done), self.done, np.where(~np.isnan(self.first), self.first, self.sent)
        )
        # First token of a successful turn (its done when a server gave no first-token time).
        self.first_or_done: F = np.where(np.isnan(self.first), self.done, self.first)


class SessionArrays:
    """Per session (index = code into ``Columns.session_names``): start, end, distinct turns,
    completion, and seconds in each breakdown part (``parts[name]``)."""

    def __init__(
        self, start: F, end: F, turns: I, completed: B, parts: dict[str, F], overlaps: int = 0
    ) -> None:
        self.start, self.end, self.turns, self.completed, self.parts = (
            start, end, turns, completed, parts,
        )  # fmt: skip
        self.overlaps = overlaps
        """Turns that went out before their session's previous record ended (not closed loop)."""

    @property
    def makespan(self) -> F:
        return self.end - self.start


def session_arrays(c: Columns, expected_turns: Mapping[str, int] | None = None) -> SessionArrays:
    """The walk of the metrics docstring, vectorised: each record contributes its wait since the
    previous record of its session (``tool`` when it starts a new turn, ``failed`` when it is a
    retry), its lag, and its own time to queue/prefill/decode (success) or to ``failed``."""
    s = c.session
    n_sessions = len(c.session_names)
    if c.n == 0:
        z = np.zeros(0)
        return SessionArrays(
            z, z, np.zeros(0, np.int64), np.zeros(0, np.bool_), dict.fromkeys(PARTS, z)
        )
    head = np.ones(c.n, dtype=np.bool_)
    head[1:] = s[1:] != s[:-1]
    prev_end = np.empty(c.n)
    prev_end[0] = 0.0
    prev_end[1:] = c.end[:-1]
    wait = np.where(head, 0.0, c.intended - prev_end)
    new_turn = head.copy()
    new_turn[1:] |= c.turn[1:] != c.turn[:-1]
    ok, known = c.ok, ~np.isnan(c.scheduled)
    zero = np.zeros(c.n)
    per_record = {
        "lag": c.sent - c.intended,
        "queue": np.where(ok & known, c.scheduled - c.sent, zero),
        "prefill": np.where(ok & known, c.first_or_done - c.scheduled, zero),
        "queue_prefill": np.where(ok & ~known, c.first_or_done - c.sent, zero),
        "decode": np.where(ok, c.done - c.first_or_done, zero),
        "tool": np.where(new_turn, wait, zero),
        "failed": np.where(new_turn, zero, wait) + np.where(ok, zero, c.end - c.sent),
    }
    parts = {
        k: np.bincount(s, weights=v, minlength=n_sessions).astype(np.float64, copy=False)
        for k, v in per_record.items()
    }
    heads = np.flatnonzero(head)
    tails = np.append(heads[1:], c.n) - 1
    start, end = c.intended[heads], c.end[tails]
    # Completion: every (session, turn) group has a successful attempt, turns are 0..max.
    groups = np.flatnonzero(new_turn)
    group_ok = np.logical_or.reduceat(ok, groups)
    group_session = s[groups]
    turns = np.bincount(group_session, minlength=n_sessions)
    failed_turns = np.bincount(group_session, weights=~group_ok, minlength=n_sessions)
    top = c.turn[tails]
    completed = (failed_turns == 0) & (turns == top + 1)
    if expected_turns is not None:
        want = np.array([expected_turns.get(x, 0) for x in c.session_names], dtype=np.int64)
        completed &= turns == want
    overlaps = int((new_turn & ~head & (wait < -1e-9)).sum())
    return SessionArrays(start, end, turns, completed, parts, overlaps)
