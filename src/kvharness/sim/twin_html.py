"""The twin's page: predicted against measured, turn by turn (inline SVG, no network)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from kvharness.report.html import standalone_page
from kvharness.report.svg import PALETTE, Series, line_chart, scatter

if TYPE_CHECKING:
    from kvharness.sim.twin import TurnPair, TwinSummary

__all__ = ["render_twin"]


def _s(v: float) -> str:
    return f"{v:.3g} s"


def _row(name: str, value: str) -> str:
    return f"<tr><td>{escape(name)}</td><td>{escape(value)}</td></tr>"


def render_twin(name: str, pairs: Sequence[TurnPair], summary: TwinSummary) -> str:
    """Scatter plots of predicted against measured end-to-end time and TTFT, the run's
    timeline (turns done over time, both worlds), and the summary table."""

    def points(which: str) -> list[tuple[float, float, str]]:
        out = []
        for p in pairs:
            m, q = p.measured, p.predicted
            if which == "e2e":
                x, y = m.e2e or 0.0, q.e2e or 0.0
            else:
                x, y = m.ttft or 0.0, q.ttft or 0.0
            out.append((x, y, f"{p.session} turn {p.turn}: measured {x:.3f} s, twin {y:.3f} s"))
        return out

    def done_curve(measured: bool) -> tuple[list[float], list[float]]:
        recs = [p.measured if measured else p.predicted for p in pairs]
        t0 = min(r.sent for r in recs)
        times = sorted((r.done or r.sent) - t0 for r in recs)
        return times, [float(i + 1) for i in range(len(times))]

    xm, ym = done_curve(True)
    xp, yp = done_curve(False)
    plots = [
        scatter(points("e2e"), title="end-to-end per turn", xlabel="measured (s)",
                ylabel="twin (s)", plot_id="twin-e2e", fmt=_s),
        scatter(points("ttft"), title="time to first token per turn", xlabel="measured (s)",
                ylabel="twin (s)", plot_id="twin-ttft", fmt=_s, color=PALETTE[1]),
        line_chart([Series("measured", xm, ym, PALETTE[0]), Series("twin", xp, yp, PALETTE[1], True)],
                   title="turns done over the run", xlabel="seconds", ylabel="turns",
                   plot_id="twin-timeline"),
    ]  # fmt: skip
    s = summary
    rows = [
        ("turns compared", str(s.turns)),
        ("end-to-end MAPE (bias)", f"{s.e2e_mape:.1%} ({s.e2e_bias:+.1%})"),
        ("TTFT MAPE (bias)", f"{s.ttft_mape:.1%} ({s.ttft_bias:+.1%})"),
        ("TTFT p50 / p90 error", f"{s.ttft_p50:+.1%} / {s.ttft_p90:+.1%}"),
        ("run makespan: twin / measured",
         f"{s.predicted_makespan_s:.2f} s / {s.measured_makespan_s:.2f} s ({s.makespan:+.1%})"),
        ("session makespan error (mean)", f"{s.session_makespan:+.1%}"),
        ("throughput error", f"{s.throughput:+.1%}"),
        ("cached tokens: twin / measured",
         f"{s.predicted_cached:.1%} / {s.measured_cached:.1%} ({s.cached_points:+.2f} points)"),
        ("worst turns, what was off", ", ".join(f"{k} {v}" for k, v in s.blame.items()) or "-"),
    ]  # fmt: skip
    table = "<h2>Twin against the run</h2><table>" + "".join(_row(a, b) for a, b in rows)
    return standalone_page(f"digital twin of {name}", plots, table + "</table>")
