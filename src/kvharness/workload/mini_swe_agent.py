"""mini-swe-agent trajectories (``*.traj.json``), one session a file.

A trajectory is ``{"info": ..., "messages": [...], "trajectory_format": "mini-swe-agent-1.1"}``
(or, in old test fixtures, the bare list of messages). mini-swe-agent sends its whole linear
history each call, so every assistant message is one model call whose prompt is every message
before it (without ``extra``, kvharness's ``exit`` marker left out): sharing is known from
content. Its output is ``extra.response.usage.completion_tokens`` (``output_tokens``) where
recorded. Times, where the format has them (``mini-swe-agent-1.1``): an assistant message's
``extra.timestamp`` is when its answer came back, an observation's when its commands finished,
so the tool time before a call is its observation's time minus the previous answer's; the
``extra.kvharness_call`` times kvharness's harness adds give the call's start and end exactly.
``mini-swe-agent-1`` files carry no times: their gaps are 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from kvharness.errors import FormatError
from kvharness.workload import reader
from kvharness.workload.conversation import Call, MessageTokens, as_message_tokens, session_turns
from kvharness.workload.model import Arrival, Message, Session, Workload
from kvharness.workload.reader import Seconds, Tokens
from kvharness.workload.traceformat import Probe, TraceFormat

__all__ = ["TRACE_FORMAT", "load_mini_swe_agent"]

_BLOCK_SIZE = 128


class _Usage(msgspec.Struct):
    completion_tokens: Tokens | None = None
    output_tokens: Tokens | None = None


class _Response(msgspec.Struct):
    usage: _Usage | None = None


class _Timing(msgspec.Struct):
    sent: Seconds | None = None
    done: Seconds | None = None


class _Extra(msgspec.Struct):
    response: _Response | None = None
    timestamp: Seconds | None = None
    kvharness_call: _Timing | None = None


class _Message(msgspec.Struct):
    role: str
    content: Any = None
    extra: _Extra | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class _Trajectory(msgspec.Struct):
    messages: list[_Message]
    trajectory_format: str = ""


_decoder = msgspec.json.Decoder(_Trajectory | list[_Message])
_raw = msgspec.json.Decoder()


def _sent(raw: dict[str, Any]) -> Message:
    return {k: v for k, v in raw.items() if k != "extra"}


def load_mini_swe_agent(
    path: str | Path, tokenizer: str | Path | MessageTokens | None = None
) -> Workload:
    """One ``.traj.json`` file as a one-session workload; faults name the file and line."""
    where = str(path)
    path = Path(path)
    data = reader.document(path)
    if not data.strip():
        raise FormatError(where, None, "no requests: the file is empty")
    doc = reader.decode(_decoder, data, where)
    typed = doc if isinstance(doc, list) else doc.messages
    raws = _raw.decode(data)
    raw_messages = raws if isinstance(raws, list) else raws["messages"]
    if not reader.check_nesting(raw_messages):
        raise FormatError(where, None, f"messages nested deeper than {reader.MAX_NESTING} levels")
    sent = [_sent(r) for r in raw_messages]
    calls: list[Call] = []
    prev_done: float | None = None
    for i, m in enumerate(typed):
        if m.role != "assistant":
            continue
        extra = m.extra or _Extra()
        usage = extra.response.usage if extra.response and extra.response.usage else _Usage()
        output = (
            usage.completion_tokens if usage.completion_tokens is not None else usage.output_tokens
        )
        timing = extra.kvharness_call or _Timing()
        done = timing.done if timing.done is not None else extra.timestamp
        observed = next(
            (o.extra.timestamp for o in reversed(typed[:i]) if o.extra and o.role != "assistant"),
            None,
        )
        tool = None if observed is None or prev_done is None else max(0.0, observed - prev_done)
        prompt = [s for s, t in zip(sent[:i], typed[:i], strict=True) if t.role != "exit"]
        calls.append(Call(prompt, None, output, sent[i], timing.sent, done, tool_seconds=tool))
        prev_done = done
    if not calls:
        raise FormatError(where, reader.line_of(data, ["messages"]), "no assistant message")
    tokens = as_message_tokens(tokenizer)
    name = path.name.removesuffix(".json").removesuffix(".traj")
    session = Session(name, session_turns(calls, tokens, _BLOCK_SIZE))
    meta = {"source": "mini-swe-agent", "path": where, "tokenizer": tokens.tokenizer.name}
    return Workload((session,), _BLOCK_SIZE, name, Arrival("trace"), meta)


def _sniff(p: Probe) -> bool:
    if p.container in ("line", "document"):
        return "messages" in p.keys and str(p.values.get("trajectory_format", "")).startswith(
            "mini-swe-agent"
        )
    return p.container == "array" and p.path.name.endswith(".traj.json") and "role" in p.keys


TRACE_FORMAT = TraceFormat(
    "mini-swe-agent",
    "mini-swe-agent trajectories (.traj.json): a file or a folder of them, one session each",
    _sniff,
    lambda path, options: load_mini_swe_agent(path, options.message_tokens()),
    sharing="content",
    per_session=True,
    suffixes=(".json",),
)
