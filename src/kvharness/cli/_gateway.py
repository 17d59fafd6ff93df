"""`kvharness gateway`: the KV-aware OpenAI-compatible router, and `gateway status`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from kvharness.errors import UserError

HELP = "run the KV-cache-aware OpenAI-compatible gateway in front of engine replicas"
KEY_ENV = "KVHARNESS_GATEWAY_API_KEY"
"""Environment variable holding the gateway's API key (when --api-key-file is not given)."""


def register(subparsers: Any) -> None:
    from kvharness.routing.registry import available_policies

    parser = subparsers.add_parser(
        "gateway",
        help=HELP,
        description=HELP + ". `kvharness gateway status --url URL` shows a running one.",
    )
    parser.set_defaults(func=run)
    sub = parser.add_subparsers(dest="gateway_command", metavar="{status}")
    status = sub.add_parser("status", help="live view of a running gateway (from its /status)")
    status.add_argument("--url", default="http://127.0.0.1:8080", help="the gateway's base URL")
    status.add_argument("--interval", type=float, default=1.0, help="refresh period, seconds")
    status.add_argument("--once", action="store_true", help="print one view and exit")
    status.add_argument("--json", action="store_true", help="print the raw /status JSON and exit")
    status.set_defaults(func=run_status)

    from kvharness.cli._config_args import add_options
    from kvharness.gateway.config import GatewayConfig

    add_options(parser, GatewayConfig, overrides={"policy": {"choices": available_policies()}})
    parser.add_argument(
        "--api-key-file",
        metavar="FILE",
        help="require the key in FILE (its first line) as 'Authorization: Bearer KEY' or "
        f"'x-api-key: KEY' on every endpoint but /health; without it the key is read from ${KEY_ENV} "
        "when set (a key is never taken on the command line, where other users can read it)",
    )
    parser.add_argument(
        "--log-level", default="WARNING", help="logging level (DEBUG, INFO, WARNING...)"
    )


def _options(pairs: list[str]) -> dict[str, Any]:
    from kvharness.routing.registry import parse_policy_options

    try:
        return parse_policy_options(pairs)
    except ValueError as err:
        raise UserError(f"--policy-option: {err}") from None


def build_config(args: argparse.Namespace) -> Any:
    from kvharness.cli._config_args import config_from_args
    from kvharness.gateway.config import GatewayConfig
    from kvharness.gateway.kv_events import event_endpoint_mode, parse_event_specs

    if args.forward_token_ids and args.tokenizer is None:
        raise UserError("--forward-token-ids needs the engines' tokenizer: add --tokenizer DIR")
    api_key = _api_key(args.api_key_file)
    if args.forward_client_auth and api_key is None:
        raise UserError(f"--forward-client-auth needs an API key: --api-key-file or ${KEY_ENV}")
    try:
        events = parse_event_specs(args.kv_events, "--kv-events")
        replays = parse_event_specs(args.kv_replay, "--kv-replay")
        for url, endpoint in [*events.items(), *replays.items()]:
            event_endpoint_mode(endpoint, url)
    except ValueError as err:
        raise UserError(str(err)) from None
    return config_from_args(
        GatewayConfig,
        args,
        policy_options=_options(args.policy_options),
        kv_events=events,
        kv_replay=replays,
        api_key=api_key,
    )


def _api_key(path: str | None) -> str | None:
    """The key from ``path`` (its first line) or, without a path, from :data:`KEY_ENV`."""
    if path is None:
        key = os.environ.get(KEY_ENV)
        if key is not None and not key.strip():
            raise UserError(f"${KEY_ENV} is set but empty")
        return key.strip() if key is not None else None
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"--api-key-file {path}: cannot read it: {err}") from None
    key = lines[0].strip() if lines else ""
    if not key:
        raise UserError(f"--api-key-file {path}: the file's first line is empty; put the key there")
    return key


def run(args: argparse.Namespace) -> int:
    from kvharness.gateway.app import Gateway

    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = build_config(args)
    try:
        gateway = Gateway(config)
    except ValueError as err:  # e.g. policy options the policy rejects
        raise UserError(str(err)) from None
    except TypeError as err:
        raise UserError(f"bad --policy-option for {config.policy}: {err}") from None

    async def main() -> None:
        port = await gateway.start()
        print(
            f"kvharness gateway on http://{config.host}:{port} -> {len(config.backends)} "
            f"replica(s), policy {config.policy}",
            file=sys.stderr,
            flush=True,
        )
        if config.record is not None:
            what = "hashes, token ids and messages" if config.record_content else "hashes only"
            print(f"recording to {config.record} ({what})", file=sys.stderr, flush=True)
        # SIGTERM (what a service manager or Kubernetes sends) stops it as Ctrl-C does: requests
        # in flight are finished, the replicas' event streams closed.
        stopped = asyncio.Event()
        with contextlib.suppress(NotImplementedError):  # no signal handlers on this platform
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
        try:
            await stopped.wait()
        finally:
            await gateway.stop()

    # Large bodies are parsed and hashed in a worker thread; the event loop's thread gets the
    # interpreter lock back after 0.5 ms of it instead of the default 5 ms, which keeps
    # /health and small requests answered meanwhile (benchmarks/gateway_abuse.py).
    sys.setswitchinterval(0.0005)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(main())
    except OSError as err:
        raise UserError(f"cannot listen on {config.host}:{config.port}: {err.strerror}") from None
    return 0


def _loop_factory() -> Any:
    """uvloop's event loop where installed (about half the per-request overhead), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_status(args: argparse.Namespace) -> int:
    from kvharness.cli._gateway_status import fetch_status, watch_status

    if args.json:
        print(json.dumps(fetch_status(args.url), indent=2))
        return 0
    watch_status(args.url, args.interval, args.once)
    return 0
