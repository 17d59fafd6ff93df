"""OpenAI-compatible bodies: streamed chunks, usage with cached tokens, error objects.

Decoded with msgspec into the few fields kvharness reads (unknown fields skipped), so a chunk
costs one C call. ``usage.prompt_tokens_details.cached_tokens`` is what vLLM reports with
``--enable-prompt-tokens-details`` (and the OpenAI API does): the prompt tokens served from the
prefix cache.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "Chunk",
    "Delta",
    "ToolCallDelta",
    "Usage",
    "decode_chunk",
    "error_body",
    "usage_of_body",
    "usage_of_stream",
]


class _Details(msgspec.Struct):
    cached_tokens: int | None = None


class Usage(msgspec.Struct):
    """Token counts of one completion."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _Details | None = None

    @property
    def cached_tokens(self) -> int | None:
        """Prompt tokens the server served from its prefix cache (None: not reported)."""
        d = self.prompt_tokens_details
        return None if d is None else d.cached_tokens


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct):
    """A piece of a streamed tool call; pieces with the same ``index`` concatenate."""

    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class _Choice(msgspec.Struct):
    text: str | None = None
    delta: Delta | None = None
    finish_reason: str | None = None


class Chunk(msgspec.Struct):
    """One streamed chunk of a text or chat completion."""

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


_chunk = msgspec.json.Decoder(Chunk)


class _Answer(msgspec.Struct):
    usage: Usage | None = None


_answer = msgspec.json.Decoder(_Answer)
_json = msgspec.json.Encoder()


def decode_chunk(payload: bytes) -> Chunk:
    """Decode one ``data:`` payload; raises ``msgspec.DecodeError`` (a ValueError) when it is
    not a chunk."""
    return _chunk.decode(payload)


def usage_of_body(body: bytes) -> Usage | None:
    """The usage of a whole (non-streamed) answer; None when it has none or is not one."""
    if b'"usage"' not in body:
        return None
    try:
        return _answer.decode(body).usage
    except msgspec.DecodeError:
        return None


def usage_of_stream(stream: bytes) -> Usage | None:
    """The last usage in a stream's ``data:`` lines (a tail of it will do, as long as it holds
    the usage chunk whole); None when there is none. Decodes only the lines that mention it."""
    at = stream.rfind(b'"usage"')
    while at >= 0:
        start = stream.rfind(b"data:", 0, at)
        if start < 0:
            return None
        end = stream.find(b"\n", at)
        try:
            usage = decode_chunk(stream[start + 5 : end if end >= 0 else None].strip()).usage
        except msgspec.DecodeError:
            usage = None
        if usage is not None:
            return usage
        at = stream.rfind(b'"usage"', 0, start)
    return None


def error_body(message: str, kind: str, status: int, param: str | None = None) -> bytes:
    """An OpenAI-style error object."""
    err: dict[str, Any] = {"message": message, "type": kind, "param": param, "code": status}
    return _json.encode({"error": err})
