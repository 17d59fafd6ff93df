"""Assembling streamed tool-call deltas (the OpenAI streaming shape) into whole tool calls."""

from __future__ import annotations

import json

import msgspec

from kvharness.env.actions import Bash, EditFile, parse_action
from kvharness.env.harness.client import _merge_tool_call
from kvharness.wire.openai import ToolCallDelta


def test_streamed_tool_call_deltas_assemble_in_index_order() -> None:
    calls: dict[int, dict[str, object]] = {}
    deltas = [
        {"index": 0, "id": "call_a", "type": "function", "function": {"name": "bash"}},
        {"index": 1, "id": "call_b", "function": {"name": "edit_", "arguments": ""}},
        {"index": 0, "function": {"arguments": '{"comm'}},
        {"index": 1, "function": {"name": "file", "arguments": '{"path": "a.py", '}},
        {"index": 0, "function": {"arguments": 'and": "ls -l"}'}},
        {"index": 1, "function": {"arguments": '"search": "x", "replace": "y"}'}},
    ]
    for d in deltas:  # as the client decodes them off the stream
        _merge_tool_call(calls, msgspec.convert(d, ToolCallDelta))
    ordered = [calls[i] for i in sorted(calls)]
    assert [c["id"] for c in ordered] == ["call_a", "call_b"]
    assert parse_action(ordered[0]) == Bash("ls -l")
    assert parse_action(ordered[1]) == EditFile("a.py", "x", "y")
    assert json.loads(ordered[0]["function"]["arguments"]) == {"command": "ls -l"}  # type: ignore[index]
