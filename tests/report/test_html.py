"""The HTML report: self-contained, and it renders in headless Chromium (Debian's) with no errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import msgspec

from kvharness.report.html import render_html, write_html
from kvharness.report.metrics import summarise
from kvharness.report.records import TurnRecord

LoadPage = Callable[[Path], tuple[str, str]]


def _plot(dom: str, plot_id: str) -> str:
    m = re.search(rf'<svg[^>]*id="{plot_id}".*?</svg>', dom, re.S)
    assert m, f"no plot {plot_id}"
    return m.group(0)


def _console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def test_report_is_self_contained(records: list[TurnRecord]) -> None:
    page = render_html([(summarise(records, label="a"), records)])
    # Nothing is fetched: no src/href attributes, stylesheets, imports or url() in the page.
    assert not re.search(r"\b(src|href)\s*=|<link|@import|url\(", page)
    assert page.count("<script>") == 1 and page.count('<svg class="plot"') == 7


def test_one_run_renders_in_chromium(
    tmp_path: Path, records: list[TurnRecord], load_page: LoadPage
) -> None:
    path = write_html(tmp_path / "report.html", [(summarise(records, label="a"), records)])
    dom, stderr = load_page(path)
    # The inline script ran to its last line (an exception would leave data-ok unset) and saw
    # the seven plots; it added the tooltip element.
    assert re.search(r'<body[^>]*data-ok="1"', dom), dom[:500]
    assert 'data-plots="7"' in dom and 'id="tip"' in dom
    assert _console_lines(stderr) == []
    # TTFT CDF: one line for the run. By turn index: p50 and p90 lines with 3 points each.
    assert _plot(dom, "plot-ttft-cdf").count("<polyline") == 1
    by_turn = _plot(dom, "plot-ttft-by-turn")
    assert by_turn.count("<polyline") == 2 and by_turn.count("<circle") == 6
    # Per-session stacked bars carry the hand-worked parts (conftest: a's tool 5 s, b's failed 1 s,
    # c's failed 0.5 s, c marked as not completed).
    bars = _plot(dom, "plot-sessions-0")
    assert 'data-tip="a tool: 5.00 s"' in bars and 'data-tip="a prefill: 3.00 s"' in bars
    assert 'data-tip="b failed: 1.00 s"' in bars and 'data-tip="c ✗ failed: 500.0 ms"' in bars
    # Mean breakdown (8.75 s total: tool 3 s) and cache bars: 350/900 achieved, 400/900 ideal.
    assert 'data-tip="a tool: 3.00 s"' in _plot(dom, "plot-breakdown")
    cache = _plot(dom, "plot-cache")
    assert 'data-tip="a cached (achieved): 39%"' in cache and 'data-tip="a ideal: 44%"' in cache
    assert _plot(dom, "plot-cache-by-turn").count("<polyline") == 2
    # Replica load (conftest: r0 400 prompt tokens, r1 800).
    loads = _plot(dom, "plot-replicas")
    assert 'data-tip="r0 a: 400"' in loads and 'data-tip="r1 a: 800"' in loads
    assert "<table>" in dom


def test_several_runs_overlay_in_chromium(
    tmp_path: Path, records: list[TurnRecord], load_page: LoadPage
) -> None:
    faster = [
        msgspec.structs.replace(r, first_token=r.first_token - 0.25)
        if r.ok and r.first_token is not None else r
        for r in records
    ]  # fmt: skip
    runs = [(summarise(records, label="base"), records), (summarise(faster, label="new"), faster)]
    dom, stderr = load_page(write_html(tmp_path / "cmp.html", runs))
    assert re.search(r'<body[^>]*data-ok="1"', dom) and 'data-plots="8"' in dom
    assert _console_lines(stderr) == []
    assert _plot(dom, "plot-ttft-cdf").count("<polyline") == 2
    assert _plot(dom, "plot-ttft-by-turn").count("<polyline") == 4
    assert "plot-sessions-1" in dom
    assert "-25.0% better" in dom  # TTFT p50 1.0 s -> 0.75 s in the comparison table


def test_empty_and_error_only_runs_render(
    tmp_path: Path, rec: Callable[..., TurnRecord], load_page: LoadPage
) -> None:
    failed = [rec("x", 0, error="connection refused")]
    runs = [(summarise([], label="empty"), []), (summarise(failed, label="down"), failed)]
    dom, stderr = load_page(write_html(tmp_path / "r.html", runs))
    assert re.search(r'<body[^>]*data-ok="1"', dom) and _console_lines(stderr) == []
    assert "no data" in _plot(dom, "plot-ttft-cdf")
    assert "errors: connection refused" in dom


def test_the_check_catches_a_script_error(tmp_path: Path, load_page: LoadPage) -> None:
    # Control: the same checks on a page whose script throws must fail.
    page = render_html([(summarise([], label="x"), [])]).replace(
        "(function () {", "(function () { undefinedFunction();", 1
    )
    path = tmp_path / "broken.html"
    path.write_text(page)
    dom, stderr = load_page(path)
    assert not re.search(r'<body[^>]*data-ok="1"', dom)
    assert any("Uncaught ReferenceError" in line for line in _console_lines(stderr))
