"""Harbor's Agent Trajectory Interchange Format (ATIF), read and written: one session a file.

A trajectory is ``{"schema_version": "ATIF-v1.x", "session_id", "agent", "steps": [...]}``. A
step has a ``source`` (``system``, ``user``, ``agent``), a ``message``, and for an agent step
``tool_calls``, an ``observation`` (``results`` with ``content``) and ``metrics`` (that call's
``prompt_tokens``, cached tokens included, and ``completion_tokens``; ``prompt_token_ids`` in
v1.4+). Every agent step with ``metrics`` is one model call, except steps marked
``is_copied_context`` (context carried over after a summary). Its prompt is, in order of
exactness: the step's ``extra.kvharness.hash_ids`` (files kvharness wrote: sharing as it was),
its ``prompt_token_ids``, or the conversation rebuilt from the steps before it (system and user
messages, agent messages with their tool calls, observations as tool messages) where those
steps hold what the agent was told (a system or user message); with none of them, ``prompt_tokens`` tokens shared with nothing. Gaps: ``extra.kvharness.gap`` where
kvharness wrote it, else the interval between step timestamps (ATIF records no durations, and
what a timestamp marks depends on the agent that wrote it).

Writing gives a folder with one ``<session>.json`` per session: an agent step per turn (its
``metrics``, the tool named by the next turn as its ``tool_calls``, the nominal ``timestamp``,
and ``extra.kvharness`` with ``hash_ids`` and ``gap``), the workload's block size in the
trajectory's ``extra.kvharness``, and ``final_metrics``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec

from kvharness import __version__
from kvharness.errors import FormatError, UserError
from kvharness.files import replacing
from kvharness.workload import reader
from kvharness.workload.chain import ChainBuilder
from kvharness.workload.conversation import (
    Call,
    MessageTokens,
    as_message_tokens,
    name_seed,
    seconds,
    session_turns,
)
from kvharness.workload.export import EPOCH, BlockIds, NominalCall, nominal_calls
from kvharness.workload.model import Arrival, Message, Session, Turn, Workload
from kvharness.workload.reader import BlockHash, BlockSize, Seconds, Tokens
from kvharness.workload.traceformat import Probe, TraceFormat

__all__ = ["SCHEMA_VERSION", "TRACE_FORMAT", "load_atif", "save_atif"]

SCHEMA_VERSION = "ATIF-v1.5"
_BLOCK_SIZE = 128
_TokenId = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]


class _Ours(msgspec.Struct):
    hash_ids: tuple[BlockHash, ...] | None = None
    gap: Seconds | None = None
    block_size: BlockSize | None = None
    start: Seconds | None = None
    group: str | None = None


class _Extra(msgspec.Struct):
    kvharness: _Ours | None = None


class _Metrics(msgspec.Struct):
    prompt_tokens: Tokens | None = None
    completion_tokens: Tokens | None = None
    prompt_token_ids: list[_TokenId] | None = None


class _Result(msgspec.Struct):
    content: Any = None
    source_call_id: str | None = None


class _Observation(msgspec.Struct):
    results: list[_Result] = msgspec.field(default_factory=list)


class _ToolCall(msgspec.Struct):
    tool_call_id: str = ""
    function_name: str = ""
    arguments: Any = None


class _Step(msgspec.Struct):
    source: str
    message: Any = ""
    timestamp: str | None = None
    tool_calls: list[_ToolCall] | None = None
    observation: _Observation | None = None
    metrics: _Metrics | None = None
    is_copied_context: bool = False
    extra: _Extra | None = None


class _Trajectory(msgspec.Struct):
    schema_version: str
    steps: list[_Step]
    session_id: str | None = None
    extra: _Extra | None = None


_decoder = msgspec.json.Decoder(_Trajectory)
_VERSION = re.compile(r"^ATIF-v1\.\d+$")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else msgspec.json.encode(value).decode()


def _step_messages(step: _Step) -> list[Message]:
    role = {"agent": "assistant", "system": "system"}.get(step.source, "user")
    message: dict[str, Any] = {"role": role, "content": _text(step.message)}
    if step.tool_calls:
        message["tool_calls"] = [
            {"id": c.tool_call_id, "type": "function",
             "function": {"name": c.function_name, "arguments": _text(c.arguments)}}
            for c in step.tool_calls
        ]  # fmt: skip
    out: list[Message] = [message]
    for r in step.observation.results if step.observation else ():
        out.append(
            {"role": "tool", "tool_call_id": r.source_call_id or "", "content": _text(r.content)}
        )
    return out


def _call(
    step: _Step,
    m: _Metrics,
    before: list[Message],
    start: float | None,
    prev_start: float | None,
    tool: str | None,
    block_size: int,
) -> Call:
    mine = step.extra.kvharness if step.extra and step.extra.kvharness else _Ours()
    gap = mine.gap
    if gap is None and start is not None and prev_start is not None:
        gap = max(0.0, start - prev_start)
    hashes, prompt = mine.hash_ids, m.prompt_tokens
    if hashes is None and m.prompt_token_ids is not None:
        builder = ChainBuilder(block_size)
        builder.extend_tokens(m.prompt_token_ids)
        hashes, prompt = builder.chain().hashes, len(m.prompt_token_ids)
    # the conversation stands for the prompt only where the steps hold what the agent was told
    told = any(m["role"] != "assistant" for m in before)
    messages = list(before) if hashes is None and told else None
    return Call(messages, prompt, m.completion_tokens, start=start, tool=tool, tool_seconds=gap,
                hashes=hashes)  # fmt: skip


def load_atif(path: str | Path, tokenizer: str | Path | MessageTokens | None = None) -> Workload:
    """One ATIF trajectory as a one-session workload; faults name the file and line."""
    where = str(path)
    path = Path(path)
    data = reader.document(path)
    doc = reader.decode(_decoder, data, where)
    if not _VERSION.match(doc.schema_version):
        line = reader.line_of(data, ["schema_version"])
        raise FormatError(where, line, f"schema_version {doc.schema_version!r} is not ATIF-v1.x")
    ours = doc.extra.kvharness if doc.extra and doc.extra.kvharness else _Ours()
    block_size = ours.block_size or _BLOCK_SIZE
    messages: list[Message] = []
    calls: list[Call] = []
    prev_start: float | None = None
    tool: str | None = None
    for k, step in enumerate(doc.steps):
        if not reader.check_nesting([c.arguments for c in step.tool_calls or ()]):
            raise FormatError(
                where, reader.line_of(data, ["steps", k]), "tool call nested too deep"
            )
        try:
            start = seconds(step.timestamp) if step.timestamp is not None else None
        except ValueError as err:
            line = reader.line_of(data, ["steps", k, "timestamp"])
            raise FormatError(where, line, str(err)) from None
        if step.source == "agent" and step.metrics is not None and not step.is_copied_context:
            calls.append(_call(step, step.metrics, messages, start, prev_start, tool, block_size))
            prev_start = start
        if step.source == "agent" and step.tool_calls:
            tool = step.tool_calls[-1].function_name or None
        messages.extend(_step_messages(step))
    if not calls:
        raise FormatError(where, reader.line_of(data, ["steps"]), "no agent step with metrics")
    tokens = as_message_tokens(tokenizer)
    name = doc.session_id or path.stem
    try:
        turns = session_turns(calls, tokens, block_size, name_seed(f"{name}\0{path.name}"))
    except ValueError as err:
        raise FormatError(where, None, str(err)) from None
    first = next((c.start for c in calls if c.start is not None), None)
    session = Session(name, turns, ours.start if ours.start is not None else first, ours.group)
    sharing = "hashes" if ours.block_size is not None else "content"
    meta = {"source": "atif", "path": where, "sharing": sharing, "tokenizer": tokens.tokenizer.name}
    return Workload((session,), block_size, name, Arrival("trace"), meta)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(EPOCH + t, UTC).isoformat()


def _trajectory(calls: list[NominalCall], ids: BlockIds, block_size: int) -> dict[str, Any]:
    session = calls[0].session
    steps: list[dict[str, Any]] = []
    turns: list[Turn] = [c.turn for c in calls]
    for n, call in enumerate(calls):
        turn = call.turn
        step: dict[str, Any] = {
            "step_id": n + 1,
            "timestamp": _iso(call.start),
            "source": "agent",
            "message": "",
            "metrics": {
                "prompt_tokens": turn.input.num_tokens,
                "completion_tokens": turn.output_tokens,
            },
            "extra": {"kvharness": {"hash_ids": ids.of(turn.input), "gap": turn.gap}},
        }
        following = turns[n + 1].tool if n + 1 < len(turns) else None
        if following is not None:
            step["tool_calls"] = [
                {"tool_call_id": f"call-{n}", "function_name": following, "arguments": {}}
            ]
        steps.append(step)
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": session.id,
        "agent": {"name": "kvharness", "version": __version__},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": sum(t.input.num_tokens for t in turns),
            "total_completion_tokens": sum(t.output_tokens for t in turns),
            "total_steps": len(steps),
        },
        "extra": {"kvharness": {"block_size": block_size, "start": calls[0].start,
                                "group": session.group}},
    }  # fmt: skip


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def save_atif(workload: Workload, path: str | Path) -> None:
    """Write ``workload`` as a new folder of ATIF trajectories, one ``<session>.json`` per session
    (see module docstring); file names keep the session id's safe characters and are numbered
    so that no two collide. A folder that holds files already is refused: what it held would be
    read back with the workload."""
    out = Path(path)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out}: ATIF is written as a new folder, one file a session; give a path "
                        "that does not exist or an empty folder")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    ids = BlockIds()
    encoder = msgspec.json.Encoder()
    for n, calls in enumerate(nominal_calls(workload)):
        name = f"{n:06d}-{_UNSAFE.sub('_', calls[0].session.id)[:80]}.json"
        with replacing(out / name) as tmp:
            tmp.write_bytes(encoder.encode(_trajectory(calls, ids, workload.block_size)))


def _sniff(p: Probe) -> bool:
    return (
        p.container in ("line", "document")
        and "steps" in p.keys
        and bool(_VERSION.match(str(p.values.get("schema_version", ""))))
    )


TRACE_FORMAT = TraceFormat(
    "atif",
    "Harbor ATIF trajectories (Terminal-Bench, SkyRL): a file or a folder of them, one session each",
    _sniff,
    lambda path, options: load_atif(path, options.message_tokens()),
    save_atif,
    sharing="content",
    per_session=True,
    suffixes=(".json",),
)
