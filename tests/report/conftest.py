"""Hand-built records for the report tests, and a headless-Chromium page loader.

The fixture run, times in seconds (every figure in tests/report is worked out from this table):

session a (scheduled known, as from the simulator), replicas r0, r0, r1:
  turn 0: intended 0.0  sent 0.0  scheduled 0.5  first 1.0   done 2.0   prompt 100 cached 0   ideal 0   out 11
  turn 1: intended 5.0  sent 5.5  scheduled 6.0  first 6.5   done 7.5   prompt 200 cached 100 ideal 100 out 5
  turn 2: intended 9.5  sent 9.5  scheduled 9.5  first 11.5  done 12.0  prompt 300 cached 150 ideal 200 out 1
session b (live: scheduled unknown), replica r1, turn 1 retried after an HTTP 503:
  turn 0:          intended 1.0  sent 1.0   first 1.5  done 3.0  prompt 100 cached 0   ideal 0   out 4
  turn 1 (try 0):  intended 4.0  sent 4.0   -- error "http 503: overloaded" --     prompt 200        ideal 100
  turn 1 (try 1):  intended 5.0  sent 5.25  first 6.0  done 6.5  prompt 200 cached 100 ideal 100 out 3
session c, replica r0, abandoned: turn 0 intended 2.0 sent 2.0 first 2.5, then "stream cut"; prompt 100.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvharness.report.records import TurnRecord

CHROMIUM = Path("/usr/bin/chromium")


def make_record(session: str, turn: int, **kw: Any) -> TurnRecord:
    """A record with defaults for what a test does not care about."""
    base: dict[str, Any] = dict(
        replica="r0", intended=0.0, sent=0.0, first_token=None, done=None, prompt_tokens=100,
        cached_tokens=None, ideal_cached_tokens=0, output_tokens=0,
    )  # fmt: skip
    base.update(kw)
    return TurnRecord(session=session, turn=turn, **base)


def hand_built() -> list[TurnRecord]:
    return [
        make_record("a", 0, intended=0.0, sent=0.0, scheduled=0.5, first_token=1.0, done=2.0,
            prompt_tokens=100, cached_tokens=0, ideal_cached_tokens=0, output_tokens=11),
        make_record("a", 1, intended=5.0, sent=5.5, scheduled=6.0, first_token=6.5, done=7.5,
            prompt_tokens=200, cached_tokens=100, ideal_cached_tokens=100, output_tokens=5, gap=3.0),
        make_record("a", 2, replica="r1", intended=9.5, sent=9.5, scheduled=9.5, first_token=11.5,
            done=12.0, prompt_tokens=300, cached_tokens=150, ideal_cached_tokens=200,
            output_tokens=1, gap=2.0),
        make_record("b", 0, replica="r1", intended=1.0, sent=1.0, first_token=1.5, done=3.0,
            prompt_tokens=100, cached_tokens=0, ideal_cached_tokens=0, output_tokens=4),
        make_record("b", 1, replica="r1", intended=4.0, sent=4.0, prompt_tokens=200,
            ideal_cached_tokens=100, gap=1.0, error="http 503: overloaded"),
        make_record("b", 1, replica="r1", intended=5.0, sent=5.25, first_token=6.0, done=6.5,
            prompt_tokens=200, cached_tokens=100, ideal_cached_tokens=100, output_tokens=3,
            gap=1.0, attempt=1),
        make_record("c", 0, intended=2.0, sent=2.0, first_token=2.5, prompt_tokens=100,
            error="stream cut"),
    ]  # fmt: skip


@pytest.fixture
def records() -> list[TurnRecord]:
    """The hand-built run of the module docstring."""
    return hand_built()


@pytest.fixture
def rec() -> Callable[..., TurnRecord]:
    """Factory: ``rec(session, turn, **fields)`` with defaults for the rest."""
    return make_record


@pytest.fixture
def load_page(tmp_path: Path) -> Callable[[Path], tuple[str, str]]:
    """``load_page(path)`` opens a file in headless Chromium; see :func:`open_in_chromium`."""
    return lambda path: open_in_chromium(path, tmp_path)


def open_in_chromium(path: Path, tmp_path: Path) -> tuple[str, str]:
    """Open a file in headless Chromium; return (the DOM after scripts ran, Chromium's stderr)."""
    assert CHROMIUM.exists(), "Debian's chromium is needed (`make test` installs it: mk/report.mk)"
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--enable-logging=stderr", "--v=0", "--dump-dom", path.resolve().as_uri(),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr
