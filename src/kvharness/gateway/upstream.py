"""The gateway's client to its replicas: lean HTTP/1.1 on asyncio's Protocol API, keep-alive pooled.

A streamed answer is the gateway's per-chunk cost, so it is relayed from ``data_received``: the
chunked framing is decoded there and each piece of payload goes straight to a *sink* (the client's
socket), with no task woken, no stream object and no future per chunk. Before the relay starts
(:meth:`Response.first`) and for answers read whole (:meth:`Response.read`), payload is buffered.

Faults, as the server needs them told apart: :class:`UpstreamError` when the replica could not be
reached or closed before its response head (safe to send the request elsewhere), and
:class:`StreamCut` when the body broke off; a replica silent for the read timeout raises their
subclasses :class:`UpstreamTimeout` / :class:`StreamTimeout` (it may be working on the request:
not safe to send it elsewhere). A *reused* keep-alive connection found closed before
any response byte (the replica's idle timeout) is replaced by a fresh one once, transparently.

Not supported (replicas are plain-HTTP OpenAI servers): TLS, proxies, compression (no
``Accept-Encoding`` is sent), HTTP/2, pipelining. Responses with 1xx heads skip them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import cast
from urllib.parse import urlsplit

__all__ = [
    "Response",
    "StreamCut",
    "StreamTimeout",
    "Upstream",
    "UpstreamError",
    "UpstreamTimeout",
]

_MAX_HEAD = 64 * 1024
_WRITE_PIECE = 256 * 1024
"""A large request body is written in pieces of this many bytes, each once the socket has room,
so the transport never holds a copy of the whole body."""

Sink = Callable[[bytes], bool]
"""Takes one piece of payload; returns False when the receiver is gone (the relay then stops)."""


class UpstreamError(Exception):
    """The replica could not be reached, or closed or timed out before its response head."""


class StreamCut(Exception):
    """The response body broke off (connection lost, silence past the read timeout, bad framing)."""


class UpstreamTimeout(UpstreamError):
    """The replica sent no response head within the read timeout."""


class StreamTimeout(StreamCut):
    """The replica fell silent mid-body for the read timeout."""


_HEAD, _SIZE, _DATA, _CRLF, _TRAILER, _LENGTH, _EOF_BODY, _DONE = range(8)


class _Conn(asyncio.Protocol):
    """One connection; at most one exchange at a time. Parses the response as bytes arrive."""

    def __init__(self, pool: Upstream, key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.served = 0
        self.resp: Response | None = None
        self._buf = b""
        self._state = _DONE
        self._need = 0
        self._got_bytes = False
        self._head: asyncio.Future[None] | None = None
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._room: asyncio.Future[None] | None = None
        """Set while the socket's send buffer is full (the request body waits for it)."""

    # -- asyncio callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        self.resume_writing()
        if self._head is not None and not self._head.done():
            stale = not self._got_bytes and self.served > 0
            self._head.set_exception(_Stale() if stale else UpstreamError(_why(exc, "closed")))
        elif self.resp is not None and self._state != _DONE:
            if self._state == _EOF_BODY:  # a body delimited by the connection's close
                self._finish()
            else:
                self.resp._fail(StreamCut(_why(exc, "connection closed mid-body")))

    def pause_writing(self) -> None:
        if self._room is None:
            self._room = self.pool.loop.create_future()

    def resume_writing(self) -> None:
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        if self._timer is not None:
            self._last = self.pool.loop.time()
        if self._buf:
            data = self._buf + data
            self._buf = b""
        try:
            self._parse(data)
        except ValueError as err:
            self._error(f"malformed response: {err}")

    # -- exchange -------------------------------------------------------------------------

    async def exchange(self, head: bytes, body: bytes | bytearray) -> Response:
        assert self.transport is not None
        loop = self.pool.loop
        self._head = loop.create_future()
        self._state = _HEAD
        self._got_bytes = False
        self.resp = None
        if self.pool.read_timeout_s is not None:
            self._last = loop.time()
            self._timer = loop.call_later(self.pool.read_timeout_s, self._check_timeout)
        if len(body) < 65536:
            self.transport.write(head + body)
        else:
            await self._send(head, memoryview(body))
        await self._head
        assert self.resp is not None
        return self.resp

    async def _send(self, head: bytes, body: memoryview) -> None:
        """Write ``head`` and ``body``, a piece at a time as the socket takes them (stops early
        when the connection closes: the response head's future then says why)."""
        assert self.transport is not None
        self.transport.write(head)
        for pos in range(0, len(body), _WRITE_PIECE):
            while self._room is not None and not self.closed:
                await self._room
            if self.closed:
                return
            self.transport.write(body[pos : pos + _WRITE_PIECE])

    def _parse(self, data: bytes) -> None:
        pos = 0
        end_of_data = len(data)
        out: list[bytes] = []
        state = self._state
        while pos < end_of_data:
            if state == _HEAD:
                end = data.find(b"\r\n\r\n", pos)
                if end < 0:
                    if end_of_data - pos > _MAX_HEAD:
                        raise ValueError("response head too large")
                    break
                state = self._on_head(data[pos:end])
                pos = end + 4
            elif state == _SIZE:
                end = data.find(b"\r\n", pos)
                if end < 0:
                    if end_of_data - pos > 1024:
                        raise ValueError("chunk size line too long")
                    break
                size = int(data[pos:end].split(b";", 1)[0], 16)
                if size < 0:
                    raise ValueError("negative chunk size")
                pos = end + 2
                if size == 0:
                    state = _TRAILER
                else:
                    state, self._need = _DATA, size
            elif state == _DATA:
                take = min(self._need, end_of_data - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._need -= take
                if not self._need:
                    state = _CRLF
            elif state == _CRLF:
                if end_of_data - pos < 2:
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
                pos += 2
                state = _SIZE
            elif state == _TRAILER:
                if data.startswith(b"\r\n", pos):
                    pos += 2
                    state = _DONE
                else:
                    end = data.find(b"\r\n\r\n", pos)
                    if end < 0:
                        break
                    pos = end + 4
                    state = _DONE
            elif state in (_LENGTH, _EOF_BODY):
                take = end_of_data - pos
                if state == _LENGTH:
                    take = min(self._need, take)
                    self._need -= take
                out.append(data[pos : pos + take])
                pos += take
                if state == _LENGTH and not self._need:
                    state = _DONE
            else:  # _DONE: bytes past the end of the answer; the connection is not reused
                self.served = -1
                pos = end_of_data
                break
            if state == _DONE:
                break
        self._state = state
        if pos < end_of_data and state not in (_DONE,):
            self._buf = data[pos:]
        elif pos < end_of_data:
            self.served = -1  # trailing garbage: do not reuse
        if out and self.resp is not None:
            self.resp._payload(out[0] if len(out) == 1 else b"".join(out))
        if state == _DONE and self.resp is not None:
            self._finish()

    def _on_head(self, raw: bytes) -> int:
        lines = raw.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        if not version.startswith(b"HTTP/1."):
            raise ValueError(f"bad status line {lines[0][:80]!r}")
        status = int(rest[:3])
        if 100 <= status < 200:
            return _HEAD  # an interim response: the real one follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ValueError(f"bad header line {line[:80]!r}")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        keep = version == b"HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        if not keep:
            self.served = -1
        resp = Response(self, status, headers)
        self.resp = resp
        if self._head is not None and not self._head.done():
            self._head.set_result(None)
        if status in (204, 304):
            return _DONE
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return _SIZE
        length = headers.get("content-length")
        if length is not None:
            self._need = int(length)
            if self._need < 0:
                raise ValueError("negative content-length")
            return _LENGTH if self._need else _DONE
        self.served = -1
        return _EOF_BODY

    def _finish(self) -> None:
        self._state = _DONE
        self._cancel_timer()
        if self.resp is not None:
            self.resp._complete()

    def _error(self, why: str, timed_out: bool = False) -> None:
        self._cancel_timer()
        if self._head is not None and not self._head.done():
            self._head.set_exception(UpstreamTimeout(why) if timed_out else UpstreamError(why))
        elif self.resp is not None:
            self.resp._fail(StreamTimeout(why) if timed_out else StreamCut(why))
        self.abort()

    def _check_timeout(self) -> None:
        timeout = self.pool.read_timeout_s
        assert timeout is not None
        left = self._last + timeout - self.pool.loop.time()
        if left > 0:
            self._timer = self.pool.loop.call_later(left, self._check_timeout)
            return
        self._timer = None
        self._error(f"no data for {timeout:g} s", timed_out=True)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    @property
    def reusable(self) -> bool:
        return not self.closed and self._state == _DONE and self.served >= 0 and not self._buf


class _Stale(Exception):
    """A reused connection was closed by the replica before answering: try a fresh one."""


def _why(exc: Exception | None, default: str) -> str:
    return f"{type(exc).__name__}: {exc}" if exc is not None else default


class Response:
    """A replica's answer; the head is read, the body arrives through :meth:`read`,
    :meth:`first` then :meth:`relay`. Call :meth:`release` when done with it (always)."""

    def __init__(self, conn: _Conn, status: int, headers: dict[str, str]) -> None:
        self._conn = conn
        self.status = status
        self.headers = headers
        """Response headers, names lower-cased."""
        self._body: list[bytes] = []
        self._sink: Sink | None = None
        self._writable: Callable[[], bool] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._error: StreamCut | None = None
        self.complete = False
        """The whole body has been received."""
        self.receiver_gone = False
        self._paused = False
        self._released = False

    # -- fed by the connection --------------------------------------------------------------

    def _payload(self, data: bytes) -> None:
        sink = self._sink
        if sink is None:
            self._body.append(data)
            self._wake()
        elif not sink(data):
            self.receiver_gone = True
            self._conn.pause_reading()
            self._wake()
        elif self._writable is not None and not self._writable():
            self._paused = True
            self._conn.pause_reading()
            self._wake()

    def _complete(self) -> None:
        self.complete = True
        self._wake()

    def _fail(self, err: StreamCut) -> None:
        if not self.complete and self._error is None:
            self._error = err
            self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def _wait(self) -> None:
        self._waiter = self._conn.pool.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # -- used by the server -----------------------------------------------------------------

    async def read(self) -> bytes:
        """The whole body. Raises :class:`StreamCut`."""
        while not self.complete:
            if self._error is not None:
                raise self._error
            await self._wait()
        return b"".join(self._body)

    async def first(self) -> bytes:
        """The payload received so far, waiting for some; b"" when the body ended empty.
        Raises :class:`StreamCut`."""
        while not self._body and not self.complete:
            if self._error is not None:
                raise self._error
            await self._wait()
        data = b"".join(self._body)
        self._body.clear()
        return data

    async def relay(self, sink: Sink, writable: Callable[[], bool]) -> bool:
        """Hand every further piece of payload to ``sink`` as it arrives, until the body ends.

        ``writable()`` says whether the receiver has room; while it has not, the replica's
        socket is not read. Returns False when the sink reported its receiver gone. Raises
        :class:`StreamCut`.
        """
        self._sink = sink
        self._writable = writable
        if self._body:
            data = b"".join(self._body)
            self._body.clear()
            if not sink(data):
                self.receiver_gone = True
        while not (self.complete or self.receiver_gone):
            if self._error is not None:
                raise self._error
            if self._paused or not writable():
                self._paused = True
                self._conn.pause_reading()
                while not writable() and self._error is None and not self._conn.closed:
                    await asyncio.sleep(0.005)
                self._paused = False
                self._conn.resume_reading()
                continue
            await self._wait()
        return not self.receiver_gone

    def release(self) -> None:
        """Give the connection back to the pool when the answer was read whole and it may be
        reused; otherwise close it (an abandoned answer: the replica stops generating it)."""
        if self._released:
            return
        self._released = True
        self._sink = None
        self._conn.pool._release(self._conn)


class Upstream:
    """Keep-alive HTTP/1.1 connections to replicas, pooled per host and port.

    ``connect_timeout_s`` bounds connecting; ``read_timeout_s`` (None: unbounded) the silence
    while waiting for a response's head or body. Idle connections older than ``idle_s`` are
    dropped rather than reused (servers close idle ones: uvicorn after 5 s).
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float | None = None,
        idle_s: float = 4.0,
        max_idle_per_host: int = 512,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.idle_s = idle_s
        self.max_idle_per_host = max_idle_per_host
        self.loop = asyncio.get_running_loop()
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._hosts: dict[str, tuple[str, int, bytes]] = {}

    async def post(
        self,
        base_url: str,
        path: str,
        body: bytes | bytearray,
        headers: Iterable[tuple[str, str]],
    ) -> Response:
        """Send ``body`` to ``base_url + path``; returns when the response head is in.

        ``headers`` are sent as given (the caller drops hop-by-hop ones); Host and
        Content-Length are added. Raises :class:`UpstreamError`.
        """
        host, port, host_line = self._host(base_url)
        lines = [f"POST {path} HTTP/1.1\r\n".encode(), host_line]
        for name, value in headers:
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                continue
            lines.append(f"{name}: {value}\r\n".encode("utf-8", "surrogateescape"))
        lines.append(b"Content-Length: %d\r\n\r\n" % len(body))
        head = b"".join(lines)
        key = (host, port)
        for _ in range(2):
            conn = self._take_idle(key)
            if conn is None:
                conn = await self._connect(key)
            try:
                return await conn.exchange(head, body)
            except _Stale:
                continue
            except BaseException:
                conn.abort()
                raise
        raise UpstreamError("connection closed before the response head")

    def _host(self, base_url: str) -> tuple[str, int, bytes]:
        got = self._hosts.get(base_url)
        if got is None:
            parts = urlsplit(base_url)
            if parts.scheme != "http" or not parts.hostname:
                raise UpstreamError(f"only http:// replicas are supported, got {base_url!r}")
            port = parts.port or 80
            got = (parts.hostname, port, f"Host: {parts.netloc}\r\n".encode())
            self._hosts[base_url] = got
        return got

    def _take_idle(self, key: tuple[str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        now = self.loop.time()
        while idle:
            conn = idle.pop()
            if conn.reusable and now - conn.idle_since < self.idle_s:
                return conn
            conn.abort()
        return None

    async def _connect(self, key: tuple[str, int]) -> _Conn:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await self.loop.create_connection(
                    lambda: _Conn(self, key), key[0], key[1]
                )
        except (OSError, TimeoutError) as err:
            raise UpstreamError(f"cannot connect: {type(err).__name__}: {err}") from None
        return conn

    def _release(self, conn: _Conn) -> None:
        conn.resp = None
        if not conn.reusable:
            conn.abort()
            return
        conn.served += 1
        conn.idle_since = self.loop.time()
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) >= self.max_idle_per_host:
            conn.abort()
            return
        idle.append(conn)

    def close(self) -> None:
        """Close every idle connection (those in use close when released)."""
        for idle in self._idle.values():
            for conn in idle:
                with contextlib.suppress(Exception):
                    conn.abort()
        self._idle.clear()
