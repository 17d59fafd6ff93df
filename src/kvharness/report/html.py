"""One self-contained HTML report (inline SVG, inline CSS and script; nothing from the network).

Plots: TTFT distribution (CDF), TTFT by turn index, time breakdown per session (stacked bars) and
per run, cache hit ratio achieved vs ideal (per run and by turn index); then the tables. Several
runs are overlaid in one colour each, the first run being the baseline of the comparison table.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

import numpy as np

from kvharness.report._columns import Columns
from kvharness.report.compare import compare, fmt_value
from kvharness.report.metrics import BREAKDOWN_PARTS, Summary, session_times
from kvharness.report.records import TurnRecord
from kvharness.report.svg import PALETTE, Series, grouped_bars, line_chart, stacked_hbars

__all__ = ["render_html", "standalone_page", "write_html"]

Run = tuple[Summary, Sequence[TurnRecord]]
_Run = tuple[Summary, Columns]

PART_COLORS = {
    "lag": "#7f7f7f",
    "queue": "#ff7f0e",
    "prefill": "#d62728",
    "queue_prefill": "#e8772e",
    "decode": "#1f77b4",
    "tool": "#2ca02c",
    "failed": "#000000",
}
_CDF_POINTS = 300
_SESSION_BARS = 40
_MAX_REPLICA_BARS = 32

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
.plots{display:flex;flex-wrap:wrap;gap:12px}
svg.plot{background:#fff;border:1px solid #ddd;font-size:11px}
svg .title{font-size:14px;font-weight:600}svg .small{font-size:9px}
svg .grid{stroke:#eee}svg .frame{fill:none;stroke:#999}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
.better{color:#137333}.worse{color:#b3261e}.same{color:#777}.warn{color:#b06000}
#tip{position:absolute;display:none;background:#333;color:#fff;padding:3px 6px;border-radius:3px;
font-size:12px;pointer-events:none}
"""

# Hover tooltips for every element with data-tip; marks the page as rendered last, so a test can
# tell that the script ran to the end (an exception would leave data-ok unset).
_JS = """
(function () {
  var tip = document.createElement('div');
  tip.id = 'tip';
  document.body.appendChild(tip);
  var els = document.querySelectorAll('[data-tip]');
  for (var i = 0; i < els.length; i++) {
    (function (el) {
      el.addEventListener('mousemove', function (e) {
        tip.textContent = el.getAttribute('data-tip');
        tip.style.left = (e.pageX + 12) + 'px';
        tip.style.top = (e.pageY + 12) + 'px';
        tip.style.display = 'block';
      });
      el.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
    })(els[i]);
  }
  document.body.setAttribute('data-plots', String(document.querySelectorAll('svg.plot').length));
  document.body.setAttribute('data-tips', String(els.length));
  document.body.setAttribute('data-ok', '1');
})();
"""


def _sec(v: float) -> str:
    return fmt_value(v, "s")


def _sec_tick(v: float) -> str:
    """Compact seconds for axis ticks: 0, 250 ms, 1.5 s."""
    if v == 0:
        return "0"
    return f"{v * 1e3:.4g} ms" if abs(v) < 1 else f"{v:.4g} s"


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%"


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _ttft_cdf(runs: Sequence[_Run]) -> str:
    series = []
    for i, (s, c) in enumerate(runs):
        has = c.ok & ~np.isnan(c.first)
        t = np.sort(c.first[has] - c.sent[has])
        if t.size == 0:
            continue
        q = np.linspace(0.0, 1.0, min(_CDF_POINTS, t.size))
        xs = np.quantile(t, q)
        series.append(Series(s.label, xs.tolist(), q.tolist(), _color(i)))
    return line_chart(
        series, title="TTFT distribution (CDF)", xlabel="time to first token",
        ylabel="fraction of turns", plot_id="plot-ttft-cdf", xf=_sec_tick, yf=_pct,
    )  # fmt: skip


def _ttft_by_turn(runs: Sequence[_Run]) -> str:
    series = []
    for i, (s, _) in enumerate(runs):
        rows = [b for b in s.by_turn if b.ttft_p50 is not None and b.ttft_p90 is not None]
        xs = [float(b.turn) for b in rows]
        series.append(Series(f"{s.label} p50", xs, [b.ttft_p50 or 0.0 for b in rows], _color(i)))
        series.append(
            Series(f"{s.label} p90", xs, [b.ttft_p90 or 0.0 for b in rows], _color(i), True)
        )
    return line_chart(
        [x for x in series if x.xs], title="TTFT by turn index", xlabel="turn index",
        ylabel="TTFT", plot_id="plot-ttft-by-turn", yf=_sec_tick, markers=True,
    )  # fmt: skip


def _parts_used(runs: Sequence[_Run]) -> list[str]:
    used = {k for s, _ in runs if s.breakdown for k, v in s.breakdown.parts().items() if v}
    return [k for k in BREAKDOWN_PARTS if k in used] or ["tool", "decode"]


def _session_bars(i: int, run: _Run, parts: list[str]) -> str:
    s, c = run
    times = sorted(session_times(c), key=lambda t: t.makespan)
    if len(times) > _SESSION_BARS:  # sessions at evenly spaced ranks of makespan, longest included
        picks = np.linspace(0, len(times) - 1, _SESSION_BARS).round().astype(int)
        times = [times[j] for j in sorted(set(picks.tolist()))]
    bars = [
        (t.session + ("" if t.completed else " ✗"), [getattr(t.breakdown, k) for k in parts])
        for t in reversed(times)
    ]
    return stacked_hbars(
        bars, [(k.replace("_", "+"), PART_COLORS[k]) for k in parts],
        title=f"Time per session — {s.label} (by makespan rank)", xlabel="seconds",
        plot_id=f"plot-sessions-{i}", xf=_sec_tick, tf=_sec,
    )  # fmt: skip


def _mean_breakdown(runs: Sequence[_Run], parts: list[str]) -> str:
    bars = [(s.label, [getattr(s.breakdown, k) for k in parts]) for s, _ in runs if s.breakdown]
    return stacked_hbars(
        bars, [(k.replace("_", "+"), PART_COLORS[k]) for k in parts],
        title="Mean completed session: where the time went", xlabel="seconds",
        plot_id="plot-breakdown", xf=_sec_tick, tf=_sec,
    )  # fmt: skip


def _cache_bars(runs: Sequence[_Run]) -> str:
    labels = [s.label for s, _ in runs]
    return grouped_bars(
        labels,
        [
            ("cached (achieved)", [s.cache.achieved_ratio for s, _ in runs], "#1f77b4"),
            ("ideal", [s.cache.ideal_ratio for s, _ in runs], "#bbbbbb"),
        ],
        title="Prompt tokens served from cache: achieved vs ideal",
        ylabel="share of prompt tokens", plot_id="plot-cache", yf=_pct,
    )  # fmt: skip


def _replica_load(runs: Sequence[_Run]) -> str | None:
    """Prompt tokens per replica, one bar per run; None with one replica or too many to draw."""
    names = sorted({x.replica for s, _ in runs for x in s.replicas})
    if not 1 < len(names) <= _MAX_REPLICA_BARS:
        return None
    series = []
    for i, (s, _) in enumerate(runs):
        load = {x.replica: float(x.prompt_tokens) for x in s.replicas}
        series.append((s.label, [load.get(n) for n in names], _color(i)))
    return grouped_bars(
        names, series, title="Prompt tokens per replica (load balance)", ylabel="prompt tokens",
        plot_id="plot-replicas",
    )  # fmt: skip


def _cache_by_turn(runs: Sequence[_Run]) -> str:
    series = []
    for i, (s, _) in enumerate(runs):
        a = [b for b in s.by_turn if b.cached_ratio is not None and b.ideal_ratio is not None]
        if not a:
            continue
        xs = [float(b.turn) for b in a]
        series.append(
            Series(f"{s.label} cached", xs, [b.cached_ratio or 0.0 for b in a], _color(i))
        )
        series.append(
            Series(f"{s.label} ideal", xs, [b.ideal_ratio or 0.0 for b in a], _color(i), True)
        )
    return line_chart(
        series, title="Cache hit ratio by turn index: achieved vs ideal", xlabel="turn index",
        ylabel="cached / prompt tokens", plot_id="plot-cache-by-turn", yf=_pct,
    )  # fmt: skip


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    h = "".join(f"<th>{escape(x)}</th>" for x in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _comparison_table(runs: Sequence[_Run]) -> str:
    cmp = compare([s for s, _ in runs])
    rows = []
    for m in cmp.metrics:
        cells = [escape(m.label), escape(m.better)]
        for i, v in enumerate(m.values):
            cell = escape(fmt_value(v, m.unit))
            pct, verdict = m.pct[i], m.verdict[i]
            if verdict not in ("baseline", "n/a") and pct is not None:
                cell += f' <span class="{verdict}">{pct:+.1f}% {verdict}</span>'
            elif verdict in ("better", "worse"):
                cell += f' <span class="{verdict}">{verdict}</span>'
            cells.append(cell)
        rows.append(cells)
    warn = "".join(f'<p class="warn">warning: {escape(w)}</p>' for w in cmp.warnings)
    return _table(["metric", "better", *cmp.labels], rows) + warn


def _detail_table(s: Summary) -> str:
    dists = [("TTFT", s.ttft), ("inter-token latency", s.itl), ("end-to-end", s.e2e),
             ("client send lag", s.lag), ("session makespan", s.makespan)]  # fmt: skip
    rows = [
        [escape(name), str(d.n), *(escape(_sec(x)) if x is not None else "-"
                                   for x in (d.mean, d.p50, d.p90, d.p99, d.max))]
        for name, d in dists
    ]  # fmt: skip
    out = _table(["per turn / session", "n", "mean", "p50", "p90", "p99", "max"], rows)
    facts = [
        ["sessions completed / all", f"{s.sessions_completed} / {s.sessions}"],
        ["within deadline", f"{s.sessions_within_deadline} (deadline {escape(s.deadline_text)})"],
        ["turns ok / attempts", f"{s.turns_ok} / {s.records}"],
        ["run span", escape(_sec(s.span))],
    ]  # fmt: skip
    facts += [[f"errors: {escape(k)}", str(v)] for k, v in s.errors.items()]
    if s.breakdown:
        total = s.breakdown.total
        facts += [
            [f"mean time: {k.replace('_', '+')}", f"{v:.3f} s ({v / total:.1%})" if total else "-"]
            for k, v in s.breakdown.parts().items()
            if v
        ]
    return out + _table(["fact", "value"], facts)


def render_html(runs: Sequence[Run], *, title: str | None = None) -> str:
    """The report page for one or several runs, each given as (summary, its records)."""
    if not runs:
        raise ValueError("no runs to report")
    return _page([(s, Columns(records)) for s, records in runs], title)


def _page(runs: Sequence[_Run], title: str | None) -> str:
    labels = ", ".join(s.label for s, _ in runs)
    title = title or f"kvharness report — {labels}"
    parts = _parts_used(runs)
    plots = [_ttft_cdf(runs), _ttft_by_turn(runs), _mean_breakdown(runs, parts)]
    plots += [_session_bars(i, run, parts) for i, run in enumerate(runs)]
    plots += [_cache_bars(runs), _cache_by_turn(runs)]
    plots += [p for p in (_replica_load(runs),) if p is not None]
    details = "".join(f"<h2>{escape(s.label)}</h2>{_detail_table(s)}" for s, _ in runs)
    heading = "Summary" if len(runs) == 1 else f"Compared against {escape(runs[0][0].label)}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{escape(title)}</h1><div class="plots">{"".join(plots)}</div>'
        f"<h2>{heading}</h2>{_comparison_table(runs)}{details}"
        f"<script>{_JS}</script></body></html>\n"
    )


def standalone_page(title: str, plots: Sequence[str], body: str = "") -> str:
    """A self-contained page in the report's style: ``plots`` (SVG strings) in a row, then
    ``body`` (HTML), the tooltip script last."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{escape(title)}</h1><div class="plots">{"".join(plots)}</div>{body}'
        f"<script>{_JS}</script></body></html>\n"
    )


def write_html(path: str | Path, runs: Sequence[Run], *, title: str | None = None) -> Path:
    out = Path(path)
    out.write_text(render_html(runs, title=title), encoding="utf-8")
    return out
