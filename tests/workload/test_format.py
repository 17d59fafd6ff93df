from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kvharness.errors import FormatError
from kvharness.workload import format as wformat
from kvharness.workload.load import load_workload
from kvharness.workload.model import Arrival, Workload
from kvharness.workload.swe_agent import load_swe_agent
from kvharness.workload.synthetic import SyntheticConfig, generate


def _small() -> Workload:
    return generate(SyntheticConfig(sessions=3, steps_median=4, repo_tokens_median=600, seed=5))


def test_round_trip_synthetic(tmp_path: Path) -> None:
    w = _small()
    path = tmp_path / "w.jsonl"
    wformat.save(w, path)
    back = wformat.load(path)
    assert back.sessions == w.sessions
    assert back.block_size == w.block_size and back.name == w.name
    assert back.arrival == w.arrival
    assert back.meta == json.loads(json.dumps(w.meta))
    assert load_workload(str(path)).sessions == w.sessions


def test_round_trip_with_messages_and_arrival(tmp_path: Path, traces: Path) -> None:
    w = load_swe_agent(traces / "swe-agent" / "function_calling_simple.traj")
    w = Workload(w.sessions, w.block_size, w.name, Arrival("poisson", rate=2.0, seed=3), w.meta)
    path = tmp_path / "w.jsonl"
    wformat.save(w, path)
    back = wformat.load(path)
    assert back.sessions == w.sessions
    assert back.arrival == w.arrival
    assert back.sessions[0].turns[1].messages == w.sessions[0].turns[1].messages


def test_delta_encoding_keeps_files_small(tmp_path: Path) -> None:
    w = _small()
    path = tmp_path / "w.jsonl"
    wformat.save(w, path)
    lines = path.read_text().splitlines()
    first = json.loads(lines[1])
    # Later turns store only the hashes beyond what they share with the previous turn.
    assert first["turns"][1]["keep"] > 0
    assert len(first["turns"][1]["hashes"]) < len(w.sessions[0].turns[1].input.hashes)


def test_files_validate_against_the_schema(tmp_path: Path) -> None:
    schema = json.loads(wformat.SCHEMA_PATH.read_text())
    path = tmp_path / "w.jsonl"
    wformat.save(_small(), path)
    header, *sessions = (json.loads(x) for x in path.read_text().splitlines())
    defs = schema["$defs"]
    jsonschema.validate(header, {**defs["Header"], "$defs": defs})
    for s in sessions:
        jsonschema.validate(s, {**defs["Session"], "$defs": defs})


HEADER = '{"format": "kvharness-workload", "version": 1, "block_size": 4}'
GOOD_TURN = '{"tokens": 5, "hashes": [1, 2], "output": 3}'


@pytest.mark.parametrize(
    ("lines", "line", "message"),
    [
        (["not json"], 1, "bad workload header"),
        (['{"format": "other", "version": 1, "block_size": 4}'], 1, "not a kvharness workload"),
        (['{"format": "kvharness-workload", "version": 9, "block_size": 4}'], 1, "version 9"),
        ([HEADER, '{"id": "a", "turns": [' + GOOD_TURN + "]}", "{oops"], 3, "bad JSON"),
        ([HEADER, '{"id": "a"}'], 2, "missing required field `turns`"),
        (
            [HEADER, '{"id": "a", "turns": [{"tokens": "5", "hashes": [], "output": 1}]}'],
            2,
            "Expected `int`",
        ),
        (
            [HEADER, '{"id": "a", "turns": [{"tokens": -5, "hashes": [], "output": 1}]}'],
            2,
            "Expected `int` >= 0 - at `$.turns[0].tokens`",
        ),
        (
            [HEADER, '{"id": "a", "turns": [{"tokens": 9, "hashes": [1], "output": 1}]}'],
            2,
            "need 3 block hashes",
        ),
        (
            [
                HEADER,
                '{"id": "a", "turns": [{"tokens": 5, "hashes": [1, 2], "output": 1, "keep": 4}]}',
            ],
            2,
            "keep=4",
        ),
        (
            [
                HEADER,
                '{"id": "a", "turns": [{"tokens": 5, "hashes": [1, 2], "output": 1, "gap": -1}]}',
            ],
            2,
            "gap",
        ),
        ([HEADER, '{"id": "a", "turns": []}'], 2, "no turns"),
        (
            [
                HEADER,
                '{"id": "a", "turns": [' + GOOD_TURN + "]}",
                '{"id": "a", "turns": [' + GOOD_TURN + "]}",
            ],
            3,
            "duplicate session id",
        ),
        (
            [HEADER, '{"id": "a", "start": -1, "turns": [' + GOOD_TURN + "]}"],
            2,
            "Expected `float` >= 0.0 - at `$.start`",
        ),
        (
            [
                HEADER,
                '{"id": "a", "turns": [{"tokens": 5, "hashes": [1, 2], "output": 1, "gap": 1e305}]}',
            ],
            2,
            "Expected `float` <= 4294967296.0 - at `$.turns[0].gap`",
        ),
        (
            [
                HEADER,
                '{"id": "a", "turns": [{"tokens": 5, "hashes": [1, 2], "output": 9223372036854775808}]}',
            ],
            2,
            "- at `$.turns[0].output`",
        ),
        (
            ['{"format": "kvharness-workload", "version": 1, "block_size": 0}'],
            1,
            "bad workload header: Expected `int` >= 1 - at `$.block_size`",
        ),
        (
            [
                '{"format": "kvharness-workload", "version": 1, "block_size": 4, "arrival": '
                '{"kind": "poisson", "rate": 0}}'
            ],
            1,
            "- at `$.arrival.rate`",
        ),
        (
            [
                '{"format": "kvharness-workload", "version": 1, "block_size": 4, "meta": '
                + "[" * 40
                + "]" * 40
                + "}"
            ],
            1,
            "Expected `object`, got `array` - at `$.meta`",
        ),
        (
            [
                '{"format": "kvharness-workload", "version": 1, "block_size": 4, "meta": {"a": '
                + "[" * 40
                + "]" * 40
                + "}}"
            ],
            1,
            "meta nested deeper than 32 levels",
        ),
        (
            [
                HEADER,
                '{"id": "a", "turns": [{"tokens": 5, "hashes": [1, 2], "output": 1, "messages": '
                '[{"role": "user", "content": ' + "[" * 40 + "]" * 40 + "}]}]}",
            ],
            2,
            "session 'a' turn 0: messages nested deeper than 32 levels",
        ),
        (
            [
                HEADER,
                '{"id": "a", "turns": [{"tokens": 5, "hashes": [1, 2], "output": 1, "messages": '
                '[{"content": ' + "[" * 5000 + "]" * 5000 + "}]}]}",
            ],
            2,
            "JSON nested deeper than the decoder can follow",
        ),
        (["\ufeff" + HEADER], 1, "starts with a UTF-8 byte-order mark; save without BOM"),
        (
            [HEADER, '{"id": "a", "turns": [' + GOOD_TURN + '], "x\\ny\\u0000": 1}'],
            2,
            "Object contains unknown field `x\\ny\\x00`",
        ),
    ],
)
def test_malformed_files_name_file_and_line(
    tmp_path: Path, lines: list[str], line: int, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError) as info:
        wformat.load(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert message in str(info.value)
    assert str(info.value).isprintable()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "the file is empty or holds only blank lines"),
        ("\n\n  \n", "the file is empty or holds only blank lines"),
        (HEADER + "\n", "the workload has a header but no sessions"),
        (HEADER + "\n\n \n", "the workload has a header but no sessions"),
    ],
)
def test_no_requests_is_an_error(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text(text)
    with pytest.raises(FormatError) as info:
        wformat.load(path)
    assert str(info.value) == f"{path}: no requests: {why}"
