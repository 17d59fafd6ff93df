"""Append-only JSONL files: a torn tail is cut back to the last complete line before appending."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvharness.errors import FormatError
from kvharness.jsonl import TornTail, cut_torn_tail, open_append

GOOD = b'{"a": 1}\n{"a": 2}\n'


@pytest.mark.parametrize(
    ("tail", "dropped"),
    [
        (b'{"a": 3, "b', TornTail(11, 1)),  # a crash mid-write
        (b"\0" * 4096, TornTail(4096, 1)),  # a power loss: the size grew, the data did not land
        (b'{"a": 3, "b{"a": 4}\n', TornTail(20, 1)),  # a torn line an older version appended to
        (b'{"a": 3, "b{"a": 4}\n{"a', TornTail(23, 2)),
        (b"", TornTail(0, 0)),
        (b"\n\n", TornTail(0, 0)),  # blank lines are complete (readers skip them)
    ],
)
def test_cut_back_to_the_last_complete_line(tmp_path: Path, tail: bytes, dropped: TornTail) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(GOOD + tail)
    assert cut_torn_tail(path) == dropped
    assert path.read_bytes() == GOOD + (tail if dropped.bytes == 0 else b"")


def test_a_line_longer_than_a_read_chunk(tmp_path: Path) -> None:
    big = json.dumps({"x": "y" * 200_000}).encode() + b"\n"
    path = tmp_path / "f.jsonl"
    path.write_bytes(big * 2 + big[:150_000])
    assert cut_torn_tail(path) == TornTail(150_000, 1)
    assert path.read_bytes() == big * 2


def test_a_torn_only_line(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"a": 1')
    assert cut_torn_tail(path) == TornTail(7, 1)
    assert path.read_bytes() == b""


def test_damage_beyond_the_tail_is_named_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    data = b'{"a": 1}\nnot json\nnot json either\n{"a'
    path.write_bytes(data)
    with pytest.raises(FormatError, match=r"f\.jsonl:2: not JSON, and not a torn last line"):
        cut_torn_tail(path)
    assert path.read_bytes() == data


def test_missing_file_is_created_by_open_append(tmp_path: Path) -> None:
    path = tmp_path / "new.jsonl"
    assert cut_torn_tail(path) == TornTail(0, 0)
    with open_append(path) as f:
        f.write(b"{}\n")
    assert path.read_bytes() == b"{}\n"


def test_open_append_says_what_it_dropped_then_appends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(GOOD + b'{"a": 3, "b')
    with open_append(path) as f:
        f.write(b'{"a": 4}\n')
    assert [json.loads(line)["a"] for line in path.read_text().splitlines()] == [1, 2, 4]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "f.jsonl: dropped 11 bytes of a torn last line" in err[0]


def test_open_append_is_silent_on_a_sound_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(GOOD)
    open_append(path).close()
    assert path.read_bytes() == GOOD and capsys.readouterr().err == ""
