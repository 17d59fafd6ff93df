"""The bench's transport against hand-written responses from a real socket on loopback:
chunked bodies split at awkward places, length-delimited bodies, keep-alive reuse, stale
connections."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from kvharness.bench.transport import HttpTransport

SSE = (
    b'data: {"choices":[{"text":"a"}]}\n\n'
    b'data: {"choices":[{"text":"b"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,'
    b'"prompt_tokens_details":{"cached_tokens":0}}}\n\n'
    b"data: [DONE]\n\n"
)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    return await reader.readexactly(length)


class _Server:
    """A loopback server running ``handler`` per connection; :meth:`close` waits for every
    connection to be closed on the server side too (no transport outlives the test's loop)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.tasks: list[asyncio.Task[None]] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def _run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self.tasks.append(task)  # type: ignore[arg-type]
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await self.handler(reader, writer)

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._run, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/completions"

    async def close(self) -> None:
        self.server.close()
        await self.server.wait_closed()
        for w in self.writers:
            w.close()
            with contextlib.suppress(ConnectionError):
                await w.wait_closed()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def _serve(handler: Handler) -> tuple[_Server, str]:
    server = _Server(handler)
    return server, await server.start()


async def test_chunked_stream_split_byte_by_byte_and_connection_reused() -> None:
    conns = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal conns
        conns += 1
        for _ in range(2):
            await _read_request(reader)
            body = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            body += b"%x\r\n%s\r\n" % (len(SSE), SSE) + b"0\r\n\r\n"
            for i in range(len(body)):
                writer.write(body[i : i + 1])
                await writer.drain()
        writer.close()

    server, url = await _serve(handler)
    t = HttpTransport(time.monotonic)
    try:
        for _ in range(2):
            out = await t.stream(url, b"{}")
            assert out.error is None, out.error
            assert out.output_tokens == 2 and out.prompt_tokens == 3 and out.cached_tokens == 0
            assert out.first_token is not None and out.done is not None
    finally:
        await t.close()
        await server.close()
    assert conns == 1


async def test_length_delimited_error_body_is_reported() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        msg = b'{"error": "model  not\\nfound"}'
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg))
        await writer.drain()
        await reader.read()  # until the client hangs up
        writer.close()

    server, url = await _serve(handler)
    t = HttpTransport(time.monotonic)
    try:
        out = await t.stream(url, b"{}")
    finally:
        await t.close()
        await server.close()
    assert out.error is not None and out.error.startswith("http 404: ")
    assert not out.retryable and out.done is None


async def test_stale_keepalive_connection_is_replaced_transparently() -> None:
    conns = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal conns
        conns += 1
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE))
        await writer.drain()
        writer.close()  # the server drops the connection after one answer (keep-alive timeout)

    server, url = await _serve(handler)
    t = HttpTransport(time.monotonic)
    try:
        first = await t.stream(url, b"{}")
        await asyncio.sleep(0.05)
        second = await t.stream(url, b"{}")
    finally:
        await t.close()
        await server.close()
    assert first.error is None and second.error is None, (first.error, second.error)
    assert conns == 2


async def test_response_without_done_is_a_cut_stream() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        part = SSE.split(b"data: [DONE]")[0]
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(part), part))
        await writer.drain()
        await reader.read()
        writer.close()

    server, url = await _serve(handler)
    t = HttpTransport(time.monotonic)
    try:
        out = await t.stream(url, b"{}")
    finally:
        await t.close()
        await server.close()
    assert out.error is not None and out.error.startswith("stream cut")
    assert out.first_token is not None and not out.retryable
