"""Every loader, whatever the bytes: a workload, or one FormatError of one line, never a traceback.

Strategies: arbitrary bytes, and near-valid files: valid records of which at most one has a value
replaced by any JSON value, a field dropped or added, or a value nested past the decoder's limit;
then blank lines, a byte-order mark, a truncation or a stray non-UTF-8 byte. A workload that loads must also survive what the CLI does with
it: statistics, and a save/load round trip through the project's own format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvharness.errors import FormatError
from kvharness.workload import format as wformat
from kvharness.workload.load import load_workload
from kvharness.workload.model import Workload
from kvharness.workload.mooncake import load_mooncake
from kvharness.workload.stats import workload_stats
from kvharness.workload.swe_agent import load_swe_agent

Loader = Callable[[Path], Workload]

LOADERS: dict[str, tuple[str, Loader]] = {
    "mooncake": ("t.jsonl", lambda p: load_mooncake(p, block_size=4)),
    "format": ("w.jsonl", wformat.load),
    "traj": ("t.traj", lambda p: load_swe_agent(p, block_size=4)),
    "spec-jsonl": ("s.jsonl", lambda p: load_workload(str(p), block_size=4)),
    "spec-traj": ("s.traj", lambda p: load_workload(str(p), block_size=4)),
}

SAMPLES = Path(__file__).parent / "samples"
# the trace formats of the field, each loaded by name, and a public sample of each to damage
FIELD_FORMATS = {
    "azure": ("t.csv", "azure/AzureLLMInferenceTrace_conv_1week.head5tail5.csv"),
    "otel": ("t.json", "otel/inference-perf_simple_chain.json"),
    "otlp": ("t.json", "otel/genai-interlingua_openinference_in.json"),
    "atif": ("t.json", "atif/harbor-rfc-example.trajectory.json"),
    "openhands": ("t.json", "openhands/harbor-rfc-openhands_trajectory.json"),
    "mini-swe-agent": ("t.traj.json", "mini-swe-agent/harbor-rfc-mini-swe-agent-trajectory.json"),
    "openai-log": ("t.jsonl", "openai-log/litellm_standard_logging_payload.json"),
}
for _name, (_file, _) in FIELD_FORMATS.items():
    _fmt = "otel" if _name == "otlp" else _name
    LOADERS[_name] = (_file, lambda p, f=_fmt: load_workload(str(p), fmt=f, block_size=4))
LOADERS["detected"] = ("d.json", lambda p: load_workload(str(p), block_size=4))

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _check(name: str, folder: Path, data: bytes) -> None:
    filename, load = LOADERS[name]
    path = folder / filename
    path.write_bytes(data)
    try:
        workload = load(path)
    except FormatError as err:
        message = str(err)
        assert message.isprintable(), message
        assert re.fullmatch(re.escape(str(path)) + r"(:[1-9]\d*)?: \S.*", message), message
        return
    assert workload.sessions
    workload_stats(workload)
    saved = folder / "saved.jsonl"
    wformat.save(workload, saved)
    assert wformat.load(saved).sessions == workload.sessions


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**31 - 1, 2**31, 2**63, 2**64 - 1, 2**64, -1, 0]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e305, 4294967296.0, 4294967297.0, -0.0, 1e-300]),
    st.text(max_size=6),
    st.sampled_from(["\ud800", "x\udfff", "\x00\n"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


_NEST = re.compile(rb'"@nest:(\d+)@"')


def _dumps(value: Any, indent: int | None = None) -> bytes:
    """JSON text of ``value`` where each ``"@nest:N@"`` string becomes a value nested N deep
    (deeper than the json module could write)."""
    text = json.dumps(value, indent=indent).encode()
    return _NEST.sub(lambda m: b"[" * int(m[1]) + b"1" + b"]" * int(m[1]), text)


@st.composite
def mutate_one(draw: st.DrawFn, records: list[dict[str, Any]]) -> None:
    """Change at most one of ``records`` in place (often none): one field replaced by any JSON
    value, dropped or nested deep, or a field added."""
    if not records or draw(st.booleans()):
        return
    record = draw(st.sampled_from(records))
    action = draw(st.sampled_from(["replace", "drop", "nest", "add"]))
    key = draw(st.sampled_from(sorted(record)))
    if action == "replace":
        record[key] = draw(json_values)
    elif action == "drop":
        del record[key]
    elif action == "nest":
        record[key] = f"@nest:{draw(st.sampled_from([1, 31, 33, 999, 3000]))}@"
    else:
        record[draw(st.text(max_size=5))] = draw(json_values)


@st.composite
def damaged_file(draw: st.DrawFn, lines: list[bytes]) -> bytes:
    """Lines joined with blank lines between, then maybe a BOM, a truncation or a stray byte."""
    parts: list[bytes] = []
    for line in lines:
        parts.extend([b""] * draw(st.integers(0, 2)))
        parts.append(line)
    data = b"\n".join(parts) + draw(st.sampled_from([b"\n", b"", b"\r\n", b"\n\n "]))
    damage = draw(st.sampled_from(["none", "none", "none", "bom", "truncate", "byte"]))
    if damage == "bom":
        data = draw(st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"])) + data
    elif damage == "truncate" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif damage == "byte" and data:
        at = draw(st.integers(0, len(data) - 1))
        data = (
            data[:at]
            + draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80"]))
            + data[at:]
        )
    return data


def _chain(draw: st.DrawFn, block_size: int = 4) -> tuple[int, list[int]]:
    tokens = draw(st.integers(0, 13))
    n = -(-tokens // block_size)
    return tokens, draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))


@st.composite
def mooncake_files(draw: st.DrawFn) -> bytes:
    rows: list[dict[str, Any]] = []
    t = 0
    for _ in range(draw(st.integers(0, 4))):
        tokens, hashes = _chain(draw)
        t += draw(st.integers(0, 3000))
        row = {"timestamp": t, "input_length": tokens, "output_length": 1, "hash_ids": hashes}
        if draw(st.booleans()):
            row["session_id"] = draw(st.sampled_from(["a", "b"]))
            row["delay"] = draw(st.integers(0, 500))
        rows.append(row)
    draw(mutate_one(rows))
    return draw(damaged_file([_dumps(r) for r in rows]))


@st.composite
def workload_files(draw: st.DrawFn) -> bytes:
    header: dict[str, Any] = {"format": "kvharness-workload", "version": 1, "block_size": 4}
    if draw(st.booleans()):
        header["arrival"] = {"kind": "poisson", "rate": 2.0, "seed": 1}
        header["meta"] = {"source": "fuzz"}
    records = [header]
    sessions = []
    for s in range(draw(st.integers(0, 3))):
        turns = []
        for _ in range(draw(st.integers(1, 3))):
            tokens, hashes = _chain(draw)
            turn: dict[str, Any] = {"tokens": tokens, "hashes": hashes, "output": 2}
            turn["gap"] = draw(st.floats(0, 10))
            if draw(st.booleans()):
                turn["messages"] = [{"role": "user", "content": draw(st.text(max_size=8))}]
            turns.append(turn)
        sessions.append({"id": f"s{s}", "start": float(s), "turns": turns})
        records += [sessions[-1], *turns]
    draw(mutate_one(records))
    return draw(damaged_file([_dumps(r) for r in [header, *sessions]]))


@st.composite
def trajectories(draw: st.DrawFn) -> bytes:
    history = []
    for _ in range(draw(st.integers(0, 4))):
        message: dict[str, Any] = {
            "role": draw(st.sampled_from(["system", "user", "assistant", "tool"])),
            "content": draw(st.text(max_size=12)),
        }
        if draw(st.booleans()):
            message["tool_calls"] = [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]
        history.append(message)
    history.append({"role": "assistant", "content": draw(st.text(max_size=12))})
    steps = [
        {"action": draw(st.text(max_size=6)), "execution_time": draw(st.floats(0, 9))}
        for _ in range(draw(st.integers(0, 3)))
    ]
    doc = {"history": history, "trajectory": steps}
    draw(mutate_one([doc, *history, *steps]))
    return draw(damaged_file([_dumps(doc, indent=draw(st.sampled_from([None, 2])))]))


@pytest.mark.parametrize("name", sorted(LOADERS))
@FUZZ
@given(data=st.binary(max_size=600))
def test_any_bytes(folder: Path, name: str, data: bytes) -> None:
    _check(name, folder, data)


@pytest.mark.parametrize("name", ["mooncake", "spec-jsonl", "format"])
@FUZZ
@given(data=mooncake_files())
def test_near_valid_hash_id_traces(folder: Path, name: str, data: bytes) -> None:
    _check(name, folder, data)


@pytest.mark.parametrize("name", ["format", "spec-jsonl", "mooncake"])
@FUZZ
@given(data=workload_files())
def test_near_valid_workload_files(folder: Path, name: str, data: bytes) -> None:
    _check(name, folder, data)


@pytest.mark.parametrize("name", ["traj", "spec-traj"])
@FUZZ
@given(data=trajectories())
def test_near_valid_trajectories(folder: Path, name: str, data: bytes) -> None:
    _check(name, folder, data)


@st.composite
def damaged_samples(draw: st.DrawFn, sample: str) -> bytes:
    """A real sample with at most one of its objects changed (or one CSV cell), then damaged."""
    text = (SAMPLES / sample).read_text()
    if sample.endswith(".csv"):
        rows = [line.split(",") for line in text.splitlines()]
        if draw(st.booleans()):
            row = draw(st.sampled_from(rows))
            row[draw(st.integers(0, len(row) - 1))] = draw(
                st.text(max_size=8).filter(lambda t: "\n" not in t and "\r" not in t)
            )
        return draw(damaged_file([",".join(r).encode() for r in rows]))
    doc = json.loads(text)
    objects: list[dict[str, Any]] = []
    stack: list[Any] = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            objects += [item] if item else []
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    draw(mutate_one(objects))
    return draw(damaged_file([_dumps(doc, indent=draw(st.sampled_from([None, 2])))]))


@pytest.mark.parametrize("name", sorted(FIELD_FORMATS))
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_near_valid_samples_of_the_fields_formats(
    folder: Path, name: str, data: st.DataObject
) -> None:
    raw = data.draw(damaged_samples(FIELD_FORMATS[name][1]))
    _check(name, folder, raw)
    _check("detected", folder, raw)


_AWKWARD = [None, [1], {"a": [1]}, "x", -1, 2**70, 1.5, True, []]


def _field_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value[:4])
        if isinstance(value, list)
        else ()
    )
    for key, child in items:
        out.append((*path, key))
        out.extend(_field_paths(child, (*path, key)))
    return out


@pytest.mark.parametrize("name", sorted(set(FIELD_FORMATS) - {"azure"}))
def test_every_field_of_each_sample_replaced_by_an_awkward_value(folder: Path, name: str) -> None:
    """Exhaustive where the strategies sample: each field of the sample (the first four items of
    each list) in turn holds each awkward value; the loader and detection give a workload or one
    FormatError line."""
    doc = json.loads((SAMPLES / FIELD_FORMATS[name][1]).read_text())
    for path in _field_paths(doc):
        for value in _AWKWARD:
            changed = json.loads(json.dumps(doc))
            node = changed
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            raw = json.dumps(changed).encode()
            _check(name, folder, raw)
            _check("detected", folder, raw)
