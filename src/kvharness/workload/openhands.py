"""OpenHands trajectories: a JSON list of events, one session a file.

Events are actions (``action``) and observations (``observation``, with ``cause``: the id of
the action they answer), each with a ``source`` and a naive ISO ``timestamp``. The conversation
the agent sent is rebuilt from them: the ``system`` action's ``args.content``, the user's
``message`` actions, each model response (``tool_call_metadata.model_response.choices[0]
.message``, once per response id: one response may carry several tool calls) and each tool
observation (as a ``tool`` message). Every distinct response, and every agent ``message`` action
without one (a final answer), is one model call whose prompt is the conversation before it:
sharing is known from content, approximately (OpenHands saves no prompt verbatim, and its
condenser may have rewritten history). The output is the response's
``usage.completion_tokens`` where recorded. An action is stamped just after its response came
back, an observation when its tool finished, so the tool time before a call is the longest
observation-minus-action time of the previous call's tools (only differences of the naive local
times are used).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from kvharness.errors import FormatError
from kvharness.workload import reader
from kvharness.workload.conversation import (
    Call,
    MessageTokens,
    as_message_tokens,
    seconds,
    session_turns,
)
from kvharness.workload.model import Arrival, Message, Session, Workload
from kvharness.workload.traceformat import Probe, TraceFormat

__all__ = ["TRACE_FORMAT", "load_openhands"]

_BLOCK_SIZE = 128


class _Event(msgspec.Struct):
    id: int = -1
    timestamp: str | None = None
    source: str = ""
    message: str = ""
    action: str | None = None
    observation: str | None = None
    cause: int | None = None
    args: dict[str, Any] | None = None
    content: str | None = None
    tool_call_metadata: dict[str, Any] | None = None


_decoder = msgspec.json.Decoder(list[_Event])


def _response(event: _Event) -> Mapping[str, Any]:
    meta = event.tool_call_metadata or {}
    response = meta.get("model_response")
    return response if isinstance(response, Mapping) else {}


def _reply(response: Mapping[str, Any]) -> Message:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, Mapping) else None
    out: dict[str, Any] = {"role": "assistant", "content": ""}
    if isinstance(message, Mapping):
        out["content"] = message.get("content") or ""
        if message.get("tool_calls"):
            out["tool_calls"] = message["tool_calls"]
    return out


def _output(response: Mapping[str, Any]) -> int | None:
    usage = response.get("usage")
    value = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
    return value if isinstance(value, int) and 0 <= value <= reader.MAX_TOKENS else None


def load_openhands(
    path: str | Path, tokenizer: str | Path | MessageTokens | None = None
) -> Workload:
    """One OpenHands trajectory as a one-session workload; faults name the file and line."""
    where = str(path)
    path = Path(path)
    data = reader.document(path)
    events = reader.decode(_decoder, data, where)
    messages: list[Message] = []
    calls: list[Call] = []
    seen: set[str] = set()
    acted: dict[int, float] = {}
    tool_time: float | None = None
    for k, e in enumerate(events):
        for value in (e.args, e.tool_call_metadata):
            if value is not None and not reader.check_nesting(value):
                raise FormatError(where, reader.line_of(data, [k]), "event nested too deep")
        try:
            stamp = seconds(e.timestamp) if e.timestamp is not None else None
        except ValueError as err:
            raise FormatError(where, reader.line_of(data, [k, "timestamp"]), str(err)) from None
        args = e.args or {}
        if e.action == "system":
            messages.append({"role": "system", "content": str(args.get("content", e.message))})
        elif e.action == "message" and e.source == "user":
            messages.append({"role": "user", "content": str(args.get("content", e.message))})
        elif e.action is not None and e.source == "agent":
            response = _response(e)
            rid = str(response.get("id", f"#{k}"))
            if e.tool_call_metadata is None and e.action != "message":
                continue
            if rid not in seen:
                seen.add(rid)
                reply = (
                    _reply(response) if response else {"role": "assistant", "content": e.message}
                )
                calls.append(Call(list(messages), None, _output(response), reply, end=stamp,
                                  tool_seconds=tool_time))  # fmt: skip
                messages.append(reply)
                tool_time = None
            if stamp is not None:
                acted[e.id] = stamp
        elif e.observation is not None and e.tool_call_metadata is not None:
            meta = e.tool_call_metadata
            messages.append({"role": "tool", "tool_call_id": str(meta.get("tool_call_id", "")),
                             "content": e.content or ""})  # fmt: skip
            if stamp is not None and e.cause in acted:
                ran = max(0.0, stamp - acted[e.cause])
                tool_time = ran if tool_time is None else max(tool_time, ran)
    if not calls:
        raise FormatError(where, None, "no model calls: no agent action came from a model response")
    tokens = as_message_tokens(tokenizer)
    session = Session(path.stem, session_turns(calls, tokens, _BLOCK_SIZE))
    meta = {"source": "openhands", "path": where, "tokenizer": tokens.tokenizer.name}
    return Workload((session,), _BLOCK_SIZE, path.stem, Arrival("trace"), meta)


def _sniff(p: Probe) -> bool:
    return (
        p.container == "array" and "source" in p.keys and bool({"action", "observation"} & p.keys)
    )


TRACE_FORMAT = TraceFormat(
    "openhands",
    "OpenHands trajectories (a JSON list of events): a file or a folder of them, one session each",
    _sniff,
    lambda path, options: load_openhands(path, options.message_tokens()),
    sharing="content",
    per_session=True,
    suffixes=(".json",),
)
