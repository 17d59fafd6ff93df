"""A lean HTTP/1.1 streaming client on asyncio's Protocol API: the bench's default transport for
``http://`` targets, because one core must drive thousands of sessions.

Per request it costs one write, the parsing done in ``data_received`` as bytes arrive (status line,
headers, chunked or length-delimited body, SSE framing, chunk JSON), and one future awaited by the
caller; no task or stream object per request. Connections are kept alive and pooled per host. A
request whose *reused* connection turns out closed before any response byte (the server's
keep-alive timeout) is sent once more on a fresh connection; any other fault is reported, not
retried (retries are the runner's job, see :class:`~kvharness.bench.config.RetryPolicy`).

Not supported (use the aiohttp transport): TLS, proxies, compression, HTTP/2, 1xx responses.
"""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

from kvharness.bench.sse import DONE, SSEParser, decode_chunk
from kvharness.bench.transport import Outcome, check_header_name, header_value

__all__ = ["FastTransport"]

_MAX_HEAD = 64 * 1024
_MAX_ERROR_BODY = 4096


class _Exchange:
    """One request's parsing state and outcome."""

    __slots__ = ("chunks", "error_body", "fut", "got_bytes", "last", "out", "sse")

    def __init__(self, fut: asyncio.Future[None]) -> None:
        self.fut = fut
        self.out = Outcome()
        self.sse = SSEParser()
        self.chunks = 0
        self.last = 0.0
        self.got_bytes = False
        self.error_body = bytearray()


class _Conn(asyncio.Protocol):
    __slots__ = (
        "_buf", "_chunked", "_close", "_remaining", "_state", "_status", "closed", "ex", "key",
        "owner", "served", "transport",
    )  # fmt: skip

    def __init__(self, owner: FastTransport, key: tuple[str, int]) -> None:
        self.owner = owner
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.ex: _Exchange | None = None
        self.closed = False
        self.served = 0  # exchanges completed on this connection
        self._buf = bytearray()
        self._state = (
            0  # 0 head, 1 chunk size, 2 chunk data, 3 chunk CRLF, 4 length body, 5 done, 6 trailers
        )
        self._status = 0
        self._chunked = False
        self._close = False
        self._remaining = 0

    # -- asyncio callbacks ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        ex = self.ex
        if ex is not None and not ex.fut.done():
            if not ex.got_bytes and self.served:
                ex.out.error = "stale"  # reused keep-alive connection closed under us
            elif self._state == 4 and not self._chunked and self._remaining < 0:
                self._finish()  # body delimited by close
                return
            else:
                what = f": {exc}" if exc else ""
                ex.out.error = f"stream cut: connection closed mid-response{what}"
                ex.out.retryable = ex.out.first_token is None
            ex.fut.set_result(None)

    def data_received(self, data: bytes) -> None:
        ex = self.ex
        if ex is None:
            return  # unsolicited bytes on an idle connection: ignore
        ex.got_bytes = True
        if self._state == 4 and not self._buf:
            self._body(data)  # the common case: no copy into the buffer
            return
        self._buf += data
        try:
            self._parse()
        except ValueError as err:
            ex.out.error = f"bad response: {err}"
            self._abort()

    # -- request ----------------------------------------------------------------------------------

    def send(self, head: bytes, body: bytes, ex: _Exchange) -> None:
        self.ex = ex
        self._state = 0
        self._status = 0
        self._chunked = False
        self._close = False
        self._buf.clear()
        assert self.transport is not None
        self.transport.write(head + body)

    # -- parsing ----------------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        while buf and self._state != 5:
            st = self._state
            if st == 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > _MAX_HEAD:
                        raise ValueError("response head too large")
                    return
                self._head(bytes(buf[:end]))
                del buf[: end + 4]
            elif st == 1:
                nl = buf.find(b"\r\n")
                if nl < 0:
                    return
                size = int(bytes(buf[:nl]).split(b";", 1)[0], 16)
                del buf[: nl + 2]
                if size == 0:
                    self._state = 6
                    continue
                self._remaining = size
                self._state = 2
            elif st == 2:
                take = min(self._remaining, len(buf))
                self._body(bytes(buf[:take]))
                del buf[:take]
                self._remaining -= take
                if self._remaining == 0:
                    self._state = 3
            elif st == 3:
                if len(buf) < 2:
                    return
                del buf[:2]
                self._state = 1
            elif st == 4:
                data = bytes(buf)
                buf.clear()
                self._body(data)
            elif st == 6:  # trailer section after the last chunk, ended by an empty line
                nl = buf.find(b"\r\n")
                if nl < 0:
                    return
                del buf[: nl + 2]
                if nl == 0:
                    self._finish()
                    return

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ValueError(f"not an HTTP/1.x status line: {lines[0][:60]!r}")
        self._status = int(parts[1])
        length = -1
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                self._chunked = b"chunked" in value.lower()
            elif name == b"content-length":
                length = int(value)
            elif name == b"connection":
                self._close = b"close" in value.lower()
        if parts[0] == b"HTTP/1.0":
            self._close = True
        if self._chunked:
            self._state = 1
        else:
            self._state = 4
            self._remaining = length  # -1: delimited by the connection closing
            if length == 0:
                self._finish()

    def _body(self, data: bytes) -> None:
        ex = self.ex
        assert ex is not None
        if not self._chunked and self._remaining >= 0:
            if len(data) > self._remaining:
                data = data[: self._remaining]
            self._remaining -= len(data)
        if self._status >= 400:
            if len(ex.error_body) < _MAX_ERROR_BODY:
                ex.error_body += data
        else:
            self._sse(ex, data)
        if not self._chunked and self._remaining == 0 and self._state == 4:
            self._finish()

    def _sse(self, ex: _Exchange, data: bytes) -> None:
        out = ex.out
        now = self.owner.clock()
        gaps = self.owner.gaps
        for payload in ex.sse.feed(data):
            if payload == DONE:
                out.done = now
                continue
            if not payload:
                continue
            try:
                chunk = decode_chunk(payload)
            except ValueError as err:  # msgspec.DecodeError is a ValueError
                out.error = f"bad stream: {str(err)[:100]}"
                self._abort()
                return
            usage = chunk.usage
            if usage is not None:
                out.prompt_tokens = usage.prompt_tokens
                out.output_tokens = usage.completion_tokens
                out.cached_tokens = usage.cached_tokens
            if chunk.has_token:
                ex.chunks += 1
                if out.first_token is None:
                    out.first_token = now
                elif gaps is not None:
                    gaps.append(now - ex.last)
                ex.last = now

    def _finish(self) -> None:
        ex = self.ex
        assert ex is not None
        self._state = 5
        out = ex.out
        if self._status >= 400:
            text = " ".join(ex.error_body.decode("utf-8", "replace").split())[:120]
            out.error = f"http {self._status}: {text}"
            out.retryable = self._status >= 500 or self._status == 429
            out.done = None
        elif out.error is None and out.done is None:
            out.error = "stream cut: response ended before [DONE]"
            out.retryable = out.first_token is None
        elif out.error is None:
            if out.first_token is None:
                out.first_token = out.done
            if out.output_tokens == 0:
                out.output_tokens = ex.chunks
        self.ex = None
        self.served += 1
        if not ex.fut.done():
            ex.fut.set_result(None)
        if self._close or self._buf or self.closed:
            self._abort()
        else:
            self.owner._release(self)

    def _abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class FastTransport:
    """Streams completions over pooled keep-alive connections (``http://`` only).

    ``clock`` gives the times written into outcomes; ``gaps`` receives inter-chunk seconds.
    ``session_header``: the header name that carries the ``session`` given to :meth:`stream` (its
    line is encoded once per session and kept; see :func:`~kvharness.bench.transport.header_value`).
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        timeout: float = 300.0,
        connect_timeout: float = 10.0,
        gaps: array[float] | None = None,
        session_header: str | None = None,
    ) -> None:
        self.clock = clock
        self.gaps = gaps
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._all: set[_Conn] = set()
        self._heads: dict[str, tuple[str, int, bytes]] = {}
        self._header = (
            (check_header_name(session_header) + ": ").encode() if session_header else b""
        )
        self._lines: dict[str, bytes] = {}

    def _release(self, conn: _Conn) -> None:
        self._idle.setdefault(conn.key, []).append(conn)

    async def _connect(self, host: str, port: int) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: _Conn(self, (host, port)), host, port),
            self._connect_timeout,
        )
        self._all.add(conn)
        return conn

    def _session_line(self, session: str | None) -> bytes:
        if session is None or not self._header:
            return b""
        line = self._lines.get(session)
        if line is None:
            line = self._lines[session] = self._header + header_value(session).encode() + b"\r\n"
        return line

    def _head(self, url: str, length: int, session: str | None = None) -> tuple[str, int, bytes]:
        known = self._heads.get(url)
        if known is None:
            parts = urlsplit(url)
            if parts.scheme != "http":
                raise ValueError(f"FastTransport speaks plain http only, not {url!r}")
            head = (
                f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            ).encode()
            known = self._heads[url] = (parts.hostname or "127.0.0.1", parts.port or 80, head)
        host, port, head = known
        line = self._session_line(session)
        return host, port, b"".join((head, line, b"Content-Length: %d\r\n\r\n" % length))

    async def stream(self, url: str, body: bytes, session: str | None = None) -> Outcome:
        host, port, head = self._head(url, len(body), session)
        loop = asyncio.get_running_loop()
        for _ in range(2):
            idle = self._idle.get((host, port))
            conn = None
            while idle:
                c = idle.pop()
                if not c.closed:
                    conn = c
                    break
            if conn is None:
                try:
                    conn = await self._connect(host, port)
                except TimeoutError:
                    return Outcome(error="timeout: no connection within "
                                   f"{self._connect_timeout:g} s", retryable=True)  # fmt: skip
                except OSError as err:
                    return Outcome(error=f"connection refused: {err}", retryable=True)
            ex = _Exchange(loop.create_future())
            conn.send(head, body, ex)
            timer = loop.call_later(self._timeout, self._expire, conn, ex)
            try:
                await ex.fut
            except asyncio.CancelledError:
                conn._abort()
                raise
            finally:
                timer.cancel()
            if ex.out.error == "stale":
                self._all.discard(conn)
                continue
            if conn.closed:
                self._all.discard(conn)
            return ex.out
        return Outcome(error="stream cut: connection closed before any response", retryable=True)

    def _expire(self, conn: _Conn, ex: _Exchange) -> None:
        if ex.fut.done():
            return
        ex.out.error = f"timeout: no complete answer within {self._timeout:g} s"
        ex.out.retryable = ex.out.first_token is None
        ex.out.done = None
        conn.ex = None
        ex.fut.set_result(None)
        conn._abort()

    async def close(self) -> None:
        for conn in list(self._all):
            with contextlib.suppress(Exception):
                conn._abort()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)
