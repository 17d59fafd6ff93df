"""Processes the benchmarks start: wait for one to answer over HTTP, read its CPU (and run-queue)
time, stop it.

Linux only for the CPU readings (``/proc``).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

from kvharness.wire import blocking
from kvharness.wire.http import WireError

__all__ = [
    "SchedTimes",
    "cpu_seconds",
    "poll",
    "session_sched_seconds",
    "stop_process",
    "wait_up",
]


def poll(
    what: str,
    url: str,
    proc: subprocess.Popen[bytes] | None,
    *,
    timeout: float,
    every: float,
    request_timeout: float,
    body: bytes | None = None,
) -> None:
    """Repeat a GET of ``url`` (a POST of the JSON ``body`` when given) until it answers 2xx;
    RuntimeError naming ``what`` when ``proc`` (None: a server not started here) exits or
    ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if body is None:
                status, _ = blocking.get(url, timeout_s=request_timeout)
            else:
                status, _ = blocking.post(url, body, timeout_s=request_timeout)
            if 200 <= status < 300:
                return
        except WireError:
            pass
        code = proc.poll() if proc is not None else None
        if code is not None:
            raise RuntimeError(f"{what} (exit {code})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} (not after {timeout:.0f} s)")
        time.sleep(every)


def wait_up(
    url: str, proc: subprocess.Popen[bytes], timeout: float = 120, every: float = 0.3
) -> None:
    """Until ``url`` answers a GET with 2xx (RuntimeError if ``proc`` exits or ``timeout``
    passes)."""
    poll(f"{url} did not come up", url, proc, timeout=timeout, every=every, request_timeout=2)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not ended after ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _stat(pid: str | int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (field 3, the state, first)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class SchedTimes(NamedTuple):
    cpu: float
    """Seconds on a CPU."""
    wait: float
    """Seconds runnable but waiting for a CPU (on a run queue)."""


def session_sched_seconds(sid: int) -> SchedTimes:
    """CPU and run-queue seconds of the threads of the live processes in session ``sid`` (a
    process started with ``start_new_session``, helpers included), from the scheduler's own
    accounting (``/proc/PID/task/TID/schedstat``, nanoseconds)."""
    cpu = wait = 0
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if int(_stat(entry.name)[3]) != sid:
                continue
            for task in (entry / "task").iterdir():
                run, queued, _ = (task / "schedstat").read_text().split()
                cpu += int(run)
                wait += int(queued)
        except OSError:  # the process or thread ended meanwhile
            continue
    return SchedTimes(cpu / 1e9, wait / 1e9)
