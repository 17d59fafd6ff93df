from __future__ import annotations

import tracemalloc
from pathlib import Path

import msgspec
import pytest

from kvharness.errors import FormatError
from kvharness.workload import reader


class _Row(msgspec.Struct):
    n: reader.Tokens
    t: reader.Seconds = 0.0


_row = msgspec.json.Decoder(_Row)


def _decode_error(data: bytes, line: int = 1) -> str:
    with pytest.raises(FormatError) as info:
        reader.decode(_row, data, "f.jsonl", line)
    return str(info.value)


def test_lines_skip_blank_lines_and_keep_numbers(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"n": 1}\n\n   \r\n{"n": 2}\n\t\n{"n": 3}')
    assert [n for n, _ in reader.lines(path)] == [1, 4, 6]
    assert [reader.decode(_row, raw, str(path), n).n for n, raw in reader.lines(path)] == [1, 2, 3]


def test_line_bound_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"x" * 16 + b"\n" + b"y" * 16)
    assert [len(raw) for _, raw in reader.lines(path, limit=16)] == [17, 16]
    path.write_bytes(b"x" * 16 + b"\n" + b"y" * 17 + b"\n")
    with pytest.raises(FormatError, match=r"t\.jsonl:2: line longer than"):
        list(reader.lines(path, limit=16))


def test_a_long_line_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("wb") as f:
        f.write(b'{"n": 1}\n{"n": 2, "pad": "')
        f.write(b"a" * (16 << 20))
        f.write(b'"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(FormatError) as info:
            list(reader.lines(path, limit=1 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(info.value) == f"{path}:2: line longer than 1 MiB, the most one line may hold"
    assert peak < 4 << 20


@pytest.mark.parametrize(
    ("start", "what"),
    [(b"\xef\xbb\xbf", "UTF-8 byte-order mark; save without BOM"), (b"\xff\xfe", "UTF-16")],
)
def test_byte_order_marks_are_named(tmp_path: Path, start: bytes, what: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(start + b'{"n": 1}\n')
    with pytest.raises(FormatError) as info:
        list(reader.lines(path))
    assert str(info.value).startswith(f"{path}:1: starts with a ")
    assert what in str(info.value)
    with pytest.raises(FormatError, match="byte-order mark"):
        reader.document(path)


def test_unreadable_files_name_the_file_alone(tmp_path: Path) -> None:
    with pytest.raises(FormatError) as info:
        list(reader.lines(tmp_path / "missing.jsonl"))
    assert (
        str(info.value) == f"{tmp_path / 'missing.jsonl'}: cannot read: No such file or directory"
    )
    with pytest.raises(FormatError, match=r": cannot read: Is a directory$"):
        reader.document(tmp_path)


def test_document_bound(tmp_path: Path) -> None:
    path = tmp_path / "t.traj"
    path.write_bytes(b" " * (1 << 20) + b"{}")
    with pytest.raises(FormatError, match=r"t\.traj: larger than 1 MiB"):
        reader.document(path, limit=1 << 20)
    assert reader.document(path, limit=2 << 20).endswith(b"{}")


def test_syntax_faults_give_line_and_column() -> None:
    assert _decode_error(b'{"n": 1,, }', 7) == (
        "f.jsonl:7: bad JSON: object keys must be strings at column 9"
    )
    assert _decode_error(b'{"n": 1', 7) == "f.jsonl:7: bad JSON: the text ends inside a value"
    doc = b'{\n  "n": 1,\n  "t": 2 x\n}'
    assert _decode_error(doc) == "f.jsonl:3: bad JSON: expected ',' or '}' at column 10"


def test_non_utf8_is_named_with_its_byte() -> None:
    message = _decode_error(b'{"n": 1, "s": "caf\xe9"}\n', 3)
    assert message == "f.jsonl:3: not UTF-8 text: byte 0xe9 at column 19; save as UTF-8"
    message = _decode_error(b'{\n"n": "\xff"}', 3)
    assert message == "f.jsonl:4: not UTF-8 text: byte 0xff at column 7; save as UTF-8"


def test_a_valid_line_with_a_bad_value_names_the_field_not_bad_json() -> None:
    message = _decode_error(b'{"n": -1}', 2)
    assert message == "f.jsonl:2: Expected `int` >= 0 - at `$.n`"
    message = _decode_error(b'{"n": 9223372036854775808}')
    assert message.startswith("f.jsonl:1: Expected `int` <= 2147483647 - at `$.n` (over kvharness")
    assert "bad JSON" not in _decode_error(b'{"n": 1, "t": 1e305}')
    assert "$.t" in _decode_error(b'{"n": 1, "t": 1e400}')


def test_field_faults_in_a_document_name_the_fields_line() -> None:
    doc = b'{\n  "t": 1,\n  "n":\n    -3\n}'
    assert _decode_error(doc, 1) == "f.jsonl:4: Expected `int` >= 0 - at `$.n`"


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deep_nesting_is_a_format_error(depth: int) -> None:
    data = b'{"n": 1, "x": ' + b"[" * depth + b"]" * depth + b"}"
    assert _decode_error(data, 5).startswith("f.jsonl:5: JSON nested deeper than the decoder")


def test_line_of_follows_keys_and_indices_past_strings_and_nesting() -> None:
    doc = (
        b'{\n "a": "x\\"]}{[",\n "b": [\n  {"c": [[1], {"d": "}"}]},\n  {"c": 2,\n   "e": 3}\n ]\n}'
    )
    assert reader.line_of(doc, ["b"]) == 3
    assert reader.line_of(doc, ["b", 0, "c", 1]) == 4
    assert reader.line_of(doc, ["b", 1, "e"]) == 6
    assert reader.line_of(doc, ["b", 1, "missing"]) == 5
    assert reader.line_of(doc, ["a", 3]) == 2


def test_check_nesting_counts_levels() -> None:
    value: object = 1
    for _ in range(reader.MAX_NESTING):
        value = [value]
    assert reader.check_nesting(value)
    assert not reader.check_nesting({"k": value})
    assert reader.check_nesting({"k": [1, 2], "j": {"x": "y"}}, limit=2)


def test_hash_bound() -> None:
    reader.check_hashes([0, 2**64 - 1])
    with pytest.raises(ValueError, match="over 2\\*\\*64 - 1"):
        reader.check_hashes([1, 2**64])
