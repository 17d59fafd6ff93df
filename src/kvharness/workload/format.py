"""kvharness's own workload format: versioned JSON Lines (see docs/workload-format.md).

Line 1 is a header, every further line one session::

    {"format": "kvharness-workload", "version": 1, "name": "...", "block_size": 128,
     "arrival": {"kind": "trace", ...}, "meta": {...}}
    {"id": "s0", "start": 0.0, "group": "repo-3", "turns": [
        {"tokens": 9000, "keep": 0, "hashes": [...], "output": 120, "gap": 0.0},
        {"tokens": 9800, "keep": 70, "hashes": [...], "output": 80, "gap": 0.4, "tool": "bash"}]}

A turn's chain is delta-encoded against the previous turn of its session: its first ``keep``
hashes are the previous chain's first ``keep``, followed by ``hashes``. ``messages`` (optional) are
the chat messages appended since the previous turn. The JSON Schema is ``workload.schema.json``
beside this module.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec

from kvharness.errors import FormatError, decode_error_message
from kvharness.workload.chain import BlockChain
from kvharness.workload.model import Arrival, Session, Turn, Workload

__all__ = ["FORMAT", "SCHEMA_PATH", "VERSION", "dumps_lines", "is_workload_file", "load", "save"]

FORMAT = "kvharness-workload"
VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("workload.schema.json")


class _Arrival(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    kind: Literal["trace", "poisson", "concurrent"] = "trace"
    rate: float = 1.0
    concurrency: int = 1
    time_scale: float = 1.0
    seed: int = 0


class _Header(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    block_size: int
    name: str = "workload"
    arrival: _Arrival = msgspec.field(default_factory=_Arrival)
    meta: dict[str, Any] = msgspec.field(default_factory=dict)


class _Turn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    tokens: int
    hashes: list[int]
    output: int
    keep: int = 0
    gap: float = 0.0
    tool: str | None = None
    messages: list[dict[str, Any]] | None = None


class _Session(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    id: str
    turns: list[_Turn]
    start: float | None = None
    group: str | None = None


_header_decoder = msgspec.json.Decoder(_Header)
_session_decoder = msgspec.json.Decoder(_Session)
_encoder = msgspec.json.Encoder()


def is_workload_file(path: Path) -> bool:
    """True when ``path``'s first line is a kvharness workload header."""
    try:
        with path.open("rb") as f:
            first = f.readline(4096)
    except OSError:
        return False
    return FORMAT.encode() in first


def _session_to_wire(s: Session) -> _Session:
    turns = []
    prev: tuple[int, ...] = ()
    for t in s.turns:
        h = t.input.hashes
        keep = 0
        limit = min(len(prev), len(h))
        while keep < limit and prev[keep] == h[keep]:
            keep += 1
        turns.append(
            _Turn(
                tokens=t.input.num_tokens,
                hashes=list(h[keep:]),
                output=t.output_tokens,
                keep=keep,
                gap=t.gap,
                tool=t.tool,
                messages=[dict(m) for m in t.messages] if t.messages is not None else None,
            )
        )
        prev = h
    return _Session(id=s.id, turns=turns, start=s.start, group=s.group)


def dumps_lines(workload: Workload) -> Iterator[bytes]:
    """The file's lines (each ending in a newline), header first."""
    a = workload.arrival
    header = _Header(
        format=FORMAT,
        version=VERSION,
        block_size=workload.block_size,
        name=workload.name,
        arrival=_Arrival(a.kind, a.rate, a.concurrency, a.time_scale, a.seed),
        meta=dict(workload.meta),
    )
    yield _encoder.encode(header) + b"\n"
    for s in workload.sessions:
        yield _encoder.encode(_session_to_wire(s)) + b"\n"


def save(workload: Workload, path: str | Path) -> None:
    """Write ``workload`` to ``path`` (atomically: a partial file never replaces a good one)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as f:
            for line in dumps_lines(workload):
                f.write(line)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _session_from_wire(w: _Session, block_size: int, where: str, lineno: int) -> Session:
    turns = []
    prev: list[int] = []
    for i, wt in enumerate(w.turns):

        def bad(msg: str, i: int = i) -> FormatError:
            return FormatError(where, lineno, f"session {w.id!r} turn {i}: {msg}")

        if wt.tokens < 0 or wt.output < 0:
            raise bad("negative token count")
        if not 0 <= wt.keep <= len(prev):
            raise bad(f"keep={wt.keep} but the previous turn has {len(prev)} blocks")
        if not (wt.gap >= 0 and math.isfinite(wt.gap)):
            raise bad(f"gap must be a finite number >= 0, got {wt.gap}")
        hashes = prev[: wt.keep] + wt.hashes
        try:
            chain = BlockChain(block_size, tuple(hashes), wt.tokens)
        except ValueError as err:
            raise bad(str(err)) from None
        messages = tuple(wt.messages) if wt.messages is not None else None
        turns.append(Turn(chain, wt.output, wt.gap, wt.tool, messages))
        prev = hashes
    try:
        return Session(w.id, tuple(turns), w.start, w.group)
    except ValueError as err:
        raise FormatError(where, lineno, decode_error_message(err)) from None


def load(path: str | Path) -> Workload:
    """Read a workload file; any fault raises :class:`FormatError` naming the file and line."""
    path = Path(path)
    where = str(path)
    try:
        f = path.open("rb")
    except OSError as err:
        raise FormatError(where, 0, f"cannot open: {err.strerror}") from None
    with f:
        first = f.readline()
        try:
            header = _header_decoder.decode(first)
        except msgspec.DecodeError as err:
            raise FormatError(where, 1, f"bad workload header: {err}") from None
        if header.format != FORMAT:
            raise FormatError(where, 1, f"not a kvharness workload (format={header.format!r})")
        if header.version != VERSION:
            raise FormatError(
                where,
                1,
                f"workload format version {header.version} (this kvharness reads {VERSION})",
            )
        if header.block_size <= 0:
            raise FormatError(where, 1, f"block_size must be positive, got {header.block_size}")
        sessions = []
        ids: set[str] = set()
        for lineno, line in enumerate(f, start=2):
            if not line.strip():
                continue
            try:
                w = _session_decoder.decode(line)
            except msgspec.DecodeError as err:
                raise FormatError(where, lineno, decode_error_message(err)) from None
            if w.id in ids:
                raise FormatError(where, lineno, f"duplicate session id {w.id!r}")
            ids.add(w.id)
            sessions.append(_session_from_wire(w, header.block_size, where, lineno))
    a = header.arrival
    try:
        arrival = Arrival(a.kind, a.rate, a.concurrency, a.time_scale, a.seed)
    except ValueError as err:
        raise FormatError(where, 1, str(err)) from None
    return Workload(tuple(sessions), header.block_size, header.name, arrival, header.meta)
