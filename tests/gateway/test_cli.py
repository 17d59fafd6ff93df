"""`kvharness gateway` as a process, and `kvharness gateway status` against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvharness.cli import main
from kvharness.testing.procs import wait_up
from kvharness.testing.vllm import free_port

from .conftest import say_hi


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
        wait_up(url + "/health", proc, timeout=60)
        assert say_hi(url)["choices"]
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


def test_the_status_table_keeps_replica_urls_whole_on_a_narrow_terminal() -> None:
    from rich.console import Console

    from kvharness.cli._gateway_status import render_status

    events = {"events": 9, "gaps": 0, "stale_marks": 0, "missed_at_join": 471, "lag_s": 0.002}
    replica = {"healthy": True, "inflight": 0, "pending_prefill_tokens": 0,
               "prefill_tokens_per_s": 1234.5, "index_blocks": 7, "kv_events": events}  # fmt: skip
    status = {
        "policy": "agent_aware",
        "block_size": 128,
        "replicas": [{"url": f"http://127.0.0.1:{port}", **replica} for port in (18000, 18001)],
    }
    console = Console(width=100, record=True, force_terminal=False)
    console.print(render_status(status))
    shown = console.export_text()
    assert "http://127.0.0.1:18000" in shown and "http://127.0.0.1:18001" in shown
    assert "missed" in shown and shown.count("471") == 2 and "1234.5" in shown
    assert max(len(line) for line in shown.splitlines()) <= 100


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


def _config(*argv: str) -> Any:
    from kvharness.cli import build_parser
    from kvharness.cli._gateway import build_config

    return build_config(build_parser().parse_args(["gateway", *argv]))


def test_options_not_given_leave_the_configs_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvharness.cli._gateway import KEY_ENV
    from kvharness.gateway.config import GatewayConfig

    monkeypatch.delenv(KEY_ENV, raising=False)
    assert _config("--backend", "http://x:1/") == GatewayConfig(backends=("http://x:1",))


def test_every_option_reaches_its_field(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvharness.cli._gateway import KEY_ENV
    from kvharness.gateway.config import GatewayConfig

    monkeypatch.delenv(KEY_ENV, raising=False)
    cfg = _config(
        "--backend", "http://x:1", "--backend", "http://y:2/", "--policy", "round_robin",
        "--host", "0.0.0.0", "--port", "0", "--block-size", "32", "--capacity-blocks", "50",
        "--kv-events", "http://x:1=tcp://*:5557", "--kv-topic", "kv", "--lru-blocks", "9",
        "--max-queue", "4", "--retry-after", "2.5", "--max-attempts", "1",
        "--health-interval", "0.5", "--unhealthy-after", "3", "--read-timeout", "0",
        "--client-timeout", "7", "--max-body-bytes", "1000", "--max-buffered-bytes", "2000",
        "--session-header", "X-Agent", "--session-header", "x-run", "--scrape-interval", "1",
        "--verify-hashing-every", "10", "--no-forward-token-ids",
    )  # fmt: skip
    assert cfg == GatewayConfig(
        backends=("http://x:1", "http://y:2"), policy="round_robin", host="0.0.0.0", port=0,
        block_size=32, capacity_blocks=50, kv_events={"http://x:1": "tcp://*:5557"},
        kv_topic="kv", lru_blocks=9, max_queue=4, retry_after_s=2.5, max_attempts=1,
        health_interval_s=0.5, unhealthy_after=3, read_timeout_s=None, client_timeout_s=7.0,
        max_body_bytes=1000, max_buffered_bytes=2000, session_headers=("x-agent", "x-run"),
        scrape_interval_s=1.0, verify_hashing_every=10, forward_token_ids=False,
    )  # fmt: skip


def test_help_gives_each_fields_help_and_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--help is built from GatewayConfig: every option field's help, with its default."""
    import dataclasses

    from kvharness.configs import option
    from kvharness.gateway.config import GatewayConfig

    monkeypatch.setenv("COLUMNS", "10000")  # one line per option: no words cut at hyphens
    with pytest.raises(SystemExit):
        main(["gateway", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for f in dataclasses.fields(GatewayConfig):
        o = option(f)
        assert o is not None, f.name
        if o.cli:
            assert " ".join(o.help.split()) in text, f.name
    for shown in ("(default: 8080)", "(default: 64 MiB)", "(default: 256 MiB)",
                  "(default: from /metrics, else 16)", "(default: those five)",
                  "(default: 600)", "(default: on)"):  # fmt: skip
        assert shown in text, shown
