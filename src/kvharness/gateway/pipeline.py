"""The gateway's request pipeline: read, parse, hash, route and retry, forward, relay.

Read
    The body is read within the shared byte budget (413 / 503 / 408, see
    :mod:`kvharness.gateway.limits`) and checked (400 with a reason when malformed, however
    malformed).

Hash
    The prompt is tokenised and hashed as the engines would (incrementally per session, see
    :mod:`kvharness.gateway.prompt_hasher`); a large body in a worker thread, in slices, so the
    event loop keeps answering meanwhile. A chat prompt's images are read and named here
    (:mod:`kvharness.gateway.images`; 400 for image data the engine could not read either).
    :meth:`Pipeline.prepare` does this part alone, with no sockets.

Route and retry
    The router's policy picks among healthy, not-full replicas (429 with Retry-After when all
    are full). A replica that fails before the answer started is suspected and the request is
    tried on another (``max_attempts`` in all); one silent for the read timeout gives 504.

Forward and relay
    The body goes on unchanged (a text prompt as its token ids, when the replica tokenises as
    the gateway does; an image the gateway named with its name as the part's ``uuid``, unless
    ``--no-name-images``, and by that name alone, no data, where the replica's engine holds it:
    ``--held-images``, :class:`~kvharness.gateway.images.HeldImages`) through the wire's client;
    a streamed answer is relayed byte for byte from the replica's socket to the client's, with
    backpressure, and a stream cut mid-way ends with an SSE ``error`` event. A client that
    leaves cancels its request: the replica's connection is closed (the engine stops working on
    it) and its queue slot freed at once.

Record
    With ``--record``, each routed request is written to the recording when its answer is
    complete and before the answer's last byte leaves (:mod:`kvharness.gateway.recorder`), or
    with the status of however else it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, TypeVar

import aiohttp
from aiohttp import web

from kvharness.gateway.answers import RelayResponse, error_response
from kvharness.gateway.byte_hasher import approximate
from kvharness.gateway.config import GatewayConfig
from kvharness.gateway.images import ChatImages, HeldImages, ImageError, prepare_chat_images
from kvharness.gateway.limits import BodyRefused, ByteBudget, read_body
from kvharness.gateway.metrics import GatewayMetrics
from kvharness.gateway.prompt_hasher import HashedPrompt, PromptHasher
from kvharness.gateway.recorder import CLIENT_GONE, Pending, Recorder
from kvharness.gateway.replicas import Replicas
from kvharness.gateway.requests import (
    MAX_SESSION_ID,
    BadRequest,
    ImageBody,
    Kind,
    ParsedRequest,
    approx_pieces,
    first_session_header,
    image_body,
    materialised,
    parse_request,
    with_token_ids,
)
from kvharness.gateway.router import Flight, NoReplica, Overloaded, Router
from kvharness.gateway.tokenizer import EngineTokenizer, TemplateError
from kvharness.routing.base import RouteRequest
from kvharness.wire.http import BodyError, BodyTimeout, ConnectError, HeadTimeout, Response
from kvharness.wire.http import encode_headers as encode_header_lines
from kvharness.wire.openai import Usage, error_body, usage_of_body, usage_of_stream

__all__ = ["Pipeline", "Prepared"]

log = logging.getLogger(__name__)

_INLINE_HASH_BYTES = 256 * 1024
"""Bodies larger than this are parsed and hashed in a worker thread, not on the event loop."""
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
_RELAY_HIGH = 1024 * 1024
"""Bytes queued for a client above which its replica's socket is not read (backpressure)."""
_T = TypeVar("_T")


class _UpstreamFailed(Exception):
    """The replica failed before the answer to the client started: safe to retry elsewhere."""


class _NamesRefused(Exception):
    """The replica answered 400 to a body with images sent by name alone."""


class _UpstreamSilent(Exception):
    """The replica sent nothing for the read timeout before the answer to the client started:
    it may still be working on the request, so it is not sent elsewhere (the client gets 504)."""


class Prepared(NamedTuple):
    """What the rest of a request needs of its body once parsed and hashed (the decoded body
    itself is not kept: for a large prompt it is the bulk of the request's memory)."""

    hashed: HashedPrompt
    as_ids: bytes | None
    """The body with a text prompt replaced by its token ids, when the gateway has them."""
    max_output_tokens: int
    model: str | None
    session: str | None
    """The session the client named: by a header, else by the body's ``user`` field."""
    image_body: ImageBody | None = None
    """The chat body cut around its named images (those the gateway named carrying their names
    as ``uuid``), when any is named and the gateway names images or sends held ones by name."""


class Pipeline:
    """Serves proxied completions for one gateway (see the module docstring). ``hasher`` is
    replaced through :meth:`set_block_size` when the replicas report their block size."""

    def __init__(
        self,
        config: GatewayConfig,
        router: Router,
        replicas: Replicas,
        metrics: GatewayMetrics,
        tokenizer: EngineTokenizer | None,
    ) -> None:
        self.config = config
        self.router = router
        self.replicas = replicas
        self.metrics = metrics
        self.tokenizer = tokenizer
        self.hasher = PromptHasher(
            tokenizer, router.states[0].block_size, verify_every=config.verify_hashing_every
        )
        self.budget = ByteBudget(config.max_buffered_bytes)
        """Bytes of request bodies held now, over all requests."""
        self.held_images = HeldImages(config.held_images)
        self.recorder: Recorder | None = None
        """Records each routed request (``--record``); set by the gateway."""
        self._ids = itertools.count()
        self._hash_lock = asyncio.Lock()
        self._not_forwarded = _NOT_FORWARDED
        if config.api_key is not None and not config.forward_client_auth:
            self._not_forwarded = _NOT_FORWARDED | _AUTH_HEADERS

    def set_block_size(self, block_size: int) -> None:
        """The engines' block size is ``block_size``: hash at it from now on."""
        if block_size == self.hasher.block_size:
            return
        log.info("engine block size %d tokens", block_size)
        for s in self.router.states:
            s.block_size = block_size
        self.hasher = PromptHasher(
            self.tokenizer, block_size, verify_every=self.config.verify_hashing_every
        )

    # -- parse and hash ---------------------------------------------------------------------

    def _approximate(self, parsed: ParsedRequest) -> bool:
        """Whether ``parsed``'s prompt is hashed from its text's bytes (no tokenizer for it)."""
        return parsed.prompt_ids is None and (
            self.tokenizer is None
            or (parsed.messages is not None and self.tokenizer.template is None)
        )

    def _hash(
        self, parsed: ParsedRequest, sid: str | None
    ) -> tuple[HashedPrompt, ChatImages | None]:
        """The prompt's hashes (and a chat prompt's images); ``parsed`` is :func:`materialised`
        unless :meth:`_approximate` (which hashes a long text's pieces as they are)."""
        h = self.hasher
        if parsed.prompt_ids is not None:
            return h.completion_ids(parsed.prompt_ids, sid), None
        if self._approximate(parsed):
            return approximate(approx_pieces(parsed), h.block_size, self.chain_limit()), None
        if parsed.messages is not None:
            messages, images = parsed.messages, None
            if parsed.media:
                tok = self.tokenizer
                assert tok is not None and tok.template is not None
                messages, images = prepare_chat_images(
                    messages, tok.images, parts_template=tok.template.takes_parts
                )
            hashed = h.chat(
                messages,
                sid,
                tools=parsed.tools,
                add_generation_prompt=parsed.add_generation_prompt,
                extra=parsed.template_kwargs,
                images=images,
            )
            return hashed, images
        assert isinstance(parsed.prompt_text, str)
        hashed = h.completion_text(
            parsed.prompt_text, sid, add_special_tokens=parsed.add_special_tokens
        )
        return hashed, None

    def prepare(self, body: bytes | bytearray, kind: Kind, sid: str | None) -> Prepared:
        """Parse, check and hash a request body (not thread-safe: see :meth:`_hashing`).
        Raises :class:`BadRequest` for anything about the body that the gateway cannot take,
        with the reason for the client."""
        parsed = parse_request(body, kind)
        if sid is None and self.config.session_user:
            sid = parsed.user[:MAX_SESSION_ID] if parsed.user is not None else None
        if not self._approximate(parsed):
            parsed = materialised(parsed)
        try:
            hashed, images = self._hash(parsed, sid)
            if len(hashed.block_hashes) > self.chain_limit():
                hashed = hashed._replace(block_hashes=hashed.block_hashes[: self.chain_limit()])
            as_ids = with_images = None
            if self.config.forward_token_ids and hashed.token_ids:
                as_ids = with_token_ids(parsed, hashed.token_ids)
            if images is not None:
                with_images = self._image_body(parsed, images)
        except ImageError as err:
            raise BadRequest(str(err), "messages") from None
        except RecursionError:
            raise BadRequest("the request nests JSON too deeply to render its prompt") from None
        except (TemplateError, ValueError, OverflowError) as err:
            raise BadRequest(f"cannot render or tokenise the prompt: {err}") from None
        return Prepared(hashed, as_ids, parsed.max_output_tokens, parsed.model, sid, with_images)

    def _image_body(self, parsed: ParsedRequest, images: ChatImages) -> ImageBody | None:
        """The body to forward cut around the images the engine will know by name (those the
        gateway named only when it forwards their names), or None when nothing would change."""
        names, ours = images.names, images.gateway_named
        if not self.config.name_images:
            names, ours = {k: v for k, v in names.items() if k not in ours}, frozenset()
        if not ours and not (names and self.config.held_images):
            return None
        return image_body(parsed, names, ours)

    def chain_limit(self) -> int:
        """Blocks of a prompt's chain that are routed on: the largest replica's KV capacity (the
        blocks past it can be cached on no replica, and would only cost the index memory and the
        event loop time)."""
        return max(s.capacity_blocks for s in self.router.states)

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

    # -- serve ------------------------------------------------------------------------------

    async def handle(self, request: web.Request, kind: Kind, path: str) -> web.StreamResponse:
        """Answer one completion request (``path`` is where it goes on the replica)."""
        t0 = time.perf_counter()
        try:
            body, held = await read_body(
                request, self.budget, self.config.max_body_bytes, self.config.client_timeout_s
            )
        except BodyRefused as err:
            self.metrics.errors.labels(f"body_{err.status}").inc()
            retry = {"Retry-After": str(max(1, round(self.config.retry_after_s)))}
            resp = error_response(
                err.status,
                str(err),
                "server_error" if err.status == 503 else "invalid_request_error",
                headers=retry if err.status == 503 else None,
            )
            resp.force_close()  # the rest of the body is not read: the connection ends here
            return resp
        try:
            return await self._serve(request, kind, path, body, t0)
        finally:
            self.budget.give(held)

    async def _serve(
        self, request: web.Request, kind: Kind, path: str, body: bytearray, t0: float
    ) -> web.StreamResponse:
        arrival = time.time()
        sid = first_session_header(request.headers, self.config.session_headers)
        try:
            prep = await self._hashing(len(body), functools.partial(self.prepare, body, kind, sid))
        except BadRequest as err:
            self.metrics.errors.labels("bad_request").inc()
            return error_response(400, str(err), "invalid_request_error", err.param)
        sid = prep.session
        pending = None
        if self.recorder is not None:
            pending = self.recorder.begin(
                arrival=arrival,
                session=sid if sid is not None else prep.hashed.session,
                named=sid is not None,
                hashed=prep.hashed,
                block_size=self.hasher.block_size,
                path=path,
                model=prep.model,
                body=body,
            )
        try:
            resp = await self._route(request, kind, path, body, sid, prep, pending, t0)
        except asyncio.CancelledError:
            if pending is not None and pending.replica is not None:
                pending.done(CLIENT_GONE)
            raise
        if pending is not None and pending.replica is not None:
            pending.done(resp.status)  # the failures; an answer was recorded as it ended
        return resp

    async def _route(
        self,
        request: web.Request,
        kind: Kind,
        path: str,
        body: bytearray,
        sid: str | None,
        prep: Prepared,
        pending: Pending | None,
        t0: float,
    ) -> web.StreamResponse:
        m = self.metrics
        hashed, as_ids = prep.hashed, prep.as_ids
        route_req = RouteRequest(
            request_id=f"gw-{next(self._ids)}",
            session_id=sid if sid is not None else hashed.session,
            block_hashes=hashed.block_hashes,
            prompt_tokens=hashed.num_tokens,
            max_output_tokens=prep.max_output_tokens,
        )
        headers = encode_header_lines(
            (k, v) for k, v in request.headers.items() if k.lower() not in self._not_forwarded
        )
        tried: set[int] = set()
        last_error = "no replica"
        for _attempt in range(self.config.max_attempts):
            outcome = self.router.route(route_req, time.monotonic(), frozenset(tried))
            if isinstance(outcome, Overloaded):
                m.errors.labels("overloaded").inc()
                wait = max(1, round(outcome.retry_after_s))
                return error_response(
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
            if pending is not None:
                pending.routed(self.replicas.urls[i], outcome.reason)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "route session=%s tokens=%d -> %s (%s, %d blocks cached there)",
                    route_req.session_id,
                    route_req.prompt_tokens,
                    self.replicas.urls[i],
                    outcome.reason,
                    outcome.matched_blocks,
                )
            if hashed.num_tokens:
                bs = self.router.states[i].block_size
                m.matched_ratio.observe(min(1.0, outcome.matched_blocks * bs / hashed.num_tokens))
            sub = self.replicas.subscribers[i]
            if sub is not None and sub.translator.recovering and hashed.token_ids:
                # Events were lost: until they flow cleanly again, the routed prompts name
                # stores whose parents were lost (the router's decisions feed the index anyway).
                sub.translator.learn_route(
                    hashed.block_hashes,
                    hashed.token_ids,
                    self.router.states[i].block_size,
                    hashed.images,
                )
            flight = self.router.dispatched(route_req, outcome, time.monotonic())
            m.route_seconds.observe(time.perf_counter() - t0)
            try:
                if prep.image_body is not None:
                    return await self._forward_images(
                        request, i, path, prep.image_body, headers, flight, kind, pending
                    )
                alike = as_ids is not None and await self.replicas.tokenizes_alike(i)
                sent = as_ids if alike and as_ids is not None else body
                return await self._forward(request, i, path, sent, headers, flight, kind, pending)
            except _UpstreamFailed as err:
                last_error = str(err)
                m.retries.labels("upstream_failed").inc()
                m.requests.labels(self.replicas.urls[i], kind, "retried").inc()
            except _UpstreamSilent as err:
                m.errors.labels("timeout").inc()
                m.requests.labels(self.replicas.urls[i], kind, "timeout").inc()
                return error_response(504, str(err), "timeout_error")
            except asyncio.CancelledError:
                m.requests.labels(self.replicas.urls[i], kind, "client_gone").inc()
                raise
            finally:
                self.router.finished(flight, time.monotonic())
        m.errors.labels("no_replica").inc()
        status = 502 if tried else 503
        return error_response(
            status, f"no replica could serve the request: {last_error}", "upstream_error"
        )

    async def _forward_images(
        self,
        request: web.Request,
        i: int,
        path: str,
        images: ImageBody,
        headers: bytes,
        flight: Flight,
        kind: Kind,
        pending: Pending | None,
    ) -> web.StreamResponse:
        """Forward a chat body with named images, those replica ``i`` holds by name alone; if
        it refuses them, the body whole, and when that is answered, it held less than taken."""
        held = self.held_images
        body, by_name = images.render(held.held(i))
        try:
            resp = await self._forward(
                request, i, path, body, headers, flight, kind, pending, by_name=bool(by_name)
            )
        except _NamesRefused:
            self.metrics.image_refusals.inc()
            body, by_name = images.render()
            resp = await self._forward(request, i, path, body, headers, flight, kind, pending)
            if resp.status < 400:
                held.refused(i)
        if resp.status < 400:
            held.sent(i, (name for name, _, _ in images.images))
        self.metrics.images.labels("name").inc(len(by_name))
        self.metrics.images.labels("whole").inc(len(images.images) - len(by_name))
        return resp

    async def _forward(
        self,
        request: web.Request,
        i: int,
        path: str,
        body: bytes | bytearray,
        headers: bytes,
        flight: Flight,
        kind: Kind,
        pending: Pending | None,
        by_name: bool = False,
    ) -> web.StreamResponse:
        """Send ``body`` to replica ``i`` and relay its answer. Raises :class:`_NamesRefused`
        for a 400 to a body with images sent by name (``by_name``), before anything is relayed."""
        url = self.replicas.urls[i]
        try:
            upstream = await self.replicas.client.request(
                "POST", url + path, body, headers, timeout_s=None,
                read_timeout_s=self.config.read_timeout_s,
            )  # fmt: skip
        except HeadTimeout as err:
            raise self._silent(i, err) from None
        except ConnectError as err:
            self.replicas.suspect(i, str(err))
            raise _UpstreamFailed(f"{url}: {err}") from None
        try:
            if upstream.status in _RETRY_STATUSES:
                raise _UpstreamFailed(f"{url} answered {upstream.status}")
            if by_name and upstream.status == 400:
                with contextlib.suppress(BodyTimeout, BodyError):
                    await upstream.read()  # the connection goes back to the pool
                raise _NamesRefused()
            ctype = upstream.headers.get("content-type", "application/json")
            if not ctype.startswith("text/event-stream"):
                try:
                    data = await upstream.read()
                except BodyTimeout as err:
                    raise self._silent(i, err) from None
                except BodyError as err:
                    self.replicas.suspect(i, f"answer cut: {err}")
                    raise _UpstreamFailed(f"{url}: answer cut: {err}") from None
                self.router.first_token(flight, time.monotonic())
                usage = usage_of_body(data) if upstream.status == 200 else None
                self._observe_usage(usage)
                if pending is not None:
                    pending.done(upstream.status, usage)
                outcome = "ok" if upstream.status < 400 else f"http_{upstream.status}"
                self.metrics.count_request(url, kind, outcome)
                return web.Response(
                    status=upstream.status,
                    body=data,
                    headers={"Content-Type": ctype, "x-kvharness-replica": url},
                )
            return await self._stream(request, upstream, i, flight, kind, ctype, pending)
        finally:
            upstream.release()  # pooled if read whole; else closed: the engine stops generating

    async def _stream(
        self,
        request: web.Request,
        upstream: Response,
        i: int,
        flight: Flight,
        kind: Kind,
        ctype: str,
        pending: Pending | None,
    ) -> web.StreamResponse:
        """Relay a streamed answer. After the first piece (sent through aiohttp, which also
        sends the head), pieces go from the replica's socket to the client's as they arrive,
        framed here as aiohttp would (chunked on HTTP/1.1), without waking this task."""
        url = self.replicas.urls[i]
        try:
            first = await upstream.first()
        except BodyTimeout as err:
            raise self._silent(i, err) from None
        except BodyError as err:
            self.replicas.suspect(i, f"stream failed before its first byte: {err}")
            raise _UpstreamFailed(f"{url}: stream failed before its first byte: {err}") from None
        if not first:
            self.replicas.suspect(i, "empty stream")
            raise _UpstreamFailed(f"{url}: the stream ended before its first byte")
        now = time.monotonic()
        self.router.first_token(flight, now)
        self.metrics.first_byte_seconds.labels(url).observe(now - flight.sent_at)
        resp = RelayResponse(
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
            except BodyError as err:
                self.metrics.errors.labels("midstream").inc()
                self.metrics.requests.labels(url, kind, "cut").inc()
                self.replicas.suspect(i, f"stream cut: {err}")
                msg = f"the replica {url} failed mid-stream ({err}); the answer is incomplete"
                if pending is not None:
                    pending.done(502)
                event = b"event: error\ndata: " + error_body(msg, "upstream_error", 502) + b"\n\n"
                await resp.write(event)
                await resp.write_eof()
                return resp
            if not alive:
                raise ConnectionResetError("client gone")
            usage = usage_of_stream(b"".join(tail)[-4096:])
            if pending is not None:
                pending.done(upstream.status, usage)  # before the stream's last byte leaves
            await resp.write_eof()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            self.metrics.requests.labels(url, kind, "client_gone").inc()
            if pending is not None:
                pending.done(CLIENT_GONE)
            return resp
        self.metrics.count_request(url, kind, "ok")
        self._observe_usage(usage)
        return resp

    def _silent(self, i: int, err: Exception) -> _UpstreamSilent:
        return _UpstreamSilent(
            f"the replica {self.replicas.urls[i]} did not answer in time ({err}; the gateway's "
            "read timeout, --read-timeout); it may be hung or overloaded"
        )

    def _observe_usage(self, usage: Usage | None) -> None:
        if usage is None or usage.prompt_tokens <= 0:
            return
        cached = usage.cached_tokens
        if cached is not None:
            self.metrics.cached_ratio.observe(min(1.0, cached / usage.prompt_tokens))

    def status(self) -> dict[str, object]:
        """The hasher's counters (JSON-able)."""
        hs = self.hasher.stats
        return {
            "prompts": hs.prompts,
            "incremental": hs.incremental,
            "shared": hs.shared,
            "tokens_total": hs.tokens_total,
            "tokens_reused": hs.tokens_reused,
            "mismatches": hs.mismatches,
            "sessions": len(self.hasher),
        }
