"""kvharness's own workload format: versioned JSON Lines (see docs/workload-format.md).

Line 1 is a header, every further line one session::

    {"format": "kvharness-workload", "version": 1, "name": "...", "block_size": 128,
     "arrival": {"kind": "trace", ...}, "meta": {...}}
    {"id": "s0", "start": 0.0, "group": "repo-3", "turns": [
        {"tokens": 9000, "keep": 0, "hashes": [...], "output": 120, "gap": 0.0},
        {"tokens": 9800, "keep": 70, "hashes": [...], "output": 80, "gap": 0.4, "tool": "bash"}]}

A turn's chain is delta-encoded against the previous turn of its session: its first ``keep``
hashes are the previous chain's first ``keep``, followed by ``hashes``; its ``images`` likewise
follow the previous turn's first ``images_keep``. ``messages`` (optional) are the chat messages
appended since the previous turn. The JSON Schema is ``workload.schema.json``
beside this module. Values are bounded as in :mod:`kvharness.workload.reader`; reading streams the
file line by line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from kvharness.errors import FormatError
from kvharness.files import replacing
from kvharness.workload import reader
from kvharness.workload.chain import BlockChain, common_prefix_len
from kvharness.workload.images import Image
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.reader import BlockHash, BlockSize, Seconds, Tokens
from kvharness.workload.traceformat import Probe, TraceFormat

__all__ = [
    "FORMAT",
    "SCHEMA_PATH",
    "TRACE_FORMAT",
    "VERSION",
    "ImageEntry",
    "dumps_lines",
    "images_delta",
    "images_of",
    "is_workload_file",
    "load",
    "save",
]

FORMAT = "kvharness-workload"
VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("workload.schema.json")


TokenId = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]

_Factor = Annotated[float, msgspec.Meta(gt=0, le=1e6)]
"""A rate (sessions/s) or a time scale: positive, and at most a million."""


class _Arrival(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    kind: Literal["trace", "poisson", "concurrent"] = "trace"
    rate: _Factor = 1.0
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)] = 1
    time_scale: _Factor = 1.0
    seed: int = 0


class _Header(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    block_size: BlockSize
    name: str = "workload"
    arrival: _Arrival = msgspec.field(default_factory=_Arrival)
    meta: dict[str, Any] = msgspec.field(default_factory=dict)


class ImageEntry(msgspec.Struct, forbid_unknown_fields=True):
    """An image as a line of the format (and of a recording) holds it: its fields as
    :class:`~kvharness.workload.images.Image`'s."""

    offset: Tokens
    tokens: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
    width: Annotated[int, msgspec.Meta(ge=1, le=2**20)]
    height: Annotated[int, msgspec.Meta(ge=1, le=2**20)]
    hash: BlockHash


def images_delta(
    prev: Sequence[Image], now: Sequence[Image]
) -> tuple[int, list[ImageEntry] | None]:
    """``now`` as (images kept from ``prev``, the entries after them, None when none)."""
    keep = next(
        (i for i, (a, b) in enumerate(zip(prev, now, strict=False)) if a != b),
        min(len(prev), len(now)),
    )
    entries = [ImageEntry(im.offset, im.tokens, im.width, im.height, im.hash) for im in now[keep:]]
    return keep, entries or None


def images_of(entries: Sequence[ImageEntry] | None) -> tuple[Image, ...]:
    """The images ``entries`` hold (ValueError for a field out of its range)."""
    return tuple(Image(e.offset, e.tokens, e.width, e.height, e.hash) for e in entries or ())


class _Turn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    tokens: Tokens
    hashes: list[BlockHash]
    output: Tokens
    keep: Annotated[int, msgspec.Meta(ge=0)] = 0
    gap: Seconds = 0.0
    tool: str | None = None
    messages: list[dict[str, Any]] | None = None
    ids: list[TokenId] | None = None
    ids_keep: Annotated[int, msgspec.Meta(ge=0)] = 0
    images: list[ImageEntry] | None = None
    images_keep: Annotated[int, msgspec.Meta(ge=0)] = 0

    def __post_init__(self) -> None:
        reader.check_hashes(self.hashes)


class _Session(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    id: str
    turns: list[_Turn]
    start: Seconds | None = None
    group: str | None = None


_header_decoder = msgspec.json.Decoder(_Header)
_session_decoder = msgspec.json.Decoder(_Session)
_encoder = msgspec.json.Encoder()


def is_workload_file(path: Path) -> bool:
    """True when ``path``'s first line is a kvharness workload header."""
    return reader.first_line_format(path) == FORMAT


def _session_to_wire(s: Session) -> _Session:
    turns = []
    prev: tuple[int, ...] = ()
    prev_ids: tuple[int, ...] = ()
    prev_images: tuple[Image, ...] = ()
    for t in s.turns:
        h = t.input.hashes
        keep = common_prefix_len(prev, h)
        ids, ids_keep = None, 0
        if t.prompt_ids is not None:
            ids_keep = common_prefix_len(prev_ids, t.prompt_ids)
            ids = list(t.prompt_ids[ids_keep:])
        prev_ids = t.prompt_ids or ()
        images_keep, images = images_delta(prev_images, t.images)
        prev_images = t.images
        turns.append(
            _Turn(
                tokens=t.input.num_tokens,
                hashes=list(h[keep:]),
                output=t.output_tokens,
                keep=keep,
                gap=t.gap,
                tool=t.tool,
                messages=[dict(m) for m in t.messages] if t.messages is not None else None,
                ids=ids,
                ids_keep=ids_keep,
                images=images,
                images_keep=images_keep,
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
    with replacing(path) as tmp, tmp.open("wb") as f:
        for line in dumps_lines(workload):
            f.write(line)


def _session_from_wire(w: _Session, block_size: int, where: str, lineno: int) -> Session:
    turns = []
    prev: list[int] = []
    prev_ids: list[int] = []
    prev_images: tuple[Image, ...] = ()
    for i, wt in enumerate(w.turns):

        def bad(msg: str, i: int = i) -> FormatError:
            return FormatError(where, lineno, f"session {w.id!r} turn {i}: {msg}")

        if not 0 <= wt.keep <= len(prev):
            raise bad(f"keep={wt.keep} but the previous turn has {len(prev)} blocks")
        if wt.messages is not None and not reader.check_nesting(wt.messages):
            raise bad(f"messages nested deeper than {reader.MAX_NESTING} levels")
        hashes = prev[: wt.keep] + wt.hashes
        try:
            chain = BlockChain(block_size, tuple(hashes), wt.tokens)
        except ValueError as err:
            raise bad(str(err)) from None
        messages = tuple(wt.messages) if wt.messages is not None else None
        ids = None
        if wt.ids is not None:
            if wt.ids_keep > len(prev_ids):
                raise bad(f"ids_keep={wt.ids_keep} but the previous turn has {len(prev_ids)} ids")
            ids = prev_ids[: wt.ids_keep] + wt.ids
        if wt.images_keep > len(prev_images):
            raise bad(
                f"images_keep={wt.images_keep} but the previous turn has {len(prev_images)} images"
            )
        images = prev_images[: wt.images_keep] + images_of(wt.images)
        try:
            turns.append(
                Turn(
                    chain,
                    wt.output,
                    wt.gap,
                    wt.tool,
                    messages,
                    None if ids is None else tuple(ids),
                    images,
                )
            )
        except ValueError as err:
            raise bad(str(err)) from None
        prev = hashes
        prev_ids = ids if ids is not None else []
        prev_images = images
    try:
        return Session(w.id, tuple(turns), w.start, w.group)
    except ValueError as err:
        raise FormatError(where, lineno, str(err)) from None


def _header(raw: bytes, where: str, lineno: int) -> _Header:
    try:
        header = reader.decode(_header_decoder, raw, where, lineno)
    except FormatError as err:
        raise FormatError(where, err.line, f"bad workload header: {err.reason}") from None
    if header.format != FORMAT:
        raise FormatError(where, lineno, f"not a kvharness workload (format={header.format!r})")
    if header.version != VERSION:
        raise FormatError(
            where,
            lineno,
            f"workload format version {header.version} (this kvharness reads {VERSION})",
        )
    if not reader.check_nesting(header.meta):
        raise FormatError(where, lineno, f"meta nested deeper than {reader.MAX_NESTING} levels")
    return header


def load(path: str | Path) -> Workload:
    """Read a workload file, streaming; any fault raises :class:`FormatError` naming the file and
    line, or the file when it holds no session."""
    where = str(path)
    records = reader.lines(path)
    first = next(records, None)
    if first is None:
        raise FormatError(where, None, "no requests: the file is empty or holds only blank lines")
    header = _header(first[1], where, first[0])
    sessions = []
    ids: set[str] = set()
    for lineno, line in records:
        w = reader.decode(_session_decoder, line, where, lineno)
        if w.id in ids:
            raise FormatError(where, lineno, f"duplicate session id {w.id!r}")
        ids.add(w.id)
        sessions.append(_session_from_wire(w, header.block_size, where, lineno))
    if not sessions:
        raise FormatError(where, None, "no requests: the workload has a header but no sessions")
    a = header.arrival
    arrival = Arrival(a.kind, a.rate, a.concurrency, a.time_scale, a.seed)
    return Workload(tuple(sessions), header.block_size, header.name, arrival, header.meta)


def _sniff(p: Probe) -> bool:
    return p.container == "line" and p.values.get("format") == FORMAT


TRACE_FORMAT = TraceFormat(
    "kvharness",
    "kvharness's own workload format (docs/workload-format.md)",
    _sniff,
    lambda path, _: load(path),
    save,
)
