"""A scripted raw HTTP server on loopback for the wire's client.

The server answers each request with the bytes a test gives it, written in pieces as small as one
byte, so framing split anywhere, keep-alive reuse, stale connections, cuts and silences are real
socket behaviour, not mocks.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

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
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
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
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            return


Serve = Callable[..., Awaitable[Server]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``await serve(script, ssl=None)``: a scripted server (TLS with an SSL context); closed
    with its connections afterwards."""
    started: list[tuple[Server, asyncio.Server]] = []

    async def go(script: Script, ssl: ssl.SSLContext | None = None) -> Server:
        s = Server(script)
        srv = await asyncio.start_server(s.handle, "127.0.0.1", 0, ssl=ssl)
        port = srv.sockets[0].getsockname()[1]
        s.url = f"{'https' if ssl else 'http'}://127.0.0.1:{port}"
        started.append((s, srv))
        return s

    yield go
    for s, srv in started:
        for w in s.writers:
            w.transport.abort()
        srv.close()
    await asyncio.sleep(0.01)  # the handlers see their connections gone and return


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def bytewise(data: bytes) -> list[bytes | float | None]:
    return [data[i : i + 1] for i in range(len(data))]


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    """Every async test here runs on both event loops: their transports' callbacks differ."""
    import uvloop

    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
