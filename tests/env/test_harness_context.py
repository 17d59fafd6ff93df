"""Context compaction, pure: which messages each way keeps, and the estimate that triggers it."""

from __future__ import annotations

from typing import Any

import pytest

from kvharness.env.harness.context import (
    PLACEHOLDER,
    SUMMARY_INTRO,
    ContextConfig,
    drop_outputs,
    estimate_tokens,
    first_difference,
    keep_last,
    turn_starts,
    with_summary,
)

HEAD = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]


def _turn(n: int, outputs: int = 1) -> list[dict[str, Any]]:
    calls = [
        {"id": f"c{n}_{i}", "function": {"name": "bash", "arguments": "{}"}} for i in range(outputs)
    ]
    return [
        {"role": "assistant", "content": f"reply {n}", "tool_calls": calls},
        *(
            {"role": "tool", "tool_call_id": f"c{n}_{i}", "content": f"out {n}.{i}"}
            for i in range(outputs)
        ),
    ]


def _conversation(turns: int) -> list[dict[str, Any]]:
    out = list(HEAD)
    for n in range(turns):
        out += _turn(n, outputs=2 if n == 1 else 1)
    return out


def test_turns_start_at_each_assistant_message_after_the_task() -> None:
    conv = _conversation(3)
    assert turn_starts(conv) == [2, 4, 7]


def test_keep_last_keeps_the_head_and_the_last_turns() -> None:
    conv = _conversation(4)
    assert keep_last(conv, 2) == HEAD + _turn(2) + _turn(3)
    assert keep_last(conv, 9) == conv
    assert keep_last(HEAD, 1) == HEAD


def test_drop_outputs_replaces_only_older_tool_outputs() -> None:
    conv = _conversation(4)
    out = drop_outputs(conv, 2)
    assert len(out) == len(conv)
    older = [m for m in out[: turn_starts(conv)[2]] if m["role"] == "tool"]
    assert older and all(m["content"] == PLACEHOLDER for m in older)
    assert out[turn_starts(conv)[2] :] == conv[turn_starts(conv)[2] :]
    assert [m["content"] for m in out if m["role"] == "assistant"] == [
        m["content"] for m in conv if m["role"] == "assistant"
    ]
    assert conv[3]["content"] == "out 0.0"  # the input is not changed
    assert drop_outputs(out, 2) == out


def test_a_summary_replaces_everything_between_the_task_and_the_kept_turns() -> None:
    conv = _conversation(3)
    out = with_summary(conv, "  did things ", 1)
    assert out[:2] == HEAD
    assert out[2] == {"role": "user", "content": SUMMARY_INTRO + "did things"}
    assert out[3:] == _turn(2)
    again = with_summary(out + _turn(3), "more", 1)  # the old summary goes too
    assert again == [*HEAD, {"role": "user", "content": SUMMARY_INTRO + "more"}, *_turn(3)]


def test_first_difference_counts_the_shared_messages() -> None:
    conv = _conversation(3)
    assert first_difference(conv, keep_last(conv, 1)) == 2
    assert first_difference(conv, drop_outputs(conv, 2)) == 3
    assert first_difference(conv, conv + _turn(9)) == len(conv)


def test_the_estimate_adds_the_new_messages_to_what_the_server_counted() -> None:
    conv = [*HEAD, {"role": "tool", "tool_call_id": "x", "content": "a" * 400}]
    assert estimate_tokens(conv, counted=2, counted_tokens=1000) == 1000 + 100 + 4
    assert estimate_tokens(conv) > estimate_tokens(conv[:2])


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"compaction": "fold"}, "unknown compaction 'fold'"),
        ({"compact_at": 0}, "compact_at"),
        ({"keep_turns": 0}, "keep_turns"),
        ({"window": 0}, "window"),
    ],
)
def test_bad_options_are_refused(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ContextConfig(**{"window": 1000, **kw})


def test_the_limit_is_the_share_of_the_window() -> None:
    assert ContextConfig(1000, compact_at=0.5).limit == 500
