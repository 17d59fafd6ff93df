"""What ``kvharness bench`` prints: the report's tables when :mod:`kvharness.report` is there, and
always a few client-side figures computed here from the records (send lag, mean TTFT, cache)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kvharness.bench import scrape
from kvharness.report.records import TurnRecord

__all__ = ["QuickStats", "quick_stats", "render_result", "render_side_by_side"]


class QuickStats(NamedTuple):
    """Figures over successful attempts (seconds; ratios of prompt tokens); lag over all."""

    turns_ok: int
    attempts_failed: int
    ttft_mean: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    e2e_mean: float | None
    ttft_intended_p50: float | None
    """TTFT measured from when the turn should have gone out (coordinated-omission free)."""
    ttft_intended_p99: float | None
    cached_ratio: float | None
    ideal_ratio: float | None
    lag_p50: float | None
    lag_p99: float | None
    lag_max: float | None


def _pct(a: npt.NDArray[np.float64], q: float) -> float | None:
    return float(np.percentile(a, q)) if a.size else None


def quick_stats(records: Sequence[TurnRecord]) -> QuickStats:
    ok = [r for r in records if r.ok]
    ttft = np.array([r.first_token - r.sent for r in ok if r.first_token is not None])
    e2e = np.array([r.done - r.sent for r in ok if r.done is not None])
    ttft_i = np.array([r.first_token - r.intended for r in ok if r.first_token is not None])
    lag = np.array([r.sent - r.intended for r in records])
    rep = [r for r in ok if r.cached_tokens is not None]
    prompt = sum(r.prompt_tokens for r in rep)
    return QuickStats(
        turns_ok=len(ok),
        attempts_failed=len(records) - len(ok),
        ttft_mean=float(ttft.mean()) if ttft.size else None,
        ttft_p50=_pct(ttft, 50),
        ttft_p99=_pct(ttft, 99),
        e2e_mean=float(e2e.mean()) if e2e.size else None,
        ttft_intended_p50=_pct(ttft_i, 50),
        ttft_intended_p99=_pct(ttft_i, 99),
        cached_ratio=sum(r.cached_tokens or 0 for r in rep) / prompt if prompt else None,
        ideal_ratio=sum(r.ideal_cached_tokens for r in rep) / prompt if prompt else None,
        lag_p50=_pct(lag, 50),
        lag_p99=_pct(lag, 99),
        lag_max=float(lag.max()) if lag.size else None,
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f} ms"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _client_table(labels: Sequence[str], stats: Sequence[QuickStats]) -> Table:
    t = Table(title="Client-side figures", title_justify="left")
    t.add_column("")
    for label in labels:
        t.add_column(label, justify="right")
    rows: list[tuple[str, Callable[[QuickStats], str]]] = [
        ("turns ok", lambda s: str(s.turns_ok)),
        ("failed attempts", lambda s: str(s.attempts_failed)),
        ("TTFT mean", lambda s: _ms(s.ttft_mean)),
        ("TTFT p50", lambda s: _ms(s.ttft_p50)),
        ("TTFT p99", lambda s: _ms(s.ttft_p99)),
        ("TTFT from intended p50", lambda s: _ms(s.ttft_intended_p50)),
        ("TTFT from intended p99", lambda s: _ms(s.ttft_intended_p99)),
        ("end-to-end mean", lambda s: _ms(s.e2e_mean)),
        ("cached / prompt tokens", lambda s: _ratio(s.cached_ratio)),
        ("ideal cached / prompt", lambda s: _ratio(s.ideal_ratio)),
        ("send lag p50", lambda s: _ms(s.lag_p50)),
        ("send lag p99", lambda s: _ms(s.lag_p99)),
        ("send lag max", lambda s: _ms(s.lag_max)),
    ]
    for name, get in rows:
        t.add_row(name, *(get(s) for s in stats))
    return t


def _server_line(server: dict[str, dict[str, float]]) -> Text:
    ratio = scrape.hit_ratio(server)
    if ratio is None:
        return Text("server prefix-cache counters: not exposed by the target(s)")
    q = sum(d.get("vllm:prefix_cache_queries", 0.0) for d in server.values())
    return Text(
        f"server prefix cache over the run: {ratio * 100:.1f}% of {q:,.0f} queried tokens hit "
        "(vllm:prefix_cache_hits / vllm:prefix_cache_queries)"
    )


def render_result(label: str, records: Sequence[TurnRecord], summary: object,
                  server: dict[str, dict[str, float]]) -> RenderableType:  # fmt: skip
    """One run: the report's summary tables (if available), client figures, server counters."""
    parts: list[RenderableType] = []
    if summary is not None:
        from kvharness.report.table import render_summary

        parts.append(render_summary(summary))  # type: ignore[arg-type]
    parts.append(_client_table([label], [quick_stats(records)]))
    parts.append(_server_line(server))
    return Group(*parts)


def render_side_by_side(
    labels: Sequence[str],
    records: Sequence[Sequence[TurnRecord]],
    summaries: Sequence[object],
    servers: Sequence[dict[str, dict[str, float]]],
) -> RenderableType:
    """Session and isolated runs side by side, with the differences an agent team should see."""
    parts: list[RenderableType] = []
    if all(s is not None for s in summaries):
        from kvharness.report.table import render_comparison

        parts.append(render_comparison(summaries))  # type: ignore[arg-type]
    stats = [quick_stats(r) for r in records]
    parts.append(_client_table(labels, stats))
    for label, server in zip(labels, servers, strict=True):
        parts.append(Text.assemble(f"{label}: ", _server_line(server)))
    a, b = stats[0], stats[-1]
    if a.ttft_mean is not None and b.ttft_mean is not None:
        parts.append(
            Text(
                f"{labels[-1]} vs {labels[0]}: mean TTFT {_ms(b.ttft_mean)} vs {_ms(a.ttft_mean)} "
                f"({(b.ttft_mean - a.ttft_mean) * 1000:+.1f} ms); cached ratio "
                f"{_ratio(b.cached_ratio)} vs {_ratio(a.cached_ratio)}",
                style="bold",
            )
        )
    return Group(*parts)
