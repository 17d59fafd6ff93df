"""A stub OpenAI-compatible streaming server (named as such: no model behind it) for the bench's
fault tests and its client-capacity benchmark.

It speaks real HTTP/1.1 on a real socket (keep-alive, chunked SSE), answers ``/v1/completions``
and ``/v1/chat/completions`` at once with ``max_tokens`` streamed tokens (or ``tokens`` when set),
a usage chunk and ``[DONE]``, and can misbehave on purpose: a :data:`Plan` picks, per request
number, one of ``"http 500"``/``"http 4xx"`` (status code), ``"cut"`` (close after the first
token), ``"hang"`` (never answer), ``"close"`` (close without answering).

Written on asyncio's Protocol API, not a web framework, so one core serves thousands of streams a
second and the client, not the stub, is what a capacity run measures.

Run ``python -m kvharness.testing.openai_stub --port P [--cpu N] [--tokens 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import msgspec

__all__ = ["Plan", "StubServer", "StubStats"]

Plan = Callable[[int, bytes], str | None]
"""(request number from 0, request body) -> fault name or None to answer normally."""


class _Req(msgspec.Struct):
    prompt: list[int | str] | str | None = None
    messages: list[dict[str, object]] | None = None
    max_tokens: int = 16


@dataclass(slots=True)
class StubStats:
    requests: int = 0
    faults: dict[str, int] = field(default_factory=dict)


_decoder = msgspec.json.Decoder(_Req)
_TOKEN = b'data: {"object":"text_completion","choices":[{"index":0,"text":"tok"}]}\n\n'
_CHAT_TOKEN = b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'
_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Conn(asyncio.Protocol):
    def __init__(self, server: StubServer) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.server._conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._conns.discard(self)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            path = head.split(b" ", 2)[1] if b" " in head else b"/"
            self.server._answer(self, path, body)


class StubServer:
    """The stub on ``127.0.0.1:port`` (0 = pick one). ``tokens`` overrides each request's
    ``max_tokens``; ``plan`` injects faults. Start in a background thread with :meth:`start` (tests)
    or run in the current loop with :meth:`serve` (a dedicated process)."""

    def __init__(self, port: int = 0, *, tokens: int | None = None, plan: Plan | None = None):
        self.port = port
        self.tokens = tokens
        self.plan = plan
        self.stats = StubStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._conns: set[_Conn] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _answer(self, conn: _Conn, path: bytes, body: bytes) -> None:
        t = conn.transport
        assert t is not None
        n = self.stats.requests
        self.stats.requests += 1
        if not path.startswith(b"/v1/") or not path.endswith(b"completions"):
            data = b"{}"
            if path.startswith(b"/v1/models"):
                data = b'{"object":"list","data":[{"id":"stub","object":"model"}]}'
            status = b"200 OK" if path in (b"/health", b"/") or data != b"{}" else b"404 Not Found"
            t.write(
                b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (status, len(data), data)
            )
            return
        fault = self.plan(n, body) if self.plan is not None else None
        if fault is not None:
            self.stats.faults[fault] = self.stats.faults.get(fault, 0) + 1
        if fault == "hang":
            return
        if fault == "close":
            t.close()
            return
        if fault is not None and fault.startswith("http "):
            code = int(fault.split()[1])
            msg = b'{"error":{"message":"injected fault"}}'
            t.write(
                b"HTTP/1.1 %d Injected\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (code, len(msg), msg)
            )
            return
        req = _decoder.decode(body)
        chat = req.messages is not None
        prompt_tokens = len(req.prompt) if isinstance(req.prompt, list) else len(body) // 4
        k = self.tokens if self.tokens is not None else max(1, req.max_tokens)
        token = _CHAT_TOKEN if chat else _TOKEN
        if fault == "cut":
            t.write(_HEAD + _chunk(token))
            t.close()
            return
        usage = (
            b'data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}}}\n\ndata: [DONE]\n\n'
            % (prompt_tokens, k)
        )
        t.write(_HEAD + _chunk(token * k + usage) + b"0\r\n\r\n")

    async def serve(self) -> None:
        """Serve until cancelled, in the running loop."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._server = await loop.create_server(
            lambda: _Conn(self), "127.0.0.1", self.port, backlog=4096
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        async with self._server:
            await self._server.serve_forever()

    def start(self) -> StubServer:
        """Serve from a daemon thread; returns once listening."""

        def run() -> None:
            with contextlib.suppress(asyncio.CancelledError):
                asyncio.run(self.serve())

        self._thread = threading.Thread(target=run, daemon=True, name="openai-stub")
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("stub server did not start")
        return self

    def stop(self) -> None:
        """Stop a server started with :meth:`start`, closing its open connections."""
        loop, srv = self._loop, self._server
        if loop is None or srv is None:
            return

        def shut() -> None:
            srv.close()
            for conn in list(self._conns):
                if conn.transport is not None:
                    conn.transport.abort()
            for task in asyncio.all_tasks(loop):
                task.cancel()

        loop.call_soon_threadsafe(shut)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description="stub OpenAI-compatible streaming server")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = any; printed)")
    ap.add_argument(
        "--tokens", type=int, default=None, help="tokens per answer (default max_tokens)"
    )
    ap.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    args = ap.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    server = StubServer(args.port, tokens=args.tokens)

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        await asyncio.to_thread(server._ready.wait)
        print(server.port, flush=True)
        await task

    asyncio.run(run())


if __name__ == "__main__":
    main()
