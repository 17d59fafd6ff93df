"""Per-turn records and everything computed from them: metrics, tables, JSON and HTML reports.

Module map: :mod:`~kvharness.report.records` (the record schema and JSONL files),
:mod:`~kvharness.report.metrics` (records -> ``Summary``), :mod:`~kvharness.report.compare`
(runs against a baseline), :mod:`~kvharness.report.table` (terminal tables, rich),
:mod:`~kvharness.report.html` and :mod:`~kvharness.report.svg` (the self-contained HTML report),
:mod:`~kvharness.report.io` (the run directory shared by sim and bench). Only the records are
imported here, so that producers of records (the bench's hot path) load nothing else.
"""

from kvharness.report.records import RecordWriter, TurnRecord, read_records, write_records

__all__ = ["RecordWriter", "TurnRecord", "read_records", "write_records"]
