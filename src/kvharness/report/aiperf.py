"""NVIDIA AIPerf's exports read as a run, so that ``kvharness report show`` and ``compare`` lay an
AIPerf run beside a kvharness one, figure for figure (written against AIPerf 0.13.0, whose
aggregate is schema 1.4).

An AIPerf artifacts directory holds, under AIPerf's default names::

    profile_export_aiperf.json   the aggregate: per metric its unit and avg/p50/p90/p99/max/count
    profile_export.jsonl         one request per line (``--export-level records``, the default):
                                 metadata (wall-clock ns, conversation id, turn index, correlation
                                 id, phase), metrics (each ``{"value", "unit"}``) and any error
    inputs.json                  the requests AIPerf planned, per conversation

(``--profile-export-prefix foo`` names the first two ``foo.json`` and ``foo.jsonl``; give such a
file directly.) A directory or either file stands for the run; both halves are read when present.

**From the record export** each profiling-phase line becomes a
:class:`~kvharness.report.records.TurnRecord` (warmup lines are left out, as AIPerf's aggregate
leaves them out), so every figure is computed exactly as for a kvharness run:

* ``session`` = its ``conversation_id``; a conversation AIPerf ran more than once (its dataset
  wrapped around) is one session per run of it (per ``x_correlation_id``), named ``ID#1``, ``ID#2``.
  ``turn`` = ``turn_index``; ``attempt`` 0 (AIPerf does not retry).
* ``intended`` = ``credit_issued_ns`` (when AIPerf's scheduler released the request: after the
  previous turn and its delay), ``sent`` = ``request_start_ns``, both in seconds from the earliest of
  them in the run; ``first_token`` = ``sent`` + ``time_to_first_token`` (None when not streamed),
  ``done`` = ``sent`` + ``request_latency``.
* ``prompt_tokens`` / ``output_tokens``: the server's usage (``usage_prompt_tokens`` /
  ``usage_completion_tokens``) where AIPerf recorded it, as kvharness bench counts them, else AIPerf's
  own ``input_sequence_length`` / ``output_sequence_length`` (its tokenizer's count, which is what its
  ITL divides by: run AIPerf with ``--use-server-token-count`` to make the two agree).
  ``cached_tokens`` = ``usage_prompt_cache_read_tokens`` where recorded, else None.
  ``ideal_cached_tokens`` = 0: AIPerf does not know it, and the summary gives the ideal ratios as
  unknown ('-').
* ``replica`` = the run's URL when it had one (AIPerf does not say which URL served a request),
  else ``"aiperf"``. ``error`` = ``"http CODE: message"`` or ``"TYPE: message"``, with no ``done``, as
  kvharness bench records a failure. ``inputs.json`` gives each session's planned turns, so a
  session AIPerf's request count cut short is not counted as completed.

**From the aggregate alone** (``--export-level summary``) the summary holds what AIPerf computed:
TTFT, ITL and end-to-end (its ``request_latency``) mean/p50/p90/p99/max, requests ok and failed
(``error_summary``'s causes), request and token throughput over its ``benchmark_duration`` with
its input/output token counts (``total_isl`` / ``total_osl``), and the cached share of the
server-reported prompt tokens. Missing, and shown as '-': everything about sessions (goodput,
sessions completed, makespan, breakdown, by turn), TTFT from intended, send lag, ideal cached
tokens, per-replica load.

**AIPerf's own figures** (:class:`AIPerfFigures`, from the aggregate) are kept beside the records;
:func:`render_own_figures` shows them next to kvharness's recomputed ones. Malformed input raises
:class:`~kvharness.errors.FormatError` with the file and line.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec
from rich.table import Table

from kvharness.errors import FormatError, UserError
from kvharness.files import read_json
from kvharness.report.compare import fmt_value
from kvharness.report.io import RECORDS as KV_RECORDS
from kvharness.report.io import DeadlineSpec, RunData, check_record, load_run
from kvharness.report.metrics import CacheStats, Dist, Summary, Throughput, error_cause
from kvharness.report.records import TurnRecord

__all__ = [
    "AGGREGATE",
    "RECORDS",
    "AIPerfFigures",
    "AIPerfRun",
    "is_export",
    "load_any",
    "load_export",
    "render_own_figures",
]

AGGREGATE = "profile_export_aiperf.json"
RECORDS = "profile_export.jsonl"
INPUTS = "inputs.json"
_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "sec": 1.0, "s": 1.0}


class AIPerfFigures(msgspec.Struct, frozen=True):
    """What AIPerf itself computed for the run (its aggregate export), in seconds, requests and
    tokens; None where the aggregate does not have a figure."""

    version: str | None
    requests_ok: int | None
    """AIPerf's ``request_count``: requests that succeeded."""
    failed: int | None
    errors: dict[str, int]
    """Failed requests by cause, as :func:`~kvharness.report.metrics.error_cause` names them."""
    duration: float | None
    """``benchmark_duration``: first request to last response."""
    requests_per_s: float | None
    input_tokens_per_s: float | None
    output_tokens_per_s: float | None
    ttft: Dist | None
    itl: Dist | None
    latency: Dist | None
    """``request_latency``: kvharness's end-to-end."""
    input_tokens: int | None
    output_tokens: int | None
    """AIPerf's ``total_isl`` / ``total_osl`` (its tokenizer's counts unless
    ``--use-server-token-count``)."""
    usage_prompt_tokens: int | None
    """Server-reported prompt tokens (``total_usage_prompt_tokens``)."""
    cached_ratio: float | None
    """Server-reported cached prompt tokens over server-reported prompt tokens."""
    urls: list[str]


@dataclasses.dataclass(frozen=True, slots=True)
class AIPerfRun(RunData):
    """An AIPerf run: its records (empty when only the aggregate was exported) and its own
    figures (None without the aggregate)."""

    figures: AIPerfFigures | None = None
    has_records: bool = True

    def summarise(self, deadline: DeadlineSpec | None = None) -> Summary:
        if deadline is not None and deadline.factor is not None:
            raise UserError(
                f"{self.path}: deadline {deadline} needs each session's lower bound, which AIPerf "
                "does not record; give the deadline in seconds"
            )
        if not self.has_records and self.figures is not None:
            return _aggregate_summary(self.figures, self.label, deadline)
        s = RunData.summarise(self, deadline)
        # The records' ideal cached tokens are 0 for want of a figure: the ideal is unknown.
        return msgspec.structs.replace(
            s,
            cache=msgspec.structs.replace(s.cache, ideal_ratio=None, achieved_vs_ideal=None),
            by_turn=[msgspec.structs.replace(t, ideal_ratio=None) for t in s.by_turn],
        )


def _paths(path: Path) -> tuple[Path | None, Path | None]:
    """(aggregate, record export) of the export ``path`` names, each None when absent."""
    if path.is_dir():
        agg, rec = path / AGGREGATE, path / RECORDS
    elif path.name in (AGGREGATE, RECORDS):
        agg, rec = path.with_name(AGGREGATE), path.with_name(RECORDS)
    else:  # --profile-export-prefix: foo.json and foo.jsonl
        agg, rec = path.with_suffix(".json"), path.with_suffix(".jsonl")
    return (agg if agg.is_file() else None), (rec if rec.is_file() else None)


def is_export(path: str | Path) -> bool:
    """Whether ``path`` names an AIPerf export: a ``.json`` / ``.jsonl`` file, or a directory
    holding one under AIPerf's default names."""
    p = Path(path)
    if p.is_file():
        return p.suffix in (".json", ".jsonl")
    return p.is_dir() and any(_paths(p))


def load_any(path: str | Path) -> RunData:
    """A kvharness run directory (:func:`~kvharness.report.io.load_run`), or an AIPerf export
    where ``path`` is one: what ``kvharness report`` reads."""
    p = Path(path)
    if not (p / KV_RECORDS).is_file() and is_export(p):
        return load_export(p)
    return load_run(p)


def load_export(path: str | Path) -> AIPerfRun:
    """Read an AIPerf export (see the module docstring) as a run."""
    p = Path(path)
    if p.is_file() and (p.parent / KV_RECORDS).is_file():
        raise UserError(f"{p}: a file of a kvharness run; give its directory {p.parent}")
    for kind in ("_raw.jsonl", "_timeslices.json", "_gpu_telemetry.jsonl", "_server_metrics.json"):
        if p.is_file() and p.name.endswith(kind):
            raise UserError(f"{p}: AIPerf's {kind[1:]} export; give its {RECORDS} or {AGGREGATE}")
    agg_path, rec_path = _paths(p)
    if agg_path is None and rec_path is None:
        raise UserError(f"{p}: no AIPerf export ({AGGREGATE} or {RECORDS})")
    figures: AIPerfFigures | None = None
    config: dict[str, Any] = {}
    if agg_path is not None:
        figures, config = _read_aggregate(agg_path)
    home = (agg_path or rec_path or p).parent
    stem = (agg_path or rec_path or p).stem
    name = home.resolve().name if stem in (Path(AGGREGATE).stem, Path(RECORDS).stem) else stem
    config = {"label": f"aiperf:{name}", "source": "aiperf", **config}
    records: list[TurnRecord] = []
    expected = None
    if rec_path is not None:
        urls = figures.urls if figures is not None else []
        replica = urls[0] if len(urls) == 1 else "aiperf"
        records, instances = _read_records(rec_path, replica)
        if (home / INPUTS).is_file():
            planned = _read_planned(home / INPUTS)
            expected = {s: planned[c] for s, c in instances.items() if c in planned}
    return AIPerfRun(
        p,
        records,
        config,
        None,
        expected or None,
        figures=figures,
        has_records=rec_path is not None,
    )


# --- the record export ------------------------------------------------------------------------


class _Meta(msgspec.Struct):
    request_start_ns: int
    request_end_ns: int
    credit_issued_ns: int | None = None
    conversation_id: str | None = None
    turn_index: int | None = None
    x_correlation_id: str | None = None
    session_num: int | None = None
    benchmark_phase: str = "profiling"
    was_cancelled: bool = False
    context_overflow_skip: bool = False


class _Error(msgspec.Struct):
    message: str = ""
    code: int | None = None
    type: str | None = None


class _Line(msgspec.Struct):
    metadata: _Meta
    metrics: dict[str, msgspec.Raw] = {}
    error: _Error | None = None


class _Value(msgspec.Struct):
    value: float
    unit: str


_line = msgspec.json.Decoder(_Line)
_value = msgspec.json.Decoder(_Value)


def _metric(where: str, lineno: int, line: _Line, name: str, unit: str) -> float | None:
    """Metric ``name`` of a line in seconds (``unit`` "s") or tokens (``unit`` "tokens")."""
    raw = line.metrics.get(name)
    if raw is None:
        return None
    try:
        v = _value.decode(raw)
    except msgspec.DecodeError as err:
        raise FormatError(where, lineno, f"metric {name}: {err}") from None
    scale = _SECONDS.get(v.unit) if unit == "s" else (1.0 if v.unit == unit else None)
    if scale is None or not math.isfinite(v.value) or v.value < 0:
        raise FormatError(where, lineno, f"metric {name}: bad value {v.value!r} {v.unit!r}")
    return v.value * scale


def _error_text(e: _Error | None, cancelled: bool = False) -> str | None:
    """A failure as kvharness words it: ``"http 503: message"``, ``"TYPE: message"``."""
    if e is None:
        return "cancelled" if cancelled else None
    message = " ".join(e.message.split())[:200]
    if e.code is not None and e.code >= 400:
        return f"http {e.code}: {message}"
    return f"{e.type or 'error'}: {message}"


def _read_records(path: Path, replica: str) -> tuple[list[TurnRecord], dict[str, str]]:
    """The records of a record export, and each session's conversation id."""
    where = str(path)
    data = path.read_bytes().splitlines(keepends=True)
    lines: list[tuple[int, _Line]] = []
    for lineno, raw in enumerate(data, start=1):
        if not raw.strip():
            continue
        try:
            line = _line.decode(raw)
        except msgspec.DecodeError as err:
            if lineno == len(data) and not raw.endswith(b"\n"):
                break  # a torn last line: AIPerf was stopped mid-write
            raise FormatError(where, lineno, f"not an AIPerf record: {err}") from None
        m = line.metadata
        if m.benchmark_phase != "warmup" and not m.context_overflow_skip:
            lines.append((lineno, line))
    if not lines:
        return [], {}
    t0 = min(min(m.request_start_ns, m.credit_issued_ns or m.request_start_ns)
             for m in (x.metadata for _, x in lines))  # fmt: skip
    names = _session_names([x.metadata for _, x in lines])
    out = []
    for (lineno, line), (session, _) in zip(lines, names, strict=True):
        m = line.metadata
        sent = (m.request_start_ns - t0) / 1e9
        error = _error_text(line.error, m.was_cancelled)
        ttft = _metric(where, lineno, line, "time_to_first_token", "s")
        latency = _metric(where, lineno, line, "request_latency", "s")
        if error is None and latency is None:
            raise FormatError(where, lineno, "a request without error has no request_latency")
        prompt = _metric(where, lineno, line, "usage_prompt_tokens", "tokens")
        if prompt is None:
            prompt = _metric(where, lineno, line, "input_sequence_length", "tokens")
        output = _metric(where, lineno, line, "usage_completion_tokens", "tokens")
        if output is None:
            output = _metric(where, lineno, line, "output_sequence_length", "tokens")
        cached = _metric(where, lineno, line, "usage_prompt_cache_read_tokens", "tokens")
        r = TurnRecord(
            session=session,
            turn=m.turn_index if m.turn_index is not None else 0,
            replica=replica,
            intended=((m.credit_issued_ns or m.request_start_ns) - t0) / 1e9,
            sent=sent,
            first_token=None if ttft is None else sent + ttft,
            done=None if error is not None or latency is None else sent + latency,
            prompt_tokens=int(prompt or 0),
            cached_tokens=None if cached is None else int(cached),
            ideal_cached_tokens=0,
            output_tokens=int(output or 0) if error is None else 0,
            error=error,
        )
        why = check_record(r)
        if why is not None:
            raise FormatError(where, lineno, f"bad record: {why}")
        out.append(r)
    return out, dict(names)


def _session_names(metas: list[_Meta]) -> list[tuple[str, str]]:
    """Per line, (session name, conversation id): the conversation id, suffixed ``#k`` when the
    conversation ran more than once (k-th distinct correlation id by first request)."""
    runs: dict[str, dict[str, int]] = defaultdict(dict)  # conversation -> correlation -> first
    keys = []
    for m in metas:
        conv = m.conversation_id or m.x_correlation_id or f"request-{m.session_num}"
        corr = m.x_correlation_id or conv
        first = runs[conv].get(corr)
        runs[conv][corr] = m.request_start_ns if first is None else min(first, m.request_start_ns)
        keys.append((conv, corr))
    rank = {
        (conv, corr): i
        for conv, seen in runs.items()
        for i, corr in enumerate(sorted(seen, key=lambda c: (seen[c], c)), start=1)
    }
    return [
        (conv if len(runs[conv]) == 1 else f"{conv}#{rank[conv, corr]}", conv)
        for conv, corr in keys
    ]


class _Planned(msgspec.Struct):
    session_id: str
    payloads: list[msgspec.Raw]


class _Inputs(msgspec.Struct):
    data: list[_Planned]


def _read_planned(path: Path) -> dict[str, int]:
    """{conversation id: turns planned} from AIPerf's ``inputs.json``."""
    try:
        inputs = msgspec.json.decode(path.read_bytes(), type=_Inputs)
    except msgspec.DecodeError as err:
        raise FormatError(str(path), None, f"not AIPerf's inputs: {err}") from None
    return {c.session_id: len(c.payloads) for c in inputs.data}


# --- the aggregate ----------------------------------------------------------------------------


class _Stat(msgspec.Struct):
    unit: str
    avg: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    count: int | None = None


class _ErrorCount(msgspec.Struct):
    error_details: _Error
    count: int


def _line_of(text: str, key: str) -> int | None:
    at = text.find(f'"{key}"')
    return None if at < 0 else text.count("\n", 0, at) + 1


def _read_aggregate(path: Path) -> tuple[AIPerfFigures, dict[str, Any]]:
    """AIPerf's figures, and what the run's config records (version, command)."""
    where = str(path)
    doc: dict[str, Any] = read_json(path, dict, "a JSON object (AIPerf's aggregate export)")

    def fault(key: str, why: str) -> FormatError:
        return FormatError(where, _line_of(path.read_text(encoding="utf-8"), key), f"{key}: {why}")

    def stat(key: str) -> _Stat | None:
        if doc.get(key) is None:
            return None
        try:
            return msgspec.convert(doc[key], _Stat)
        except msgspec.ValidationError as err:
            raise fault(key, str(err)) from None

    def scalar(key: str, unit: str | None = None) -> float | None:
        s = stat(key)
        if s is None or s.avg is None:
            return None
        if unit == "s":
            if s.unit not in _SECONDS:
                raise fault(key, f"unit {s.unit!r} is not a time")
            return s.avg * _SECONDS[s.unit]
        return s.avg / 100 if s.unit == "%" else s.avg

    def count(key: str) -> int | None:
        v = scalar(key)
        return None if v is None else round(v)

    def dist_of(key: str) -> Dist | None:
        s = stat(key)
        if s is None:
            return None
        k = _SECONDS.get(s.unit)
        if k is None:
            raise fault(key, f"unit {s.unit!r} is not a time")
        vals = [None if v is None else v * k for v in (s.avg, s.p50, s.p90, s.p99, s.max)]
        return Dist(s.count or 0, *vals)

    if not ("aiperf_version" in doc or "request_count" in doc or "schema_version" in doc):
        raise FormatError(where, 1, "not AIPerf's aggregate export (no aiperf_version)")
    try:
        summary = msgspec.convert(doc.get("error_summary") or [], list[_ErrorCount])
    except msgspec.ValidationError as err:
        raise fault("error_summary", str(err)) from None
    errors: dict[str, int] = defaultdict(int)
    for e in summary:
        errors[error_cause(_error_text(e.error_details) or "")] += e.count
    endpoint = (doc.get("input_config") or {}).get("endpoint") or {}
    urls = endpoint.get("urls") if isinstance(endpoint, dict) else None
    run_info = doc.get("run_info")
    command = run_info.get("cli_command") if isinstance(run_info, dict) else None
    figures = AIPerfFigures(
        version=doc.get("aiperf_version") if isinstance(doc.get("aiperf_version"), str) else None,
        requests_ok=count("request_count"),
        failed=count("error_request_count") or sum(errors.values()),
        errors=dict(sorted(errors.items())),
        duration=scalar("benchmark_duration", "s"),
        requests_per_s=scalar("request_throughput"),
        input_tokens_per_s=scalar("input_token_throughput"),
        output_tokens_per_s=scalar("output_token_throughput"),
        ttft=dist_of("time_to_first_token"),
        itl=dist_of("inter_token_latency"),
        latency=dist_of("request_latency"),
        input_tokens=count("total_isl"),
        output_tokens=count("total_osl"),
        usage_prompt_tokens=count("total_usage_prompt_tokens"),
        cached_ratio=scalar("overall_usage_prompt_cache_read_pct"),
        urls=[u for u in urls if isinstance(u, str)] if isinstance(urls, list) else [],
    )
    config = {"aiperf_version": figures.version, "aiperf_command": command}
    return figures, {k: v for k, v in config.items() if v is not None}


def _aggregate_summary(f: AIPerfFigures, label: str, deadline: DeadlineSpec | None) -> Summary:
    """The summary that can be had from AIPerf's aggregate alone (see the module docstring)."""
    ok = f.requests_ok or 0
    prompt = f.usage_prompt_tokens if f.usage_prompt_tokens is not None else f.input_tokens
    cached = None if f.cached_ratio is None or prompt is None else round(f.cached_ratio * prompt)
    none = Dist(0)
    return Summary(
        label=label,
        deadline=None if deadline is None else deadline.seconds,
        records=ok + (f.failed or 0),
        turns_ok=ok,
        sessions=0,
        sessions_completed=0,
        sessions_within_deadline=0,
        span=f.duration or 0.0,
        goodput=None,
        ttft=f.ttft or none,
        ttft_intended=none,
        itl=f.itl or none,
        e2e=f.latency or none,
        lag=none,
        makespan=none,
        breakdown=None,
        by_turn=[],
        cache=CacheStats(
            prompt_tokens=(prompt or 0) if cached is not None else 0,
            cached_tokens=cached or 0,
            ideal_cached_tokens=0,
            unreported=0 if cached is not None else ok,
            achieved_ratio=f.cached_ratio,
            ideal_ratio=None,
            achieved_vs_ideal=None,
        ),
        errors=f.errors or ({"unknown": f.failed} if f.failed else {}),
        replicas=[],
        imbalance=None,
        output_tokens=f.output_tokens or 0,
        throughput=Throughput(
            duration=f.duration or 0.0,
            requests_per_s=f.requests_per_s,
            input_tokens_per_s=f.input_tokens_per_s,
            output_tokens_per_s=f.output_tokens_per_s,
            input_tokens=f.input_tokens or 0,
        ),
    )


# --- AIPerf's figures beside kvharness's --------------------------------------------------------


def render_own_figures(run: RunData, summary: Summary) -> Table | None:
    """AIPerf's own figures for ``run`` beside the ones kvharness recomputed from its records
    (``summary``); None for a run that is not AIPerf's or has no aggregate."""
    if not isinstance(run, AIPerfRun) or run.figures is None:
        return None
    f, s = run.figures, summary
    mine = run.has_records
    tp = s.throughput
    rows: list[tuple[str, float | None, float | None, str]] = [
        ("requests ok", _num(f.requests_ok), float(s.turns_ok), "count"),
        ("requests failed", _num(f.failed), float(s.error_count), "count"),
        ("request throughput (req/s)", f.requests_per_s, tp.requests_per_s if tp else None, "/s"),
        ("output tokens", _num(f.output_tokens), float(s.output_tokens), "count"),
        ("cached / prompt tokens", f.cached_ratio, s.cache.achieved_ratio, "ratio"),
    ]
    for name, aiperf, recomputed in (("TTFT", f.ttft, s.ttft), ("ITL", f.itl, s.itl),
                                     ("end-to-end", f.latency, s.e2e)):  # fmt: skip
        for stat in ("mean", "p50", "p90", "p99"):
            theirs = None if aiperf is None else getattr(aiperf, stat)
            rows.append((f"{name} {stat}", theirs, getattr(recomputed, stat), "s"))
    t = Table(
        title=f"AIPerf's own figures ({s.label})",
        title_justify="left",
        caption=None if mine else "no record export: kvharness has only AIPerf's figures",
        caption_justify="left",
    )
    t.add_column("figure")
    t.add_column(f"AIPerf {f.version or ''}".strip(), justify="right")
    t.add_column("kvharness (records)", justify="right")
    for name, a, k, unit in rows:
        t.add_row(name, fmt_value(a, unit), fmt_value(k, unit) if mine else "-")
    return t


def _num(v: int | None) -> float | None:
    return None if v is None else float(v)
