"""The report's SVG charts: labels too long for their room are shortened visibly, never cut."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from kvharness.report.svg import PALETTE, grouped_bars, stacked_hbars


def _texts(svg: str) -> list[ET.Element]:
    return list(ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text"))


def test_a_long_bar_label_ends_in_an_ellipsis_with_the_whole_name_on_hover() -> None:
    svg = stacked_hbars(
        [("round_robin", [1.0, 2.0]), ("sglang_cache_aware", [2.0, 1.0])],
        [("prefill", PALETTE[0]), ("a part with a very long name", PALETTE[1])],
        title="t",
        xlabel="s",
        plot_id="p",
    )
    shown = {"".join(t.itertext()): t for t in _texts(svg)}
    assert "round_robin" in shown  # fits: as it is, no title
    assert shown["round_robin"].find("{http://www.w3.org/2000/svg}title") is None
    cut = next(t for t in _texts(svg) if (t.text or "").startswith("sglang_cac"))
    assert cut.text == "sglang_cach\u2026"
    title = cut.find("{http://www.w3.org/2000/svg}title")
    assert title is not None and title.text == "sglang_cache_aware"
    legend = next(t for t in _texts(svg) if (t.text or "").startswith("a part"))
    assert legend.text == "a part with a very\u2026"  # 19 characters kept, the space dropped


def test_group_labels_are_escaped_and_shortened() -> None:
    svg = grouped_bars(
        ["a<b", "x" * 30],
        [("s", [1.0, 2.0], PALETTE[0])],
        title="t",
        ylabel="y",
        plot_id="g",
    )
    assert "a&lt;b" in svg
    assert re.search(r">x{23}\u2026<title>x{30}</title>", svg)
