from __future__ import annotations

from pathlib import Path

import pytest

from kvharness.errors import FormatError
from kvharness.workload.mooncake import infer_sessions, load_mooncake, read_requests
from kvharness.workload.stats import workload_stats


def _write(tmp_path: Path, *lines: str) -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    return p


def test_session_inference_hand_worked(tmp_path: Path) -> None:
    # Block size 4. r0: blocks 0,1,2 (full) + tail 3. r1 continues r0 (r0's full blocks 0,1,2 are
    # its prefix). r2 shares only block 0 (the system prompt): new session. r3 continues r1.
    # r4 also extends r0's full chain, but r0 already continues (r1): a session of its own.
    path = _write(
        tmp_path,
        '{"timestamp": 0, "input_length": 14, "output_length": 2, "hash_ids": [0, 1, 2, 3]}',
        '{"timestamp": 1000, "input_length": 20, "output_length": 2, "hash_ids": [0, 1, 2, 4, 5]}',
        '{"timestamp": 1500, "input_length": 8, "output_length": 2, "hash_ids": [0, 9]}',
        '{"timestamp": 4000, "input_length": 24, "output_length": 1, "hash_ids": [0, 1, 2, 4, 5, 6]}',
        '{"timestamp": 5000, "input_length": 16, "output_length": 1, "hash_ids": [0, 1, 2, 7]}',
    )
    requests = read_requests(path, block_size=4)
    assert infer_sessions([r.chain for r in requests]) == [[0, 1, 3], [2], [4]]
    w = load_mooncake(path, block_size=4)
    first = w.sessions[0]
    assert [len(s.turns) for s in w.sessions] == [3, 1, 1]
    assert first.start == 0.0
    assert [t.gap for t in first.turns] == [0.0, 1.0, 3.0]  # arrival intervals, seconds
    assert [s.start for s in w.sessions] == [0.0, 1.5, 5.0]


def test_explicit_session_ids_and_delay(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '{"session_id": "a", "input_length": 4, "output_length": 1, "hash_ids": [1]}',
        '{"session_id": "a", "delay": 250, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]}',
        '{"session_id": "b", "input_length": 4, "output_length": 1, "hash_ids": [7]}',
    )
    w = load_mooncake(path, block_size=4)
    assert [s.id for s in w.sessions] == ["a", "b"]
    assert [t.gap for t in w.sessions[0].turns] == [0.0, 0.25]


GOOD = '{"timestamp": 5, "input_length": 4, "output_length": 1, "hash_ids": [1]}'


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"timestamp": 5, "input_length": 4, "output_length": 1, "hash_ids": [1]', "bad JSON"),
        (
            '{"timestamp": 5, "output_length": 1, "hash_ids": [1]}',
            "missing required field `input_length`",
        ),
        (
            '{"timestamp": 5, "input_length": "4", "output_length": 1, "hash_ids": [1]}',
            "Expected `int`, got `str`",
        ),
        (
            '{"timestamp": 5, "input_length": -4, "output_length": 1, "hash_ids": []}',
            "Expected `int` >= 0 - at `$.input_length`",
        ),
        (
            '{"timestamp": 5, "input_length": 4, "output_length": -1, "hash_ids": [1]}',
            "Expected `int` >= 0 - at `$.output_length`",
        ),
        (
            '{"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1]}',
            "time goes backwards",
        ),
        ('{"timestamp": 9, "input_length": 9, "output_length": 1, "hash_ids": [1]}', "needs 3"),
        ('{"input_length": 4, "output_length": 1, "hash_ids": [1]}', "missing timestamp"),
        (
            '{"timestamp": 9, "input_length": 4, "output_length": 1, "hash_ids": ["x"]}',
            "Expected `int`",
        ),
        (
            '{"timestamp": -5, "input_length": 4, "output_length": 1, "hash_ids": [1]}',
            "Expected `float` >= 0.0 - at `$.timestamp`",
        ),
        (
            '{"timestamp": 9, "input_length": 4, "output_length": 9223372036854775808, '
            '"hash_ids": [1]}',
            "Expected `int` <= 2147483647 - at `$.output_length` (over kvharness's bound",
        ),
        (
            '{"timestamp": 1e305, "input_length": 4, "output_length": 1, "hash_ids": [1]}',
            "- at `$.timestamp`",
        ),
        (
            '{"timestamp": 9, "delay": -1, "input_length": 4, "output_length": 1, "hash_ids": [1]}',
            "Expected `float` >= 0.0 - at `$.delay`",
        ),
        (
            '{"timestamp": 9, "input_length": 4, "output_length": 1, "hash_ids": [18446744073709551616]}',
            "block hash 18446744073709551616 is over 2**64 - 1",
        ),
        (
            '{"timestamp": 9, "input_length": 4, "output_length": 1, "hash_ids": [1], "x": '
            + "[" * 5000
            + "]" * 5000
            + "}",
            "JSON nested deeper than the decoder can follow",
        ),
        (
            '{"timestamp": 9, "input_length": 4, "output_length": 1, "hash_ids": [1], "x": "\udcff"}',
            "not UTF-8 text: byte 0xff at column 80",
        ),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path: Path, bad: str, message: str) -> None:
    path = _write(tmp_path, GOOD, GOOD, bad, GOOD)
    with pytest.raises(FormatError) as info:
        read_requests(path, block_size=4)
    assert str(info.value).startswith(f"{path}:3: ")
    assert message in str(info.value)


@pytest.mark.parametrize("data", [b"", b"\n", b"\n  \n\r\n\t\n"])
def test_no_requests_is_an_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(data)
    with pytest.raises(FormatError) as info:
        load_mooncake(path)
    assert str(info.value) == f"{path}: no requests: the file is empty or holds only blank lines"


def test_a_byte_order_mark_is_named(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode() + b"\n")
    with pytest.raises(FormatError) as info:
        load_mooncake(path, block_size=4)
    assert str(info.value) == f"{path}:1: starts with a UTF-8 byte-order mark; save without BOM"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="cannot read"):
        read_requests(tmp_path / "nope.jsonl")


def test_conversation_trace(traces: Path) -> None:
    w = load_mooncake(traces / "mooncake" / "conversation_trace.jsonl")
    s = workload_stats(w)
    assert s.requests == 12031
    assert abs(s.ideal_hit_ratio_blocks - 0.366) < 0.01
    # About half the requests link into about 2,000 multi-turn sessions (shared/traces/README.md).
    assert 1900 <= s.multi_turn_sessions <= 2100
    linked = s.requests - (s.sessions - s.multi_turn_sessions)
    assert 0.45 <= linked / s.requests <= 0.55
    assert s.turns_per_multi_turn_session.p50 == 2 and s.turns_per_multi_turn_session.max == 43
    assert 100 <= s.gap_seconds.p50 <= 150
