"""What the writers of other tools' formats share: block ids the way those formats number them,
and the nominal times of a workload's calls.

Formats outside kvharness name blocks by small integers (Mooncake's ``hash_ids`` count up from
0) and hold times, not gaps; a workload holds 64-bit chained hashes and closed-loop gaps. The
writers map one onto the other the same way, so a file written in any of them and read back
gives the same sharing and gaps:

- :class:`BlockIds` numbers each distinct hash in the order it is first met: equal hashes get
  equal ids, so two prompts share exactly the blocks they shared before.
- :func:`nominal_calls` places each call at its nominal time: a session starts at its arrival
  time and each call follows the previous one's end by its gap, calls taking no time (a workload
  holds no service time). A reader that takes a gap as "start minus the previous end" gets the
  workload's gaps back.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kvharness.workload.chain import BlockChain
from kvharness.workload.model import Session, Turn, Workload

__all__ = ["EPOCH", "BlockIds", "NominalCall", "nominal_calls"]

EPOCH = 1_735_689_600.0
"""Unix time (2025-01-01 00:00 UTC) a written workload's time 0 is placed at, for formats that
hold wall-clock times (a time of 0 reads as "unset" in several of them)."""


class BlockIds:
    """Block hashes as ids counting up from 0, in first-met order."""

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}

    def of(self, chain: BlockChain) -> list[int]:
        ids = self._ids
        return [ids.setdefault(h, len(ids)) for h in chain.hashes]


@dataclass(frozen=True, slots=True)
class NominalCall:
    session: Session
    index: int
    turn: Turn
    start: float
    """Seconds from the workload's time 0 (the earliest session start)."""


def nominal_calls(workload: Workload) -> Iterator[list[NominalCall]]:
    """Each session's calls at their nominal times (see module docstring), session by session."""
    starts = workload.arrival.start_times(workload.sessions)
    for session, t0 in zip(workload.sessions, starts, strict=True):
        t = t0
        calls = []
        for i, turn in enumerate(session.turns):
            t += turn.gap
            calls.append(NominalCall(session, i, turn, t))
        yield calls
