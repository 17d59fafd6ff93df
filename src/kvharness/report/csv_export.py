"""Records and report tables as CSV, for spreadsheets and the peers' analysis scripts.

Two files, both plain numbers (seconds, not milliseconds; ratios in 0..1; an empty cell where a
figure is not defined):

- a run's records, one row per attempt: every :class:`~kvharness.report.records.TurnRecord` field
  and the per-turn figures derived from them (``ttft_s``, ``e2e_s``, ``itl_s``);
- runs side by side, one row per run: its label, then every figure of
  :data:`~kvharness.report.compare.KEY_METRICS` and the run's throughput, each column named by its
  key and unit.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

from kvharness.report.compare import KEY_METRICS
from kvharness.report.metrics import Summary
from kvharness.report.records import TurnRecord

__all__ = ["write_records_csv", "write_summaries_csv"]

_RECORD_FIELDS = TurnRecord.__struct_fields__
_DERIVED = ("ttft_s", "e2e_s", "itl_s")
_SUFFIX = {"s": "_s", "ratio": "_ratio", "/h": "_per_h", "/s": "_per_s", "count": "", "x": "_x"}


def _cell(v: object) -> object:
    return "" if v is None else v


def write_records_csv(path: str | Path, records: Iterable[TurnRecord]) -> Path:
    """Write ``records`` to ``path``, one row per attempt; returns the path."""
    out = Path(path)
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow((*_RECORD_FIELDS, *_DERIVED))
        for r in records:
            w.writerow(
                (*(_cell(getattr(r, k)) for k in _RECORD_FIELDS),
                 *(_cell(x) for x in (r.ttft, r.e2e, r.itl)))
            )  # fmt: skip
    return out


def _column(key: str, unit: str) -> str:
    suffix = _SUFFIX.get(unit, "")
    return key if key.endswith(suffix) else key + suffix


def _throughput(s: Summary) -> tuple[object, object]:
    tp = s.throughput
    return ("", "") if tp is None else (tp.duration, _cell(tp.input_tokens_per_s))


def write_summaries_csv(path: str | Path, summaries: Sequence[Summary]) -> Path:
    """Write one row per run: its label, each key metric, the run's duration and input token
    throughput (the rest of :class:`Throughput` is among the key metrics), attempts."""
    out = Path(path)
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(
            ("run", *(_column(m.key, m.unit) for m in KEY_METRICS), "duration_s",
             "input_tokens_per_s", "turns_ok", "records")
        )  # fmt: skip
        for s in summaries:
            w.writerow(
                (s.label, *(_cell(m.get(s)) for m in KEY_METRICS), *_throughput(s), s.turns_ok,
                 s.records)
            )  # fmt: skip
    return out
