"""Per-turn records and everything computed from them: metrics, tables, JSON and HTML reports."""

from kvharness.report.records import RecordWriter, TurnRecord, read_records, write_records

__all__ = ["RecordWriter", "TurnRecord", "read_records", "write_records"]
