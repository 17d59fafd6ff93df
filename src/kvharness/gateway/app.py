"""The gateway's HTTP server: its parts put together, its aiohttp app and its lifecycle.

Parts
    :class:`~kvharness.gateway.router.Router` (pure bookkeeping around the policy and the
    prefix index), :class:`~kvharness.gateway.replicas.Replicas` (health, discovery, load, KV
    events, tokenizer probe), :class:`~kvharness.gateway.pipeline.Pipeline` (each proxied
    request), :class:`~kvharness.gateway.metrics.GatewayMetrics`; one
    :class:`~kvharness.wire.http.Client` carries everything said to the replicas.

Endpoints
    ``/v1/chat/completions`` and ``/v1/completions`` (the pipeline), ``/v1/models`` (the
    healthy replicas' models), ``/tokenize`` (a healthy replica's), ``/health`` (200 while a replica is healthy; open without the
    API key, for load balancers' probes), ``/metrics`` (the gateway's own families, then every
    replica's, labelled by replica), ``/status`` (each part's own status, and the
    configuration).

Access and faults
    With an API key configured, every endpoint but ``/health`` wants it (else 401). HTTP
    errors are answered as OpenAI-style JSON; an unexpected exception is logged and answered
    500; a request aiohttp cannot parse is one warning line.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import sys
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kvharness.configs import to_json_dict
from kvharness.gateway import engine_metrics
from kvharness.gateway.answers import error_response
from kvharness.gateway.config import GatewayConfig
from kvharness.gateway.metrics import PREFIX, GatewayMetrics, ReplicaView
from kvharness.gateway.pipeline import Pipeline
from kvharness.gateway.recorder import Recorder
from kvharness.gateway.replicas import Replicas
from kvharness.gateway.router import Router
from kvharness.gateway.tokenizer import EngineTokenizer, load_engine_tokenizer
from kvharness.routing.base import ReplicaState
from kvharness.routing.index import PrefixIndex
from kvharness.routing.registry import make_policy
from kvharness.wire.http import Client, WireError
from kvharness.workload.recording import RecordingWriter

__all__ = ["Gateway"]

log = logging.getLogger(__name__)

DEFAULT_BLOCK_SIZE = 16
DEFAULT_CAPACITY_BLOCKS = 10_000
_OPEN_PATHS = frozenset({"/health"})
"""Paths answered without the API key (load balancers' and orchestrators' probes)."""
_json = msgspec.json.Encoder()


class _ClientFaultLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server logger for the gateway: a request aiohttp could not parse (bad header
    bytes, a malformed request line: the client's fault) is one warning line; anything else is
    logged as aiohttp logs it, with its traceback."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kw: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if isinstance(exc, HttpProcessingError):
            what = " ".join(str(exc).split())[:300]
            self.warning("%s: %s: %s", str(msg) % args, type(exc).__name__, what)
        else:
            super().exception(msg, *args, exc_info=exc_info, **kw)


class Gateway:
    """One gateway (see the module docstring). Use :meth:`start` / :meth:`stop` (tests,
    embedding) or :meth:`serve_forever` (the CLI)."""

    def __init__(self, config: GatewayConfig, tokenizer: EngineTokenizer | None = None) -> None:
        self.config = config
        urls = [u.rstrip("/") for u in config.backends]
        if tokenizer is None and config.tokenizer is not None:
            tokenizer = load_engine_tokenizer(config.tokenizer, config.chat_template)
        self.tokenizer = tokenizer
        bs = config.block_size or DEFAULT_BLOCK_SIZE
        cap = config.capacity_blocks or DEFAULT_CAPACITY_BLOCKS
        states = [ReplicaState(u, capacity_blocks=cap, block_size=bs) for u in urls]
        self.index = PrefixIndex(len(urls), lru_capacity=config.lru_blocks)
        self.router = Router(
            make_policy(config.policy, **config.policy_options),
            states,
            self.index,
            max_queue=config.max_queue,
            retry_after_s=config.retry_after_s,
            unhealthy_after=config.unhealthy_after,
        )
        self.replicas = Replicas(config, self.router, tokenizer)
        self.metrics = GatewayMetrics()
        self.pipeline = Pipeline(config, self.router, self.replicas, self.metrics, tokenizer)
        if config.record is not None:
            writer = RecordingWriter(
                config.record,
                content=config.record_content,
                max_part_bytes=config.record_part_bytes,
            )
            self.pipeline.recorder = Recorder(writer)
        self.metrics.watch(
            lambda: [
                ReplicaView(u, s, e, self.router.healthy[i])
                for i, (u, s, e) in enumerate(
                    zip(self.replicas.urls, states, self.replicas.subscribers, strict=True)
                )
            ],
            lambda: self.router.inflight,
            self.index,
            lambda: self.pipeline.hasher.stats,
        )
        self._client: Client | None = None
        self._runner: web.AppRunner | None = None
        self.started_at = time.time()
        self.port = config.port
        self.app = self._make_app()

    # -- lifecycle --------------------------------------------------------------------------

    def _make_app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.config.max_body_bytes,
            middlewares=[_errors, _require_key(self.config.api_key)],
        )
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/status", self._status)
        app.cleanup_ctx.append(self._lifespan)
        return app

    async def _lifespan(self, app: web.Application) -> AsyncIterator[None]:
        # Idle connections are dropped before uvicorn's (vLLM's) 5 s keep-alive ends, so a
        # request never goes out on a connection the server is closing.
        self._client = Client(connect_timeout_s=self.config.connect_timeout_s, idle_s=4.0)
        block_size = await self.replicas.start(self._client)
        if block_size is not None:
            self.pipeline.set_block_size(block_size)
        try:
            yield
        finally:
            await self.replicas.stop()
            self._client.close()
            if self.pipeline.recorder is not None:
                self.pipeline.recorder.close()

    async def start(self) -> int:
        """Start listening; returns the port (useful with ``port=0``)."""
        self._runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            keepalive_timeout=self.config.client_timeout_s,
            logger=_ClientFaultLogger(logging.getLogger("aiohttp.server")),
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, reuse_address=True)
        await site.start()
        for addr in self._runner.addresses:
            if isinstance(addr, tuple) and len(addr) >= 2:
                self.port = int(addr[1])
                break
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def serve_forever(self) -> None:
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    # -- endpoints --------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self.pipeline.handle(request, "chat", "/v1/chat/completions")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self.pipeline.handle(request, "completion", "/v1/completions")

    async def _models(self, request: web.Request) -> web.Response:
        models = await self.replicas.models()
        if not models:
            return error_response(503, "no healthy replica answered /v1/models", "upstream_error")
        return web.Response(
            body=_json.encode({"object": "list", "data": models}),
            content_type="application/json",
        )

    async def _tokenize(self, request: web.Request) -> web.Response:
        """vLLM's ``/tokenize``, answered by the first healthy replica that answers (they serve
        one model), so a client that counts its prompts as the engine does can through here."""
        body = await request.read()
        for i, url in enumerate(self.replicas.urls):
            if not self.router.healthy[i]:
                continue
            try:
                status, data = await self.replicas.client.post(
                    url + "/tokenize", body, timeout_s=self.config.health_timeout_s * 5
                )
            except WireError:
                continue
            if status < 500:
                return web.Response(status=status, body=data, content_type="application/json")
        return error_response(503, "no healthy replica answered /tokenize", "upstream_error")

    async def _health(self, request: web.Request) -> web.Response:
        healthy = sum(self.router.healthy)
        body = {"status": "ok" if healthy else "unavailable", "healthy_replicas": healthy}
        return web.Response(
            status=200 if healthy else 503, body=_json.encode(body), content_type="application/json"
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        """The gateway's own metrics, then each replica's (see
        :mod:`kvharness.gateway.engine_metrics`), read now from every replica at once."""
        texts = await self.replicas.metrics_texts()
        engines = engine_metrics.relabel(list(zip(self.replicas.urls, texts, strict=True)), PREFIX)
        return web.Response(
            body=generate_latest(self.metrics.registry) + engines,
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def _status(self, request: web.Request) -> web.Response:
        return web.Response(body=_json.encode(self.status()), content_type="application/json")

    def status(self) -> dict[str, Any]:
        """A JSON-able snapshot: each part's own status, and the configuration."""
        return {
            "policy": self.config.policy,
            "block_size": self.pipeline.hasher.block_size,
            "uptime_s": round(time.time() - self.started_at, 1),
            "tokenizer": str(self.tokenizer.path) if self.tokenizer else None,
            "buffered_bytes": self.pipeline.budget.held,
            "replicas": self.replicas.status(),
            "hashing": self.pipeline.status(),
            "recording": self.pipeline.recorder.status() if self.pipeline.recorder else None,
            "config": to_json_dict(self.config),
        }


def _require_key(key: str | None) -> Any:
    """Middleware answering 401 to a request without ``key`` (as ``Authorization: Bearer KEY``
    or ``x-api-key: KEY``) on any path but :data:`_OPEN_PATHS`; passes all when ``key`` is None."""
    expected = key.encode() if key is not None else b""

    @web.middleware
    async def require_key(request: web.Request, handler: Any) -> web.StreamResponse:
        if key is None or request.path in _OPEN_PATHS or _has_key(request.headers, expected):
            resp: web.StreamResponse = await handler(request)
            return resp
        return error_response(
            401,
            "this gateway wants its API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
            "authentication_error",
            headers={"WWW-Authenticate": 'Bearer realm="kvharness gateway"'},
        )

    return require_key


def _has_key(headers: Mapping[str, str], expected: bytes) -> bool:
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    given = token.strip() if scheme.lower() == "bearer" else headers.get("x-api-key", "")
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected)


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """HTTP errors as OpenAI-style JSON; an unexpected exception is logged and answered 500."""
    try:
        resp: web.StreamResponse = await handler(request)
        return resp
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = "invalid_request_error" if exc.status < 500 else "server_error"
        return error_response(exc.status, exc.reason, kind)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("gateway bug while serving %s %s", request.method, request.path)
        return error_response(500, "internal gateway error", "server_error")
