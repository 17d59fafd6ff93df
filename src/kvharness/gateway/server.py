"""The gateway's HTTP server: an OpenAI-compatible proxy routing each request by KV-cache contents.

Per request: check the client's key (when one is configured), read the body within the shared
byte budget (413 / 503 / 408, see :mod:`kvharness.gateway.limits`), check it (400 with a reason
when malformed, however malformed), hash the prompt as the engines would (incrementally per
session; large prompts in a worker thread, in slices), let the policy pick among healthy, not-full
replicas (429 with Retry-After when all are full), forward the body unchanged and stream the answer
back byte for byte. A replica that fails before the answer started is marked down and the request
is tried on another; one silent for the read timeout gives 504; a stream cut mid-way ends with an
SSE ``error`` event. A client that leaves cancels its request: the replica's connection is closed
(the engine stops working on it) and its queue slot freed at once. Replica bookkeeping lives in
:class:`kvharness.gateway.router.Router` (pure); this module adds the clock and the sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import itertools
import logging
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NamedTuple, TypeVar

import aiohttp
import msgspec
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kvharness.configs import to_json_dict
from kvharness.gateway import engine_metrics
from kvharness.gateway.backends import (
    HealthChecker,
    fetch_engine_info,
    fetch_engine_load,
    fetch_tokens,
)
from kvharness.gateway.config import GatewayConfig
from kvharness.gateway.hashing import ByteChainHasher
from kvharness.gateway.kv_events import KVEventSubscriber
from kvharness.gateway.limits import BodyRefused, ByteBudget, read_body
from kvharness.gateway.metrics import PREFIX, GatewayMetrics, ReplicaView
from kvharness.gateway.requests import (
    BadRequest,
    Kind,
    ParsedRequest,
    approx_pieces,
    first_session_header,
    materialised,
    parse_request,
    with_token_ids,
)
from kvharness.gateway.router import Flight, NoReplica, Overloaded, Router
from kvharness.gateway.sessions import HashedPrompt, PromptHasher
from kvharness.gateway.tokenizer import EngineTokenizer, TemplateError, load_engine_tokenizer
from kvharness.gateway.upstream import Response as UpstreamResponse
from kvharness.gateway.upstream import (
    StreamCut,
    StreamTimeout,
    Upstream,
    UpstreamError,
    UpstreamTimeout,
)
from kvharness.routing.base import ReplicaState, RouteRequest, make_policy
from kvharness.routing.index import PrefixIndex

__all__ = ["Gateway", "error_body"]

log = logging.getLogger(__name__)

DEFAULT_BLOCK_SIZE = 16
DEFAULT_CAPACITY_BLOCKS = 10_000
_INLINE_HASH_BYTES = 256 * 1024
"""Bodies larger than this are parsed and hashed in a worker thread, not on the event loop."""
_TEXT_SLICE = 1024 * 1024
"""Characters of a prompt encoded at once when hashing it without a tokenizer (each C call that
holds the interpreter's lock stays short, so the event loop keeps running beside the thread)."""
_PROBE = (
    "kvharness: def f(x):\n\treturn x ** 2  # ASCII, digits 0123456789, tabs and   spaces,\n"
    "ünïcödé, 日本語, emoji \U0001f680, <|begin_of_text|> <s> </s> [INST] <|im_start|>\n\n"
)
"""Text whose tokens a replica must give as the gateway does before prompts go to it as ids."""
_RETRY_STATUSES = frozenset({502, 503, 504})
_NOT_FORWARDED = frozenset(
    {
        "host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade",
        "te", "trailer", "proxy-authorization", "proxy-connection", "accept-encoding", "expect",
    }
)  # fmt: skip
"""Hop-by-hop and body-framing headers; the rest of a request's headers go to the replica."""
_AUTH_HEADERS = frozenset({"authorization", "x-api-key"})
"""Where a client puts an API key; not forwarded when the gateway checks its own."""
_OPEN_PATHS = frozenset({"/health"})
"""Paths answered without the API key (load balancers' and orchestrators' probes)."""
_T = TypeVar("_T")
_json = msgspec.json.Encoder()
_RELAY_HIGH = 1024 * 1024
"""Bytes queued for a client above which its replica's socket is not read (backpressure)."""


def error_body(message: str, kind: str, status: int, param: str | None = None) -> bytes:
    """An OpenAI-style error object."""
    return _json.encode(
        {"error": {"message": message, "type": kind, "param": param, "code": status}}
    )


def _error(
    status: int,
    message: str,
    kind: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(message, kind, status, param),
        content_type="application/json",
        headers=headers,
    )


class _RelayResponse(web.StreamResponse):
    """A streamed answer whose head goes out with its first piece (one send, not two), as
    aiohttp's own ``web.Response`` does; the class attribute is aiohttp's switch for it."""

    _send_headers_immediately = False


class _UpstreamFailed(Exception):
    """The replica failed before the answer to the client started: safe to retry elsewhere."""


class _UpstreamSilent(Exception):
    """The replica sent nothing for the read timeout before the answer to the client started:
    it may still be working on the request, so it is not sent elsewhere (the client gets 504)."""


class _Prepared(NamedTuple):
    """What the rest of a request needs of its body once parsed and hashed (the decoded body
    itself is not kept: for a large prompt it is the bulk of the request's memory)."""

    hashed: HashedPrompt
    as_ids: bytes | None
    """The body with a text prompt replaced by its token ids, when the gateway has them."""
    max_output_tokens: int


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
    """One gateway: replicas, index, policy, hasher, metrics, and the aiohttp application.

    Use :meth:`start` / :meth:`stop` (tests, embedding) or :meth:`serve_forever` (the CLI).
    """

    def __init__(self, config: GatewayConfig, tokenizer: EngineTokenizer | None = None) -> None:
        self.config = config
        self.urls = [u.rstrip("/") for u in config.backends]
        if tokenizer is None and config.tokenizer is not None:
            tokenizer = load_engine_tokenizer(config.tokenizer, config.chat_template)
        self.tokenizer = tokenizer
        bs = config.block_size or DEFAULT_BLOCK_SIZE
        cap = config.capacity_blocks or DEFAULT_CAPACITY_BLOCKS
        self.states = [ReplicaState(u, capacity_blocks=cap, block_size=bs) for u in self.urls]
        self.index = PrefixIndex(len(self.urls), lru_capacity=config.lru_blocks)
        self.policy = make_policy(config.policy, **config.policy_options)
        events = {k.rstrip("/"): v for k, v in config.kv_events.items()}
        replays = {k.rstrip("/"): v for k, v in config.kv_replay.items()}
        self.subscribers: list[KVEventSubscriber | None] = []
        for i, url in enumerate(self.urls):
            if url in events:
                self.subscribers.append(
                    KVEventSubscriber(
                        url,
                        events[url],
                        apply=functools.partial(self.index.apply, i),
                        mark_stale=functools.partial(self.index.mark_stale, i),
                        replay_endpoint=replays.get(url),
                        topic=config.kv_topic,
                    )
                )
            else:
                self.subscribers.append(None)
        self.router = Router(
            self.policy,
            self.states,
            self.index,
            max_queue=config.max_queue,
            retry_after_s=config.retry_after_s,
        )
        self.hasher = PromptHasher(tokenizer, bs, verify_every=config.verify_hashing_every)
        self.metrics = GatewayMetrics()
        self.metrics.watch(
            lambda: [
                ReplicaView(u, s, e)
                for u, s, e in zip(self.urls, self.states, self.subscribers, strict=True)
            ],
            lambda: self.router.inflight,
            self.index,
            lambda: self.hasher.stats,
        )
        self._fails = [0] * len(self.urls)
        self._forgotten = [False] * len(self.urls)
        self._alike: list[bool | None] = [None] * len(self.urls)
        """Whether replica i tokenises text as the gateway does (None: not found out yet)."""
        self._probes: dict[int, asyncio.Task[bool | None]] = {}
        self._ids = itertools.count()
        self._hash_lock = asyncio.Lock()
        self.budget = ByteBudget(config.max_buffered_bytes)
        """Bytes of request bodies held now, over all requests."""
        self._not_forwarded = _NOT_FORWARDED
        if config.api_key is not None and not config.forward_client_auth:
            self._not_forwarded = _NOT_FORWARDED | _AUTH_HEADERS
        self._session: aiohttp.ClientSession | None = None
        """For health checks, discovery, scrapes and /v1/models (off the request path)."""
        self._upstream: Upstream | None = None
        """For proxied requests: lean keep-alive HTTP/1.1 (see kvharness.gateway.upstream)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._event_tasks: dict[int, asyncio.Task[None]] = {}
        self._runner: web.AppRunner | None = None
        self.started_at = time.time()
        self.port = config.port
        self.app = self._make_app()

    # --- lifecycle -------------------------------------------------------------------------

    def _make_app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.config.max_body_bytes,
            middlewares=[_errors, _require_key(self.config.api_key)],
        )
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/status", self._status)
        app.cleanup_ctx.append(self._lifespan)
        return app

    async def _lifespan(self, app: web.Application) -> AsyncIterator[None]:
        # Idle upstream connections are dropped before uvicorn's (vLLM's) 5 s keep-alive ends, so
        # a request never goes out on a connection the server is closing.
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=4.0)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None,
                sock_connect=self.config.connect_timeout_s,
                sock_read=self.config.read_timeout_s,
            ),
            auto_decompress=False,
        )
        self._upstream = Upstream(
            connect_timeout_s=self.config.connect_timeout_s,
            read_timeout_s=self.config.read_timeout_s,
        )
        await self._discover()
        if self.config.forward_token_ids and self.tokenizer is not None:
            for i in range(len(self.urls)):
                self._start_probe(i)  # so a replica that differs is reported at once
        for i, sub in enumerate(self.subscribers):
            if sub is not None:
                self.start_events(i)
        checker = HealthChecker(
            self._session,
            self.urls,
            self._report_health,
            interval_s=self.config.health_interval_s,
            timeout_s=self.config.health_timeout_s,
        )
        self._tasks.append(asyncio.create_task(checker.run()))
        if self.config.scrape_interval_s > 0:
            self._tasks.append(asyncio.create_task(self._scrape_loop()))
        try:
            yield
        finally:
            for i in list(self._event_tasks):
                await self.stop_events(i)
            tasks: list[asyncio.Task[Any]] = [*self._tasks, *self._probes.values()]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._tasks.clear()
            self._upstream.close()
            await self._session.close()

    def start_events(self, i: int) -> None:
        """(Re)subscribe to replica ``i``'s KV events (no-op if it has none or already runs)."""
        sub = self.subscribers[i]
        if sub is None or i in self._event_tasks:
            return
        sub.open()
        self._event_tasks[i] = asyncio.create_task(sub.run())

    async def stop_events(self, i: int) -> None:
        """Unsubscribe from replica ``i``'s KV events; what it publishes meanwhile is lost (a
        later :meth:`start_events` sees the gap and recovers as configured)."""
        task = self._event_tasks.pop(i, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _discover(self) -> None:
        """Read block size and cache size from the replicas unless configured."""
        assert self._session is not None
        if self.config.block_size is not None and self.config.capacity_blocks is not None:
            return
        infos = await asyncio.gather(*(fetch_engine_info(self._session, u) for u in self.urls))
        sizes = {i.block_size for i in infos if i.block_size}
        if self.config.block_size is None and sizes:
            if len(sizes) > 1:
                log.warning("replicas report different block sizes %s; using the first", sizes)
            self._set_block_size(next(i.block_size for i in infos if i.block_size))
        if self.config.capacity_blocks is None:
            for i, (s, info) in enumerate(zip(self.states, infos, strict=True)):
                if info.num_gpu_blocks:
                    s.capacity_blocks = info.num_gpu_blocks
                    if self.config.lru_blocks is None:
                        # What decisions alone assume cached is bounded by the replica's KV.
                        self.index.set_lru_capacity(i, info.num_gpu_blocks)

    async def _scrape_loop(self) -> None:
        assert self._session is not None
        while True:
            loads = await asyncio.gather(*(fetch_engine_load(self._session, u) for u in self.urls))
            for i, load in enumerate(loads):
                if load is not None:
                    self.router.observe_engine(i, load.waiting, load.kv_usage)
            await asyncio.sleep(self.config.scrape_interval_s)

    def _set_block_size(self, bs: int) -> None:
        if bs == self.hasher.block_size:
            return
        log.info("engine block size %d tokens", bs)
        for s in self.states:
            s.block_size = bs
        self.hasher = PromptHasher(
            self.tokenizer, bs, verify_every=self.config.verify_hashing_every
        )

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

    # --- feeding ---------------------------------------------------------------------------

    def _report_health(self, i: int, ok: bool) -> None:
        if ok:
            self._fails[i] = 0
            self._forgotten[i] = False
            if self.router.set_healthy(i, True):
                log.warning("replica %s is back", self.urls[i])
            return
        self._fails[i] += 1
        if self._fails[i] >= self.config.unhealthy_after:
            if self.router.set_healthy(i, False):
                log.warning("replica %s failed %d health checks: out", self.urls[i], self._fails[i])
            if not self._forgotten[i]:
                # Confirmed down: it comes back with an empty cache, perhaps another engine.
                self.router.forget(i)
                self._forgotten[i] = True
                self._alike[i] = None

    def _suspect(self, i: int, why: str) -> None:
        """A request could not reach replica ``i``: take it out until a health check passes (one
        that fails instead confirms it down, and its index entries are dropped)."""
        self._fails[i] = self.config.unhealthy_after
        if self.router.set_healthy(i, False):
            log.warning("replica %s out: %s", self.urls[i], why)

    # --- hashing ---------------------------------------------------------------------------

    def _approximate(self, parsed: ParsedRequest) -> bool:
        """Whether ``parsed``'s prompt is hashed from its text's bytes (no tokenizer for it)."""
        return parsed.prompt_ids is None and (
            self.tokenizer is None
            or (parsed.messages is not None and self.tokenizer.template is None)
        )

    def _hash_sync(self, parsed: ParsedRequest, sid: str | None) -> HashedPrompt:
        """The prompt's hashes; ``parsed`` is :func:`materialised` unless :meth:`_approximate`
        (which hashes a long text's pieces as they are)."""
        h = self.hasher
        if parsed.prompt_ids is not None:
            return h.completion_ids(parsed.prompt_ids, sid)
        if self._approximate(parsed):
            chain = ByteChainHasher(4 * h.block_size, max_blocks=self._chain_limit())
            for piece in approx_pieces(parsed):
                for at in range(0, len(piece), _TEXT_SLICE):
                    chain.feed(piece[at : at + _TEXT_SLICE].encode())
            return HashedPrompt(tuple(chain.hashes), chain.size // 4, (), 0)
        if parsed.messages is not None:
            return h.chat(
                parsed.messages,
                sid,
                tools=parsed.tools,
                add_generation_prompt=parsed.add_generation_prompt,
                extra=parsed.template_kwargs,
            )
        assert isinstance(parsed.prompt_text, str)
        return h.completion_text(
            parsed.prompt_text, sid, add_special_tokens=parsed.add_special_tokens
        )

    def _prepare_sync(self, body: bytes | bytearray, kind: Kind, sid: str | None) -> _Prepared:
        """Parse, check and hash a request body. Raises :class:`BadRequest` for anything about
        the body that the gateway cannot take, with the reason for the client."""
        parsed = parse_request(body, kind)
        if not self._approximate(parsed):
            parsed = materialised(parsed)
        try:
            hashed = self._hash_sync(parsed, sid)
            if len(hashed.block_hashes) > self._chain_limit():
                hashed = hashed._replace(block_hashes=hashed.block_hashes[: self._chain_limit()])
            as_ids = None
            if self.config.forward_token_ids and hashed.token_ids:
                as_ids = with_token_ids(parsed, hashed.token_ids)
        except RecursionError:
            raise BadRequest("the request nests JSON too deeply to render its prompt") from None
        except (TemplateError, ValueError, OverflowError) as err:
            raise BadRequest(f"cannot render or tokenise the prompt: {err}") from None
        return _Prepared(hashed, as_ids, parsed.max_output_tokens)

    def _chain_limit(self) -> int:
        """Blocks of a prompt's chain that are routed on: the largest replica's KV capacity (the
        blocks past it can be cached on no replica, and would only cost the index memory and the
        event loop time)."""
        return max(s.capacity_blocks for s in self.states)

    async def _hashing(self, size: int, work: Callable[[], _T]) -> _T:
        """``work()`` (which uses the hasher) under the hash lock: inline for a body of up to
        :data:`_INLINE_HASH_BYTES`, else in a worker thread. The lock is held until ``work``
        returns, even when the caller is cancelled meanwhile (the hasher is not thread-safe)."""
        await self._hash_lock.acquire()
        if size <= _INLINE_HASH_BYTES:
            try:
                return work()
            finally:
                self._hash_lock.release()
        task = asyncio.ensure_future(asyncio.to_thread(work))

        def done(t: asyncio.Future[_T]) -> None:
            self._hash_lock.release()
            if not t.cancelled():
                t.exception()  # retrieved: a caller that left does not leave it unreported

        task.add_done_callback(done)
        return await asyncio.shield(task)

    async def _tokenizes_alike(self, i: int) -> bool:
        """Whether replica ``i`` tokenises text as the gateway does, found out once per replica
        (again after it was confirmed down) by asking its ``/tokenize`` (vLLM's) for
        :data:`_PROBE`; an unreachable replica is asked again next time."""
        known = self._alike[i]
        if known is not None:
            return known
        found = await asyncio.shield(self._start_probe(i))
        return bool(found)

    def _start_probe(self, i: int) -> asyncio.Task[bool | None]:
        """The probe of replica ``i``'s tokenizer under way, started if none is; its answer
        (None when the replica could not be asked) is kept in ``_alike``."""
        task = self._probes.get(i)
        if task is None:
            task = self._probes[i] = asyncio.create_task(self._probe_tokenizer(i))

            def done(t: asyncio.Task[bool | None]) -> None:
                self._probes.pop(i, None)
                if not t.cancelled() and t.exception() is None and t.result() is not None:
                    self._alike[i] = t.result()

            task.add_done_callback(done)
        return task

    async def _probe_tokenizer(self, i: int) -> bool | None:
        assert self._session is not None and self.tokenizer is not None
        url = self.urls[i]
        try:
            status, tokens = await fetch_tokens(self._session, url, _PROBE)
        except (TimeoutError, aiohttp.ClientError):
            return None
        if tokens is None:
            log.warning("replica %s does not tokenise on request (POST /tokenize: HTTP %d): "
                        "its text prompts are sent as text", url, status)  # fmt: skip
            return False
        if tokens != self.tokenizer.encode_ids(_PROBE, add_special_tokens=True):
            log.warning("replica %s tokenises text unlike --tokenizer %s: its text prompts are "
                        "sent as text", url, self.tokenizer.path)  # fmt: skip
            return False
        return True

    # --- handlers --------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._proxy(request, "chat", "/v1/chat/completions")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._proxy(request, "completion", "/v1/completions")

    async def _proxy(self, request: web.Request, kind: Kind, path: str) -> web.StreamResponse:
        t0 = time.perf_counter()
        try:
            body, held = await read_body(
                request, self.budget, self.config.max_body_bytes, self.config.client_timeout_s
            )
        except BodyRefused as err:
            self.metrics.errors.labels(f"body_{err.status}").inc()
            retry = {"Retry-After": str(max(1, round(self.config.retry_after_s)))}
            resp = _error(
                err.status,
                str(err),
                "server_error" if err.status == 503 else "invalid_request_error",
                headers=retry if err.status == 503 else None,
            )
            resp.force_close()  # the rest of the body is not read: the connection ends here
            return resp
        try:
            return await self._proxy_body(request, kind, path, body, t0)
        finally:
            self.budget.give(held)

    async def _proxy_body(
        self, request: web.Request, kind: Kind, path: str, body: bytearray, t0: float
    ) -> web.StreamResponse:
        m = self.metrics
        sid = first_session_header(request.headers, self.config.session_headers)
        try:
            prep = await self._hashing(
                len(body), functools.partial(self._prepare_sync, body, kind, sid)
            )
        except BadRequest as err:
            m.errors.labels("bad_request").inc()
            return _error(400, str(err), "invalid_request_error", err.param)
        hashed, as_ids = prep.hashed, prep.as_ids
        route_req = RouteRequest(
            request_id=f"gw-{next(self._ids)}",
            session_id=sid if sid is not None else hashed.session,
            block_hashes=hashed.block_hashes,
            prompt_tokens=hashed.num_tokens,
            max_output_tokens=prep.max_output_tokens,
        )
        headers = [
            (k, v) for k, v in request.headers.items() if k.lower() not in self._not_forwarded
        ]
        tried: set[int] = set()
        last_error = "no replica"
        for _attempt in range(self.config.max_attempts):
            outcome = self.router.route(route_req, time.monotonic(), frozenset(tried))
            if isinstance(outcome, Overloaded):
                m.errors.labels("overloaded").inc()
                wait = max(1, round(outcome.retry_after_s))
                return _error(
                    429,
                    f"all replicas are at their queue limit ({self.config.max_queue}); retry later",
                    "rate_limit_error",
                    headers={"Retry-After": str(wait)},
                )
            if isinstance(outcome, NoReplica):
                break
            i = outcome.replica
            tried.add(i)
            m.count_decision(outcome.reason)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "route session=%s tokens=%d -> %s (%s, %d blocks cached there)",
                    route_req.session_id,
                    route_req.prompt_tokens,
                    self.urls[i],
                    outcome.reason,
                    outcome.matched_blocks,
                )
            if hashed.num_tokens:
                bs = self.states[i].block_size
                m.matched_ratio.observe(min(1.0, outcome.matched_blocks * bs / hashed.num_tokens))
            sub = self.subscribers[i]
            if sub is not None and sub.translator.recovering and hashed.token_ids:
                # Events were lost: until they flow cleanly again, the routed prompts name
                # stores whose parents were lost (the router's decisions feed the index anyway).
                sub.translator.learn_route(
                    hashed.block_hashes, hashed.token_ids, self.states[i].block_size
                )
            flight = self.router.dispatched(route_req, outcome, time.monotonic())
            m.route_seconds.observe(time.perf_counter() - t0)
            try:
                sent = as_ids if as_ids is not None and await self._tokenizes_alike(i) else body
                return await self._forward(request, i, path, sent, headers, flight, kind)
            except _UpstreamFailed as err:
                last_error = str(err)
                m.retries.labels("upstream_failed").inc()
                m.requests.labels(self.urls[i], kind, "retried").inc()
            except _UpstreamSilent as err:
                m.errors.labels("timeout").inc()
                m.requests.labels(self.urls[i], kind, "timeout").inc()
                return _error(504, str(err), "timeout_error")
            except asyncio.CancelledError:
                m.requests.labels(self.urls[i], kind, "client_gone").inc()
                raise
            finally:
                self.router.finished(flight, time.monotonic())
        m.errors.labels("no_replica").inc()
        status = 502 if tried else 503
        return _error(status, f"no replica could serve the request: {last_error}", "upstream_error")

    async def _forward(
        self,
        request: web.Request,
        i: int,
        path: str,
        body: bytes | bytearray,
        headers: list[tuple[str, str]],
        flight: Flight,
        kind: Kind,
    ) -> web.StreamResponse:
        assert self._upstream is not None
        url = self.urls[i]
        try:
            upstream = await self._upstream.post(url, path, body, headers)
        except UpstreamTimeout as err:
            raise self._silent(i, err) from None
        except UpstreamError as err:
            self._suspect(i, str(err))
            raise _UpstreamFailed(f"{url}: {err}") from None
        try:
            if upstream.status in _RETRY_STATUSES:
                raise _UpstreamFailed(f"{url} answered {upstream.status}")
            ctype = upstream.headers.get("content-type", "application/json")
            if not ctype.startswith("text/event-stream"):
                try:
                    data = await upstream.read()
                except StreamTimeout as err:
                    raise self._silent(i, err) from None
                except StreamCut as err:
                    self._suspect(i, f"answer cut: {err}")
                    raise _UpstreamFailed(f"{url}: answer cut: {err}") from None
                self.router.first_token(flight, time.monotonic())
                if upstream.status == 200:
                    self._observe_usage(data)
                outcome = "ok" if upstream.status < 400 else f"http_{upstream.status}"
                self.metrics.count_request(url, kind, outcome)
                return web.Response(
                    status=upstream.status,
                    body=data,
                    headers={"Content-Type": ctype, "x-kvharness-replica": url},
                )
            return await self._stream(request, upstream, i, flight, kind, ctype)
        finally:
            upstream.release()  # pooled if read whole; else closed: the engine stops generating

    async def _stream(
        self,
        request: web.Request,
        upstream: UpstreamResponse,
        i: int,
        flight: Flight,
        kind: Kind,
        ctype: str,
    ) -> web.StreamResponse:
        """Relay a streamed answer. After the first piece (sent through aiohttp, which also
        sends the head), pieces go from the replica's socket to the client's as they arrive,
        framed here as aiohttp would (chunked on HTTP/1.1), without waking this task."""
        url = self.urls[i]
        try:
            first = await upstream.first()
        except StreamTimeout as err:
            raise self._silent(i, err) from None
        except StreamCut as err:
            self._suspect(i, f"stream failed before its first byte: {err}")
            raise _UpstreamFailed(f"{url}: stream failed before its first byte: {err}") from None
        if not first:
            self._suspect(i, "empty stream")
            raise _UpstreamFailed(f"{url}: the stream ended before its first byte")
        now = time.monotonic()
        self.router.first_token(flight, now)
        self.metrics.first_byte_seconds.labels(url).observe(now - flight.sent_at)
        resp = _RelayResponse(
            status=upstream.status,
            headers={
                "Content-Type": ctype,
                "Cache-Control": "no-cache",
                "x-kvharness-replica": url,
            },
        )
        await resp.prepare(request)
        tail: deque[bytes] = deque((first,), maxlen=8)
        try:
            await resp.write(first)
            transport = request.transport
            if transport is None or transport.is_closing():
                raise ConnectionResetError("client gone")
            chunked = resp.headers.get("Transfer-Encoding") == "chunked"  # as aiohttp set it

            def sink(data: bytes) -> bool:
                if transport.is_closing():
                    return False
                transport.write(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)
                tail.append(data)
                return True

            def writable() -> bool:
                return transport.is_closing() or transport.get_write_buffer_size() < _RELAY_HIGH

            try:
                alive = await upstream.relay(sink, writable)
            except StreamCut as err:
                self.metrics.errors.labels("midstream").inc()
                self.metrics.requests.labels(url, kind, "cut").inc()
                self._suspect(i, f"stream cut: {err}")
                msg = f"the replica {url} failed mid-stream ({err}); the answer is incomplete"
                event = b"event: error\ndata: " + error_body(msg, "upstream_error", 502) + b"\n\n"
                await resp.write(event)
                await resp.write_eof()
                return resp
            if not alive:
                raise ConnectionResetError("client gone")
            await resp.write_eof()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            self.metrics.requests.labels(url, kind, "client_gone").inc()
            return resp
        self.metrics.count_request(url, kind, "ok")
        self._observe_stream_usage(b"".join(tail)[-4096:])
        return resp

    def _silent(self, i: int, err: Exception) -> _UpstreamSilent:
        return _UpstreamSilent(
            f"the replica {self.urls[i]} did not answer in time ({err}; the gateway's read "
            "timeout, --read-timeout); it may be hung or overloaded"
        )

    def _observe_usage(self, data: bytes) -> None:
        if b'"usage"' not in data[-2048:] and b'"usage"' not in data[:2048]:
            return
        try:
            usage = msgspec.json.decode(data).get("usage")
        except (msgspec.DecodeError, AttributeError):
            return
        self._observe_usage_obj(usage)

    def _observe_stream_usage(self, tail: bytes) -> None:
        at = tail.rfind(b'"usage"')
        if at < 0:
            return
        start = tail.rfind(b"data: ", 0, at)
        end = tail.find(b"\n", at)
        if start < 0:
            return
        try:
            obj = msgspec.json.decode(tail[start + 6 : end if end > 0 else None])
        except msgspec.DecodeError:
            return
        if isinstance(obj, dict):
            self._observe_usage_obj(obj.get("usage"))

    def _observe_usage_obj(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        prompt = usage.get("prompt_tokens")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(prompt, int) and prompt > 0:
            cached = details.get("cached_tokens")
            if isinstance(cached, int):
                self.metrics.cached_ratio.observe(min(1.0, cached / prompt))

    async def _models(self, request: web.Request) -> web.Response:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=self.config.health_timeout_s)

        async def one(url: str) -> list[Any]:
            try:
                async with self._session.get(url + "/v1/models", timeout=timeout) as r:  # type: ignore[union-attr]
                    if r.status != 200:
                        return []
                    data = msgspec.json.decode(await r.read())
                    models = data.get("data") if isinstance(data, dict) else None
                    return models if isinstance(models, list) else []
            except (TimeoutError, aiohttp.ClientError, msgspec.DecodeError):
                return []

        healthy = [u for u, s in zip(self.urls, self.states, strict=True) if s.healthy]
        seen: dict[str, Any] = {}
        for models in await asyncio.gather(*(one(u) for u in healthy)):
            for mdl in models:
                if isinstance(mdl, dict) and isinstance(mdl.get("id"), str):
                    seen.setdefault(mdl["id"], mdl)
        if not seen:
            return _error(503, "no healthy replica answered /v1/models", "upstream_error")
        return web.Response(
            body=_json.encode({"object": "list", "data": list(seen.values())}),
            content_type="application/json",
        )

    async def _health(self, request: web.Request) -> web.Response:
        healthy = sum(s.healthy for s in self.states)
        body = {"status": "ok" if healthy else "unavailable", "healthy_replicas": healthy}
        return web.Response(
            status=200 if healthy else 503, body=_json.encode(body), content_type="application/json"
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        """The gateway's own metrics, then each replica's (see
        :mod:`kvharness.gateway.engine_metrics`), read now from every replica at once."""
        assert self._session is not None
        texts = await engine_metrics.fetch_texts(
            self._session, self.urls, self.config.health_timeout_s
        )
        engines = engine_metrics.relabel(list(zip(self.urls, texts, strict=True)), PREFIX)
        return web.Response(
            body=generate_latest(self.metrics.registry) + engines,
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def _status(self, request: web.Request) -> web.Response:
        return web.Response(body=_json.encode(self.status()), content_type="application/json")

    def status(self) -> dict[str, Any]:
        """A JSON-able snapshot: configuration, replicas, index and event streams, hashing."""
        replicas = []
        for i, (url, s, sub) in enumerate(
            zip(self.urls, self.states, self.subscribers, strict=True)
        ):
            entry: dict[str, Any] = {
                "url": url,
                "healthy": s.healthy,
                "inflight": self.router.inflight[i],
                "pending_prefill_tokens": s.pending_prefill_tokens,
                "prefill_tokens_per_s": round(s.prefill_tokens_per_s, 1),
                "capacity_blocks": s.capacity_blocks,
                "index_blocks": self.index.cached_blocks(i),
                "kv_events": None,
            }
            if sub is not None:
                st = sub.stats
                entry["kv_events"] = {
                    "endpoint": sub.endpoint,
                    "batches": st.batches,
                    "events": st.events,
                    "gaps": st.gaps,
                    "replays": st.replays,
                    "stale_marks": st.stale_marks,
                    "last_seq": st.last_seq,
                    "lag_s": round(st.last_lag_s, 4),
                    "age_s": round(time.time() - st.last_batch_at, 3) if st.last_batch_at else None,
                    "recovering": sub.translator.recovering,
                }
            replicas.append(entry)
        hs = self.hasher.stats
        return {
            "policy": self.config.policy,
            "block_size": self.hasher.block_size,
            "uptime_s": round(time.time() - self.started_at, 1),
            "tokenizer": str(self.tokenizer.path) if self.tokenizer else None,
            "buffered_bytes": self.budget.held,
            "replicas": replicas,
            "hashing": {
                "prompts": hs.prompts,
                "incremental": hs.incremental,
                "shared": hs.shared,
                "tokens_total": hs.tokens_total,
                "tokens_reused": hs.tokens_reused,
                "mismatches": hs.mismatches,
                "sessions": len(self.hasher),
            },
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
        return _error(
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
        return _error(exc.status, exc.reason, kind)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("gateway bug while serving %s %s", request.method, request.path)
        return _error(500, "internal gateway error", "server_error")
