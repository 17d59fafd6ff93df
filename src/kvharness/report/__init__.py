"""Per-turn records and everything computed from them: metrics, tables, JSON and HTML reports.

Module map: :mod:`~kvharness.report.records` (the record schema and JSONL files),
:mod:`~kvharness.report.metrics` (records -> :class:`Summary`), :mod:`~kvharness.report.compare`
(runs against a baseline), :mod:`~kvharness.report.table` (terminal tables, rich),
:mod:`~kvharness.report.html` and :mod:`~kvharness.report.svg` (the self-contained HTML report),
:mod:`~kvharness.report.io` (the run directory shared by sim and bench).
"""

from kvharness.report.metrics import Summary, summarise
from kvharness.report.records import RecordWriter, TurnRecord, read_records, write_records

__all__ = ["RecordWriter", "Summary", "TurnRecord", "read_records", "summarise", "write_records"]
