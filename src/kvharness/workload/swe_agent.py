"""SWE-agent ``.traj`` trajectories: real agent conversations as sessions.

A trajectory holds ``history`` (the chat messages) and ``trajectory`` (one step per action, with
``execution_time`` in newer files). Every assistant message in ``history`` is one model call: its
prompt is every message before it, its output the assistant message itself. Each call becomes a
turn whose chain is the tokenised prompt and whose ``messages`` are those appended since the
previous call; the gap before it is the previous action's ``execution_time`` where recorded
(0 otherwise) and ``tool`` is that action's command name. Fields are typed and bounded as in
:mod:`kvharness.workload.reader`; a fault names the line of the offending field.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from kvharness.errors import FormatError
from kvharness.workload import reader
from kvharness.workload.conversation import Call, MessageTokens, as_message_tokens, session_turns
from kvharness.workload.model import Arrival, Session, Workload
from kvharness.workload.reader import Seconds
from kvharness.workload.tokenize import Tokenizer
from kvharness.workload.traceformat import LoadOptions, Probe, TraceFormat

__all__ = ["TRACE_FORMAT", "load_swe_agent", "trajectory_session"]


class _Part(msgspec.Struct):
    text: str = ""


class _Message(msgspec.Struct):
    role: str
    content: str | list[_Part | str] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class _Step(msgspec.Struct):
    action: str | None = None
    execution_time: Seconds | None = None


class _Trajectory(msgspec.Struct):
    history: list[_Message]
    trajectory: list[_Step] = msgspec.field(default_factory=list)


_decoder = msgspec.json.Decoder(_Trajectory)


def _message(m: _Message) -> dict[str, Any]:
    """The message as a chat message: content parts joined into text, absent fields left out."""
    out: dict[str, Any] = {"role": m.role}
    if isinstance(m.content, list):
        out["content"] = "".join(p if isinstance(p, str) else p.text for p in m.content)
    elif m.content is not None:
        out["content"] = m.content
    for key in ("tool_calls", "tool_call_id", "name"):
        if (value := getattr(m, key)) is not None:
            out[key] = value
    return out


def trajectory_session(path: Path, tokens: MessageTokens, block_size: int = 128) -> Session:
    """One ``.traj`` file as a session. Raises :class:`FormatError` naming file and line."""
    where = str(path)
    data = reader.document(path)
    if not data.strip():
        raise FormatError(where, None, "no requests: the file is empty")
    doc = reader.decode(_decoder, data, where)
    history = doc.history
    for i, m in enumerate(history):
        if m.tool_calls is not None and not reader.check_nesting(m.tool_calls):
            line = reader.line_of(data, ["history", i, "tool_calls"])
            raise FormatError(
                where,
                line,
                f"history[{i}].tool_calls nested deeper than {reader.MAX_NESTING} levels",
            )

    messages = [_message(m) for m in history]
    calls: list[Call] = []
    for i, raw in enumerate(history):
        if raw.role != "assistant":
            continue
        k = len(calls)
        seconds, tool = None, None
        if 0 < k <= len(doc.trajectory):
            step = doc.trajectory[k - 1]
            seconds = step.execution_time or 0.0
            action = (step.action or "").strip()
            tool = action.split(maxsplit=1)[0] if action else None
        calls.append(Call(messages[:i], reply=messages[i], tool=tool, tool_seconds=seconds))
    turns = session_turns(calls, tokens, block_size)
    if not turns:
        raise FormatError(
            where, reader.line_of(data, ["history"]), "no assistant message in history"
        )
    return Session(path.stem, turns)


def _files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out.extend(sorted(p.glob("*.traj")) if p.is_dir() else [p])
    return out


def load_swe_agent(
    path: str | Path,
    tokenizer: str | Path | Tokenizer | MessageTokens | None = None,
    block_size: int = 128,
) -> Workload:
    """Load one ``.traj`` file or a folder of them (each a session, starting together)."""
    files = _files([Path(path)])
    if not files:
        raise FormatError(str(path), None, "no .traj files found")
    tokens = as_message_tokens(tokenizer)
    sessions = tuple(trajectory_session(f, tokens, block_size) for f in files)
    meta = {"source": "swe-agent", "path": str(path), "tokenizer": tokens.tokenizer.name}
    return Workload(sessions, block_size, Path(path).stem, Arrival("trace"), meta)


def _sniff(p: Probe) -> bool:
    return p.path.suffix == ".traj" or (p.container in ("line", "document") and "history" in p.keys)


def _load(path: Path, options: LoadOptions) -> Workload:
    return load_swe_agent(path, options.message_tokens())


TRACE_FORMAT = TraceFormat(
    "swe-agent",
    "SWE-agent trajectories (.traj): a file or a folder of them, one session each",
    _sniff,
    _load,
    sharing="content",
    per_session=True,
    suffixes=(".traj",),
)
