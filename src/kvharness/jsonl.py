"""Append-only JSON Lines files that survive a torn write.

Every JSONL file the project appends to while it works (a bench run's ``records.jsonl``, an env
run's ``rollouts.jsonl``) is opened through :func:`open_append`. A crash mid-write, a full disk or
a power loss can leave the file ending in a partial line; appending after it would fuse the next
line into it and make the whole file unreadable. So on every open the file is first cut back to
its last complete line (newline-terminated and valid JSON), one line on stderr says how many bytes
were dropped, and writing continues from there.

Only the tail is repaired: the bytes after the last newline, and at most one newline-terminated
line before them that is not JSON (a torn line that a version without this rule appended after).
A file damaged further back is not a torn write; :class:`FormatError` names its line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, NamedTuple

import msgspec

from kvharness.errors import FormatError

__all__ = ["TornTail", "cut_torn_tail", "open_append"]

_CHUNK = 1 << 16  # bytes read at a time while looking back for a line break


class TornTail(NamedTuple):
    """What :func:`cut_torn_tail` removed: ``bytes`` and ``lines`` (partial ones counted)."""

    bytes: int
    lines: int


def _line_start(f: IO[bytes], end: int) -> int:
    """Offset of the first byte after the last ``\\n`` before offset ``end`` (0 when none)."""
    pos = end
    while pos > 0:
        step = min(_CHUNK, pos)
        f.seek(pos - step)
        hit = f.read(step).rfind(b"\n")
        if hit >= 0:
            return pos - step + hit + 1
        pos -= step
    return 0


def _complete(line: bytes) -> bool:
    if not line.strip():
        return True
    try:
        msgspec.json.decode(line)
    except msgspec.DecodeError:
        return False
    return True


def _line_number(f: IO[bytes], offset: int) -> int:
    """1-based number of the line that starts at ``offset``."""
    f.seek(0)
    count, pos = 1, 0
    while pos < offset:
        block = f.read(min(_CHUNK, offset - pos))
        count += block.count(b"\n")
        pos += len(block)
    return count


def cut_torn_tail(path: str | Path) -> TornTail:
    """Truncate ``path`` after its last complete line; returns what was dropped (0, 0 when the file
    already ends with one, is empty or does not exist). Raises :class:`FormatError` when more than
    a torn tail is damaged (the file is then left as it was)."""
    p = Path(path)
    try:
        f = p.open("r+b")
    except FileNotFoundError:
        return TornTail(0, 0)
    with f:
        size = f.seek(0, os.SEEK_END)
        cut = _line_start(f, size)
        lines = int(cut < size)
        for tries in range(2):
            if cut == 0:
                break
            start = _line_start(f, cut - 1)
            f.seek(start)
            if _complete(f.read(cut - start)):
                break
            if tries == 1:
                raise FormatError(
                    str(p), _line_number(f, start),
                    "not JSON, and not a torn last line: repair or move the file aside",
                )  # fmt: skip
            cut, lines = start, lines + 1
        if cut < size:
            f.truncate(cut)
    return TornTail(size - cut, lines)


def open_append(path: str | Path) -> IO[bytes]:
    """Open ``path`` (created if missing) for appending whole lines, after cutting a torn tail;
    a cut is reported as one line on stderr. The caller writes ``line + b"\\n"`` per entry and
    flushes it."""
    torn = cut_torn_tail(path)
    if torn.bytes:
        print(
            f"kvharness: {path}: dropped {torn.bytes} bytes of a torn last line "
            f"({torn.lines} line{'s' if torn.lines > 1 else ''} left by an interrupted write); "
            "appending after the last complete line",
            file=sys.stderr,
        )
    return Path(path).open("ab")
