"""A FAKE OpenAI-compatible server: canned answers, no model behind it (named as such).

What it is for
    Measuring what kvharness itself costs (the bench's client capacity, the gateway's added
    latency: an engine's time would drown both) and fault tests that need a server to
    misbehave on cue. Tests of real serving use vLLM.

What it answers
    ``/v1/completions`` and ``/v1/chat/completions``, streamed or not, with ``max_tokens``
    (default 16, at most 4096; ``tokens`` overrides it) tokens of the word " tok", a usage
    chunk and ``[DONE]``; ``/v1/models`` (one model, ``model``); ``/health``; a ``/metrics`` in
    vLLM's names (``vllm:cache_config_info``, load gauges, prefix-cache counters); and, given a
    ``tokenizer.json``, vLLM's ``/tokenize``. Its "prefix cache" remembers whole prompts: a
    prompt seen before counts as all cached (``cached_tokens`` in usage, the hit counter), any
    other as none. A client that disconnects mid-answer stops it, as vLLM aborts a request.

Faults, by request header
    ``x-fake-status: CODE`` answers CODE with an error body; ``x-fake-delay-ms: MS`` waits
    before answering; ``x-fake-token-ms: MS`` paces streamed tokens (default ``token_ms``);
    ``x-fake-cut-after: N`` sends N token chunks, then drops the connection.

Faults, by plan
    ``plan(n, body)`` (``n`` counts completion requests from 0) names a fault or None:
    ``"http CODE"``, ``"cut"`` (drop the connection after the first token), ``"hang"`` (never
    answer), ``"close"`` (close without answering).

How it runs
    On asyncio's Protocol API with the wire's framing (:mod:`kvharness.wire.http`), so one core
    serves thousands of streams a second and a capacity run measures the client, not the fake:
    :meth:`FakeOpenAI.start` serves from a thread (tests), :meth:`FakeOpenAI.serve` in the
    running loop, ``python -m kvharness.testing.fake_openai --port P`` in its own process
    (prints the port it listens on).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec

from kvharness.wire.framing import DONE, MAX_HEAD, BodyFraming, Headers, parse_head

__all__ = ["FakeOpenAI", "FakeStats", "Plan", "main"]

Plan = Callable[[int, bytes], str | None]
"""(completion request number from 0, request body) -> fault name, or None to answer."""

MAX_TOKENS = 4096
DEFAULT_TOKENS = 16


@dataclass(slots=True)
class FakeStats:
    requests: int = 0
    """Requests received, on any path."""
    completions: int = 0
    inflight: int = 0
    """Completion requests being answered now."""
    queries: int = 0
    """Prompt tokens of all completion requests (the prefix-cache query counter)."""
    hits: int = 0
    """Prompt tokens counted as cached."""
    aborted: int = 0
    """Answers stopped because their client went away."""
    faults: dict[str, int] = field(default_factory=dict)


_NULL = msgspec.Raw(b"null")


class _Body(msgspec.Struct):
    prompt: msgspec.Raw = _NULL
    messages: msgspec.Raw = _NULL
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool = False


class _Tokenize(msgspec.Struct):
    prompt: str
    add_special_tokens: bool = True


_decode = msgspec.json.Decoder(_Body)
_ids = msgspec.json.Decoder(list[int])
_json = msgspec.json.Encoder()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _plain(status: int, body: bytes, ctype: bytes = b"application/json") -> bytes:
    reason = b"OK" if status == 200 else b"Fake"
    return b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status, reason, ctype, len(body), body,
    )  # fmt: skip


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
_END = b"0\r\n\r\n"


class _Conn(asyncio.Protocol):
    """One client connection: requests parsed as they arrive, answered one after another."""

    def __init__(self, server: FakeOpenAI) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = b""
        self._head: tuple[str, str, Headers] | None = None
        self._framing = BodyFraming()
        self._body: list[bytes] = []
        self._queue: deque[tuple[str, str, Headers, bytes]] = deque()
        self._busy: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.server._conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server._conns.discard(self)
        if self._busy is not None:
            self._busy.cancel()

    def data_received(self, data: bytes) -> None:
        if self._buf:
            data, self._buf = self._buf + data, b""
        pos = 0
        try:
            while pos < len(data):
                if self._head is None:
                    end = data.find(b"\r\n\r\n", pos)
                    if end < 0:
                        if len(data) - pos > MAX_HEAD:
                            raise ValueError("request head too large")
                        self._buf = data[pos:]
                        return
                    head = parse_head(data[pos:end])
                    verb, target, *_ = head.first
                    pos = end + 4
                    self._head = (verb.decode("latin-1"), target.decode("latin-1"), head.headers)
                    self._framing.start(head, until_close=False)
                if self._framing.state != DONE:
                    pos = self._framing.feed(data, pos, self._body)
                    if self._framing.state != DONE:
                        return
                method, path, headers = self._head
                self._queue.append((method, path, headers, b"".join(self._body)))
                self._head, self._body = None, []
        except ValueError:
            self.write(_plain(400, b'{"error":{"message":"malformed request"}}'))
            self.close()
            return
        finally:
            self._answer_queued()

    def _answer_queued(self) -> None:
        while self._queue and self._busy is None and not self.closed:
            method, path, headers, body = self._queue.popleft()
            try:
                pending = self.server._answer(self, method, path, headers, body)
            except Exception as err:  # answered as a web framework would: 500, connection kept
                msg = _json.encode({"error": {"message": f"{type(err).__name__}: {err}"}})
                self.write(_plain(500, msg))
                continue
            if pending is not None:
                self._busy = asyncio.get_running_loop().create_task(pending)
                self._busy.add_done_callback(self._done)
            elif headers.get("connection", "").lower() == "close":
                self.close()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._busy = None
        if not task.cancelled() and task.exception() is not None:
            self.close()
            return
        self._answer_queued()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.closed = True


class FakeOpenAI:
    """The fake on ``host:port`` (0: pick a free port; :attr:`port` then says which). See the
    module docstring for what it answers; ``plan`` may be set or changed at any time."""

    def __init__(
        self,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        model: str = "fake-model",
        tokens: int | None = None,
        plan: Plan | None = None,
        block_size: int = 16,
        num_blocks: int = 1000,
        name: str = "",
        token_ms: float = 0.0,
        tokenizer: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.model = model
        self.tokens = tokens
        self.plan = plan
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.name = name
        self.token_ms = token_ms
        self.stats = FakeStats()
        self._tok: Any = None
        if tokenizer is not None:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(tokenizer)
        self._seen: set[int] = set()
        self._ids = itertools.count()
        self._conns: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- answers ----------------------------------------------------------------------------

    def _answer(
        self, conn: _Conn, method: str, path: str, headers: Headers, body: bytes
    ) -> Coroutine[Any, Any, None] | None:
        """Answer one request: written now (None), or a coroutine that answers it."""
        self.stats.requests += 1
        path = path.split("?", 1)[0]
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return self._completion(conn, path.endswith("/chat/completions"), headers, body)
        if method == "GET" and path == "/health":
            conn.write(_plain(200, b"", b"text/plain"))
        elif method == "GET" and path == "/v1/models":
            listed = {"object": "list", "data": [{"id": self.model, "object": "model",
                                                  "owned_by": "fake"}]}  # fmt: skip
            conn.write(_plain(200, _json.encode(listed)))
        elif method == "GET" and path == "/metrics":
            conn.write(_plain(200, self._metrics().encode(), b"text/plain; version=0.0.4"))
        elif method == "POST" and path == "/tokenize" and self._tok is not None:
            conn.write(self._tokenize(body))
        else:
            conn.write(_plain(404, b'{"error":{"message":"not found","code":404}}'))
        return None

    def _tokenize(self, body: bytes) -> bytes:
        try:
            req = msgspec.json.decode(body, type=_Tokenize)
        except msgspec.DecodeError as err:
            return _plain(400, _json.encode({"error": {"message": str(err)}}))
        enc = self._tok.encode(req.prompt, add_special_tokens=req.add_special_tokens)
        return _plain(200, _json.encode({"count": len(enc.ids), "tokens": enc.ids}))

    def _metrics(self) -> str:
        s = self.stats
        return (
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{self.block_size}",'
            f'num_gpu_blocks="{self.num_blocks}"}} 1.0\n'
            f"fake_requests_total {s.completions}\n"
            # As if the engine ran one request at a time and queued the rest.
            f'vllm:num_requests_running{{engine="0"}} {min(1, s.inflight)}\n'
            f'vllm:num_requests_waiting{{engine="0"}} {max(0, s.inflight - 1)}\n'
            f'vllm:kv_cache_usage_perc{{engine="0"}} {0.1 * s.inflight}\n'
            "# TYPE vllm:prefix_cache_queries_total counter\n"
            f'vllm:prefix_cache_queries_total{{engine="0"}} {s.queries}\n'
            "# TYPE vllm:prefix_cache_hits_total counter\n"
            f'vllm:prefix_cache_hits_total{{engine="0"}} {s.hits}\n'
        )

    def _completion(
        self, conn: _Conn, chat: bool, headers: Headers, body: bytes
    ) -> Coroutine[Any, Any, None] | None:
        stats = self.stats
        n = stats.completions
        stats.completions += 1
        fault = self.plan(n, body) if self.plan is not None else None
        if fault is not None:
            stats.faults[fault] = stats.faults.get(fault, 0) + 1
            if fault == "hang":
                return _hang()
            if fault == "close":
                conn.close()
                return None
            if fault.startswith("http "):
                code = int(fault.split()[1])
                conn.write(_plain(code, b'{"error":{"message":"injected fault"}}'))
                return None
        delay = headers.get("x-fake-delay-ms")
        status = headers.get("x-fake-status")
        pace = float(headers.get("x-fake-token-ms") or self.token_ms) / 1000
        cut = headers.get("x-fake-cut-after")
        if fault == "cut":
            cut = "1"
        if delay or pace or (status is None and cut is not None):
            return self._paced(conn, chat, body, delay, status, pace, cut)
        if status is not None:
            conn.write(self._error(int(status)))
            return None
        conn.write(self._complete(chat, body))
        return None

    def _error(self, code: int) -> bytes:
        err = {"error": {"message": f"fake failure {code}", "type": "fake", "code": code}}
        return _plain(code, _json.encode(err))

    def _prepared(self, chat: bool, body: bytes) -> tuple[_Body, int, int, int] | bytes:
        """The request decoded with its (tokens out, prompt tokens, cached tokens), counted in
        the stats; or a 400 answer."""
        try:
            req = _decode.decode(body)
        except (msgspec.DecodeError, RecursionError) as err:
            return _plain(400, _json.encode({"error": {"message": f"bad body: {err}"}}))
        asked = req.max_tokens if req.max_tokens is not None else req.max_completion_tokens
        n = self.tokens if self.tokens is not None else asked or DEFAULT_TOKENS
        n = max(1, min(n, MAX_TOKENS))
        raw = bytes(memoryview(req.messages if chat else req.prompt))
        try:
            prompt_tokens = len(_ids.decode(raw))  # token ids, counted as an engine counts them
        except msgspec.DecodeError:
            try:  # about 4 characters a token
                prompt_tokens = len(json.dumps(msgspec.json.decode(raw))) // 4
            except RecursionError:
                return _plain(400, b'{"error":{"message":"bad body: nested too deeply"}}')
        key = hash(raw)
        cached = prompt_tokens if key in self._seen else 0
        self._seen.add(key)
        self.stats.queries += prompt_tokens
        self.stats.hits += cached
        return req, n, prompt_tokens, cached

    def _parts(self, chat: bool, n: int, prompt: int, cached: int) -> tuple[bytes, bytes]:
        """A stream's token event and its closing events (usage, ``[DONE]``)."""
        rid = f"fake-{next(self._ids)}"
        obj = "chat.completion.chunk" if chat else "text_completion"
        choice: dict[str, Any] = (
            {"index": 0, "delta": {"content": " tok"}} if chat else {"index": 0, "text": " tok"}
        )
        head = {"id": rid, "object": obj, "created": int(time.time()), "model": self.model}
        event = b"data: " + _json.encode({**head, "choices": [choice]}) + b"\n\n"
        last = {**head, "choices": [], "usage": _usage(prompt, n, cached)}
        return event, b"data: " + _json.encode(last) + b"\n\ndata: [DONE]\n\n"

    def _whole(self, chat: bool, n: int, prompt: int, cached: int) -> bytes:
        rid = f"fake-{next(self._ids)}"
        if chat:
            message = {"role": "assistant", "content": " tok" * n}
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": " tok" * n, "finish_reason": "length"}
        answer = {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
            "usage": _usage(prompt, n, cached),
            "served_by": self.name,
        }
        return _plain(200, _json.encode(answer))

    def _complete(self, chat: bool, body: bytes) -> bytes:
        """The whole answer at once (no pacing, no cut)."""
        got = self._prepared(chat, body)
        if isinstance(got, bytes):
            return got
        req, n, prompt, cached = got
        if not req.stream:
            return self._whole(chat, n, prompt, cached)
        event, closing = self._parts(chat, n, prompt, cached)
        return _STREAM_HEAD + _chunk(event * n + closing) + _END

    async def _paced(
        self,
        conn: _Conn,
        chat: bool,
        body: bytes,
        delay: str | None,
        status: str | None,
        pace: float,
        cut: str | None,
    ) -> None:
        self.stats.inflight += 1
        try:
            if delay:
                await asyncio.sleep(int(delay) / 1000)
            if status is not None:
                conn.write(self._error(int(status)))
                return
            got = self._prepared(chat, body)
            if isinstance(got, bytes):
                conn.write(got)
                return
            req, n, prompt, cached = got
            if not req.stream:
                conn.write(self._whole(chat, n, prompt, cached))
                return
            event, closing = self._parts(chat, n, prompt, cached)
            conn.write(_STREAM_HEAD)
            for i in range(n):
                if cut is not None and i == int(cut):
                    conn.abort()
                    return
                if pace and i:
                    await asyncio.sleep(pace)
                if conn.closed:
                    self.stats.aborted += 1
                    return
                conn.write(_chunk(event))
            conn.write(_chunk(closing) + _END)
        except asyncio.CancelledError:
            self.stats.aborted += 1
            raise
        finally:
            self.stats.inflight -= 1

    # -- running ----------------------------------------------------------------------------

    async def serve(self) -> None:
        """Serve until cancelled, in the running loop."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._server = await loop.create_server(
            lambda: _Conn(self), self.host, self.port, backlog=4096, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        async with self._server:
            await self._server.serve_forever()

    def start(self) -> FakeOpenAI:
        """Serve from a daemon thread; returns once listening."""

        def run() -> None:
            with contextlib.suppress(asyncio.CancelledError):
                asyncio.run(self.serve())

        self._thread = threading.Thread(target=run, daemon=True, name="fake-openai")
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake OpenAI server did not start")
        return self

    def stop(self) -> None:
        """Stop a server started with :meth:`start`, closing its open connections."""
        loop, srv = self._loop, self._server
        if loop is None or srv is None:
            return

        def shut() -> None:
            srv.close()
            for conn in list(self._conns):
                conn.abort()
            for task in asyncio.all_tasks(loop):
                task.cancel()

        loop.call_soon_threadsafe(shut)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _hang() -> None:
    await asyncio.Event().wait()


def _usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="a FAKE OpenAI-compatible server (canned answers, no model); prints the port"
    )
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=0, help="port to listen on (default 0: any)")
    ap.add_argument(
        "--tokens", type=int, help="tokens per answer (default: the request's max_tokens)"
    )
    ap.add_argument("--block-size", type=int, default=16, help="block size /metrics reports (16)")
    ap.add_argument("--name", default="", help="name put in non-streamed answers")
    ap.add_argument("--token-ms", type=float, default=0.0, help="pause between streamed tokens, ms")
    ap.add_argument("--tokenizer", help="tokenizer.json that /tokenize answers with")
    ap.add_argument("--cpu", type=int, help="pin this process to one CPU")
    args = ap.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    server = FakeOpenAI(
        args.port,
        host=args.host,
        tokens=args.tokens,
        block_size=args.block_size,
        name=args.name,
        token_ms=args.token_ms,
        tokenizer=args.tokenizer,
    )

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        await asyncio.to_thread(server._ready.wait)
        print(server.port, flush=True)
        await task

    try:
        import uvloop

        uvloop.run(run())
    except ImportError:
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
