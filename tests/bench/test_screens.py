"""Screenshot PNGs for image workloads: real Chromium renderings, one deterministic PNG per hash."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from kvharness.bench.screens import PAGES, base_screens, image_png, read_hash, render_html

PIL_Image = pytest.importorskip("PIL.Image")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cache() -> Path:
    return REPO / ".cache" / "screens"


def _size(png: bytes) -> tuple[int, int]:
    with PIL_Image.open(io.BytesIO(png)) as im:
        assert im.format == "PNG"
        size: tuple[int, int] = im.size
        return size


def test_base_screens_are_rendered_pages(cache: Path) -> None:
    paths = base_screens(cache)
    assert [p.name.split("-")[0] for p in paths] == list(PAGES)
    for p in paths:
        with PIL_Image.open(p) as im:
            assert im.size == (1280, 800)
            colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
            assert colours is not None and len(colours) > 50  # text and widgets, not a blank page
    assert base_screens(cache) == paths  # cached: same files, not re-rendered


@pytest.mark.parametrize("size", [(1280, 800), (640, 400), (1920, 1080), (800, 1280), (8, 8)])
def test_image_png_has_the_size_and_reads_back_its_hash(cache: Path, size: tuple[int, int]) -> None:
    h = 0x9E3779B97F4A7C15
    png = image_png(h, *size, cache)
    assert _size(png) == size
    assert read_hash(png) == h
    assert image_png(h, *size, cache) == png


def test_equal_hashes_give_equal_bytes_and_different_hashes_differ(cache: Path) -> None:
    pngs = {h: image_png(h, 640, 400, cache) for h in (0, 1, 2, 5, 1 << 63, (1 << 64) - 1)}
    assert len(set(pngs.values())) == len(pngs)
    assert {read_hash(png) for png in pngs.values()} == set(pngs)
    assert image_png(-1, 640, 400, cache) == pngs[(1 << 64) - 1]  # taken modulo 2**64


def test_too_small_images_are_refused(cache: Path) -> None:
    with pytest.raises(ValueError):
        image_png(1, 7, 100, cache)


def test_render_html_writes_a_screenshot_of_the_page(tmp_path: Path) -> None:
    html = "<html><body style='margin:0;background:#ff0000'></body></html>"
    out = render_html(html, tmp_path / "red.png", 200, 100)
    with PIL_Image.open(out) as im:
        assert im.size == (200, 100)
        assert im.convert("RGB").getpixel((100, 50)) == (255, 0, 0)
