"""The run directory, shared by ``sim`` and ``bench``::

    <run>/records.jsonl   one TurnRecord per line, appended as turns complete (the source of truth)
    <run>/config.json     the resolved configuration that produced the run (any JSON object)
    <run>/summary.json    the Summary computed from the records (derived; recomputable)
    <run>/report.html     the self-contained HTML report (derived)
    <run>/expected_turns.json   optional: {session id: turns in the workload}, so that a session
                          a run did not finish is not counted as completed when records are re-read

``config.json`` may carry ``"label"`` (the run's name in comparisons; default: the directory name)
and ``"deadline"`` for goodput: seconds (``600``), or a factor of each session's lower bound
(``"1.5x"``) with ``"lower_bounds"`` ({session id: seconds}, what the session would take on an idle
cluster; the simulator writes them). Reports are always recomputed from ``records.jsonl``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple, overload

import msgspec
import numpy as np
import numpy.typing as npt

from kvharness.configs import to_json_dict
from kvharness.errors import FormatError, UserError
from kvharness.files import read_json, replacing
from kvharness.report.html import write_html
from kvharness.report.metrics import Summary, summarise
from kvharness.report.records import TurnRecord, write_records

__all__ = [
    "CONFIG",
    "EXPECTED",
    "RECORDS",
    "REPORT",
    "SUMMARY",
    "DeadlineSpec",
    "RunData",
    "check_record",
    "load_run",
    "parse_deadline",
    "read_run_records",
    "summarise_with_deadline",
    "write_run_report",
]

RECORDS = "records.jsonl"
CONFIG = "config.json"
SUMMARY = "summary.json"
REPORT = "report.html"
EXPECTED = "expected_turns.json"

_decoder = msgspec.json.Decoder(TurnRecord)
_EPS = 1e-9  # seconds of slack when checking that a record's times run forwards


class DeadlineSpec(NamedTuple):
    """A goodput deadline: ``seconds`` of makespan, or ``factor`` x each session's lower bound."""

    seconds: float | None = None
    factor: float | None = None

    def __str__(self) -> str:
        return f"{self.factor:g}x" if self.factor is not None else f"{self.seconds:g}"

    def label(self) -> str:
        """In words, as summaries and captions give it: ``"1.5x lower bound"`` or ``"600 s"``."""
        return f"{self.factor:g}x lower bound" if self.factor is not None else f"{self.seconds:g} s"

    def of(self, lower_bound: float) -> float:
        """The deadline in seconds for a session whose lower bound is ``lower_bound``."""
        if self.factor is not None:
            return self.factor * lower_bound
        assert self.seconds is not None
        return self.seconds


@overload
def parse_deadline(value: str | float) -> DeadlineSpec: ...
@overload
def parse_deadline(value: object) -> DeadlineSpec | None: ...
def parse_deadline(value: object) -> DeadlineSpec | None:
    """``600``, ``"600"``, ``"600s"`` (seconds) or ``"1.5x"`` (factor); None stays None. Raises
    :class:`UserError` on anything else."""
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, int | float):
            spec = DeadlineSpec(seconds=float(value))
        elif isinstance(value, str) and value.strip().lower().endswith("x"):
            spec = DeadlineSpec(factor=float(value.strip()[:-1]))
        elif isinstance(value, str):
            spec = DeadlineSpec(seconds=float(value.strip().lower().removesuffix("s")))
        else:
            raise ValueError
    except ValueError:
        raise UserError(
            f"bad deadline {value!r}: give seconds (600) or a factor of each session's lower "
            "bound (1.5x)"
        ) from None
    v = spec.factor if spec.factor is not None else spec.seconds
    if v is None or not v > 0 or v == float("inf"):
        raise UserError(f"deadline must be > 0, got {value!r}")
    return spec


@dataclasses.dataclass(frozen=True, slots=True)
class RunData:
    """A run directory as read by :func:`load_run`."""

    path: Path
    records: list[TurnRecord]
    config: dict[str, Any]
    saved: dict[str, Any] | None
    """``summary.json`` as written with the run (perhaps by an older version), if present."""
    expected_turns: dict[str, int] | None = None
    """``expected_turns.json``, if present."""

    @property
    def label(self) -> str:
        label = self.config.get("label")
        return label if isinstance(label, str) and label else self.path.resolve().name

    @property
    def deadline(self) -> DeadlineSpec | None:
        """The deadline the run was recorded with (``config.json``, else ``summary.json``)."""
        for source in (self.config, self.saved or {}):
            value: object = source.get("deadline")
            if value is not None:
                return parse_deadline(value)
        return None

    def summarise(self, deadline: DeadlineSpec | None = None) -> Summary:
        """Summary recomputed from the records, with ``deadline`` or else the run's own."""
        spec = deadline if deadline is not None else self.deadline
        bounds = None
        if spec is not None and spec.factor is not None:
            bounds = self.config.get("lower_bounds")
            if not isinstance(bounds, dict) or not all(
                isinstance(v, int | float) for v in bounds.values()
            ):
                raise UserError(
                    f"{self.path}: deadline {spec} needs each session's lower bound "
                    f'("lower_bounds" in {CONFIG}); give the deadline in seconds instead'
                )
        return summarise_with_deadline(
            self.records, spec, bounds, label=self.label, expected_turns=self.expected_turns
        )


def summarise_with_deadline(
    records: Sequence[TurnRecord],
    deadline: DeadlineSpec | None,
    lower_bounds: Mapping[str, float] | None = None,
    *,
    label: str,
    expected_turns: Mapping[str, int] | None = None,
) -> Summary:
    """The summary of ``records`` with goodput counted within ``deadline``: seconds of makespan,
    or a factor of each session's lower bound in ``lower_bounds`` (seconds; ValueError when a
    factor comes without them). The one place a deadline becomes per-session deadlines and the
    summary's ``deadline_rule``."""
    per_session = rule = None
    if deadline is not None and deadline.factor is not None:
        if lower_bounds is None:
            raise ValueError(f"deadline {deadline} needs each session's lower bound")
        per_session = {k: deadline.of(float(v)) for k, v in lower_bounds.items()}
        rule = deadline.label()
    return summarise(
        records,
        deadline=None if deadline is None else deadline.seconds,
        label=label,
        expected_turns=expected_turns,
        session_deadlines=per_session,
        deadline_rule=rule,
    )


def check_record(r: TurnRecord) -> str | None:
    """Why a decoded record cannot be right (times running backwards, negative counts), or None."""
    if r.turn < 0 or r.attempt < 0:
        return "turn and attempt must be >= 0"
    for name in ("prompt_tokens", "ideal_cached_tokens", "output_tokens"):
        if getattr(r, name) < 0:
            return f"{name} must be >= 0"
    if r.cached_tokens is not None and r.cached_tokens < 0:
        return "cached_tokens must be >= 0"
    chain = [("sent", r.sent), ("scheduled", r.scheduled), ("first_token", r.first_token),
             ("done", r.done)]  # fmt: skip
    known = [(n, t) for n, t in chain if t is not None]
    for (n0, t0), (n1, t1) in itertools.pairwise(known):
        if t1 < t0 - _EPS:
            return f"time runs backwards: {n1} ({t1}) < {n0} ({t0})"
    if r.error is None and r.done is None:
        return "a record without error must have done"
    return None


def _first_impossible(records: list[TurnRecord]) -> int | None:
    """Index of the first record :func:`check_record` rejects (the same rules on whole columns)."""
    if not records:
        return None

    def col(field: str) -> npt.NDArray[np.float64]:
        return np.array(list(map(attrgetter(field), records)), dtype=np.float64).reshape(-1)

    bad = np.zeros(len(records), dtype=np.bool_)
    for field in ("turn", "attempt", "prompt_tokens", "ideal_cached_tokens", "output_tokens",
                  "cached_tokens"):  # fmt: skip
        bad |= col(field) < 0  # NaN (an unreported cached_tokens) compares False
    prev = col("sent")
    for field in ("scheduled", "first_token", "done"):
        t = col(field)
        bad |= t < prev - _EPS
        prev = np.where(np.isnan(t), prev, t)
    no_error = np.fromiter((r.error is None for r in records), np.bool_, len(records))
    bad |= no_error & np.isnan(col("done"))
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else None


def _read_line_by_line(where: str, lines: list[bytes]) -> list[TurnRecord]:
    out = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            r = _decoder.decode(line)
        except msgspec.DecodeError as err:
            if lineno == len(lines) and not line.endswith(b"\n"):
                break
            raise FormatError(where, lineno, f"bad record: {err}") from None
        why = check_record(r)
        if why is not None:
            raise FormatError(where, lineno, f"bad record: {why}")
        out.append(r)
    return out


def read_run_records(path: str | Path) -> list[TurnRecord]:
    """Read and check a records file; a bad line raises :class:`FormatError` with file:line. A torn
    final line (a run killed mid-write, no newline after it) is ignored."""
    where = str(path)
    data = Path(path).read_bytes()
    cut = data.rfind(b"\n") + 1
    try:
        # Fast path: the whole file at once, checked column-wise; any fault is then located (and
        # reported with its line) by the line-by-line reader.
        out: list[TurnRecord] = _decoder.decode_lines(data[:cut])
        if data[cut:].strip():
            out.append(_decoder.decode(data[cut:]))
    except msgspec.DecodeError:
        return _read_line_by_line(where, data.splitlines(keepends=True))
    if _first_impossible(out) is not None:
        return _read_line_by_line(where, data.splitlines(keepends=True))
    return out


def _read_json_object(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = read_json(path, dict, "a JSON object")
    return data


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory; clear one-line errors when it is missing or malformed
    (:func:`kvharness.report.aiperf.load_any` also reads an AIPerf export as a run)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(f"{path}: no such run directory")
    records_path = path / RECORDS
    if not records_path.is_file():
        raise UserError(f"{path}: not a run directory (no {RECORDS})")
    records = read_run_records(records_path)
    config = _read_json_object(path / CONFIG) if (path / CONFIG).is_file() else {}
    # summary.json is derived and always recomputed; only its deadline is used, so one written by
    # an older version still serves, but damaged JSON is an error.
    saved = _read_json_object(path / SUMMARY) if (path / SUMMARY).is_file() else None
    expected = None
    if (path / EXPECTED).is_file():
        try:
            expected = msgspec.json.decode((path / EXPECTED).read_bytes(), type=dict[str, int])
        except msgspec.DecodeError as err:
            raise FormatError(str(path / EXPECTED), 1, f"bad expected turns: {err}") from None
    return RunData(path, records, config, saved, expected)


def _atomic_write(path: Path, data: bytes) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def write_run_report(
    run_dir: str | Path,
    records: Sequence[TurnRecord] | None,
    config: Mapping[str, Any] | Any,
    deadline: float | str | None = None,
    *,
    label: str | None = None,
    expected_turns: Mapping[str, int] | None = None,
) -> Summary:
    """Write a run directory's files and return its summary.

    ``records=None`` reads the ``records.jsonl`` already there (the bench appends it as it goes);
    otherwise it is (over)written with ``records``. ``config`` (a mapping, msgspec Struct or
    dataclass) is saved as ``config.json`` with ``deadline`` (seconds or ``"1.5x"``, see the
    module docstring) and ``label`` added when given;
    ``expected_turns`` (session id -> turns in the workload) as ``expected_turns.json``.
    ``summary.json`` and ``report.html`` are rewritten. Creates ``run_dir`` if needed.
    """
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    if records is None:
        records = read_run_records(path / RECORDS)
    else:
        with replacing(path / RECORDS) as tmp:
            write_records(tmp, records)
    cfg = to_json_dict(config)
    if deadline is not None:
        cfg["deadline"] = deadline
    if label is not None:
        cfg["label"] = label
    _atomic_write(path / CONFIG, msgspec.json.format(msgspec.json.encode(cfg), indent=2))
    if expected_turns is not None:
        _atomic_write(path / EXPECTED, msgspec.json.encode(dict(expected_turns)))
    run = RunData(
        path, list(records), cfg, None, None if expected_turns is None else dict(expected_turns)
    )
    summary = run.summarise(parse_deadline(deadline))
    _atomic_write(path / SUMMARY, summary.to_json())
    write_html(path / REPORT, [(summary, run.records)])
    return summary
