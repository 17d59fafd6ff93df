"""Model calls as a trace records them, made into a session's turns.

The trace loaders that carry conversations (SWE-agent, mini-swe-agent, OpenHands, ATIF, OTel
spans, OpenAI request logs) each read their own file into :class:`Call` records and hand them to
:func:`session_turns`, so every one of them makes chains, lengths and gaps by the same rules:

- **Prompt.** With the call's messages known, its chain is their tokens, message by message
  (:func:`~kvharness.workload.tokenize.message_tokens`), so calls that repeat a conversation's
  prefix share its blocks. With ``hashes`` given (a file kvharness wrote), those are the chain.
  With neither, the chain is ``prompt_tokens`` tokens no other call shares: the trace records no
  content, and sharing is not invented.
- **Output.** ``output_tokens`` where recorded, else the reply's tokens (at least 1).
- **Gap.** Seconds from the previous call's end to this call's start where both are recorded;
  else the recorded tool time; else the interval between the two starts (the trace records no
  service time); else 0.
- **Messages.** A turn keeps the messages appended since the previous call when every call of
  the session extends the previous one's prompt; a session whose history is rewritten (a
  compaction) keeps its chains and drops its messages, since a replay could not rebuild it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from kvharness.workload import reader
from kvharness.workload.chain import BlockChain, ChainBuilder
from kvharness.workload.model import Message, Turn
from kvharness.workload.tokenize import Tokenizer, content_text, load_tokenizer, message_tokens

__all__ = [
    "Call",
    "MessageTokens",
    "as_message_tokens",
    "name_seed",
    "seconds",
    "session_turns",
    "unique_chain",
]


@dataclass(frozen=True, slots=True)
class Call:
    """One model call as a trace tells it; every field but one of ``messages``, ``hashes`` and
    ``prompt_tokens`` may be unknown (None)."""

    messages: Sequence[Message] | None = None
    """The whole prompt."""
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    reply: Message | None = None
    start: float | None = None
    """Seconds (any epoch the trace uses, the same for every call)."""
    end: float | None = None
    tool: str | None = None
    """The tool that ran before this call."""
    tool_seconds: float | None = None
    """Recorded tool time before this call."""
    hashes: tuple[int, ...] | None = None


_encoder = msgspec.json.Encoder(order="sorted")
_FRACTION = re.compile(r"(\.\d{1,6})\d*")


def as_message_tokens(tokenizer: str | Path | Tokenizer | MessageTokens | None) -> MessageTokens:
    """``tokenizer`` (a path, a tokenizer, or None for the built-in approximation) as
    :class:`MessageTokens`; one given already is returned as it is, its cache shared."""
    if isinstance(tokenizer, MessageTokens):
        return tokenizer
    if tokenizer is None or isinstance(tokenizer, str | Path):
        return MessageTokens(load_tokenizer(tokenizer))
    return MessageTokens(tokenizer)


class MessageTokens:
    """Tokens of chat messages, each distinct message tokenised once (traces repeat the whole
    conversation in every call)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[bytes, list[int]] = {}

    def of(self, message: Message) -> list[int]:
        key = _encoder.encode(message)
        tokens = self._cache.get(key)
        if tokens is None:
            tokens = message_tokens(self.tokenizer, message)
            self._cache[key] = tokens
        return tokens

    def text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def chain(self, messages: Sequence[Message], block_size: int) -> BlockChain:
        builder = ChainBuilder(block_size)
        for m in messages:
            builder.extend_tokens(self.of(m))
        return builder.chain()


def unique_chain(block_size: int, tokens: int, seed: int) -> BlockChain:
    """A chain of ``tokens`` tokens that no chain built from another ``seed`` (or from token ids)
    shares."""
    builder = ChainBuilder(block_size)
    builder.extend_segment(seed, tokens)
    return builder.chain()


def _extends(prompt: Sequence[Message], prev: Sequence[Message]) -> bool:
    return len(prompt) >= len(prev) and all(
        a is b or a == b for a, b in zip(prompt, prev, strict=False)
    )


def name_seed(name: str) -> int:
    """A seed for :func:`session_turns` that is the same for the same session name only: what
    per-session files (loaded one by one) give, so their content-free prompts never coincide."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def session_turns(
    calls: Sequence[Call], tokens: MessageTokens, block_size: int, seed: int = 0
) -> tuple[Turn, ...]:
    """The turns of one session's ``calls`` (in order) by the rules of the module docstring.

    ``seed`` names the session's content-free prompts (distinct sessions of one workload need
    distinct seeds: :func:`name_seed` where sessions are read apart).
    O(tokens appended over the session), each distinct message tokenised once.
    """
    turns: list[Turn] = []
    appended: list[tuple[Message, ...]] = []
    builder = ChainBuilder(block_size)
    prev: Call | None = None
    prev_messages: Sequence[Message] = ()
    rewritten = False
    for k, call in enumerate(calls):
        if call.hashes is not None:
            chain = BlockChain(block_size, call.hashes, call.prompt_tokens or 0)
        elif call.messages is not None:
            prompt = call.messages
            if not _extends(prompt, prev_messages):
                builder, prev_messages, rewritten = ChainBuilder(block_size), (), True
            for m in prompt[len(prev_messages) :]:
                builder.extend_tokens(tokens.of(m))
            appended.append(tuple(prompt[len(prev_messages) :]))
            prev_messages = prompt
            chain = builder.chain()
        else:
            chain = unique_chain(block_size, call.prompt_tokens or 0, seed * 1_000_003 + k)
        output = call.output_tokens
        if output is None:
            reply = content_text(call.reply) if call.reply is not None else ""
            output = max(1, len(tokens.text(reply)))
        turns.append(Turn(chain, output, _gap(call, prev), call.tool))
        prev = call
    if not rewritten and len(appended) == len(turns):
        turns = [
            Turn(t.input, t.output_tokens, t.gap, t.tool, messages)
            for t, messages in zip(turns, appended, strict=True)
        ]
    return tuple(turns)


def _gap(call: Call, prev: Call | None) -> float:
    if prev is None:
        return 0.0
    if call.start is not None and prev.end is not None:
        return max(0.0, call.start - prev.end)
    if call.tool_seconds is not None:
        return call.tool_seconds
    if call.start is not None and prev.start is not None:
        return max(0.0, call.start - prev.start)
    return 0.0


def seconds(value: object) -> float:
    """A trace's time as Unix seconds: a number (seconds), or an ISO-8601 string (naive: UTC;
    a trailing ``Z`` and up to 9 fractional digits taken). Raises ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, int | float):
        if not 0 <= value <= reader.MAX_SECONDS:
            raise ValueError(f"time {value} out of range")
        return float(value)
    if isinstance(value, str):
        text = _FRACTION.sub(r"\1", value.strip().replace("Z", "+00:00"), count=1)
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"not an ISO-8601 time: {value!r}") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    raise ValueError(f"not a time: {value!r}")
