"""PNG screenshots for image workloads: real renderings of app-like pages, one per content hash.

A workload names an image by a 64-bit content hash and a pixel size; :func:`image_png` turns that
into PNG bytes. The pixels come from a base screenshot (one of :data:`PAGES`, chosen by the
hash), rendered once by headless Chromium (Debian's ``chromium``) and kept under a cache directory
the caller gives; the base is scaled to cover the requested size and cropped at a hash-chosen
offset, then stamped: a cursor and a highlight box at hash-chosen places, and an 8 x 8 grid of
squares in the bottom-right corner spelling the hash's 64 bits, which :func:`read_hash` reads
back. Equal hashes and sizes give byte-identical PNGs (for the same base screenshots), so an
engine's multimodal hash sees exactly the reuse the workload has; different hashes give different
pixels.

Pillow is imported only when an image is made (it is in the ``vision`` extra).
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import random
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "BASE_SIZE",
    "MIN_SIDE",
    "PAGES",
    "base_screens",
    "chromium",
    "image_png",
    "read_hash",
    "render_html",
]

BASE_SIZE = (1280, 800)
"""Width and height (pixels) of the base screenshots."""
MIN_SIDE = 8
"""The smallest width or height :func:`image_png` makes (the bit grid needs 8 x 8 pixels)."""

_VERSION = 1  # part of the cache key: bump when the rendering or the pages change
_MASK = (1 << 64) - 1
_BIT_ON = (255, 96, 0)
_BIT_OFF = (16, 24, 72)
_FRAME = (255, 255, 255)

_STYLE = """
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 "DejaVu Sans", sans-serif; color: #1d2330; background: #eef1f6; }
.bar { height: 44px; background: #26324a; color: #fff; display: flex; align-items: center;
       padding: 0 16px; gap: 24px; }
.bar b { font-size: 16px; } .bar span { opacity: .75; }
.side { position: absolute; top: 44px; bottom: 0; left: 0; width: 220px; background: #f8f9fc;
        border-right: 1px solid #d5dbe6; padding: 12px; }
.side div { padding: 6px 10px; border-radius: 4px; } .side .on { background: #dbe6ff; }
.main { position: absolute; top: 44px; left: 220px; right: 0; bottom: 0; padding: 24px; }
.card { background: #fff; border: 1px solid #d5dbe6; border-radius: 6px; padding: 20px; }
button { font: inherit; padding: 7px 16px; border-radius: 4px; border: 1px solid #9aa6bd;
         background: #fff; } button.primary { background: #2f6fed; color: #fff; border: 0; }
input, select { font: inherit; padding: 6px 8px; border: 1px solid #9aa6bd; border-radius: 4px;
                width: 100%; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { border-bottom: 1px solid #e1e5ee; padding: 7px 10px; text-align: left; }
th { background: #f1f4fa; } tr:nth-child(even) td { background: #fafbfd; }
.ico { display: inline-block; width: 14px; height: 12px; margin-right: 6px; border-radius: 2px;
       vertical-align: -1px; } .dir { background: #e8b53d; } .doc { background: #9fb3d9; }
.img { background: #6cc18a; } .zip { background: #b58ad6; }
"""


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def _form() -> str:
    fields = "".join(
        f"<label style='display:block;margin:10px 0'>{name}"
        f'<input value="{escape(value)}"></label>'
        for name, value in [
            ("Full name", "Ada Lovelace"),
            ("Email", "ada@example.com"),
            ("Company", "Analytical Engines Ltd"),
            ("Phone", "+44 20 7946 0958"),
            ("Street", "12 St James's Square"),
        ]
    )
    body = (
        "<div class='bar'><b>Acme CRM</b><span>Contacts</span><span>Deals</span></div>"
        "<div class='side'><div>Dashboard</div><div class='on'>New contact</div><div>Import</div>"
        "<div>Reports</div></div><div class='main'><div class='card' style='width:520px'>"
        f"<h2 style='margin-top:0'>New contact</h2>{fields}"
        "<label style='display:block;margin:10px 0'>Role<select><option>Engineer</option>"
        "</select></label><p style='color:#b3261e'>Email is already in use.</p>"
        "<button class='primary'>Save contact</button> <button>Cancel</button></div></div>"
    )
    return _page("Form", body)


def _table() -> str:
    rows = "".join(
        f"<tr><td>#{1040 + i}</td><td>{name}</td><td>{status}</td><td>{i * 37 % 90 + 10}.00</td>"
        f"<td>2024-0{i % 9 + 1}-{i % 27 + 1:02d}</td></tr>"
        for i, (name, status) in enumerate(
            [
                ("Parser rewrite", "Open"),
                ("Flaky test in CI", "In review"),
                ("Cache eviction bug", "Open"),
                ("Upgrade tokenizer", "Done"),
                ("Router timeouts", "Blocked"),
                ("Docs for gateway", "Done"),
                ("KV events replay", "Open"),
                ("Bench pacing", "In review"),
                ("Memory leak in worker", "Open"),
                ("Retry budget", "Done"),
                ("HTML report plots", "Open"),
                ("Sandbox hardening", "Blocked"),
                ("Trace loader", "Done"),
                ("Cost model presets", "Open"),
            ]
        )
    )
    body = (
        "<div class='bar'><b>Tracker</b><span>Issues</span><span>Board</span><span>Insights</span>"
        "</div><div style='padding:20px'><div style='display:flex;gap:8px;margin-bottom:12px'>"
        "<input style='width:320px' value='is:open label:bug'><button>Filter</button>"
        "<button class='primary'>New issue</button></div><table><tr><th>Id</th><th>Title</th>"
        f"<th>Status</th><th>Estimate</th><th>Updated</th></tr>{rows}</table></div>"
    )
    return _page("Table", body)


def _files() -> str:
    tree = "".join(
        f"<div style='padding-left:{12 * depth + 10}px' class='{cls}'>"
        f"<i class='ico dir'></i>{name}</div>"
        for depth, name, cls in [
            (0, "home", ""),
            (1, "projects", ""),
            (2, "kvharness", "on"),
            (3, "src", ""),
            (3, "tests", ""),
            (1, "Downloads", ""),
            (1, "Pictures", ""),
        ]
    )
    files = "".join(
        f"<tr><td><i class='ico {icon}'></i>{name}</td><td>{size}</td><td>{kind}</td>"
        f"<td>Mar {i + 3}, 10:{i * 7:02d}</td></tr>"
        for i, (icon, name, size, kind) in enumerate(
            [
                ("dir", "src", "-", "Folder"),
                ("dir", "tests", "-", "Folder"),
                ("doc", "README.md", "4.2 kB", "Markdown"),
                ("doc", "pyproject.toml", "1.9 kB", "TOML"),
                ("doc", "Makefile", "2.3 kB", "Text"),
                ("doc", "DESIGN.md", "11 kB", "Markdown"),
                ("img", "plot.png", "88 kB", "PNG image"),
                ("zip", "dist.tar.gz", "1.2 MB", "Archive"),
            ]
        )
    )
    body = (
        "<div class='bar'><b>Files</b><span>&#8592; &#8594;</span>"
        "<span>/home/projects/kvharness</span></div>"
        f"<div class='side'>{tree}</div><div class='main'><table><tr><th>Name</th><th>Size</th>"
        f"<th>Type</th><th>Modified</th></tr>{files}</table>"
        "<p style='color:#5b6478'>8 items, 1.3 MB free of 64 GB</p></div>"
    )
    return _page("Files", body)


def _settings() -> str:
    def toggle(label: str, on: bool) -> str:
        knob = "right:2px" if on else "left:2px"
        track = "#2f6fed" if on else "#b9c1d1"
        return (
            "<div style='display:flex;justify-content:space-between;align-items:center;"
            f"padding:10px 0;border-bottom:1px solid #e1e5ee'>{label}<span style='position:"
            f"relative;width:40px;height:22px;border-radius:11px;background:{track}'><span "
            f"style='position:absolute;top:2px;{knob};width:18px;height:18px;border-radius:9px;"
            "background:#fff'></span></span></div>"
        )

    toggles = "".join(
        toggle(label, on)
        for label, on in [
            ("Automatic updates", True),
            ("Send usage statistics", False),
            ("Open files in new tab", True),
            ("Format on save", True),
            ("Telemetry", False),
        ]
    )
    body = (
        "<div class='bar'><b>Editor</b><span>File</span><span>Edit</span><span>View</span></div>"
        "<div style='position:absolute;inset:44px 0 0 0;background:rgba(20,26,40,.45)'></div>"
        "<div class='card' style='position:absolute;left:340px;top:120px;width:600px'>"
        "<h2 style='margin-top:0'>Settings</h2><div style='display:flex;gap:18px;border-bottom:"
        "2px solid #e1e5ee;margin-bottom:8px'><b style='border-bottom:2px solid #2f6fed'>General"
        f"</b><span>Appearance</span><span>Keyboard</span><span>Accounts</span></div>{toggles}"
        "<label style='display:block;margin:12px 0'>Theme<select><option>Light</option></select>"
        "</label><div style='text-align:right'><button>Cancel</button> "
        "<button class='primary'>Apply</button></div></div>"
    )
    return _page("Settings", body)


def _editor() -> str:
    code = [
        "def schedule(self, now: float) -> Plan:",
        '    """Pick the next batch under the token budget."""',
        "    budget = self.max_batched_tokens",
        "    plan = Plan(now)",
        "    for req in self.running:",
        "        if budget <= 0:",
        "            break",
        "        plan.decode(req)",
        "        budget -= 1",
        "    while self.waiting and budget > 0:",
        "        req = self.waiting[0]",
        "        n = min(req.remaining_prefill, budget)",
        "        plan.prefill(req, n)",
        "        budget -= n",
        "    return plan",
    ]
    lines = "".join(
        f"<div><span style='color:#7d8799;display:inline-block;width:40px'>{i + 1}</span>"
        f"{line}</div>"
        for i, line in enumerate(code)
    )
    body = (
        "<div class='bar'><b>scheduler.py</b><span>engine/</span></div>"
        "<div class='side'><div>engine</div><div class='on'>scheduler.py</div><div>pool.py</div>"
        "<div>cost.py</div></div><div class='main' style='background:#1e222b;color:#d7dce5;"
        f'font:14px/1.6 "DejaVu Sans Mono",monospace;white-space:pre\'>{lines}'
        "<div style='position:absolute;bottom:0;left:0;right:0;height:180px;background:#14171d;"
        "padding:10px;color:#e7b35a'>$ pytest tests/engine -q\nF.....\nFAILED test_schedule_"
        "budget - assert 3 == 2\n1 failed, 5 passed in 0.42s</div></div>"
    )
    return _page("Editor", body)


PAGES: dict[str, str] = {
    "form": _form(),
    "table": _table(),
    "files": _files(),
    "settings": _settings(),
    "editor": _editor(),
}
"""Self-contained HTML pages (no network resources) that look like application screens."""


def chromium() -> str:
    """Path of the Chromium executable; RuntimeError saying how to install it when missing."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("no chromium on PATH: install it with `apt-get install chromium`")


def render_html(html: str, out: Path, width: int, height: int, *, timeout_s: float = 120.0) -> Path:
    """Render ``html`` with headless Chromium into the PNG ``out`` (``width`` x ``height``
    pixels), replacing it atomically. Each call uses a throwaway profile directory.

    Raises RuntimeError with Chromium's output when no screenshot is written.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kvharness-chromium-") as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(html, encoding="utf-8")
        shot = Path(tmp) / "shot.png"
        cmd = [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--disable-extensions", "--mute-audio",
            "--force-device-scale-factor=1", f"--user-data-dir={tmp}/profile",
            f"--window-size={width},{height}", f"--screenshot={shot}", page.as_uri(),
        ]  # fmt: skip
        env = dict(os.environ, HOME=tmp)
        proc = subprocess.run(
            cmd, capture_output=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL
        )
        if not shot.exists():
            tail = (proc.stdout + proc.stderr).decode(errors="replace")[-2000:]
            raise RuntimeError(f"chromium wrote no screenshot (exit {proc.returncode}):\n{tail}")
        staged = out.with_name(f".{out.name}.{os.getpid()}")
        shutil.copyfile(shot, staged)
        os.replace(staged, out)
    return out


def base_screens(cache_dir: Path) -> list[Path]:
    """The base screenshots of :data:`PAGES` (in that order) under ``cache_dir``, rendered on
    first use. A file's name carries a digest of its page and size, so edits re-render."""
    paths = []
    for name, html in PAGES.items():
        key = f"{_VERSION}:{BASE_SIZE}:{html}".encode()
        path = Path(cache_dir) / f"{name}-{hashlib.sha256(key).hexdigest()[:16]}.png"
        if not path.exists():
            render_html(html, path, *BASE_SIZE)
        paths.append(path)
    return paths


@functools.lru_cache(maxsize=16)
def _decoded(path: str, mtime_ns: int) -> Image.Image:
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def _grid(width: int, height: int) -> tuple[int, int, int]:
    # (square side, left, top) of the 8 x 8 bit grid: bottom-right, inside a one-square margin
    # when the image has room for it.
    side = max(1, min(8, min(width, height) // 50))
    margin = side if 10 * side <= min(width, height) else 0
    return side, width - margin - 8 * side, height - margin - 8 * side


def _cover(base: Image.Image, width: int, height: int, rng: random.Random) -> Image.Image:
    from PIL import Image

    scale = max(width / base.width, height / base.height)
    w, h = max(width, round(base.width * scale)), max(height, round(base.height * scale))
    scaled = base.resize((w, h), Image.Resampling.LANCZOS) if (w, h) != base.size else base
    x, y = rng.randint(0, w - width), rng.randint(0, h - height)
    return scaled.crop((x, y, x + width, y + height))  # a new image: the cached base is unchanged


def _stamp(im: Image.Image, h: int, rng: random.Random) -> None:
    from PIL import ImageDraw

    draw = ImageDraw.Draw(im)
    w, ht = im.size
    unit = max(1, min(w, ht) // 600)
    bx, by = rng.randrange(w), rng.randrange(ht)
    box = (bx, by, min(w - 1, bx + max(2, w // 8)), min(ht - 1, by + max(2, ht // 24)))
    draw.rectangle(box, outline=(255, 200, 0), width=2 * unit)
    cx, cy = rng.randrange(w), rng.randrange(ht)
    arrow = [(0, 0), (0, 16), (4, 12), (7, 18), (9, 17), (6, 11), (12, 11)]
    draw.polygon(
        [(cx + px * unit, cy + py * unit) for px, py in arrow], fill=(0, 0, 0), outline=_FRAME
    )
    side, left, top = _grid(w, ht)
    if side > 1 or left > 0:
        draw.rectangle((left - 1, top - 1, left + 8 * side, top + 8 * side), fill=_FRAME)
    for bit in range(64):
        x, y = left + (bit % 8) * side, top + (bit // 8) * side
        colour = _BIT_ON if h >> bit & 1 else _BIT_OFF
        draw.rectangle((x, y, x + side - 1, y + side - 1), fill=colour)


def image_png(content_hash: int, width: int, height: int, cache_dir: Path) -> bytes:
    """PNG bytes of exactly ``width`` x ``height`` pixels standing for the image item whose
    content hash is ``content_hash`` (taken modulo 2**64). Deterministic: the same arguments (and
    base screenshots under ``cache_dir``, rendered there on first use) give the same bytes.

    Raises ValueError when a side is under :data:`MIN_SIDE` pixels.
    """
    if width < MIN_SIDE or height < MIN_SIDE:
        raise ValueError(f"image must be at least {MIN_SIDE}x{MIN_SIDE}, got {width}x{height}")
    h = content_hash & _MASK
    bases: Sequence[Path] = base_screens(cache_dir)
    path = bases[h % len(bases)]
    rng = random.Random(h)
    im = _cover(_decoded(str(path), path.stat().st_mtime_ns), width, height, rng)
    _stamp(im, h, rng)
    buf = io.BytesIO()
    im.save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def read_hash(png: bytes) -> int:
    """The 64-bit hash stamped by :func:`image_png` into ``png`` (read from its bit grid)."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        rgb = im.convert("RGB")
    side, left, top = _grid(*rgb.size)
    h = 0
    for bit in range(64):
        x, y = left + (bit % 8) * side + side // 2, top + (bit // 8) * side + side // 2
        px = rgb.getpixel((x, y))
        if isinstance(px, tuple) and px[0] > 128:
            h |= 1 << bit
    return h
