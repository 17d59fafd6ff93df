"""`kvharness gateway`: the KV-aware OpenAI-compatible router, and `gateway status`."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
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

    a = parser.add_argument
    a(
        "--backend",
        action="append",
        default=[],
        metavar="URL",
        help="an engine replica's base URL (repeat for each replica)",
    )
    a("--policy", default="agent_aware", choices=available_policies(), help="routing policy")
    a(
        "--policy-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a policy constructor argument (VALUE parsed as JSON, else a string); repeatable",
    )
    a("--host", default="127.0.0.1", help="address to listen on")
    a("--port", type=int, default=8080, help="port to listen on (0: any free port)")
    a(
        "--tokenizer",
        metavar="DIR",
        help="the served model's directory (tokenizer.json and chat template), to hash prompts "
        "exactly as the engines tokenise them; without it prompts are hashed approximately "
        "and KV events cannot be matched to text prompts",
    )
    a("--chat-template", metavar="FILE", help="Jinja chat template overriding the model's")
    a(
        "--block-size",
        type=int,
        help="engine KV block size, tokens (default: from /metrics, else 16)",
    )
    a(
        "--capacity-blocks",
        type=int,
        help="KV blocks per replica (default: from the replicas' /metrics, else 10000)",
    )
    a(
        "--kv-events",
        action="append",
        default=[],
        metavar="URL=ENDPOINT",
        help="subscribe to a backend's vLLM KV events; ENDPOINT as given to vLLM's "
        "--kv-events-config (tcp://*:PORT: vLLM binds, the gateway connects to the backend's "
        "host; tcp://HOST:PORT: vLLM connects, the gateway binds)",
    )
    a(
        "--kv-replay",
        action="append",
        default=[],
        metavar="URL=ENDPOINT",
        help="a backend's vLLM KV-event replay endpoint, used to recover lost events",
    )
    a("--kv-topic", default="", help="KV-event topic to subscribe to (default: all)")
    a(
        "--lru-blocks",
        type=int,
        help="for backends without KV events: blocks assumed cached per replica (default: unbounded)",
    )
    a(
        "--max-queue",
        type=int,
        default=256,
        help="requests in flight per replica before it counts as full; all full -> 429",
    )
    a("--retry-after", type=float, default=1.0, help="Retry-After seconds sent with a 429")
    a(
        "--max-attempts",
        type=int,
        default=3,
        help="replicas tried per request when one fails before answering",
    )
    a("--health-interval", type=float, default=2.0, help="seconds between health checks")
    a(
        "--unhealthy-after",
        type=int,
        default=2,
        help="failed health checks in a row that take a replica out",
    )
    a(
        "--read-timeout",
        type=float,
        default=600.0,
        help="longest silence from a replica while it answers, seconds; past it the client gets "
        "504 (default 600; 0: wait forever)",
    )
    a(
        "--client-timeout",
        type=float,
        default=15.0,
        help="seconds a client has to send a request's head (from connecting or its previous "
        "answer; idle keep-alive connections close after it too) and longest silence within "
        "its body (else 408)",
    )
    a(
        "--max-body-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="largest request body taken, bytes; larger -> 413 (default 64 MiB)",
    )
    a(
        "--max-buffered-bytes",
        type=int,
        default=256 * 1024 * 1024,
        help="request-body bytes held at once over all requests; a body that does not fit -> "
        "503 with Retry-After (default 256 MiB)",
    )
    a(
        "--api-key-file",
        metavar="FILE",
        help="require the key in FILE (its first line) as 'Authorization: Bearer KEY' or "
        f"'x-api-key: KEY' on every endpoint but /health; without it the key is read from ${KEY_ENV} "
        "when set (a key is never taken on the command line, where other users can read it)",
    )
    a(
        "--forward-client-auth",
        action="store_true",
        help="with an API key: still send the client's Authorization and x-api-key headers on "
        "to the replicas (by default the gateway's key stops at the gateway)",
    )
    a(
        "--session-header",
        action="append",
        default=[],
        metavar="NAME",
        help="request header naming the agent session (default: x-session-id)",
    )
    a(
        "--scrape-interval",
        type=float,
        default=0.0,
        help="seconds between reads of each replica's vLLM /metrics (queued requests, KV usage); "
        "0: off, load is then the gateway's own count of requests in flight",
    )
    a(
        "--verify-hashing-every",
        type=int,
        default=0,
        help="check every n-th incremental tokenisation against a full one (0: never)",
    )
    a(
        "--forward-token-ids",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send text completion prompts to the replicas as the token ids the gateway "
        "computed, so the engines skip tokenising them again (default: on with --tokenizer; a "
        "replica gets ids only once its /tokenize agrees with the gateway's tokenizer, the "
        "others get text)",
    )
    a("--log-level", default="WARNING", help="logging level (DEBUG, INFO, WARNING...)")  # fmt: skip


def _options(pairs: list[str]) -> dict[str, Any]:
    from kvharness.routing.registry import parse_policy_options

    try:
        return parse_policy_options(pairs)
    except ValueError as err:
        raise UserError(f"--policy-option: {err}") from None


def build_config(args: argparse.Namespace) -> Any:
    from kvharness.gateway.config import GatewayConfig
    from kvharness.gateway.kv_events import event_endpoint_mode, parse_event_specs

    if not args.backend:
        raise UserError("give at least one --backend URL")
    if args.forward_token_ids and args.tokenizer is None:
        raise UserError("--forward-token-ids needs the engines' tokenizer: add --tokenizer DIR")
    api_key = _api_key(args.api_key_file)
    if args.forward_client_auth and api_key is None:
        raise UserError(f"--forward-client-auth needs an API key: --api-key-file or ${KEY_ENV}")
    try:
        events = parse_event_specs(args.kv_events, "--kv-events")
        replays = parse_event_specs(args.kv_replay, "--kv-replay")
        backends = tuple(b.rstrip("/") for b in args.backend)
        for url, endpoint in [*events.items(), *replays.items()]:
            event_endpoint_mode(endpoint, url)
        return GatewayConfig(
            backends=backends,
            policy=args.policy,
            policy_options=_options(args.policy_option),
            host=args.host,
            port=args.port,
            tokenizer=args.tokenizer,
            chat_template=args.chat_template,
            block_size=args.block_size,
            capacity_blocks=args.capacity_blocks,
            kv_events=events,
            kv_replay=replays,
            kv_topic=args.kv_topic,
            lru_blocks=args.lru_blocks,
            max_queue=args.max_queue,
            retry_after_s=args.retry_after,
            max_attempts=args.max_attempts,
            health_interval_s=args.health_interval,
            unhealthy_after=args.unhealthy_after,
            read_timeout_s=args.read_timeout or None,
            client_timeout_s=args.client_timeout,
            max_body_bytes=args.max_body_bytes,
            max_buffered_bytes=args.max_buffered_bytes,
            api_key=api_key,
            forward_client_auth=args.forward_client_auth,
            session_headers=tuple(h.lower() for h in args.session_header) or ("x-session-id",),
            scrape_interval_s=args.scrape_interval,
            verify_hashing_every=args.verify_hashing_every,
            forward_token_ids=args.forward_token_ids is not False,
        )
    except ValueError as err:
        raise UserError(str(err)) from None


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
        try:
            await asyncio.Event().wait()
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
