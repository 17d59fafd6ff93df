"""The run directory: writing a report, reading it back, and one-line errors for bad runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvharness.errors import FormatError, UserError
from kvharness.report import io as report_io
from kvharness.report.io import (
    DeadlineSpec,
    _first_impossible,
    check_record,
    load_run,
    parse_deadline,
    read_run_records,
    write_run_report,
)
from kvharness.report.metrics import Summary
from kvharness.report.records import RecordWriter, TurnRecord

Rec = Callable[..., TurnRecord]


@dataclass(frozen=True)
class _Config:
    policy: str
    replicas: int


def test_write_then_load_run(tmp_path: Path, records: list[TurnRecord]) -> None:
    run = tmp_path / "runs" / "week-1"
    summary = write_run_report(run, records, _Config("round_robin", 2), deadline=10.0)
    assert sorted(p.name for p in run.iterdir()) == [
        "config.json", "records.jsonl", "report.html", "summary.json",
    ]  # fmt: skip
    assert msgspec.json.decode((run / "config.json").read_bytes()) == {
        "policy": "round_robin", "replicas": 2, "deadline": 10.0,
    }  # fmt: skip
    assert Summary.from_json((run / "summary.json").read_bytes()) == summary
    assert summary.label == "week-1" and summary.goodput == pytest.approx(300.0)
    loaded = load_run(run)
    assert loaded.records == records
    assert (loaded.label, loaded.deadline) == ("week-1", DeadlineSpec(seconds=10.0))
    assert loaded.saved == msgspec.json.decode(summary.to_json())
    assert loaded.summarise() == summary
    assert loaded.summarise(DeadlineSpec(seconds=12.0)).goodput == pytest.approx(600.0)
    assert "plot-ttft-cdf" in (run / "report.html").read_text()


def test_write_run_report_reads_appended_records(tmp_path: Path, records: list[TurnRecord]) -> None:
    # The bench appends records.jsonl as it goes, then asks for the report with records=None.
    with RecordWriter(tmp_path / "records.jsonl") as w:
        for r in records:
            w.write(r)
    s = write_run_report(tmp_path, None, {"label": "live"})
    assert (s.label, s.records, s.sessions_completed) == ("live", 7, 2)
    assert load_run(tmp_path).records == records


def test_a_failed_rewrite_keeps_the_old_files_and_leaves_no_tmp(
    tmp_path: Path, records: list[TurnRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_run_report(tmp_path, records, {"label": "first"})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full_disk(path: Path, recs: object) -> None:
        Path(path).write_bytes(b"{")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report_io, "write_records", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_run_report(tmp_path, records[:2], {"label": "second"})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_missing_run_dir(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such run directory"):
        load_run(tmp_path / "nope")
    with pytest.raises(UserError, match=r"not a run directory \(no records.jsonl\)"):
        load_run(tmp_path)


def _write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


def test_bad_record_line_names_file_and_line(tmp_path: Path, records: list[TurnRecord]) -> None:
    good = [msgspec.json.encode(r) + b"\n" for r in records[:2]]
    path = tmp_path / "records.jsonl"
    _write_lines(path, [*good, b"\n", b'{"session": "x"}\n', good[0]])
    with pytest.raises(FormatError, match=r"records.jsonl:4: bad record: Object missing required"):
        load_run(tmp_path)
    _write_lines(path, [good[0], b"not json\n"])
    with pytest.raises(FormatError) as err:
        read_run_records(path)
    assert (err.value.path, err.value.line) == (str(path), 2)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        (dict(sent=2.0, first_token=1.0, done=3.0), r"first_token \(1.0\) < sent \(2.0\)"),
        (dict(first_token=2.0, done=1.0), r"done \(1.0\) < first_token \(2.0\)"),
        (dict(scheduled=3.0, first_token=2.0, done=4.0), r"first_token \(2.0\) < scheduled"),
        (dict(done=1.0, prompt_tokens=-1), "prompt_tokens must be >= 0"),
        (dict(done=1.0, cached_tokens=-5), "cached_tokens must be >= 0"),
        (dict(first_token=1.0), "a record without error must have done"),
    ],
)
def test_impossible_record_is_an_error(
    tmp_path: Path, rec: Rec, fields: dict[str, float], why: str
) -> None:
    path = tmp_path / "records.jsonl"
    ok = rec("s", 0, first_token=1.0, done=2.0)
    _write_lines(
        path, [msgspec.json.encode(ok) + b"\n", msgspec.json.encode(rec("s", 1, **fields)) + b"\n"]
    )
    with pytest.raises(FormatError, match=f"records.jsonl:2: bad record: .*{why}"):
        read_run_records(path)


def test_torn_last_line_is_ignored(tmp_path: Path, records: list[TurnRecord]) -> None:
    path = tmp_path / "records.jsonl"
    whole = msgspec.json.encode(records[0]) + b"\n"
    _write_lines(path, [whole, msgspec.json.encode(records[1])[:20]])  # killed mid-write
    assert read_run_records(path) == [records[0]]


def test_bad_config_and_summary(tmp_path: Path, records: list[TurnRecord]) -> None:
    write_run_report(tmp_path, records, {})
    (tmp_path / "config.json").write_text('{\n  "label": "x",\n  oops\n}\n')
    with pytest.raises(FormatError, match=r"config.json:3: bad JSON"):
        load_run(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(FormatError, match=r"config.json:1: expected a JSON object"):
        load_run(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "summary.json").write_text('{"label": 3,\n "deadline": 7.5,}')
    with pytest.raises(FormatError, match=r"summary.json:2: bad JSON"):
        load_run(tmp_path)
    # A summary from another version of the layout still gives its deadline.
    (tmp_path / "summary.json").write_text('{"label": 3, "deadline": 7.5, "old_field": 1}')
    assert load_run(tmp_path).deadline == DeadlineSpec(seconds=7.5)


def test_run_without_config_or_summary(tmp_path: Path, records: list[TurnRecord]) -> None:
    _write_lines(tmp_path / "records.jsonl", [msgspec.json.encode(r) + b"\n" for r in records])
    run = load_run(tmp_path)
    assert (run.config, run.saved, run.deadline, run.label) == ({}, None, None, tmp_path.name)
    assert load_run(tmp_path).summarise(DeadlineSpec(seconds=10.0)).goodput == pytest.approx(300.0)
    assert run.summarise().sessions == 3


def test_expected_turns_are_kept_with_the_run(tmp_path: Path, records: list[TurnRecord]) -> None:
    # The workload gave b 3 turns; the run stopped after 2: b is not completed, then or later.
    s = write_run_report(tmp_path, records, {}, expected_turns={"a": 3, "b": 3, "c": 1})
    assert s.sessions_completed == 1
    run = load_run(tmp_path)
    assert run.expected_turns == {"a": 3, "b": 3, "c": 1}
    assert run.summarise().sessions_completed == 1
    (tmp_path / "expected_turns.json").write_text('{"a": "x"}')
    with pytest.raises(FormatError, match=r"expected_turns.json:1: bad expected turns"):
        load_run(tmp_path)


def test_parse_deadline() -> None:
    assert parse_deadline(None) is None
    assert parse_deadline(600) == parse_deadline("600") == parse_deadline(" 600s ")
    assert parse_deadline("600") == DeadlineSpec(seconds=600.0)
    assert parse_deadline("1.5x") == DeadlineSpec(factor=1.5)
    assert str(parse_deadline("1.5X")) == "1.5x" and str(parse_deadline(90.0)) == "90"
    for bad in ("soon", "x", True, [1], "-1", "0x", "inf"):
        with pytest.raises(UserError, match="deadline"):
            parse_deadline(bad)


_maybe_t = st.one_of(st.none(), st.floats(0.0, 10.0))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-1, 2), st.floats(0.0, 10.0), _maybe_t, _maybe_t, _maybe_t,
                  st.one_of(st.none(), st.integers(-1, 5)), st.booleans()),
        max_size=8,
    )
)  # fmt: skip
def test_column_check_agrees_with_check_record(
    rows: list[tuple[int, float, float | None, float | None, float | None, int | None, bool]],
) -> None:
    records = [
        TurnRecord("s", turn, "r", 0.0, sent, first, done, 10, cached, 0, 1, scheduled=sched,
                   error="timeout" if err else None)
        for turn, sent, sched, first, done, cached, err in rows
    ]  # fmt: skip
    expected = next((i for i, r in enumerate(records) if check_record(r) is not None), None)
    assert _first_impossible(records) == expected


def test_impossible_record_after_blank_lines_names_its_line(tmp_path: Path, rec: Rec) -> None:
    path = tmp_path / "records.jsonl"
    ok = msgspec.json.encode(rec("s", 0, first_token=1.0, done=2.0)) + b"\n"
    bad = msgspec.json.encode(rec("s", 1, first_token=3.0, done=2.5)) + b"\n"
    _write_lines(path, [ok, b"\n", ok, b"  \n", bad, ok])
    with pytest.raises(FormatError, match=r"records.jsonl:5: bad record: time runs backwards"):
        read_run_records(path)
