"""Server-sent events from an OpenAI-compatible stream, parsed by hand on the hot path.

:class:`SSEParser` frames a byte stream into ``data:`` payloads without decoding anything but the
framing; :func:`decode_chunk` turns one payload into the few fields the bench needs (msgspec,
unknown fields skipped). One ``data:`` line is one payload: OpenAI-compatible servers never split a
JSON chunk over several ``data:`` lines.
"""

from __future__ import annotations

import msgspec

__all__ = ["DONE", "Chunk", "SSEParser", "Usage", "decode_chunk"]

DONE = b"[DONE]"


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


class _Details(msgspec.Struct):
    cached_tokens: int | None = None


class Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _Details | None = None

    @property
    def cached_tokens(self) -> int | None:
        d = self.prompt_tokens_details
        return None if d is None else d.cached_tokens


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[object] | None = None


class _Choice(msgspec.Struct):
    text: str | None = None
    delta: _Delta | None = None
    finish_reason: str | None = None


class Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: Usage | None = None

    @property
    def has_token(self) -> bool:
        """True when the chunk carries generated output (a role-only chat chunk does not)."""
        for c in self.choices:
            if c.text:
                return True
            d = c.delta
            if d is not None and (d.content or d.reasoning_content or d.reasoning or d.tool_calls):
                return True
        return False


_decoder = msgspec.json.Decoder(Chunk)


def decode_chunk(payload: bytes) -> Chunk:
    """Decode one payload; raises ``msgspec.DecodeError`` on malformed JSON."""
    return _decoder.decode(payload)
