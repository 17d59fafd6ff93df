"""Inline SVG charts written in Python, so a report needs no network and no plotting library.

Each chart is a ``<svg class="plot" id=...>`` string; elements that carry a ``data-tip``
attribute get a hover tooltip from the report's inline script.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape
from typing import NamedTuple

__all__ = [
    "PALETTE",
    "Series",
    "grouped_bars",
    "line_chart",
    "nice_ticks",
    "scatter",
    "stacked_hbars",
]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")

W, H = 700, 320
ML, MR, MT, MB = 80, 150, 34, 46  # margins: left (y labels), right (legend), top (title), bottom


class Series(NamedTuple):
    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    color: str
    dashed: bool = False


Fmt = Callable[[float], str]


def _g(v: float) -> str:
    """Compact number: 0, 0.25, 12, 3.5k, 40M."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 12))
    return ticks


class _Frame:
    """Maps data to pixels inside the plotting area and draws axes, grid and labels."""

    def __init__(self, xt: list[float], yt: list[float]) -> None:
        self.x0, self.x1, self.y0, self.y1 = xt[0], xt[-1], yt[0], yt[-1]
        self.xt, self.yt = xt, yt

    def px(self, x: float) -> float:
        return ML + (x - self.x0) / ((self.x1 - self.x0) or 1.0) * (W - ML - MR)

    def py(self, y: float) -> float:
        return H - MB - (y - self.y0) / ((self.y1 - self.y0) or 1.0) * (H - MT - MB)

    def axes(self, xlabel: str, ylabel: str, xf: Fmt, yf: Fmt, xgrid: bool = True) -> list[str]:
        out = []
        for y in self.yt:
            p = self.py(y)
            out.append(f'<line x1="{ML}" x2="{W - MR}" y1="{p:.1f}" y2="{p:.1f}" class="grid"/>')
            out.append(
                f'<text x="{ML - 6}" y="{p + 4:.1f}" text-anchor="end">{escape(yf(y))}</text>'
            )
        for x in self.xt if xgrid else []:
            p = self.px(x)
            out.append(f'<line x1="{p:.1f}" x2="{p:.1f}" y1="{MT}" y2="{H - MB}" class="grid"/>')
            out.append(
                f'<text x="{p:.1f}" y="{H - MB + 16}" text-anchor="middle">{escape(xf(x))}</text>'
            )
        out.append(
            f'<rect x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}" class="frame"/>'
        )
        out.append(
            f'<text x="{(ML + W - MR) / 2}" y="{H - 8}" text-anchor="middle">{escape(xlabel)}</text>'
        )
        out.append(
            f'<text transform="translate(14,{(MT + H - MB) / 2}) rotate(-90)" text-anchor="middle">'
            f"{escape(ylabel)}</text>"
        )
        return out


def _fit(text: str, chars: int) -> str:
    """``text`` as a label's content, at most ``chars`` characters: a longer one ends in an
    ellipsis, with the whole text in a ``<title>`` (the browser shows it on hover)."""
    if len(text) <= chars:
        return escape(text)
    return f"{escape(text[: chars - 1].rstrip())}\u2026<title>{escape(text)}</title>"


def _svg(plot_id: str, title: str, body: list[str]) -> str:
    head = (
        f'<svg class="plot" id="{escape(plot_id)}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img">'
        f'<text x="{ML}" y="20" class="title">{escape(title)}</text>'
    )
    return head + "".join(body) + "</svg>"


def _legend(items: Sequence[tuple[str, str]], dashed: Sequence[bool] = ()) -> list[str]:
    out = []
    for i, (name, color) in enumerate(items):
        y = MT + 8 + 18 * i
        dash = ' stroke-dasharray="5,3"' if i < len(dashed) and dashed[i] else ""
        out.append(
            f'<line x1="{W - MR + 10}" x2="{W - MR + 30}" y1="{y}" y2="{y}" stroke="{color}" '
            f'stroke-width="4"{dash}/><text x="{W - MR + 35}" y="{y + 4}">{_fit(name, 20)}</text>'
        )
    return out


def _empty(plot_id: str, title: str) -> str:
    return _svg(
        plot_id, title, [f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">no data</text>']
    )


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    plot_id: str,
    xf: Fmt = _g,
    yf: Fmt = _g,
    markers: bool = False,
) -> str:
    """Lines (and optional point markers with tooltips), one per series, with a legend."""
    pts = [(x, y) for s in series for x, y in zip(s.xs, s.ys, strict=True)]
    if not pts:
        return _empty(plot_id, title)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    f = _Frame(nice_ticks(min(xs), max(xs)), nice_ticks(min(0.0, min(ys)), max(ys)))
    body = f.axes(xlabel, ylabel, xf, yf)
    for s in series:
        path = " ".join(f"{f.px(x):.1f},{f.py(y):.1f}" for x, y in zip(s.xs, s.ys, strict=True))
        dash = ' stroke-dasharray="5,3"' if s.dashed else ""
        body.append(
            f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2"{dash} '
            f'data-tip="{escape(s.name)}"/>'
        )
        if markers:
            body += [
                f'<circle cx="{f.px(x):.1f}" cy="{f.py(y):.1f}" r="3" fill="{s.color}" '
                f'data-tip="{escape(s.name)}: {escape(xf(x))}, {escape(yf(y))}"/>'
                for x, y in zip(s.xs, s.ys, strict=True)
            ]
    body += _legend([(s.name, s.color) for s in series], [s.dashed for s in series])
    return _svg(plot_id, title, body)


def stacked_hbars(
    bars: Sequence[tuple[str, Sequence[float]]],
    parts: Sequence[tuple[str, str]],
    *,
    title: str,
    xlabel: str,
    plot_id: str,
    xf: Fmt = _g,
    tf: Fmt | None = None,
) -> str:
    """Horizontal bars, one per ``(label, values)``, each stacked from ``parts`` (name, colour);
    ``xf`` formats axis ticks, ``tf`` tooltips (default ``xf``)."""
    tf = tf or xf
    if not bars:
        return _empty(plot_id, title)
    top = max(math.fsum(max(v, 0.0) for v in vals) for _, vals in bars)
    f = _Frame(nice_ticks(0.0, top or 1.0), [0.0, float(len(bars))])
    body = f.axes(xlabel, "", xf, lambda _: "")
    band = (H - MT - MB) / len(bars)
    for i, (label, vals) in enumerate(bars):
        y = MT + i * band + band * 0.1
        x = 0.0
        for (name, color), v in zip(parts, vals, strict=True):
            if v <= 0:
                continue
            body.append(
                f'<rect x="{f.px(x):.1f}" y="{y:.1f}" width="{f.px(x + v) - f.px(x):.2f}" '
                f'height="{band * 0.8:.1f}" fill="{color}" '
                f'data-tip="{escape(label)} {escape(name)}: {escape(tf(v))}"/>'
            )
            x += v
        if len(bars) <= 20:
            body.append(
                f'<text x="{ML - 4}" y="{y + band * 0.4 + 4:.1f}" text-anchor="end" class="small">'
                f"{_fit(label, 12)}</text>"
            )
    body += _legend(parts)
    return _svg(plot_id, title, body)


def grouped_bars(
    groups: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None], str]],
    *,
    title: str,
    ylabel: str,
    plot_id: str,
    yf: Fmt = _g,
) -> str:
    """Vertical bars: for each group (x position) one bar per series ``(name, values, colour)``."""
    vals = [v for _, vs, _ in series for v in vs if v is not None]
    if not groups or not vals:
        return _empty(plot_id, title)
    f = _Frame([0.0, float(len(groups))], nice_ticks(0.0, max(vals) or 1.0))
    body = f.axes("", ylabel, lambda _: "", yf, xgrid=False)
    slot = (W - ML - MR) / len(groups)
    width = slot * 0.8 / len(series)
    for gi, group in enumerate(groups):
        for si, (name, values, color) in enumerate(series):
            v = values[gi]
            if v is None:
                continue
            x = ML + gi * slot + slot * 0.1 + si * width
            body.append(
                f'<rect x="{x:.1f}" y="{f.py(v):.1f}" width="{width:.1f}" '
                f'height="{f.py(0.0) - f.py(v):.1f}" fill="{color}" '
                f'data-tip="{escape(group)} {escape(name)}: {escape(yf(v))}"/>'
            )
        body.append(
            f'<text x="{ML + (gi + 0.5) * slot:.1f}" y="{H - MB + 16}" text-anchor="middle">'
            f"{_fit(group, 24)}</text>"
        )
    body += _legend([(name, color) for name, _, color in series])
    return _svg(plot_id, title, body)


def scatter(
    points: Sequence[tuple[float, float, str]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    plot_id: str,
    fmt: Fmt = _g,
    color: str = PALETTE[0],
    diagonal: bool = True,
) -> str:
    """Points ``(x, y, tooltip)`` on shared axes, with the line ``y = x`` when ``diagonal`` (a
    prediction against what was measured: on the line is exact)."""
    if not points:
        return _empty(plot_id, title)
    top = max(max(x, y) for x, y, _ in points)
    ticks = nice_ticks(0.0, top or 1.0)
    f = _Frame(ticks, ticks)
    body = f.axes(xlabel, ylabel, fmt, fmt)
    if diagonal:
        a, b = ticks[0], ticks[-1]
        body.append(
            f'<line x1="{f.px(a):.1f}" y1="{f.py(a):.1f}" x2="{f.px(b):.1f}" y2="{f.py(b):.1f}" '
            'stroke="#999" stroke-dasharray="4,3"/>'
        )
    body += [
        f'<circle cx="{f.px(x):.1f}" cy="{f.py(y):.1f}" r="2.5" fill="{color}" '
        f'fill-opacity="0.6" data-tip="{escape(tip)}"/>'
        for x, y, tip in points
    ]
    return _svg(plot_id, title, body)
