"""Logs of OpenAI requests, as LLM proxies keep them: JSON Lines, one request a line.

Each record is one chat-completions request with its time. The request body is the record
itself (``messages``, ``model``, ...) or sits under ``body``, ``request`` or
``proxy_server_request.body``, and ``messages`` may be a JSON string (LiteLLM's spend logs). The
fields read, first found wins:

- time: ``startTime``, ``start_time``, ``timestamp``, ``created`` (Unix seconds, or an ISO time:
  naive is UTC); end: ``endTime``, ``end_time``;
- lengths: ``prompt_tokens`` / ``completion_tokens`` on the record or in ``response.usage``;
- session: ``session_id``, ``metadata.session_id``, ``body.user``, ``user``, ``end_user``.

A file may also be one such record as a JSON document, or a JSON list of them. Without session
ids, sessions are inferred from the prompts' shared prefixes, as for Mooncake traces
(:func:`kvharness.workload.mooncake.infer_sessions`). Sharing is known from the messages,
tokenised; the gap before a call is its start minus the previous call's end where both are
logged, else the interval between starts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

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
from kvharness.workload.mooncake import infer_sessions
from kvharness.workload.traceformat import Probe, TraceFormat

__all__ = ["TRACE_FORMAT", "load_openai_log"]

_BLOCK_SIZE = 128
_record = msgspec.json.Decoder(dict[str, Any])
_records = msgspec.json.Decoder(dict[str, Any] | list[dict[str, Any]])


def _first(record: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        node: Any = record
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node not in (None, ""):
            return node
    return None


def _body(record: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("body", "request", "proxy_server_request.body"):
        body = _first(record, key)
        if isinstance(body, str):
            try:
                body = _record.decode(body)
            except msgspec.DecodeError:
                continue
        if isinstance(body, Mapping) and "messages" in body:
            return body
    return record


def _messages(value: Any) -> list[Message] | None:
    if isinstance(value, str):
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError:
            return None
    if not isinstance(value, list) or not value:
        return None
    for i, m in enumerate(value):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] is not a chat message with a string role")
    return [dict(m) for m in value]


def _int(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= reader.MAX_TOKENS:
        raise ValueError(f"{what} must be a token count, got {value!r}")
    return value


def _read(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    where = str(path)
    first = next(reader.lines(path), None)
    if first is None:
        raise FormatError(where, None, "no requests: the file is empty")
    stripped = first[1].strip()
    if stripped.startswith(b"{") and stripped.endswith(b"}"):
        for lineno, raw in reader.lines(path):
            yield lineno, reader.decode(_record, raw, where, lineno)
        return
    data = reader.document(path)
    doc = reader.decode(_records, data, where)
    for i, record in enumerate(doc if isinstance(doc, list) else [doc]):
        yield (reader.line_of(data, [i]) if isinstance(doc, list) else 1), record


class _Request(NamedTuple):
    line: int
    session: str | None
    call: Call


def _request(lineno: int, record: dict[str, Any]) -> _Request:
    if not reader.check_nesting(record):
        raise ValueError(f"nested deeper than {reader.MAX_NESTING} levels")
    body = _body(record)
    messages = _messages(body.get("messages"))
    if messages is None:
        raise ValueError("no request messages (a list of chat messages, or its JSON text)")
    start = _first(record, "startTime", "start_time", "timestamp", "created")
    end = _first(record, "endTime", "end_time")
    usage = _first(record, "response.usage", "usage")
    usage = usage if isinstance(usage, Mapping) else {}
    prompt = _int(_first(record, "prompt_tokens") or usage.get("prompt_tokens"), "prompt_tokens")
    output = _int(
        _first(record, "completion_tokens") or usage.get("completion_tokens"), "completion_tokens"
    )
    session = _first(record, "session_id", "metadata.session_id", "user", "end_user")
    if session is None:
        session = body.get("user") or None
    call = Call(
        messages,
        prompt,
        output,
        start=None if start is None else seconds(start),
        end=None if end is None else seconds(end),
    )
    return _Request(lineno, None if session is None else str(session), call)


def load_openai_log(
    path: str | Path, tokenizer: str | Path | MessageTokens | None = None
) -> Workload:
    """Read a log of OpenAI requests (see module docstring); faults name the file and line."""
    where = str(path)
    path = Path(path)
    requests: list[_Request] = []
    for lineno, record in _read(path):
        try:
            requests.append(_request(lineno, record))
        except ValueError as err:
            raise FormatError(where, lineno, str(err)) from None
    if not requests:
        raise FormatError(where, None, "no requests")
    requests.sort(key=lambda r: (r.call.start or 0.0, r.line))
    tokens = as_message_tokens(tokenizer)
    groups: dict[str, list[_Request]] = {}
    if any(r.session is not None for r in requests):
        for r in requests:
            groups.setdefault(r.session or f"line-{r.line}", []).append(r)
    else:
        chains = [tokens.chain(r.call.messages or (), _BLOCK_SIZE) for r in requests]
        for indices in infer_sessions(chains):
            groups[f"line-{requests[indices[0]].line}"] = [requests[i] for i in indices]
    sessions = []
    for n, (sid, group) in enumerate(groups.items()):
        turns = session_turns([r.call for r in group], tokens, _BLOCK_SIZE, seed=n)
        sessions.append(Session(sid, turns, group[0].call.start))
    sessions.sort(key=lambda s: s.start or 0.0)
    meta = {"source": "openai-log", "path": where, "requests": len(requests),
            "tokenizer": tokens.tokenizer.name}  # fmt: skip
    return Workload(tuple(sessions), _BLOCK_SIZE, path.stem, Arrival("trace"), meta)


def _sniff(p: Probe) -> bool:
    return p.container is not None and bool(
        {"messages", "body", "request", "proxy_server_request"} & p.keys
    )


TRACE_FORMAT = TraceFormat(
    "openai-log",
    "OpenAI request logs as proxies keep them (LiteLLM and the like): JSONL of request bodies "
    "with times",
    _sniff,
    lambda path, options: load_openai_log(path, options.message_tokens()),
    sharing="content",
)
