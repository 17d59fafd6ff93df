"""The gateway's lean upstream client against a scripted raw HTTP server on loopback.

The server answers each request with the bytes a test gives it, written in pieces as small as one
byte, so framing split anywhere, keep-alive reuse, stale connections, cuts and silences are real
socket behaviour, not mocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from kvharness.gateway.upstream import StreamCut, Upstream, UpstreamError
from kvharness.testing.vllm import free_port

Script = Callable[[bytes], list[bytes | float | None]]
"""Request bytes -> what to send: bytes pieces, a float to pause (seconds), None to hang up."""


@dataclass
class Server:
    script: Script
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                for step in self.script(request):
                    if step is None:
                        writer.transport.abort()
                        return
                    if isinstance(step, float):
                        await asyncio.sleep(step)
                        continue
                    writer.write(step)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Script], Awaitable[Server]]]:
    """Starts scripted servers; closes them and their connections afterwards."""
    started: list[tuple[Server, asyncio.Server]] = []

    async def go(script: Script) -> Server:
        s = Server(script)
        port = free_port()
        s.url = f"http://127.0.0.1:{port}"
        started.append((s, await asyncio.start_server(s.handle, "127.0.0.1", port)))
        return s

    yield go
    for s, srv in started:
        for w in s.writers:
            w.transport.abort()
        srv.close()


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
EVENTS = [b'data: {"n": %d}\n\n' % i for i in range(5)]


def bytewise(data: bytes) -> list[bytes | float | None]:
    return [data[i : i + 1] for i in range(len(data))]


async def relay_all(up: Upstream, url: str) -> tuple[int, bytes]:
    r = await up.post(url, "/v1/x", b"{}", [("Content-Type", "application/json")])
    first = await r.first()
    got = [first]
    assert await r.relay(lambda d: got.append(d) or True, lambda: True)
    r.release()
    return r.status, b"".join(got)


async def test_chunked_stream_split_anywhere_is_relayed_whole_and_reused(serve: Any) -> None:
    body = SSE_HEAD + chunked(*EVENTS)
    srv = await serve(lambda req: bytewise(body))
    up = Upstream()
    for _ in range(3):
        status, data = await relay_all(up, srv.url)
        assert status == 200 and data == b"".join(EVENTS)
    assert srv.connections == 1  # kept alive and reused
    req = srv.requests[0]
    assert req.startswith(b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Content-Length: 2\r\n" in req and req.endswith(b"\r\n\r\n{}")
    assert b"accept-encoding" not in req.lower()
    up.close()


async def test_length_close_delimited_interim_and_extensions(serve: Any) -> None:
    answers = {
        b"/len": [
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 418 No\r\nContent-Length: 5\r\n\r\nhello"
        ],
        b"/ext": [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n"
        ],
        b"/eof": [b"HTTP/1.0 200 OK\r\n\r\nuntil", 0.05, b" close", None],
    }
    srv = await serve(lambda req: answers[req.split(b" ")[1]])
    up = Upstream()
    r = await up.post(srv.url, "/len", b"", [])
    assert (r.status, await r.read()) == (418, b"hello")
    r.release()
    r = await up.post(srv.url, "/ext", b"", [])
    assert await r.read() == b"abc"
    r.release()
    r = await up.post(srv.url, "/eof", b"", [])
    assert await r.read() == b"until close"
    r.release()
    r = await up.post(srv.url, "/len", b"", [])
    assert await r.read() == b"hello"
    r.release()
    assert srv.connections == 2  # the HTTP/1.0 answer's connection is not reused
    up.close()


async def test_cut_mid_body_and_refused_connection(serve: Any) -> None:
    srv = await serve(lambda req: [SSE_HEAD, chunked(*EVENTS)[:60], 0.05, None])
    up = Upstream()
    r = await up.post(srv.url, "/", b"", [])
    assert (await r.first()).startswith(b'data: {"n": 0}')
    with pytest.raises(StreamCut, match="mid-body"):
        await r.relay(lambda d: True, lambda: True)
    r.release()
    with pytest.raises(UpstreamError, match="cannot connect"):
        await up.post(f"http://127.0.0.1:{free_port()}", "/", b"", [])
    hangs_up = await serve(lambda req: [None])
    with pytest.raises(UpstreamError):
        await up.post(hangs_up.url, "/", b"", [])
    up.close()


async def test_read_timeout_is_a_cut(serve: Any) -> None:
    srv = await serve(lambda req: [SSE_HEAD, chunked(EVENTS[0])[:-5], 2.0])
    up = Upstream(read_timeout_s=0.2)
    r = await up.post(srv.url, "/", b"", [])
    await r.first()
    with pytest.raises(StreamCut, match=r"no data for 0\.2 s"):
        await r.relay(lambda d: True, lambda: True)
    r.release()
    up.close()


async def test_stale_keepalive_connection_is_replaced_once(serve: Any) -> None:
    srv = await serve(lambda req: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])
    up = Upstream()
    r = await up.post(srv.url, "/", b"", [])
    assert await r.read() == b"ok"
    r.release()
    for w in srv.writers:  # the server drops its idle connection
        w.transport.abort()
    await asyncio.sleep(0.05)
    r = await up.post(srv.url, "/", b"", [])
    assert await r.read() == b"ok"
    r.release()
    assert srv.connections == 2
    up.close()


async def test_relay_stops_when_receiver_gone_and_waits_when_full(serve: Any) -> None:
    paced: list[bytes | float | None] = [SSE_HEAD]
    for e in EVENTS:
        paced += [chunked(e)[:-5], 0.05]
    srv = await serve(lambda req: [*paced, 2.0])
    up = Upstream()
    r = await up.post(srv.url, "/", b"", [])
    await r.first()
    seen: list[bytes] = []
    assert not await r.relay(lambda d: seen.append(d) or len(seen) < 2, lambda: True)
    r.release()  # not read whole: closed, not pooled
    srv2 = await serve(lambda req: [SSE_HEAD, chunked(EVENTS[0])[:-5], 0.05, chunked(*EVENTS[1:])])
    r = await up.post(srv2.url, "/", b"", [])
    first = await r.first()
    room = asyncio.Event()
    got = [first]
    task = asyncio.create_task(r.relay(lambda d: got.append(d) or True, room.is_set))
    await asyncio.sleep(0.1)
    assert not task.done()  # paused: the receiver has no room
    room.set()
    assert await task
    assert b"".join(got) == b"".join(EVENTS)
    r.release()
    up.close()
