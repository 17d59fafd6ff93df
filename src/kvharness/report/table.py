"""Terminal tables (rich) for one run and for several runs side by side."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kvharness.report.compare import Comparison, MetricDelta, compare, fmt_value
from kvharness.report.metrics import Summary

__all__ = ["render_comparison", "render_summary"]

_MARK = {"better": ("better", "green"), "worse": ("worse", "red"), "same": ("same", "dim")}
_BY_TURN_ROWS = 12


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:,.1f}"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def _latency_table(s: Summary) -> Table:
    t = Table(title="Latency per request (successful attempts, ms)", title_justify="left")
    for col in ("metric", "n", "mean", "p50", "p90", "p99", "max"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for name, d in (
        ("time to first token", s.ttft),
        ("inter-token latency", s.itl),
        ("end-to-end", s.e2e),
        ("client send lag", s.lag),
    ):
        t.add_row(name, str(d.n), *(_ms(x) for x in (d.mean, d.p50, d.p90, d.p99, d.max)))
    return t


def _throughput_table(s: Summary) -> Table | None:
    tp = s.throughput
    if tp is None:
        return None
    t = Table(title="Throughput over the run", title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_row("requests ok / attempts", f"{s.turns_ok} / {s.records}")
    t.add_row("duration (first send to last end)", fmt_value(tp.duration, "s"))
    t.add_row("request throughput (req/s)", _rate(tp.requests_per_s))
    t.add_row("input token throughput (tok/s)", _rate(tp.input_tokens_per_s))
    t.add_row("output token throughput (tok/s)", _rate(tp.output_tokens_per_s))
    t.add_row("input / output tokens", f"{tp.input_tokens:,} / {s.output_tokens:,}")
    return t


def _sessions_table(s: Summary) -> Table:
    c = s.cache
    rows: list[tuple[str, str]] = []
    if s.session_view:
        m = s.makespan
        rows += [
            ("sessions (completed / all)", f"{s.sessions_completed} / {s.sessions}"),
            (f"completed within deadline ({s.deadline_text})", str(s.sessions_within_deadline)),
            ("run span", fmt_value(s.span, "s")),
            ("goodput", fmt_value(s.goodput, "/h")),
            (
                "session makespan mean / p50 / p90",
                " / ".join(fmt_value(x, "s") for x in (m.mean, m.p50, m.p90)),
            ),
        ]
    rows += [
        ("cached / prompt tokens", f"{fmt_value(c.achieved_ratio, 'ratio')} ({c.cached_tokens})"),
        ("ideal / prompt tokens", f"{fmt_value(c.ideal_ratio, 'ratio')} ({c.ideal_cached_tokens})"),
        ("cached vs ideal", fmt_value(c.achieved_vs_ideal, "ratio")),
    ]
    if c.unreported:
        rows.append(("turns without cached-token report", str(c.unreported)))
    if len(s.replicas) > 1:
        rows.append(
            (f"replica load max/mean ({len(s.replicas)} replicas)", fmt_value(s.imbalance, "x"))
        )
    for cause, n in s.errors.items():
        rows.append((f"errors: {cause}", str(n)))
    title = "Sessions and cache" if s.session_view else "Cache (a run of requests, not sessions)"
    t = Table(title=title, title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    for row in rows:
        t.add_row(*row)
    return t


def _breakdown_table(s: Summary) -> Table | None:
    if s.breakdown is None:
        return None
    t = Table(title="Where a completed session's time went (mean)", title_justify="left")
    t.add_column("part")
    t.add_column("seconds", justify="right")
    t.add_column("share", justify="right")
    total = s.breakdown.total
    for k, v in s.breakdown.parts().items():
        if v or k in ("tool", "decode"):
            t.add_row(
                k.replace("_", "+"), f"{v:.3f}", fmt_value(v / total if total else None, "ratio")
            )
    t.add_row("total = makespan mean", f"{total:.3f}", "100.0%", style="bold")
    return t


def _by_turn_table(s: Summary) -> Table | None:
    if not s.by_turn:
        return None
    t = Table(title="By turn index", title_justify="left")
    for col in ("turn", "n", "TTFT p50", "TTFT p90", "cached", "ideal"):
        t.add_column(col, justify="right")
    rows = s.by_turn
    if len(rows) > _BY_TURN_ROWS:  # first turns and the last, where the growth shows
        rows = rows[: _BY_TURN_ROWS - 2] + rows[-2:]
    for b in rows:
        t.add_row(
            str(b.turn),
            str(b.n),
            fmt_value(b.ttft_p50, "s"),
            fmt_value(b.ttft_p90, "s"),
            fmt_value(b.cached_ratio, "ratio"),
            fmt_value(b.ideal_ratio, "ratio"),
        )
    return t


def render_summary(summary: Summary) -> RenderableType:
    """The report of one run: latency and throughput per request (the figures every serving
    benchmark reports), cache, and for a run of agent sessions (:attr:`Summary.session_view`)
    its goodput, makespan, where the time went and the figures by turn index."""
    parts: list[RenderableType] = [Text(f"run: {summary.label}", style="bold")]
    tables = [_latency_table(summary), _throughput_table(summary), _sessions_table(summary)]
    if summary.session_view:
        tables += [_breakdown_table(summary), _by_turn_table(summary)]
    parts += [t for t in tables if t is not None]
    if summary.overlapping_turns:
        parts.append(
            Text(
                f"note: {summary.overlapping_turns} turns went out before their session's previous "
                "turn ended (not closed-loop): session makespan, goodput and breakdown do not "
                "describe agent sessions",
                style="yellow",
            )
        )
    if summary.records == 0:
        parts.append(Text("no records: nothing was measured", style="yellow"))
    return Group(*parts)


def _cell(m: MetricDelta, i: int, sep: str = " ") -> Text:
    """A value with its change against the baseline: ``750.0 ms ↓25.0% better``."""
    text = Text(fmt_value(m.values[i], m.unit))
    verdict, d, pct = m.verdict[i], m.delta[i], m.pct[i]
    if verdict == "baseline" or d is None:
        return text
    if verdict == "same":
        text.append(f"{sep}= same", style="dim")
        return text
    arrow = "↑" if d > 0 else "↓"
    change = f"{abs(pct):.1f}%" if pct is not None else fmt_value(abs(d), m.unit)
    text.append(f"{sep}{arrow}{change}")
    if verdict in _MARK:
        word, style = _MARK[verdict]
        text.append(f" {word}")
        text.stylize(style)
    return text


def render_comparison(
    summaries: Sequence[Summary],
    baseline: int = 0,
    *,
    rows_are_runs: bool = False,
    tolerance: float = 0.01,
) -> RenderableType:
    """Runs side by side with each value's change against ``summaries[baseline]``, marked better /
    worse / same (within ``tolerance``). Columns are runs, or rows are runs (the sim's policy table)
    with ``rows_are_runs``."""
    cmp: Comparison = compare(summaries, baseline=baseline, tolerance=tolerance)
    title = f"Runs compared against {cmp.labels[baseline]!r}"
    if rows_are_runs:
        t = Table(title=title, title_justify="left")
        t.add_column("run", no_wrap=True, min_width=max(map(len, cmp.labels)))
        for m in cmp.metrics:
            t.add_column(m.short, justify="right", min_width=len(m.short))
        for i, label in enumerate(cmp.labels):
            t.add_row(label, *(_cell(m, i, sep="\n") for m in cmp.metrics))
    else:
        t = Table(title=title, title_justify="left")
        t.add_column("metric")
        t.add_column("better", justify="center")
        for label in cmp.labels:
            t.add_column(label, justify="right")
        for m in cmp.metrics:
            t.add_row(m.label, m.better, *(_cell(m, i) for i in range(len(cmp.labels))))
    parts: list[RenderableType] = [t]
    parts += [Text(f"warning: {w}", style="yellow") for w in cmp.warnings]
    return Group(*parts)
