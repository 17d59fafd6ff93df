"""The per-turn record: one row per turn, the same schema from the simulator and the live bench.

All times are seconds on the producer's clock (virtual for sim, wall clock from the run's start for
bench). For one turn::

    intended <= sent <= [scheduled] <= first_token <= done

``intended`` is when the turn should have gone out (session start, or the previous turn's ``done``
plus ``gap``); ``sent - intended`` is the client's lag. ``scheduled`` is when the engine first ran
the request (known in the simulator, None live, where queueing and prefill are not separable).
Every metric of :mod:`kvharness.report.metrics` is computed from these rows alone.

Records are written as JSON Lines, one record per line, appended as turns complete, so a run that
is interrupted keeps everything it finished (see :class:`RecordWriter`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

import msgspec

from kvharness.errors import FormatError
from kvharness.jsonl import open_append

__all__ = ["RecordWriter", "TurnRecord", "read_records", "write_records"]


class TurnRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One turn's outcome. ``error`` is None on success, else a short cause (``"timeout"``,
    ``"http 503: ..."``, ``"connection refused"``, ``"stream cut"``)."""

    session: str
    turn: int
    replica: str
    intended: float
    sent: float
    first_token: float | None
    done: float | None
    prompt_tokens: int
    cached_tokens: int | None
    ideal_cached_tokens: int
    output_tokens: int
    gap: float = 0.0
    scheduled: float | None = None
    tool: str | None = None
    error: str | None = None
    attempt: int = 0
    """Retry attempt that produced this record (0 = first try)."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.done is not None

    @property
    def lag(self) -> float:
        return self.sent - self.intended

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.sent

    @property
    def e2e(self) -> float | None:
        return None if self.done is None else self.done - self.sent

    @property
    def itl(self) -> float | None:
        """Mean inter-token latency of this turn (decode time over output tokens after the first)."""
        if self.first_token is None or self.done is None or self.output_tokens < 2:
            return None
        return (self.done - self.first_token) / (self.output_tokens - 1)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(TurnRecord)


class RecordWriter:
    """Appends records to a JSONL file, flushed per record: what is written survives a crash. A
    torn last line left by an earlier crash is cut off first (:func:`kvharness.jsonl.open_append`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._f: IO[bytes] = open_append(self.path)

    def write(self, record: TurnRecord) -> None:
        self._f.write(_encoder.encode(record) + b"\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_records(path: str | Path, records: Iterable[TurnRecord]) -> None:
    with Path(path).open("wb") as f:
        for r in records:
            f.write(_encoder.encode(r) + b"\n")


def iter_records(path: str | Path) -> Iterator[TurnRecord]:
    where = str(path)
    with Path(path).open("rb") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield _decoder.decode(line)
            except msgspec.DecodeError as err:
                # A run killed mid-write leaves at most a torn last line; anything else is an error.
                rest = f.read()
                if not rest.strip() and not line.endswith(b"\n"):
                    return
                raise FormatError(where, lineno, str(err)) from None


def read_records(path: str | Path) -> list[TurnRecord]:
    """Read a records file; a torn final line (a run killed mid-write) is ignored."""
    return list(iter_records(path))
