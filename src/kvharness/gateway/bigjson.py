"""Decoding a large JSON body without one long call that holds the interpreter's lock.

Decoding a 60 MiB JSON string is one C call of ~0.1 s during which no other thread (the event
loop's included) runs Python. :func:`decode` splits the work: objects and arrays larger than
``slice_bytes`` are decoded one level at a time into raw values (a scan, no copying), and strings
larger than it are decoded a slice at a time into a :class:`LongText` (its pieces, never joined
here). Each call then handles at most about ``slice_bytes`` of text, or scans one level.

``materialise(decode(b))`` equals ``msgspec.json.decode(b)`` for every body; a body that is not
valid JSON raises the same :class:`msgspec.DecodeError` (decoded again whole, for its message).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = ["SLICE_BYTES", "LongText", "decode", "materialise"]

SLICE_BYTES = 1024 * 1024
"""Values up to this many bytes of JSON are decoded in one call."""
_MAX_DEPTH = 16
"""Levels decoded lazily; deeper values are decoded whole (bounds the rescans a nested body costs)."""
_ESCAPE_SPAN = 6
"""The longest JSON escape (``\\uXXXX``), in bytes."""

_any = msgspec.json.Decoder()
_object = msgspec.json.Decoder(dict[str, msgspec.Raw])
_array = msgspec.json.Decoder(list[msgspec.Raw])
_string = msgspec.json.Decoder(str)
_SPACE = frozenset(b" \t\r\n")


@dataclass(frozen=True, slots=True)
class LongText:
    """A long JSON string, as the pieces it was decoded in (their concatenation is the text)."""

    pieces: tuple[str, ...]

    def __str__(self) -> str:
        return "".join(self.pieces)


def decode(body: bytes | bytearray, slice_bytes: int = SLICE_BYTES) -> Any:
    """``body`` decoded, with strings over ``slice_bytes`` as :class:`LongText`. Raises
    :class:`msgspec.DecodeError` or RecursionError as ``msgspec.json.decode(body)`` would."""
    try:
        return _lazy(memoryview(body), slice_bytes, 0)
    except msgspec.DecodeError:
        return _any.decode(body)  # raises, with the message for the whole body


def _lazy(raw: memoryview, slice_bytes: int, depth: int) -> Any:
    span = _span(raw) if len(raw) > slice_bytes and depth < _MAX_DEPTH else None
    if span is None:
        return _any.decode(raw)
    start, end = span
    first = raw[start]
    if first == ord("{"):
        items = _object.decode(raw)
        return {k: _lazy(memoryview(v), slice_bytes, depth + 1) for k, v in items.items()}
    if first == ord("["):
        return [_lazy(memoryview(v), slice_bytes, depth + 1) for v in _array.decode(raw)]
    if first == ord('"') and raw[end - 1] == ord('"') and end - start >= 2:
        return LongText(tuple(_pieces(raw[start + 1 : end - 1], slice_bytes)))
    return _any.decode(raw)


def _span(raw: memoryview) -> tuple[int, int] | None:
    """Where the value in ``raw`` starts and ends, past surrounding whitespace (None when there
    is much of it: the value is then decoded whole)."""
    start, end = 0, len(raw)
    while start < end and start <= 64 and raw[start] in _SPACE:
        start += 1
    while end > start and len(raw) - end <= 64 and raw[end - 1] in _SPACE:
        end -= 1
    if start > 64 or len(raw) - end > 64 or start == end:
        return None
    return start, end


def _pieces(inner: memoryview, slice_bytes: int) -> Iterator[str]:
    """The text of a JSON string's inside (between its quotes), decoded about ``slice_bytes``
    at a time, cut only where no escape sequence or UTF-8 character is split."""
    start = 0
    while len(inner) - start > slice_bytes:
        cut = start + slice_bytes
        while cut > start and not _safe_cut(inner, start, cut):
            cut -= 1
        if cut == start or cut - start < slice_bytes // 2:
            break  # no safe cut near: the rest in one piece
        yield _string.decode(b'"' + inner[start:cut] + b'"')
        start = cut
    yield _string.decode(b'"' + inner[start:] + b'"')


def _safe_cut(inner: memoryview, start: int, cut: int) -> bool:
    if 0x80 <= inner[cut] < 0xC0:
        return False  # inside a UTF-8 character
    return ord("\\") not in inner[max(start, cut - _ESCAPE_SPAN) : cut]


def materialise(value: Any) -> Any:
    """``value`` with every :class:`LongText` in it, at any depth, joined into a str."""
    if isinstance(value, LongText):
        return str(value)
    if isinstance(value, dict):
        return {k: materialise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [materialise(v) for v in value]
    return value
