"""What ``kvharness bench`` prints: the report's tables, a few client-side figures, and the
servers' own prefix-cache counters. Every figure is the report's (:mod:`kvharness.report.metrics`
defines them); this module only lays them out."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kvharness.bench import scrape
from kvharness.report.metrics import Summary, summarise
from kvharness.report.records import TurnRecord

__all__ = ["client_figures", "render_result", "render_side_by_side"]


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f} ms"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


ROWS: tuple[tuple[str, Callable[[Summary], str]], ...] = (
    ("turns ok", lambda s: str(s.turns_ok)),
    ("failed attempts", lambda s: str(s.records - s.turns_ok)),
    ("TTFT mean", lambda s: _ms(s.ttft.mean)),
    ("TTFT p50", lambda s: _ms(s.ttft.p50)),
    ("TTFT p99", lambda s: _ms(s.ttft.p99)),
    ("TTFT from intended p50", lambda s: _ms(s.ttft_intended.p50)),
    ("TTFT from intended p99", lambda s: _ms(s.ttft_intended.p99)),
    ("end-to-end mean", lambda s: _ms(s.e2e.mean)),
    ("cached / prompt tokens", lambda s: _ratio(s.cache.achieved_ratio)),
    ("ideal cached / prompt", lambda s: _ratio(s.cache.ideal_ratio)),
    ("send lag p50", lambda s: _ms(s.lag.p50)),
    ("send lag p99", lambda s: _ms(s.lag.p99)),
    ("send lag max", lambda s: _ms(s.lag.max)),
)
"""The client-side table's rows: label, and the Summary figure it shows."""


def client_figures(records: Sequence[TurnRecord], summary: Summary | None) -> Summary:
    """The run's Summary: ``summary`` when the report was written, else computed from the
    records (the figures of the client table do not depend on the deadline)."""
    return summary if summary is not None else summarise(records)


def _client_table(labels: Sequence[str], summaries: Sequence[Summary]) -> Table:
    t = Table(title="Client-side figures", title_justify="left")
    t.add_column("")
    for label in labels:
        t.add_column(label, justify="right")
    for name, get in ROWS:
        t.add_row(name, *(get(s) for s in summaries))
    return t


def _server_line(server: dict[str, dict[str, float]]) -> Text:
    ratio = scrape.hit_ratio(server)
    if ratio is None:
        return Text(
            "server prefix-cache counters: not exposed by the target(s) (behind a router, "
            "point --metrics-url at the engines)"
        )
    q = sum(d.get("vllm:prefix_cache_queries", 0.0) for d in server.values())
    line = Text(
        f"server prefix cache over the run: {ratio * 100:.1f}% of {q:,.0f} queried tokens hit "
        "(vllm:prefix_cache_hits / vllm:prefix_cache_queries)"
    )
    means = scrape.means(server)
    if means:
        figures = ", ".join(f"{scrape.MEANS[k]} {_ms(v)}" for k, v in means.items())
        line.append(
            f"\nthe engines' own means over the run: {figures} (their histograms' sum / count, "
            "timed inside the engine: no HTTP or client time)"
        )
    return line


def render_result(label: str, records: Sequence[TurnRecord], summary: Summary | None,
                  server: dict[str, dict[str, float]]) -> RenderableType:  # fmt: skip
    """One run: the report's summary tables (when written), client figures, server counters."""
    parts: list[RenderableType] = []
    if summary is not None:
        from kvharness.report.table import render_summary

        parts.append(render_summary(summary))
    parts.append(_client_table([label], [client_figures(records, summary)]))
    parts.append(_server_line(server))
    return Group(*parts)


def render_side_by_side(
    labels: Sequence[str],
    records: Sequence[Sequence[TurnRecord]],
    summaries: Sequence[Summary | None],
    servers: Sequence[dict[str, dict[str, float]]],
) -> RenderableType:
    """Session and isolated runs side by side, with the differences an agent team should see."""
    parts: list[RenderableType] = []
    written = [s for s in summaries if s is not None]
    if len(written) == len(summaries):
        from kvharness.report.table import render_comparison

        parts.append(render_comparison(written))
    stats = [client_figures(r, s) for r, s in zip(records, summaries, strict=True)]
    parts.append(_client_table(labels, stats))
    for label, server in zip(labels, servers, strict=True):
        parts.append(Text.assemble(f"{label}: ", _server_line(server)))
    a, b = stats[0], stats[-1]
    if a.ttft.mean is not None and b.ttft.mean is not None:
        parts.append(
            Text(
                f"{labels[-1]} vs {labels[0]}: mean TTFT {_ms(b.ttft.mean)} vs {_ms(a.ttft.mean)} "
                f"({(b.ttft.mean - a.ttft.mean) * 1000:+.1f} ms); cached ratio "
                f"{_ratio(b.cache.achieved_ratio)} vs {_ratio(a.cache.achieved_ratio)}",
                style="bold",
            )
        )
    return Group(*parts)
