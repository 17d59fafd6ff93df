"""Context management: what the harness does when the conversation nears the model's window.

An episode's conversation is the system prompt, the task, then *turns*: an assistant message and
the tool results (and nudges) after it. Long episodes outgrow the window, and the harness then
compacts the conversation in one of three ways (``compaction``), the same three the long-horizon
workload generator models (:mod:`kvharness.workload.long_horizon`):

- ``summarize``: one extra model call (its record's ``purpose`` is ``summarize``) is sent the whole
  conversation plus :data:`SUMMARY_REQUEST` and writes a summary of at most ``summary_tokens``; the
  conversation restarts from the system prompt and the task, a user message holding the summary,
  and the last ``keep_turns`` turns;
- ``drop-outputs``: every tool output older than the last ``keep_turns`` turns is replaced by
  :data:`PLACEHOLDER`, the replies stay; when that still leaves the prompt over the mark, the
  conversation is summarized as above;
- ``keep-last``: only the last ``keep_turns`` turns stay after the task.

**When.** Before a model call whose prompt is estimated to pass ``compact_at * window`` tokens.
The estimate (:func:`estimate_tokens`) is the previous call's prompt and completion tokens as the
server reported them, plus one token per :data:`CHARS_PER_TOKEN` characters of the messages
appended since; it needs no tokenizer, and it is exact up to the new messages' text.

**Its cost** is what the KV cache sees: the next prompt shares only the messages before the first
one compaction changed (the system prompt and the task after ``summarize`` and ``keep-last``, the
messages up to the first dropped output after ``drop-outputs``), so that call prefills the rest
again. Each compaction is kept in the episode's record (:class:`~.episode.Compaction`) and the
call after it carries ``keep``, so the recorded workload has the broken prefix where it happened.

The functions here are pure: lists of messages in, lists of messages out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHARS_PER_TOKEN",
    "COMPACTIONS",
    "PLACEHOLDER",
    "SUMMARY_REQUEST",
    "ContextConfig",
    "drop_outputs",
    "estimate_tokens",
    "first_difference",
    "keep_last",
    "turn_starts",
    "with_summary",
]

COMPACTIONS = ("summarize", "drop-outputs", "keep-last")

CHARS_PER_TOKEN = 4
"""Characters a token, for the estimate of messages the server has not counted yet: the usual
figure for English and code under the BPE tokenizers of open models (an estimate: it only decides
when to compact, never what is sent)."""

PLACEHOLDER = "[output dropped to save context]"
"""What a dropped tool output is replaced by."""

SUMMARY_REQUEST = (
    "The conversation is near the context window and will be cut. Summarize the work so far "
    "for yourself: the task, what you found, what you changed (files and functions), what you "
    "tried that failed, and what is left to do. Be brief. Do not call a tool."
)
"""The user message that asks the model for a compaction's summary."""

SUMMARY_INTRO = "Summary of the work so far (earlier turns were removed to fit the context):\n"

_HEAD = 2
"""Messages every compaction keeps: the system prompt and the task."""

Message = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ContextConfig:
    """When and how an episode's context is compacted (see the module docstring). ``window``:
    the model's context window (tokens); ``compact_at``: the share of it a prompt may reach;
    ``keep_turns``: turns kept verbatim (at least 1: the latest tool results must reach the
    model); ``summary_tokens``: the summary's completion budget."""

    window: int
    compaction: str = "summarize"
    compact_at: float = 0.8
    keep_turns: int = 4
    summary_tokens: int = 512

    def __post_init__(self) -> None:
        if self.compaction not in COMPACTIONS:
            raise ValueError(
                f"unknown compaction {self.compaction!r} (choose from {', '.join(COMPACTIONS)})"
            )
        if self.window < 1 or not 0 < self.compact_at <= 1:
            raise ValueError("window must be >= 1 and compact_at in (0, 1]")
        if self.keep_turns < 1 or self.summary_tokens < 1:
            raise ValueError("keep_turns and summary_tokens must be >= 1")

    @property
    def limit(self) -> int:
        """The estimated prompt tokens a call may reach before the context is compacted."""
        return int(self.compact_at * self.window)


def _text(message: Message) -> int:
    """Characters of a message's content and tool calls (what its tokens are made of)."""
    content = message.get("content")
    n = len(content) if isinstance(content, str) else 0
    if isinstance(content, list):
        n += sum(len(str(part.get("text", ""))) for part in content if isinstance(part, Mapping))
    for call in message.get("tool_calls") or ():
        fn = (call.get("function") or {}) if isinstance(call, Mapping) else {}
        n += len(str(fn.get("name", ""))) + len(str(fn.get("arguments", "")))
    return n


def estimate_tokens(messages: Sequence[Message], counted: int = 0, counted_tokens: int = 0) -> int:
    """The prompt tokens of ``messages``: ``counted_tokens`` for its first ``counted`` messages
    (what the server reported for them), plus one per :data:`CHARS_PER_TOKEN` characters of each
    later message and a few for its framing."""
    rest = sum(_text(m) // CHARS_PER_TOKEN + 4 for m in messages[counted:])
    return counted_tokens + rest


def turn_starts(messages: Sequence[Message]) -> list[int]:
    """Indices of the assistant messages after the task: each one starts a turn."""
    return [i for i in range(_HEAD, len(messages)) if messages[i].get("role") == "assistant"]


def _cut(messages: Sequence[Message], turns: int) -> int:
    """Where the last ``turns`` turns begin (the first turn when there are fewer; the end when
    there is none)."""
    starts = turn_starts(messages)
    return starts[max(0, len(starts) - turns)] if starts else len(messages)


def keep_last(messages: Sequence[Message], turns: int) -> list[Message]:
    """The system prompt, the task and the last ``turns`` turns."""
    if not turn_starts(messages):
        return list(messages)
    return [*messages[:_HEAD], *messages[_cut(messages, turns) :]]


def drop_outputs(messages: Sequence[Message], turns: int) -> list[Message]:
    """``messages`` with every tool output before the last ``turns`` turns replaced by
    :data:`PLACEHOLDER` (a new list; the messages themselves are not changed)."""
    cut = _cut(messages, turns)
    out: list[Message] = []
    for i, m in enumerate(messages):
        if i < cut and m.get("role") == "tool" and m.get("content") != PLACEHOLDER:
            m = {**m, "content": PLACEHOLDER}
        out.append(m)
    return out


def with_summary(messages: Sequence[Message], summary: str, turns: int) -> list[Message]:
    """The system prompt, the task, a user message holding ``summary``, and the last ``turns``
    turns (an earlier summary is part of what the new one summarizes, so it goes)."""
    cut = _cut(messages, turns)
    note = {"role": "user", "content": SUMMARY_INTRO + summary.strip()}
    return [*messages[:_HEAD], note, *messages[cut:]]


def first_difference(a: Sequence[Message], b: Sequence[Message]) -> int:
    """How many messages ``a`` and ``b`` share from the start."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
