"""OpenTelemetry GenAI spans (OTLP JSON), read and written.

Reading takes an OTLP/JSON export, ``{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}``,
as one document or one export a line (as the OpenTelemetry Collector's file exporter writes
them), and finds two kinds of span by their attributes, in the GenAI semantic conventions or
OpenInference's:

- **model calls**: ``gen_ai.operation.name`` ``chat``, ``text_completion`` or
  ``generate_content``, or ``openinference.span.kind`` ``LLM``. Their lengths are
  ``gen_ai.usage.input_tokens`` / ``output_tokens`` (``llm.token_count.prompt`` /
  ``completion``); their prompt, where recorded, ``gen_ai.input.messages`` (a JSON string of
  messages with ``parts``, or with ``content``) or ``llm.input_messages.N.message.role`` /
  ``content``;
- **tool runs**: ``gen_ai.operation.name`` ``execute_tool`` or ``openinference.span.kind``
  ``TOOL``, named by ``gen_ai.tool.name`` (``tool.name``).

A session is a ``gen_ai.conversation.id`` (``session.id``), else a trace. Its calls run in start
order; the gap before a call is its start minus the previous call's end (the tool spans lie in
it: the last one names the tool). Sharing is known from content where messages are recorded,
else not at all, except in files kvharness wrote, whose ``kvharness.hash_ids`` and
``kvharness.block_size`` keep it exactly.

Writing gives one export a line, a trace per session: an ``invoke_agent`` span over the session,
a ``chat`` span per call (with ``gen_ai.conversation.id``, the usage counts,
``gen_ai.request.max_tokens`` and the block ids) at its nominal time
(:func:`kvharness.workload.export.nominal_calls`: no service time, so the spans take none) and an
``execute_tool`` span over each gap.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from kvharness.errors import FormatError
from kvharness.files import replacing
from kvharness.workload import reader
from kvharness.workload.conversation import (
    Call,
    MessageTokens,
    as_message_tokens,
    seconds,
    session_turns,
)
from kvharness.workload.export import EPOCH, BlockIds, nominal_calls
from kvharness.workload.model import Arrival, Message, Session, Workload
from kvharness.workload.traceformat import Probe, TraceFormat

__all__ = ["TRACE_FORMAT", "load_otel", "save_otel"]

_LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
_CONTENT_BLOCK_SIZE = 128


class _AnyValue(msgspec.Struct):
    stringValue: str | None = None
    intValue: int | str | None = None
    doubleValue: float | None = None
    boolValue: bool | None = None
    arrayValue: _ArrayValue | None = None


class _ArrayValue(msgspec.Struct):
    values: list[_AnyValue] = msgspec.field(default_factory=list)


class _KeyValue(msgspec.Struct):
    key: str
    value: _AnyValue = msgspec.field(default_factory=_AnyValue)


class _Span(msgspec.Struct):
    traceId: str = ""
    spanId: str = ""
    name: str = ""
    startTimeUnixNano: int | str = 0
    endTimeUnixNano: int | str = 0
    attributes: list[_KeyValue] = msgspec.field(default_factory=list)


class _ScopeSpans(msgspec.Struct):
    spans: list[_Span] = msgspec.field(default_factory=list)


class _ResourceSpans(msgspec.Struct):
    scopeSpans: list[_ScopeSpans] = msgspec.field(default_factory=list)


class _Export(msgspec.Struct):
    resourceSpans: list[_ResourceSpans]


class _FlatSpan(msgspec.Struct):
    start_time: str | float
    end_time: str | float | None = None
    trace_id: str | None = None
    name: str = ""
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)


class _Flat(msgspec.Struct):
    spans: list[_FlatSpan]
    session_id: str | None = None
    trace_id: str | None = None


_decoder = msgspec.json.Decoder(_Export)
_flat_decoder = msgspec.json.Decoder(_Flat)
_keys = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _value(v: _AnyValue) -> Any:
    if v.stringValue is not None:
        return v.stringValue
    if v.intValue is not None:
        return int(v.intValue)
    if v.doubleValue is not None:
        return v.doubleValue
    if v.boolValue is not None:
        return v.boolValue
    if v.arrayValue is not None:
        return [_value(x) for x in v.arrayValue.values]
    return None


@dataclass(frozen=True, slots=True)
class _Found:
    locate: Callable[[], int]
    """The line the span starts on (worked out only for an error message)."""
    order: int
    trace: str
    start: float
    end: float
    attrs: Mapping[str, Any]


def _nanos(raw: int | str, what: str) -> float:
    value = int(raw)
    if not 0 <= value <= reader.MAX_SECONDS * 1e9:
        raise ValueError(f"{what} {value} out of range")
    return value / 1e9


def _spans(path: Path) -> Iterator[_Found]:
    """Every span of the file, with the line it starts on."""
    where = str(path)
    first = next(reader.lines(path), None)
    if first is None:
        raise FormatError(where, None, "no spans: the file is empty")
    exports: list[tuple[int, bytes, _Export]] = []
    line = first[1].strip()
    if line.startswith(b"{") and line.endswith(b"}") and b'"resourceSpans"' in line:
        for lineno, raw in reader.lines(path):
            exports.append((lineno, raw, reader.decode(_decoder, raw, where, lineno)))
    else:
        data = reader.document(path)
        keys = reader.decode(_keys, data, where)
        if "resourceSpans" not in keys:
            yield from _flat_spans(path, data)
            return
        exports.append((1, data, reader.decode(_decoder, data, where)))
    order = 0
    for lineno, data, export in exports:
        for r, resource in enumerate(export.resourceSpans):
            for s, scope in enumerate(resource.scopeSpans):
                for k, span in enumerate(scope.spans):
                    at = ("resourceSpans", r, "scopeSpans", s, "spans", k)

                    def locate(lineno: int = lineno, data: bytes = data, at: Any = at) -> int:
                        one_line = len(exports) > 1 or b"\n" not in data.rstrip()
                        return lineno if one_line else reader.line_of(data, at)

                    try:
                        start = _nanos(span.startTimeUnixNano, "startTimeUnixNano")
                        end = _nanos(span.endTimeUnixNano, "endTimeUnixNano")
                        attrs = {a.key: _value(a.value) for a in span.attributes}
                    except (ValueError, RecursionError) as err:
                        raise FormatError(where, locate(), f"span {span.name!r}: {err}") from None
                    order += 1
                    yield _Found(locate, order, span.traceId, start, max(start, end), attrs)


def _flat_spans(path: Path, data: bytes) -> Iterator[_Found]:
    """The spans of a flat span dump (``{"spans": [...]}`` with ISO times and attribute objects,
    what inference-perf replays), one session a file: its ``session_id``, ``trace_id`` or name."""
    where = str(path)
    doc = reader.decode(_flat_decoder, data, where)
    session = doc.session_id or doc.trace_id or path.stem
    for k, span in enumerate(doc.spans):

        def locate(k: int = k) -> int:
            return reader.line_of(data, ["spans", k])

        try:
            if not reader.check_nesting(span.attributes):
                raise ValueError(f"attributes nested deeper than {reader.MAX_NESTING} levels")
            start = seconds(span.start_time)
            end = start if span.end_time is None else seconds(span.end_time)
        except ValueError as err:
            raise FormatError(where, locate(), f"span {span.name!r}: {err}") from None
        attrs = dict(span.attributes)
        if span.name.startswith("chat ") and "gen_ai.operation.name" not in attrs:
            attrs["gen_ai.operation.name"] = "chat"
        attrs.setdefault("session.id", session)
        yield _Found(locate, k, span.trace_id or session, start, max(start, end), attrs)


def _kind(attrs: Mapping[str, Any]) -> str | None:
    op = str(attrs.get("gen_ai.operation.name"))  # any JSON value in a flat span dump
    kind = attrs.get("openinference.span.kind")
    if op in _LLM_OPERATIONS or kind == "LLM":
        return "llm"
    if op == "execute_tool" or kind == "TOOL":
        return "tool"
    return None


def _text(parts: Any) -> str:
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        return "".join(
            str(p.get("content", p.get("text", ""))) if isinstance(p, Mapping) else str(p)
            for p in parts
        )
    return ""


def _messages(attrs: Mapping[str, Any]) -> list[Message] | None:
    raw = attrs.get("gen_ai.input.messages")
    if isinstance(raw, str):
        try:
            decoded = json.loads(raw)
        except (ValueError, RecursionError):
            return None
        if isinstance(decoded, list) and reader.check_nesting(decoded):
            return [
                {
                    "role": str(m.get("role", "user")),
                    "content": _text(m.get("parts", m.get("content"))),
                }
                for m in decoded
                if isinstance(m, Mapping)
            ]
    out: list[Message] = []
    while (role := attrs.get(f"llm.input_messages.{len(out)}.message.role")) is not None:
        content = attrs.get(f"llm.input_messages.{len(out)}.message.content", "")
        out.append({"role": str(role), "content": str(content)})
    return out or None


def _tokens(attrs: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = attrs.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{key} must be an integer token count, got {value!r}")
        if not 0 <= value <= reader.MAX_TOKENS:
            raise ValueError(f"{key} {value} out of range")
        return value
    return None


def load_otel(path: str | Path, tokenizer: str | Path | MessageTokens | None = None) -> Workload:
    """Read GenAI spans (see module docstring); faults name the file and the span's line."""
    where = str(path)
    path = Path(path)
    llm: dict[str, list[_Found]] = {}
    tools: dict[str, list[_Found]] = {}
    for span in _spans(path):
        kind = _kind(span.attrs)
        if kind is None:
            continue
        key = str(
            span.attrs.get("gen_ai.conversation.id")
            or span.attrs.get("session.id")
            or f"trace-{span.trace}"
        )
        (llm if kind == "llm" else tools).setdefault(key, []).append(span)
    if not llm:
        raise FormatError(where, None, "no model-call spans (gen_ai.operation.name chat, or LLM)")
    tokens = as_message_tokens(tokenizer)
    sizes: set[int] = set()
    for spans in llm.values():
        for span in spans:
            size = span.attrs.get("kvharness.block_size")
            if size is None:
                continue
            if type(size) is not int or not 1 <= size <= reader.MAX_BLOCK_SIZE:
                message = f"kvharness.block_size must be 1..{reader.MAX_BLOCK_SIZE}, got {size!r}"
                raise FormatError(where, span.locate(), message)
            sizes.add(size)
    if len(sizes) > 1:
        raise FormatError(where, None, f"spans at different kvharness.block_size {sorted(sizes)}")
    hashed = any(
        isinstance(s.attrs.get("kvharness.hash_ids"), list) for v in llm.values() for s in v
    )
    sharing = "hashes" if hashed else "none"
    block_size = sizes.pop() if sizes else _CONTENT_BLOCK_SIZE
    sessions = []
    for n, (sid, spans) in enumerate(llm.items()):
        spans.sort(key=lambda s: (s.start, s.order))
        gaps = sorted(tools.get(sid, ()), key=lambda s: s.start)
        calls = []
        for k, span in enumerate(spans):
            try:
                calls.append(_call(span, spans[k - 1] if k else None, gaps))
            except ValueError as err:
                raise FormatError(where, span.locate(), str(err)) from None
        if any(c.messages is not None and c.hashes is None for c in calls):
            sharing = "content" if sharing == "none" else sharing
        try:
            turns = session_turns(calls, tokens, block_size, seed=n)
        except ValueError as err:
            raise FormatError(where, spans[0].locate(), f"session {sid!r}: {err}") from None
        sessions.append(Session(sid, turns, spans[0].start))
    sessions.sort(key=lambda s: s.start or 0.0)
    meta = {"source": "otel", "path": where, "sharing": sharing, "tokenizer": tokens.tokenizer.name}
    return Workload(tuple(sessions), block_size, path.stem, Arrival("trace"), meta)


def _call(span: _Found, prev: _Found | None, tools: list[_Found]) -> Call:
    attrs = span.attrs
    prompt = _tokens(attrs, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens",
                     "llm.token_count.prompt")  # fmt: skip
    output = _tokens(attrs, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                     "llm.token_count.completion")  # fmt: skip
    hashes = attrs.get("kvharness.hash_ids")
    ids = None
    if isinstance(hashes, list):
        if not all(isinstance(h, int) and 0 <= h <= reader.MAX_HASH for h in hashes):
            raise ValueError("kvharness.hash_ids must be integers >= 0")
        ids = tuple(hashes)
    messages = None if ids is not None else _messages(attrs)
    if prompt is None and messages is None:
        raise ValueError("a model-call span with no input token count and no input messages")
    tool = None
    if prev is not None:
        inside = [t for t in tools if prev.end <= t.start and t.end <= span.start]
        if inside:
            name = inside[-1].attrs.get("gen_ai.tool.name") or inside[-1].attrs.get("tool.name")
            tool = str(name) if name is not None else None
    return Call(messages, prompt, output, start=span.start, end=span.end, tool=tool, hashes=ids)


def _sniff(p: Probe) -> bool:
    return "resourceSpans" in p.keys or (p.container in ("line", "document") and "spans" in p.keys)


def _id(text: str, hex_digits: int) -> str:
    return hashlib.blake2b(text.encode(), digest_size=hex_digits // 2).hexdigest()


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, list):
        items = [{"intValue": str(v)} for v in value]
        return {"key": key, "value": {"arrayValue": {"values": items}}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _span(trace: str, span_id: str, parent: str, name: str, start: float, end: float,
          attrs: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    return {
        "traceId": trace,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "kind": 3 if name.startswith("chat") else 1,  # CLIENT for model calls, else INTERNAL
        "startTimeUnixNano": str(round((EPOCH + start) * 1e9)),
        "endTimeUnixNano": str(round((EPOCH + end) * 1e9)),
        "attributes": [_attr(k, v) for k, v in attrs.items() if v is not None],
    }


def save_otel(workload: Workload, path: str | Path) -> None:
    """Write ``workload`` as GenAI spans, one OTLP/JSON export a line, a trace per session."""
    ids = BlockIds()
    encoder = msgspec.json.Encoder()
    with replacing(path) as tmp, tmp.open("wb") as f:
        for calls in nominal_calls(workload):
            session = calls[0].session
            trace = _id(session.id, 32)
            root = _id(f"{session.id}/agent", 16)
            conversation = {"gen_ai.conversation.id": session.id}
            spans = [
                _span(trace, root, "", "invoke_agent kvharness", calls[0].start, calls[-1].start, {
                    "gen_ai.operation.name": "invoke_agent", **conversation,
                    "kvharness.session.group": session.group,
                }),
            ]  # fmt: skip
            for call in calls:
                turn, t = call.turn, call.start
                if call.index and (turn.gap > 0 or turn.tool is not None):
                    name = f"execute_tool {turn.tool}" if turn.tool else "execute_tool"
                    spans.append(_span(trace, _id(f"{session.id}/{call.index}/tool", 16), root,
                                       name, t - turn.gap, t, {
                        "gen_ai.operation.name": "execute_tool", **conversation,
                        "gen_ai.tool.name": turn.tool,
                    }))  # fmt: skip
                spans.append(_span(trace, _id(f"{session.id}/{call.index}", 16), root, "chat",
                                   t, t, {
                    "gen_ai.operation.name": "chat", **conversation,
                    "gen_ai.usage.input_tokens": turn.input.num_tokens,
                    "gen_ai.usage.output_tokens": turn.output_tokens,
                    "gen_ai.request.max_tokens": turn.output_tokens,
                    "kvharness.block_size": workload.block_size,
                    "kvharness.hash_ids": ids.of(turn.input),
                }))  # fmt: skip
            scope = {"scope": {"name": "kvharness"}, "spans": spans}
            resource = {"attributes": [_attr("service.name", "kvharness")]}
            line = {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}
            f.write(encoder.encode(line) + b"\n")


TRACE_FORMAT = TraceFormat(
    "otel",
    "OpenTelemetry GenAI / OpenInference spans, OTLP JSON: model calls and tool runs",
    _sniff,
    lambda path, options: load_otel(path, options.message_tokens()),
    save_otel,
    sharing="none",
)
