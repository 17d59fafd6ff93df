"""What a normal ``kvharness gateway`` start writes to stderr, as a user sees it.

``--help`` writes nothing else. A start writes its banner and, for each replica whose KV events it
joined late without recovering what it missed, one warning saying what that means for routing and
what to do; with the replay endpoint, or in front of a fresh engine, nothing more. The gateway runs
as its own process in front of a FAKE backend and a real ZMQ publisher playing vLLM's KV events.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kvharness.testing.procs import wait_up
from kvharness.testing.vllm import free_port

from .conftest import joined_late_without_replay, say_hi

BS = 16
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


def status(url: str) -> Any:
    return json.loads(urllib.request.urlopen(url + "/status", timeout=5).read())


def test_help_writes_nothing_but_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kvharness", "gateway", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and out.stderr == ""
    assert "--kv-replay URL=ENDPOINT" in out.stdout and '"replay_endpoint"' in out.stdout


@pytest.mark.parametrize("engine", ["fresh", "served_before", "served_before_with_replay"])
def test_a_normal_start_says_only_what_matters(
    fake_backends: Any, publishers: Any, kv_schema: Any, tiny_model_dir: Path, engine: str
) -> None:
    (b,) = fake_backends(1, block_size=BS, tokenizer=str(tiny_model_dir / "tokenizer.json"))
    events_port, replay_port = free_port(), free_port()
    replay = engine.endswith("with_replay")
    pub = publishers(
        f"tcp://127.0.0.1:{events_port}",
        bind=True,
        replay=f"tcp://127.0.0.1:{replay_port}" if replay else None,
    )
    cached = list(range(100, 100 + 2 * BS))
    if engine != "fresh":
        # The engine served before the gateway started: its events went nowhere.
        pub.send([kv_schema.Stored([1, 2], None, cached, BS)], drop=True)
        for _ in range(4):
            pub.send([kv_schema.Removed([99])], drop=True)
    port = free_port()
    args = ["--backend", b.url, "--port", str(port), "--tokenizer", str(tiny_model_dir),
            "--kv-events", f"{b.url}=tcp://*:{events_port}", "--kv-topic", "kv"]  # fmt: skip
    if replay:
        args += ["--kv-replay", f"{b.url}=tcp://*:{replay_port}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvharness", "gateway", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        wait_up(url + "/health", proc, timeout=60)
        time.sleep(0.5)  # PUB/SUB: what is published before the subscription settles is lost
        # The engine's next step publishes (the first batch the gateway can see).
        while status(url)["replicas"][0]["kv_events"]["batches"] == 0:
            assert time.monotonic() < deadline
            pub.send([kv_schema.Stored([7], None, list(range(300, 300 + BS)), BS)])
            time.sleep(0.05)
        assert say_hi(url)["choices"]
        events = status(url)["replicas"][0]["kv_events"]
    finally:
        # SIGTERM, as a service manager stops it (SIGINT is ignored by a process that a shell
        # started in the background, as CI may start the tests).
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0  # stopped cleanly, not killed by the signal
    lines = [_STAMP.sub("", line) for line in err.splitlines()]
    expected = [f"kvharness gateway on {url} -> 1 replica(s), policy agent_aware"]
    if engine == "served_before":
        expected.append(
            "WARNING kvharness.gateway.kv_subscriber: "
            + joined_late_without_replay(b.url, events["joined_at"])
        )
        assert events["joined_at"] >= 5 and events["missed_at_join"] == events["joined_at"]
    else:
        assert events["joined_at"] == 0 and events["missed_at_join"] == 0
    assert events["gaps"] == 0 or replay  # PUB/SUB may drop a first probe: replayed
    assert events["stale_marks"] == 0
    assert lines == expected


def _sigint_default() -> None:
    """In the child before exec: Ctrl-C delivered, even where the test runner inherited it
    ignored (a shell's background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("sig", "code", "last"), [
    (signal.SIGINT, 130, "kvharness gateway: interrupted"),
    (signal.SIGTERM, 0, None),
])  # fmt: skip
def test_ctrl_c_and_sigterm_stop_it(
    fake_backends: Any, sig: signal.Signals, code: int, last: str | None
) -> None:
    (b,) = fake_backends(1, block_size=BS)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvharness", "gateway", "--backend", b.url, "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=_sigint_default,
    )  # fmt: skip
    try:
        wait_up(f"http://127.0.0.1:{port}/health", proc, timeout=60)
    finally:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    lines = err.splitlines()
    assert lines[0].startswith(f"kvharness gateway on http://127.0.0.1:{port}")
    assert lines[1:] == ([last] if last else [])
