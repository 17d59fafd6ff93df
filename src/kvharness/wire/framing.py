"""HTTP/1.1 message framing, shared by the client and by the servers that tests run.

:func:`parse_head` splits a head into its first line and headers; :class:`BodyFraming` decodes a
body as bytes arrive (chunked, ``Content-Length`` or until close) without copying what it passes
on; :func:`encode_headers` writes header lines that cannot break a head.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

__all__ = [
    "CRLF",
    "DATA",
    "DONE",
    "LENGTH",
    "MAX_HEAD",
    "SIZE",
    "TRAILER",
    "UNTIL_CLOSE",
    "BodyFraming",
    "Head",
    "Headers",
    "encode_headers",
    "parse_head",
]

MAX_HEAD = 64 * 1024
"""Bytes a message head may take."""


class Headers(Mapping[str, str]):
    """A message's header lines, looked up by name (any case; a repeated header gives its last
    value, stripped). They are decoded on the first lookup, not before, so a reader that looks
    up none (the bench's) pays for none; :meth:`raw` finds one in the head's bytes."""

    __slots__ = ("_all", "_lines", "_low", "_raw")

    def __init__(self, lines: bytes) -> None:
        self._lines = lines
        self._raw = self._low = b""
        self._all: dict[str, str] | None = None

    def raw(self, name: bytes) -> bytes | None:
        """The value of header ``name`` (lower-case bytes) as bytes, or None."""
        if not self._raw:
            self._raw = b"\r\n" + self._lines + b"\r\n"
            self._low = self._raw.lower()
        low = self._low
        at = low.rfind(b"\r\n" + name + b":")
        if at < 0:
            return None
        start = at + len(name) + 3
        return self._raw[start : low.find(b"\r\n", start)].strip()

    def __getitem__(self, name: str) -> str:
        return self._mapping()[name.lower()]

    def _mapping(self) -> dict[str, str]:
        if self._all is None:
            self._all = {}
            for line in self._lines.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name:
                    self._all[name.strip().lower()] = value.strip()
        return self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())


class Head(NamedTuple):
    """A message head: its first line's parts, its headers, and what frames its body."""

    first: list[bytes]
    """The first line's three parts (method, target, version; or version, status, reason)."""
    headers: Headers
    chunked: bool
    """``Transfer-Encoding`` says chunked."""
    length: int | None
    """``Content-Length`` (None when absent)."""
    close: bool
    """``Connection: close``."""


def parse_head(raw: bytes) -> Head:
    """A message head (without its blank line). ValueError when a header line has no colon or
    the length is not a number; one pass over the lines, decoding none of them."""
    first, _, lines = raw.partition(b"\r\n")
    chunked = close = False
    length = None
    if lines:
        for line in lines.split(b"\r\n"):
            name, sep, value = line.partition(b":")
            if not sep:
                raise ValueError(f"bad header line {line[:80]!r}")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"content-length":
                length = int(value)
            elif name == b"connection":
                close = b"close" in value.lower()
    return Head(first.split(b" ", 2), Headers(lines), chunked, length, close)


def encode_headers(pairs: Iterable[tuple[str, str]]) -> bytes:
    """Header lines for a request head; a pair whose name or value holds CR or LF (which would
    break the head) is left out."""
    out = []
    for name, value in pairs:
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            continue
        out.append(f"{name}: {value}\r\n".encode("utf-8", "surrogateescape"))
    return b"".join(out)


# Body framing states; the two that copy payload come first, so one comparison finds them.
DATA, LENGTH, SIZE, CRLF, TRAILER, UNTIL_CLOSE, DONE = range(7)


class BodyFraming:
    """Decodes a message body as bytes arrive: chunked, ``Content-Length`` or until close.

    :meth:`feed` consumes what it can of ``data[pos:]`` and returns the new position, putting
    each piece of payload in ``out``; :attr:`state` is :data:`DONE` once the body is complete.
    Raises ValueError on malformed chunk framing.
    """

    __slots__ = ("need", "state")

    def __init__(self, state: int = DONE, need: int = 0) -> None:
        self.state = state
        self.need = need

    def start(self, head: Head, *, until_close: bool) -> None:
        """Frame the body ``head`` announces; without length or chunking, the body runs until
        the connection closes (``until_close``: responses) or is empty (requests)."""
        self.need = 0
        if head.chunked:
            self.state = SIZE
        elif head.length is not None:
            if head.length < 0:
                raise ValueError("negative content-length")
            self.state, self.need = (LENGTH, head.length) if head.length else (DONE, 0)
        else:
            self.state = UNTIL_CLOSE if until_close else DONE

    def feed(self, data: bytes, pos: int, out: list[bytes]) -> int:
        end_of_data = len(data)
        state = self.state
        while pos < end_of_data and state != DONE:
            if state <= LENGTH:  # DATA or LENGTH
                take = min(self.need, end_of_data - pos)
                out.append(data[pos : pos + take])
                pos += take
                self.need -= take
                if not self.need:
                    state = CRLF if state == DATA else DONE
            elif state == SIZE:
                end = data.find(b"\r\n", pos)
                if end < 0:
                    if end_of_data - pos > 1024:
                        raise ValueError("chunk size line too long")
                    break
                size = int(data[pos:end].split(b";", 1)[0], 16)
                if size < 0:
                    raise ValueError("negative chunk size")
                pos = end + 2
                if size:
                    state, self.need = DATA, size
                else:
                    state = TRAILER
            elif state == CRLF:
                if end_of_data - pos < 2:
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
                pos += 2
                state = SIZE
            elif state == TRAILER:
                if data.startswith(b"\r\n", pos):
                    pos += 2
                else:
                    end = data.find(b"\r\n\r\n", pos)
                    if end < 0:
                        break
                    pos = end + 4
                state = DONE
            else:  # UNTIL_CLOSE
                out.append(data[pos:] if pos else data)
                pos = end_of_data
        self.state = state
        return pos
