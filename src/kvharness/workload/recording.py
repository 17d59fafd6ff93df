"""Recordings: live traffic written as it is served, read back as a workload.

``kvharness gateway --record DIR`` writes every request it routes to ``DIR`` through a
:class:`RecordingWriter`; :func:`load_recording` (and so every command that takes a workload)
reads the folder back as a :class:`~kvharness.workload.model.Workload`, one session per agent
session, in arrival order, with the recorded gaps.

Files
    ``DIR/part-NNNNNN.jsonl``, JSON Lines. Line 1 of each part is a header
    (``{"format": "kvharness-recording", "version": 1, "block_size": B, "part": N, "started":
    UNIX}``), every further line one request (:class:`Request`). A part is self-contained:
    its delta encoding (``keep``, ``ids_keep``, ``messages_keep``) refers only to earlier lines
    of the same part, so a part loads on its own. A writer never appends to an existing part:
    it starts the next number, and a new part when the current one passes its size limit or the
    block size changes.

Crash safety
    A request is one line, written whole by one ``write(2)`` once it is answered (the gateway
    writes it before its answer's last byte leaves), so a process killed at any moment leaves
    every finished request on disk: the data is in the kernel's page cache, which outlives the
    process; a part appears with its header already in it. Only an operating-system crash or a
    full disk can leave a torn last line (or a part without its header); :func:`load_recording`
    drops such a line or part (one note on stderr) and refuses damage anywhere else, naming the
    file and line.

A request's prompt
    ``tokens`` prompt tokens as the gateway counted them, as a block chain: ``hashes`` (after
    the first ``keep`` of the session's previous request in the part) names every full block
    and a last partial one, as :mod:`kvharness.workload.chain` defines. With content kept,
    ``ids`` (after the first ``ids_keep``) are its token ids and ``messages`` (after the first
    ``messages_keep``) its chat messages as sent. ``images`` (after the first ``images_keep``)
    place its images' placeholder tokens, so a replay sends an image of each one's size there.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import msgspec

from kvharness.errors import FormatError, UserError
from kvharness.workload import reader
from kvharness.workload.chain import BlockChain, common_prefix_len
from kvharness.workload.format import ImageEntry, images_delta, images_of
from kvharness.workload.images import Image, check_images
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.reader import BlockHash, BlockSize, Seconds, Tokens
from kvharness.workload.traceformat import Probe, TraceFormat

__all__ = [
    "FORMAT",
    "TRACE_FORMAT",
    "VERSION",
    "Observed",
    "RecordingWriter",
    "Request",
    "is_recording",
    "load_recording",
    "read_requests",
    "recording_parts",
]

FORMAT = "kvharness-recording"
VERSION = 1
DEFAULT_MAX_PART_BYTES = 256 << 20
_PART = re.compile(r"^part-(\d{6,})\.jsonl$")
_KEPT_SESSIONS = 4096
"""Sessions whose last request a writer remembers (for delta encoding and gaps), most recent."""
_KEPT_CONTENT_BYTES = 32 << 20
"""Bytes of content (token ids at 4 bytes each, encoded messages) a writer holds over all
sessions' last requests, with content kept."""


class _Header(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    block_size: BlockSize
    part: Annotated[int, msgspec.Meta(ge=1)] = 1
    started: Seconds = 0.0


class Request(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One recorded request (a line of a part)."""

    session: str
    """The agent session: the client's session header, else the gateway's inference."""
    arrival: Seconds
    """Unix time the request arrived at the gateway."""
    end: Seconds
    """Unix time its answer ended."""
    tokens: Tokens
    hashes: list[BlockHash]
    keep: Annotated[int, msgspec.Meta(ge=0)] = 0
    gap: Seconds = 0.0
    """Seconds from the end of the session's previous answer to this arrival (tool/think time);
    0 for a session's first request and for one sent while the previous was unanswered."""
    inferred: bool = False
    """The session was inferred from the prompt (the client sent no session header)."""
    prompt_tokens: Tokens | None = None
    cached_tokens: Tokens | None = None
    output_tokens: Tokens | None = None
    """The engine's usage counts, where its answer reported them."""
    model: str | None = None
    status: Annotated[int, msgspec.Meta(ge=100, le=599)] = 200
    """HTTP status of the answer (499: the client left before it ended)."""
    replica: str | None = None
    reason: str | None = None
    """The routing decision's reason (the policy's words)."""
    path: str = "/v1/chat/completions"
    ids: list[Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]] | None = None
    ids_keep: Annotated[int, msgspec.Meta(ge=0)] = 0
    messages: list[dict[str, Any]] | None = None
    messages_keep: Annotated[int, msgspec.Meta(ge=0)] = 0
    images: list[ImageEntry] | None = None
    """The prompt's images after the first ``images_keep`` of the previous request's (as in
    the workload format; the hash is of the image's name at the gateway)."""
    images_keep: Annotated[int, msgspec.Meta(ge=0)] = 0

    def __post_init__(self) -> None:
        reader.check_hashes(self.hashes)


@dataclass(frozen=True, slots=True)
class Observed:
    """What the gateway knows of one answered request, as :meth:`RecordingWriter.write` takes it
    (whole, not delta-encoded)."""

    session: str
    inferred: bool
    arrival: float
    end: float
    chain: BlockChain
    status: int
    path: str
    model: str | None = None
    replica: str | None = None
    reason: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    token_ids: Sequence[int] | None = None
    messages: Sequence[Mapping[str, Any]] | None = None
    images: tuple[Image, ...] = ()
    """The images in the prompt (their placeholder tokens are part of :attr:`chain`)."""


@dataclass(slots=True)
class _Last:
    """A session's previous request."""

    part: int
    """The part it was written to (delta encoding refers only to the same part)."""
    hashes: tuple[int, ...]
    full: int
    """How many of ``hashes`` name full blocks."""
    ids: array[int] | None = None
    messages: list[bytes] | None = None
    images: tuple[Image, ...] = ()

    @property
    def content_bytes(self) -> int:
        ids = self.ids.itemsize * len(self.ids) if self.ids is not None else 0
        return ids + sum(map(len, self.messages or ()))


_encoder = msgspec.json.Encoder()
_header_decoder = msgspec.json.Decoder(_Header)
_request_decoder = msgspec.json.Decoder(Request)


def recording_parts(folder: Path) -> list[Path]:
    """The folder's parts, in order (empty when it holds none)."""
    found = []
    for p in folder.iterdir():
        m = _PART.match(p.name)
        if m is not None and p.is_file():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


class RecordingWriter:
    """Appends requests to a recording folder (see the module docstring). ``content`` keeps
    token ids and messages; ``max_part_bytes`` rotates parts. Not thread-safe; no task of its
    own (each :meth:`write` is one ``write(2)`` on the caller's thread).

    Memory: the last request of at most :data:`_KEPT_SESSIONS` sessions (their hashes; with
    content, token ids and messages up to :data:`_KEPT_CONTENT_BYTES` in all), least recently
    used dropped first; a dropped session's next request is written whole."""

    def __init__(
        self,
        folder: str | Path,
        *,
        content: bool = False,
        max_part_bytes: int = DEFAULT_MAX_PART_BYTES,
    ) -> None:
        if max_part_bytes < 1:
            raise ValueError(f"max_part_bytes must be >= 1, got {max_part_bytes}")
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            existing = recording_parts(self.folder)
        except OSError as err:
            raise UserError(f"cannot record to {self.folder}: {err.strerror or err}") from None
        first = _part_number(existing[-1]) + 1 if existing else 1
        self.content = content
        self.max_part_bytes = max_part_bytes
        self.run = first
        """The number of this writer's first part: it names the sessions it infers."""
        self._numbers = itertools.count(first)
        self._number = 0
        self._fd: int | None = None
        self._block_size: int | None = None
        self.part: Path | None = None
        self.part_bytes = 0
        self.requests = 0
        """Requests written by this writer."""
        self._last: OrderedDict[str, _Last] = OrderedDict()
        self._ends: OrderedDict[str, float] = OrderedDict()
        """Each session's last answer's end (Unix time), most recent last."""
        self._content_bytes = 0
        self._heads: OrderedDict[int, list[str]] = OrderedDict()
        """First block hash -> the sessions inferred here that begin with it, newest last."""
        self._inferred = itertools.count()

    # -- parts ------------------------------------------------------------------------------

    def _open(self, block_size: int) -> None:
        self.close()
        self._number = next(self._numbers)
        path = self.folder / f"part-{self._number:06d}.jsonl"
        # A part appears with its header or not at all: the header goes to a hidden file that
        # is then linked to the part's name (link refuses an existing name, as O_EXCL would).
        staging = self.folder / f".{path.name}.{os.getpid()}"
        self._fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self.part_bytes = 0
        try:
            header = _Header(FORMAT, VERSION, block_size, self._number, time.time())
            self._emit(_encoder.encode(header) + b"\n")
            os.link(staging, path)
        except BaseException:
            self.close()
            raise
        finally:
            staging.unlink(missing_ok=True)
        self._block_size = block_size
        self.part = path

    def _emit(self, line: bytes) -> None:
        assert self._fd is not None
        view = memoryview(line)
        while view:  # one write for a regular file; the loop only guards a short one
            view = view[os.write(self._fd, view) :]
        self.part_bytes += len(line)

    def close(self) -> None:
        """Close the current part (the next :meth:`write` starts a new one)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- sessions ---------------------------------------------------------------------------

    def infer_session(self, chain: BlockChain) -> str:
        """The session a request that names none continues: the most recent one inferred here
        whose last prompt's full blocks begin this prompt, else a new ``rec-RUN-N``."""
        full = chain.full_hashes
        bucket = self._heads.get(full[0]) if full else None
        for sid in reversed(bucket or ()):
            last = self._last.get(sid)
            n = last.full if last is not None else 0
            if last is not None and 0 < n <= len(full) and last.hashes[:n] == full[:n]:
                return sid
        sid = f"rec-{self.run}-{next(self._inferred)}"
        if full:
            bucket = self._heads.pop(full[0], [])
            bucket.append(sid)
            del bucket[:-8]
            self._heads[full[0]] = bucket
            if len(self._heads) > _KEPT_SESSIONS:
                self._heads.popitem(last=False)
        return sid

    def _gap(self, session: str, arrival: float, end: float) -> float:
        prev = self._ends.pop(session, None)
        self._ends[session] = end
        if len(self._ends) > _KEPT_SESSIONS:
            self._ends.popitem(last=False)
        return max(0.0, arrival - prev) if prev is not None else 0.0

    # -- writing ----------------------------------------------------------------------------

    def write(self, o: Observed) -> None:
        """Append one answered request, now (see the module docstring)."""
        chain = o.chain
        if (
            self._fd is None
            or chain.block_size != self._block_size
            or self.part_bytes >= self.max_part_bytes
        ):
            self._open(chain.block_size)
        last = self._last.pop(o.session, None)
        if last is not None:
            self._content_bytes -= last.content_bytes
        if last is not None and last.part != self._number:
            last = None
        hashes = chain.hashes
        keep = common_prefix_len(last.hashes, hashes) if last is not None else 0
        rec = Request(
            session=o.session,
            arrival=o.arrival,
            end=max(o.end, o.arrival),
            tokens=chain.num_tokens,
            hashes=list(hashes[keep:]),
            keep=keep,
            gap=self._gap(o.session, o.arrival, o.end),
            inferred=o.inferred,
            prompt_tokens=o.prompt_tokens,
            cached_tokens=o.cached_tokens,
            output_tokens=o.output_tokens,
            model=o.model,
            status=o.status,
            replica=o.replica,
            reason=o.reason,
            path=o.path,
        )
        rec.images_keep, rec.images = images_delta(
            last.images if last is not None else (), o.images
        )
        state = _Last(self._number, tuple(hashes), chain.num_full_blocks, images=o.images)
        if self.content:
            _add_content(rec, state, last, o)
        self._emit(_encoder.encode(rec) + b"\n")
        self.requests += 1
        self._last[o.session] = state
        self._content_bytes += state.content_bytes
        while len(self._last) > 1 and (
            len(self._last) > _KEPT_SESSIONS or self._content_bytes > _KEPT_CONTENT_BYTES
        ):
            _, old = self._last.popitem(last=False)
            self._content_bytes -= old.content_bytes


def _add_content(rec: Request, state: _Last, last: _Last | None, o: Observed) -> None:
    """Put ``o``'s token ids and messages on ``rec``, delta-encoded against ``last``."""
    if o.token_ids is not None:
        ids = array("I", o.token_ids)
        keep = common_prefix_len(last.ids, ids) if last is not None and last.ids is not None else 0
        rec.ids, rec.ids_keep = ids[keep:].tolist(), keep
        state.ids = ids
    if o.messages is not None:
        encoded = [_encoder.encode(m) for m in o.messages]
        prev = last.messages if last is not None and last.messages is not None else []
        keep = common_prefix_len(prev, encoded)
        rec.messages, rec.messages_keep = [dict(m) for m in o.messages[keep:]], keep
        state.messages = encoded


def _part_number(path: Path) -> int:
    m = _PART.match(path.name)
    assert m is not None
    return int(m.group(1))


# -- reading --------------------------------------------------------------------------------


def is_recording(path: Path) -> bool:
    """True when ``path`` is a recording folder (it holds parts) or one part."""
    try:
        if path.is_dir():
            return bool(recording_parts(path))
    except OSError:
        return False
    return reader.first_line_format(path) == FORMAT


class _Read(NamedTuple):
    """One request as read: its line, its whole chain, token ids and messages."""

    request: Request
    chain: BlockChain
    ids: tuple[int, ...] | None
    messages: list[dict[str, Any]] | None
    images: tuple[Image, ...] = ()


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The part's lines; a last line without its newline is a torn write, dropped with a note."""
    pending: tuple[int, bytes] | None = None
    for item in reader.lines(path):
        if pending is not None:
            yield pending
        pending = item
    if pending is None:
        return
    if pending[1].endswith(b"\n"):
        yield pending
    else:
        print(
            f"kvharness: {path}:{pending[0]}: dropped a torn last line (a write cut short)",
            file=sys.stderr,
        )


def _read_part(path: Path, into: dict[str, list[_Read]]) -> tuple[int | None, int]:
    """Add the part's requests to ``into`` by session; returns (its block size, requests), the
    block size None for a part whose header was torn."""
    where = str(path)
    lines = _lines(path)
    first = next(lines, None)
    if first is None:  # its header torn: no request was written after it
        print(f"kvharness: {path}: skipped a part without its header (a write cut short)",
              file=sys.stderr)  # fmt: skip
        return None, 0
    header = reader.decode(_header_decoder, first[1], where, first[0])
    if header.format != FORMAT:
        raise FormatError(where, first[0], f"not a kvharness recording (format={header.format!r})")
    if header.version != VERSION:
        raise FormatError(
            where, first[0], f"recording version {header.version} (this kvharness reads {VERSION})"
        )
    bs = header.block_size
    last: dict[str, _Read] = {}
    count = 0
    for lineno, line in lines:
        r = reader.decode(_request_decoder, line, where, lineno)
        prev = last.get(r.session)

        def bad(msg: str, lineno: int = lineno, sid: str = r.session) -> FormatError:
            return FormatError(where, lineno, f"session {sid!r}: {msg}")

        base = prev.chain.hashes if prev is not None else ()
        if r.keep > len(base):
            raise bad(f"keep={r.keep} but its previous request has {len(base)} blocks")
        try:
            chain = BlockChain(bs, (*base[: r.keep], *r.hashes), r.tokens)
        except ValueError as err:
            raise bad(str(err)) from None
        ids = None
        if r.ids is not None:
            base_ids = prev.ids if prev is not None and prev.ids is not None else ()
            if r.ids_keep > len(base_ids):
                raise bad(f"ids_keep={r.ids_keep} but its previous request has {len(base_ids)} ids")
            ids = (*base_ids[: r.ids_keep], *r.ids)
        messages = None
        if r.messages is not None:
            base_m = prev.messages if prev is not None and prev.messages is not None else []
            if r.messages_keep > len(base_m):
                raise bad(
                    f"messages_keep={r.messages_keep} but its previous request has "
                    f"{len(base_m)} messages"
                )
            if not reader.check_nesting(r.messages):
                raise bad(f"messages nested deeper than {reader.MAX_NESTING} levels")
            messages = base_m[: r.messages_keep] + r.messages
        base_images = prev.images if prev is not None else ()
        if r.images_keep > len(base_images):
            raise bad(
                f"images_keep={r.images_keep} but its previous request has "
                f"{len(base_images)} images"
            )
        images = base_images[: r.images_keep] + images_of(r.images)
        try:
            check_images(images, r.tokens)
        except ValueError as err:
            raise bad(str(err)) from None
        last[r.session] = read = _Read(r, chain, ids, messages, images)
        into.setdefault(r.session, []).append(read)
        count += 1
    return bs, count


def _appended(items: Sequence[_Read]) -> list[tuple[dict[str, Any], ...]] | None:
    """Each request's messages past the previous request's, or None when some request has none
    or does not extend the one before (a rewritten history)."""
    out: list[tuple[dict[str, Any], ...]] = []
    prev: list[dict[str, Any]] = []
    for item in items:
        now = item.messages
        if now is None or now[: len(prev)] != prev:
            return None
        out.append(tuple(now[len(prev) :]))
        prev = now
    return out


def _parts_of(p: Path) -> list[Path]:
    try:
        parts = recording_parts(p) if p.is_dir() else [p]
    except OSError as err:
        raise FormatError(str(p), None, f"cannot read: {err.strerror or err}") from None
    if not parts:
        raise FormatError(str(p), None, "no recording parts (part-NNNNNN.jsonl) in this folder")
    return parts


def read_requests(path: str | Path) -> list[Request]:
    """Every request of a recording folder (or one part) as recorded, answered or not, in the
    order their answers ended (each line's delta fields as they are in the file)."""
    by_session: dict[str, list[_Read]] = {}
    for part in _parts_of(Path(path)):
        _read_part(part, by_session)
    return sorted((x.request for items in by_session.values() for x in items), key=lambda r: r.end)


def load_recording(path: str | Path) -> Workload:
    """A recording folder (or one part) as a workload: one session per recorded session, its
    turns the answered (status 200) requests in arrival order, each session starting at its
    first arrival (seconds from the recording's first), gaps as recorded. Turns carry the token
    ids where they were recorded, and messages where each request's messages extend the
    session's previous ones. Faults raise :class:`FormatError` naming the file and line."""
    p = Path(path)
    parts = _parts_of(p)
    by_session: dict[str, list[_Read]] = {}
    sizes: dict[int, str] = {}
    requests = 0
    for part in parts:
        bs, n = _read_part(part, by_session)
        if bs is not None:
            sizes.setdefault(bs, part.name)
        requests += n
    if len(sizes) > 1:
        named = ", ".join(f"{bs} (from {name})" for bs, name in sizes.items())
        raise FormatError(
            str(p), None, f"parts recorded at different block sizes: {named}; load them apart"
        )
    answered = {}
    for sid, items in by_session.items():
        ok = sorted((x for x in items if x.request.status == 200), key=lambda x: x.request.arrival)
        if ok:
            answered[sid] = ok
    if not answered:
        raise FormatError(
            str(p), None, f"no answered requests: {requests} recorded, none with status 200"
        )
    t0 = min(items[0].request.arrival for items in answered.values())
    sessions = []
    for sid, items in answered.items():
        appended = _appended(items)
        turns = tuple(
            Turn(
                x.chain,
                x.request.output_tokens or 0,
                x.request.gap if i else 0.0,
                messages=appended[i] if appended is not None else None,
                prompt_ids=x.ids,
                images=x.images,
            )
            for i, x in enumerate(items)
        )
        sessions.append(Session(sid, turns, start=items[0].request.arrival - t0))
    sessions.sort(key=lambda s: (s.start or 0.0, s.id))
    meta = {
        "source": FORMAT,
        "requests": requests,
        "not_answered": requests - sum(len(items) for items in answered.values()),
        "parts": len(parts),
        "started": t0,
    }
    return Workload(tuple(sessions), next(iter(sizes)), p.name, Arrival("trace"), meta)


def _sniff(p: Probe) -> bool:
    if p.container is None and not p.first_line:
        return is_recording(p.path)  # a folder
    return p.container == "line" and p.values.get("format") == FORMAT


TRACE_FORMAT = TraceFormat(
    "recording",
    "a kvharness gateway recording (--record DIR): its folder or one part "
    "(docs/recording-format.md)",
    _sniff,
    lambda path, _: load_recording(path),
)
