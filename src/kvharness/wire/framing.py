"""HTTP/1.1 message framing, shared by the client and by the servers that tests run.

:func:`parse_head` splits a head into its first line and headers; :class:`BodyFraming` decodes a
body as bytes arrive (chunked, ``Content-Length`` or until close) without copying what it passes
on; :func:`encode_headers` writes header lines that cannot break a head.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    "encode_headers",
    "parse_head",
]

MAX_HEAD = 64 * 1024
"""Bytes a message head may take."""


def parse_head(raw: bytes) -> tuple[list[str], dict[str, str]]:
    """A message head (without its blank line) as the first line's three parts and the
    headers, names lower-cased (a repeated header keeps its last value). ValueError when a
    header line has no colon."""
    text = raw.decode("latin-1")
    first, *lines = text.split("\r\n")
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"bad header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return first.split(" ", 2), headers


def encode_headers(pairs: Iterable[tuple[str, str]]) -> bytes:
    """Header lines for a request head; a pair whose name or value holds CR or LF (which would
    break the head) is left out."""
    out = []
    for name, value in pairs:
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            continue
        out.append(f"{name}: {value}\r\n".encode("utf-8", "surrogateescape"))
    return b"".join(out)


# Body framing states.
SIZE, DATA, CRLF, TRAILER, LENGTH, UNTIL_CLOSE, DONE = range(7)


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

    @classmethod
    def of(cls, headers: dict[str, str], *, until_close: bool) -> BodyFraming:
        """The framing a head announces; without length or chunking, the body runs until the
        connection closes (``until_close``: responses) or is empty (requests)."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return cls(SIZE)
        length = headers.get("content-length")
        if length is not None:
            need = int(length)
            if need < 0:
                raise ValueError("negative content-length")
            return cls(LENGTH, need) if need else cls()
        return cls(UNTIL_CLOSE) if until_close else cls()

    def feed(self, data: bytes, pos: int, out: list[bytes]) -> int:
        end_of_data = len(data)
        state = self.state
        while pos < end_of_data and state != DONE:
            if state in (DATA, LENGTH):
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
