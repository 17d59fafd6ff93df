"""The Azure LLM inference traces (Azure/AzurePublicDataset, 2023 and 2024): CSV, one request a row.

::

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:15:46.6805900,4808,10

``TIMESTAMP`` is the arrival time (``YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]``, UTC where no
offset is given; the 2023 traces give 7 fractional digits, the 2024 week-long ones 6 and ``+00:00``), ``ContextTokens`` the prompt's tokens, ``GeneratedTokens`` the output's. Rows are
open-loop arrivals: the trace names no sessions and records no content, so every request is a
session of one turn, starting at its own time, with a prompt no other request shares
(``sharing: none``: the ideal hit ratio of such a workload says nothing about real reuse).
Rows must come in time order. The file is streamed.
"""

from __future__ import annotations

import csv
from pathlib import Path

from kvharness.errors import FormatError
from kvharness.workload import reader
from kvharness.workload.conversation import seconds, unique_chain
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.traceformat import Probe, TraceFormat

__all__ = ["HEADER", "TRACE_FORMAT", "load_azure"]

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BLOCK_SIZE = 512


def _cells(where: str, lineno: int, raw: bytes) -> list[str]:
    try:
        return next(csv.reader([raw.decode("utf-8").rstrip("\r\n")]), [])
    except (UnicodeDecodeError, csv.Error) as err:
        raise FormatError(where, lineno, f"bad row: {err}") from None


def _tokens(text: str, field: str) -> int:
    value = int(text)
    if not 0 <= value <= reader.MAX_TOKENS:
        raise ValueError(f"{field} {value} out of range 0..{reader.MAX_TOKENS}")
    return value


def load_azure(path: str | Path, block_size: int = _BLOCK_SIZE) -> Workload:
    """Read an Azure LLM inference trace (see module docstring); faults name file and line."""
    where = str(path)
    sessions: list[Session] = []
    last = float("-inf")
    rows = reader.lines(path)
    first = next(rows, None)
    if first is None:
        raise FormatError(where, None, "no requests: the file is empty")
    header = tuple(c.strip() for c in _cells(where, *first))
    if header != HEADER:
        raise FormatError(where, first[0], f"expected the header {','.join(HEADER)}")
    for lineno, raw in rows:
        cells = _cells(where, lineno, raw)
        try:
            if len(cells) != len(HEADER):
                raise ValueError(f"{len(cells)} columns, expected {len(HEADER)}")
            time = seconds(cells[0])
            context = _tokens(cells[1], "ContextTokens")
            generated = _tokens(cells[2], "GeneratedTokens")
        except ValueError as err:
            raise FormatError(where, lineno, f"bad row: {err}") from None
        if time < last:
            raise FormatError(where, lineno, f"time goes backwards: {cells[0].strip()}")
        last = time
        turn = Turn(unique_chain(block_size, context, lineno), generated)
        sessions.append(Session(f"az-{lineno}", (turn,), time))
    if not sessions:
        raise FormatError(where, None, "no requests: the file holds a header only")
    meta = {"source": "azure", "path": where, "requests": len(sessions), "sharing": "none"}
    return Workload(tuple(sessions), block_size, Path(path).stem, Arrival("trace"), meta)


def _sniff(p: Probe) -> bool:
    cells = tuple(c.strip().lower() for c in p.first_line.split(","))
    return cells == tuple(h.lower() for h in HEADER)


TRACE_FORMAT = TraceFormat(
    "azure",
    "Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens): open-loop "
    "requests, lengths only",
    _sniff,
    lambda path, options: load_azure(path, options.block_size or _BLOCK_SIZE),
)
