"""`kvharness gateway` as a process, and `kvharness gateway status` against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kvharness.cli import main
from kvharness.testing.vllm import free_port


def test_gateway_process_and_status_view(fake_backends: Any, tiny_model_dir: Path) -> None:
    (b,) = fake_backends(1)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvharness", "gateway", "--backend", b.url, "--port", str(port),
         "--tokenizer", str(tiny_model_dir), "--policy", "least_outstanding"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        req = urllib.request.Request(
            url + "/v1/chat/completions",
            data=json.dumps({"messages": [{"role": "user", "content": "hi there"}]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert json.loads(urllib.request.urlopen(req, timeout=10).read())["choices"]
        out = subprocess.run(
            [sys.executable, "-m", "kvharness", "gateway", "status", "--url", url, "--once"],
            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert b.url in out.stdout and "least_outstanding" in out.stdout
        assert "prompts 1" in out.stdout
        raw = subprocess.run(
            [sys.executable, "-m", "kvharness", "gateway", "status", "--url", url, "--json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        status = json.loads(raw.stdout)
        assert status["replicas"][0]["healthy"] and status["block_size"] == 16
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gateway"], "give at least one --backend"),
        (["gateway", "--backend", "http://x:1", "--kv-events", "tcp://*:5"], "BACKEND_URL="),
        (
            ["gateway", "--backend", "http://x:1", "--kv-events", "http://y:1=tcp://*:5"],
            "unknown backends",
        ),
        (["gateway", "--backend", "http://x:1", "--kv-events", "http://x:1=udp://a"], "tcp://"),
        (["gateway", "--backend", "http://x:1", "--policy-option", "nokey"], "KEY=VALUE"),
        (
            ["gateway", "--backend", "http://x:1", "--policy-option", "bogus=1"],
            "bad --policy-option",
        ),
        (
            ["gateway", "--backend", "http://x:1", "--tokenizer", "/nonexistent"],
            "no tokenizer.json",
        ),
        (["gateway", "--backend", "http://x:1", "--forward-token-ids"], "needs the engines'"),
        (["gateway", "status", "--url", "http://127.0.0.1:9", "--once"], "cannot reach"),
        (["gateway", "--backend", "http://x:1", "--port", "99999"], "port must be 0..65535"),
        (["gateway", "--backend", "not-a-url"], "is not an http://HOST:PORT URL"),
        (["gateway", "--backend", "http://x:1/v1"], "without a path"),
        (["gateway", "--backend", "http://x:99999"], "Port out of range"),
        (["gateway", "--backend", "http://x:1", "--read-timeout", "-1"], "read_timeout_s must be"),
        (
            [
                "gateway",
                "--backend",
                "http://x:1",
                "--max-body-bytes",
                "9",
                "--max-buffered-bytes",
                "5",
            ],
            "max_body_bytes (9) <= max_buffered_bytes (5)",
        ),
        (
            ["gateway", "--backend", "http://x:1", "--api-key-file", "/nonexistent"],
            "cannot read it",
        ),
    ],
)
def test_cli_errors_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_the_api_key_comes_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvharness.cli import build_parser
    from kvharness.cli._gateway import KEY_ENV, build_config

    def config(*extra: str) -> Any:
        return build_config(
            build_parser().parse_args(["gateway", "--backend", "http://x:1", *extra])
        )

    monkeypatch.delenv(KEY_ENV, raising=False)
    assert config().api_key is None
    assert main(["gateway", "--backend", "http://x:1", "--forward-client-auth"]) == 2
    assert "needs an API key" in capsys.readouterr().err
    monkeypatch.setenv(KEY_ENV, " k-env \n")
    assert config().api_key == "k-env"
    key = tmp_path / "key"
    key.write_text("k-file\nignored\n")
    assert config("--api-key-file", str(key)).api_key == "k-file"
    key.write_text("\n")
    assert main(["gateway", "--backend", "http://x:1", "--api-key-file", str(key)]) == 2
    assert "first line is empty" in capsys.readouterr().err
    monkeypatch.setenv(KEY_ENV, "")
    assert main(["gateway", "--backend", "http://x:1"]) == 2
    assert "set but empty" in capsys.readouterr().err
