"""The trace formats kvharness reads and writes, by name, and how a file's format is told.

Each :class:`TraceFormat` has a loader and, where the format can hold a whole workload, a writer.
:func:`detect` tells a file's format from what it starts with (:class:`Probe`: its first line,
the keys of its first JSON record, the first element of a JSON array); a folder is a recording,
or holds files of one per-session format (one ``.traj`` file per session, say), which load
together as one workload.

What a format knows goes into the workload's ``meta``: ``format`` (its name) and ``sharing``,
how prefix sharing between calls is known — ``hashes`` (the trace names blocks), ``content``
(its text was tokenised) or ``none`` (the trace holds lengths only: every prompt is taken as
unique, and the ideal hit ratio says nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from kvharness.errors import FormatError, UserError
from kvharness.workload import (
    atif,
    azure,
    mini_swe_agent,
    mooncake,
    openai_log,
    openhands,
    otel,
    reader,
    recording,
    swe_agent,
)
from kvharness.workload import format as wformat
from kvharness.workload.model import Arrival, Workload
from kvharness.workload.traceformat import LoadOptions, Probe, Sharing, TraceFormat

__all__ = [
    "LoadOptions",
    "Probe",
    "Sharing",
    "TraceFormat",
    "by_name",
    "detect",
    "formats",
    "load_path",
    "merge",
    "save_as",
    "writable",
]

_HEAD_BYTES = 64 << 10


_object_keys = msgspec.json.Decoder(dict[str, msgspec.Raw])
_array_items = msgspec.json.Decoder(list[msgspec.Raw])
_scalar = msgspec.json.Decoder(str | int | float | bool | None)


def _object(raw: bytes | msgspec.Raw) -> dict[str, msgspec.Raw] | None:
    try:
        return _object_keys.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def _continues(path: Path) -> bool:
    """True when the file's first line does not hold a whole JSON value (a document spread over
    lines): its second line's first character would not start a value of JSON Lines."""
    lines = reader.lines(path)
    next(lines, None)
    second = next(lines, (0, b""))[1].lstrip()[:1]
    return second not in (b"{", b"")


def probe(path: Path) -> Probe:
    """Probe ``path`` (see :class:`Probe`); a file that cannot be read is a :class:`FormatError`."""
    first = b""
    for _, line in reader.lines(
        path, limit=reader.MAX_DOCUMENT_BYTES
    ):  # JSON Lines loaders bound lines
        first = line
        break
    if not first:
        raise FormatError(
            str(path), None, "no requests: the file is empty or holds only blank lines"
        )
    text = first[:_HEAD_BYTES].decode("utf-8", "replace").strip()
    container: Literal["line", "document", "array"] | None = None
    obj = _object(first) if first.lstrip().startswith(b"{") else None
    if obj is not None:
        container = "line"
    elif first.strip() not in (b"{", b"[") and first.lstrip()[:1] == b"{" and not _continues(path):
        reader.decode(_object_keys, first, str(path))  # one line, not an object: say where
    elif first.lstrip()[:1] in (b"{", b"["):
        data = reader.document(path)
        obj = _object(data)
        if obj is None and data.lstrip()[:1] == b"{":
            obj = reader.decode(_object_keys, data, str(path))  # raises, naming the line
        container = "document" if obj is not None else None
        if obj is None:
            items = (
                reader.decode(_array_items, data, str(path)) if data.lstrip()[:1] == b"[" else []
            )
            obj = _object(items[0]) if items else None
            container = "array" if obj is not None else None
    values: dict[str, Any] = {}
    for key, raw in (obj or {}).items():
        try:
            values[key] = _scalar.decode(raw)
        except msgspec.DecodeError:
            continue
    return Probe(path, text, frozenset(obj or ()), container, values)


_FORMATS = (
    wformat.TRACE_FORMAT,
    recording.TRACE_FORMAT,
    mooncake.TRACE_FORMAT,
    azure.TRACE_FORMAT,
    otel.TRACE_FORMAT,
    atif.TRACE_FORMAT,
    openhands.TRACE_FORMAT,
    mini_swe_agent.TRACE_FORMAT,
    swe_agent.TRACE_FORMAT,
    openai_log.TRACE_FORMAT,
)


def formats() -> tuple[TraceFormat, ...]:
    """Every format, in the order :func:`detect` tries them."""
    return _FORMATS


def by_name(name: str) -> TraceFormat:
    """The format called ``name``; an unknown name is a user error listing the known ones."""
    for f in formats():
        if f.name == name:
            return f
    raise UserError(f"unknown format {name!r}; formats are: {_names(formats())}")


def writable() -> tuple[TraceFormat, ...]:
    """The formats a workload can be written in."""
    return tuple(f for f in formats() if f.save is not None)


def _names(chosen: Sequence[TraceFormat]) -> str:
    return ", ".join(f.name for f in chosen)


def _unknown(path: Path) -> FormatError:
    return FormatError(
        str(path),
        None,
        f"not a trace format kvharness knows; it reads {_names(formats())} "
        "(see `kvharness workload formats`): name one with --format",
    )


def detect(path: Path) -> TraceFormat:
    """The format of the file or folder at ``path``; :class:`FormatError` when none fits."""
    known = formats()
    if path.is_dir():
        return _folder_format(path, known)[0]
    p = probe(path)
    for f in known:
        if f.sniff(p):
            return f
    raise _unknown(path)


def _folder_format(path: Path, known: Sequence[TraceFormat]) -> tuple[TraceFormat, list[Path]]:
    for f in known:
        if not f.per_session and f.sniff(Probe(path, "", frozenset(), None, {})):
            return f, [path]
    suffixes = {s for f in known for s in f.suffixes}
    found: dict[str, tuple[TraceFormat, list[Path]]] = {}
    for child in sorted(path.iterdir()):
        if child.name.startswith(".") or not child.is_file():
            continue
        if not any(child.name.endswith(s) for s in suffixes):
            continue
        p = probe(child)
        for f in known:
            if f.per_session and f.sniff(p):
                found.setdefault(f.name, (f, []))[1].append(child)
                break
    if not found:
        raise FormatError(
            str(path),
            None,
            "a folder holding no recording and no trace files kvharness knows "
            f"(per-session formats: {_names([f for f in known if f.per_session])})",
        )
    if len(found) > 1:
        named = ", ".join(f"{len(files)} {name}" for name, (_, files) in found.items())
        raise FormatError(str(path), None, f"a folder mixing formats ({named}): load them apart")
    return next(iter(found.values()))


def merge(workloads: Sequence[Workload], name: str, meta: dict[str, Any]) -> Workload:
    """Per-session files' workloads as one: their sessions in order, one block size."""
    sizes = {w.block_size for w in workloads}
    if len(sizes) > 1:
        raise FormatError(name, None, f"files at different block sizes {sorted(sizes)}")
    sessions = tuple(s for w in workloads for s in w.sessions)
    try:
        return Workload(sessions, sizes.pop(), name, Arrival("trace"), meta)
    except ValueError as err:
        raise FormatError(name, None, str(err)) from None


def load_path(path: Path, fmt: str | None = None, options: LoadOptions | None = None) -> Workload:
    """Load the file or folder at ``path`` in format ``fmt`` (None: detected)."""
    options = options or LoadOptions()
    if fmt is None:
        chosen, files = _folder_format(path, formats()) if path.is_dir() else (detect(path), [path])
    else:
        chosen = by_name(fmt)
        files = [path]
        if path.is_dir() and chosen.per_session:
            files = sorted(
                c for c in path.iterdir() if c.is_file() and c.name.endswith(chosen.suffixes)
            )
            if not files:
                raise FormatError(str(path), None, f"no {chosen.name} files in the folder")
    if files == [path]:
        workload = chosen.load(path, options)
    else:
        parts = [chosen.load(f, options) for f in files]
        meta = {**parts[0].meta, "path": str(path), "files": len(files)}
        workload = merge(parts, path.name, meta)
    meta = {**workload.meta, "format": chosen.name}
    meta.setdefault("sharing", chosen.sharing)
    return Workload(workload.sessions, workload.block_size, workload.name, workload.arrival, meta)


def save_as(workload: Workload, path: Path, fmt: str) -> None:
    """Write ``workload`` to ``path`` in format ``fmt``; a format that cannot hold a workload is
    a user error naming those that can."""
    chosen = by_name(fmt)
    if chosen.save is None:
        raise UserError(
            f"kvharness reads {fmt} but does not write it; it writes: {_names(writable())}"
        )
    chosen.save(workload, path)
