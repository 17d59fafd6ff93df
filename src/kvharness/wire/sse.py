"""Server-sent events as OpenAI-compatible servers send them, framed by hand on the hot path.

:class:`SSEParser` cuts a byte stream into ``data:`` payloads without decoding anything but the
framing. One ``data:`` line is one payload: OpenAI-compatible servers never split a JSON chunk
over several ``data:`` lines; other fields (``event:``, ``id:``, comments) are skipped.
"""

from __future__ import annotations

__all__ = ["DONE", "SSEParser"]

DONE = b"[DONE]"
"""The payload that ends an OpenAI stream."""


class SSEParser:
    """Feed raw bytes, get back complete ``data:`` payloads (bytes, stripped). Keeps only the
    unterminated last line between calls."""

    __slots__ = ("_rest",)

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._rest + data if self._rest else data
        out: list[bytes] = []
        start = 0
        find = buf.find
        while (nl := find(b"\n", start)) >= 0:
            if buf.startswith(b"data:", start):
                out.append(buf[start + 5 : nl].strip())
            start = nl + 1
        self._rest = buf[start:]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line held back."""
        return len(self._rest)
