"""The benchmarks' process helpers, on real child processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvharness.testing.procs import (
    cpu_seconds,
    poll,
    session_sched_seconds,
    stop_process,
    wait_up,
)
from kvharness.testing.vllm import free_port

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"


def test_sched_seconds_of_a_session_count_its_children_and_their_waits() -> None:
    # A parent and its child, both on one CPU, burn 0.3 s of CPU each at the same time: each
    # waits on the run queue while the other runs.
    code = (
        "import os, subprocess, sys, time\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        f"c = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read(1);' + {BURN!r}"
        " + 'time.sleep(30)'], stdin=subprocess.PIPE)\n"
        "time.sleep(0.5)\n"
        "c.stdin.write(b'x'); c.stdin.flush()\n"
        f"exec({BURN!r})\n"
        "time.sleep(0.5)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            own = cpu_seconds(proc.pid)
            assert own >= 0.25
            times = session_sched_seconds(proc.pid)
            assert times.cpu >= own + 0.25
            assert times.wait >= 0.15
        finally:
            os.killpg(proc.pid, 9)


def test_stop_process_kills_what_ignores_sigterm() -> None:
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint(1, flush=True)\ntime.sleep(60)"  # fmt: skip
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == b"1\n"
        stop_process(proc, timeout=0.5)
        assert proc.returncode == -9


def test_wait_up_fails_naming_the_url_when_the_process_exits() -> None:
    url = f"http://127.0.0.1:{free_port()}/health"
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match=rf"{url} did not come up \(exit 3\)"):
        wait_up(url, proc, timeout=30, every=0.05)


def test_poll_of_a_server_not_started_here_gives_up_after_its_timeout() -> None:
    url = f"http://127.0.0.1:{free_port()}/health"
    with pytest.raises(RuntimeError, match=r"nobody there \(not after 0 s\)"):
        poll("nobody there", url, None, timeout=0.2, every=0.05, request_timeout=0.5)
