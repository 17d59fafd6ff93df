"""Reading untrusted JSON for the workload loaders: streamed, bounded, one error type.

Whatever the bytes, a fault raises :class:`FormatError` with ``FILE:LINE: reason`` (``FILE:
reason`` for the file as a whole) and nothing else escapes:

- :func:`lines` streams a JSON Lines file one line at a time and never holds more than
  :data:`MAX_LINE_BYTES` of it; blank lines are skipped; a leading byte-order mark is named.
- :func:`document` reads a one-document file of at most :data:`MAX_DOCUMENT_BYTES`.
- :func:`decode` decodes bytes into a typed msgspec Struct. Syntax faults name the line and column,
  non-UTF-8 bytes are named as such, a wrong or out-of-bounds value names its field by JSON path
  (msgspec's words: ``Expected `int` >= 0 - at `$.input_length```; in a multi-line document the
  line is that of the field), and nesting deeper than the decoder can follow is said so.

Sane bounds are part of the types (:data:`Tokens`, :data:`Seconds`, ...) that the loaders' Structs
use, so msgspec checks them while decoding. Free-form JSON kept from the input (chat messages,
``meta``) is checked by :func:`check_nesting` against :data:`MAX_NESTING`, so nothing downstream
that encodes it again can run out of stack.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Annotated, TypeVar

import msgspec

from kvharness.errors import FormatError

__all__ = [
    "MAX_BLOCK_SIZE",
    "MAX_DOCUMENT_BYTES",
    "MAX_HASH",
    "MAX_LINE_BYTES",
    "MAX_NESTING",
    "MAX_SECONDS",
    "MAX_TOKENS",
    "BlockHash",
    "BlockSize",
    "Milliseconds",
    "Seconds",
    "Tokens",
    "check_hashes",
    "check_nesting",
    "decode",
    "document",
    "first_line_format",
    "line_of",
    "lines",
]

T = TypeVar("T")

MAX_LINE_BYTES = 64 << 20
"""Bytes one JSON Lines record may hold (a 64 MiB line is far beyond any real trace's)."""
MAX_DOCUMENT_BYTES = 256 << 20
"""Bytes a one-document file (a SWE-agent ``.traj``) may hold."""
MAX_TOKENS = 2**31 - 1
"""Tokens in one prompt or one output: the largest 32-bit signed integer, what engines count in."""
MAX_SECONDS = float(2**32)
"""Any time, gap or delay in seconds (about 136 years: Unix-epoch timestamps fit too)."""
MAX_BLOCK_SIZE = 1 << 16
"""Tokens per block of a workload file's chains."""
MAX_HASH = 2**64 - 1
"""Block hashes are unsigned 64-bit integers (chaining hashes them as 8 bytes)."""
MAX_NESTING = 32
"""Levels of arrays and objects in free-form JSON kept from the input (messages, meta)."""

Tokens = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]
Seconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_SECONDS)]
Milliseconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_SECONDS * 1000)]
BlockSize = Annotated[int, msgspec.Meta(ge=1, le=MAX_BLOCK_SIZE)]
BlockHash = Annotated[int, msgspec.Meta(ge=0)]
"""A block hash; msgspec bounds only fit int64, so Structs call :func:`check_hashes` for the top."""

_BOMS = (
    (b"\xef\xbb\xbf", "starts with a UTF-8 byte-order mark; save without BOM"),
    (b"\xff\xfe", "starts with a UTF-16 byte-order mark; save as UTF-8 without BOM"),
    (b"\xfe\xff", "starts with a UTF-16 byte-order mark; save as UTF-8 without BOM"),
)


def _mib(n: int) -> str:
    return f"{n >> 20} MiB"


def _open(path: str | Path) -> IO[bytes]:
    try:
        return open(path, "rb")
    except OSError as err:
        raise FormatError(str(path), None, f"cannot read: {err.strerror or err}") from None


def _check_start(where: str, data: bytes) -> None:
    for bom, why in _BOMS:
        if data.startswith(bom):
            raise FormatError(where, 1, why)


def lines(path: str | Path, limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` for each non-blank line of ``path``, read one at a time.

    A line over ``limit`` bytes is refused after reading ``limit + 1`` bytes of it, never more.
    """
    where = str(path)
    number = 0
    with _open(path) as f:
        readline = f.readline
        try:
            while raw := readline(limit + 1):
                number += 1
                if number == 1:
                    _check_start(where, raw)
                if len(raw) > limit and not raw.endswith(b"\n"):
                    raise FormatError(
                        where, number, f"line longer than {_mib(limit)}, the most one line may hold"
                    )
                if not raw.isspace():
                    yield number, raw
        except OSError as err:
            raise FormatError(where, number + 1, f"cannot read: {err.strerror or err}") from None


def document(path: str | Path, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The whole of a one-document file, refused when over ``limit`` bytes or starting with a BOM."""
    where = str(path)
    with _open(path) as f:
        try:
            data = f.read(limit + 1)
        except OSError as err:
            raise FormatError(where, None, f"cannot read: {err.strerror or err}") from None
    if len(data) > limit:
        raise FormatError(where, None, f"larger than {_mib(limit)}, the most one file may hold")
    _check_start(where, data)
    return data


_MALFORMED = re.compile(r"^JSON is malformed: (.*) \(byte (\d+)\)$")
_AT_PATH = re.compile(r" - at `\$(.*)`")
_OVER_BOUND = re.compile(r"Expected `\w+` <")
_PATH_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def decode(decoder: msgspec.json.Decoder[T], data: bytes, where: str, line: int = 1) -> T:
    """``data`` (starting at ``line`` of ``where``) decoded by ``decoder``; any fault is a
    :class:`FormatError` at the line it lies on."""
    try:
        if not data.isascii():
            data.decode("utf-8")
        return decoder.decode(data)
    except UnicodeDecodeError as err:
        offset = err.start
        col = _column(data, offset)
        reason = f"not UTF-8 text: byte 0x{data[offset]:02x} at column {col}; save as UTF-8"
    except msgspec.ValidationError as err:
        offset, reason = _field_fault(data, str(err))
    except msgspec.DecodeError as err:
        offset, reason = _syntax_fault(data, str(err))
    except RecursionError:
        offset = 0
        reason = f"JSON nested deeper than the decoder can follow (about {sys.getrecursionlimit()} levels)"
    raise FormatError(where, line + data.count(b"\n", 0, offset), reason) from None


def _column(data: bytes, offset: int) -> int:
    return offset - (data.rfind(b"\n", 0, offset) + 1) + 1


def _syntax_fault(data: bytes, message: str) -> tuple[int, str]:
    if message == "Input data was truncated":
        return len(data.rstrip()), "bad JSON: the text ends inside a value"
    found = _MALFORMED.match(message)
    if found is None:
        return 0, f"bad JSON: {message}"
    offset = min(int(found.group(2)), len(data))
    return offset, f"bad JSON: {found.group(1)} at column {_column(data, offset)}"


def _field_fault(data: bytes, message: str) -> tuple[int, str]:
    if _OVER_BOUND.match(message):
        message += " (over kvharness's bound for it: see docs/workload-format.md)"
    found = _AT_PATH.search(message)
    if found is None or b"\n" not in data.rstrip():
        return 0, message
    steps = [k if k else int(i) for k, i in _PATH_STEP.findall(found.group(1))]
    return _offset_of(data, steps), message


def line_of(data: bytes, path: Sequence[str | int]) -> int:
    """1-based line of the value at JSON ``path`` (object keys and array indices) in ``data``,
    which must be valid JSON up to that value; line 1 when the path cannot be followed."""
    return 1 + data.count(b"\n", 0, _offset_of(data, path))


_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(rb"[^,\]}\s]*")
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def _skip_ws(data: bytes, i: int) -> int:
    m = _WS.match(data, i)
    return m.end() if m else i


def _skip_value(data: bytes, i: int) -> int:
    """Offset just after the JSON value starting at ``i`` (iterative: any nesting depth)."""
    if data[i : i + 1] not in (b"[", b"{", b'"'):
        m = _SCALAR.match(data, i)
        return m.end() if m else i + 1
    depth = 0
    for m in _TOKEN.finditer(data, i):
        c = data[m.start()]
        if c in b"[{":
            depth += 1
        elif c in b"]}":
            depth -= 1
        if depth == 0:
            return m.end()
    return len(data)


def _next_item(data: bytes, i: int) -> int:
    """From the end of a value, the start of the next item of its container."""
    i = _skip_ws(data, i)
    if data[i : i + 1] == b",":
        i = _skip_ws(data, i + 1)
    return i


def _offset_of(data: bytes, path: Sequence[str | int]) -> int:
    i = _skip_ws(data, 0)
    for step in path:
        opener = data[i : i + 1]
        if isinstance(step, int) and opener == b"[":
            i = _skip_ws(data, i + 1)
            for _ in range(step):
                i = _next_item(data, _skip_value(data, i))
        elif isinstance(step, str) and opener == b"{":
            start, i = i, _skip_ws(data, i + 1)
            while (key := _STRING.match(data, i)) is not None:
                i = _skip_ws(data, key.end())
                i = _skip_ws(data, i + 1)
                if key.group()[1:-1] == step.encode():
                    break
                i = _next_item(data, _skip_value(data, i))
            else:
                return start
        else:
            return i
    return i


class _Format(msgspec.Struct):
    format: str = ""


_format_decoder = msgspec.json.Decoder(_Format)


def first_line_format(path: Path, limit: int = 1 << 20) -> str | None:
    """The ``format`` field of the JSON object on ``path``'s first line (how kvharness's own
    files name themselves), or None when the file cannot be read or does not start so."""
    try:
        with path.open("rb") as f:
            first = f.readline(limit)
        return _format_decoder.decode(first).format or None
    except (OSError, msgspec.DecodeError, RecursionError):
        return None  # the loader that reads it says what is wrong


def check_hashes(hashes: Sequence[int]) -> None:
    """Raise ValueError (msgspec reports it with the field's path) for a hash over :data:`MAX_HASH`."""
    if hashes and max(hashes) > MAX_HASH:
        raise ValueError(f"block hash {max(hashes)} is over 2**64 - 1")


def check_nesting(value: object, limit: int = MAX_NESTING) -> bool:
    """True when ``value`` (decoded JSON) nests arrays and objects at most ``limit`` deep."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            continue
        if depth >= limit:
            return False
        stack.extend((c, depth + 1) for c in children)
    return True
