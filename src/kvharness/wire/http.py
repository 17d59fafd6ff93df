"""The one HTTP/1.1 client of kvharness, on asyncio's Protocol API.

Why by hand
    A streamed answer costs the bench and the gateway per chunk, so framing is decoded as
    bytes arrive (:mod:`kvharness.wire.connection`) and each piece of payload goes straight to
    a :class:`Receiver`: no task, no stream object and no future per chunk. One core drives
    thousands of agent sessions this way (``benchmarks/client_capacity.py``).

Exchanges
    :meth:`Client.start` sends one request and returns its :class:`Exchange` at once; the
    receiver hears ``head``, then ``data`` for each piece of payload, then ``end`` (or ``fail``
    at any point, once). :class:`Response` is the receiver for callers that await: the head,
    the whole body (:meth:`Response.read`) or a relay of it to another socket
    (:meth:`Response.relay`); :meth:`Client.request` starts an exchange with one and returns
    when its head is in.

Connections
    Kept alive and pooled per (scheme, host, port), one exchange at a time each, ``http://``
    and ``https://`` (TLS with the system's trust store unless a context is given). A *reused*
    connection that the server closed before any byte of the answer (its keep-alive timeout)
    is replaced by a fresh one once, unseen by the receiver. Idle connections older than
    ``idle_s`` are dropped rather than reused (uvicorn closes idle ones after 5 s).

Faults
    :class:`ConnectError` when the server failed before the response head, :class:`BodyError`
    when the body broke off; their subclasses (:mod:`kvharness.wire.errors`) say more.

Not supported: proxies, compression (no ``Accept-Encoding`` is sent), HTTP/2, pipelining.
Interim (1xx) responses are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as _ssl
from types import EllipsisType
from urllib.parse import urlsplit

from kvharness.wire.connection import Connection, Exchange, Receiver, Target
from kvharness.wire.errors import (
    BadBody,
    BadHead,
    BodyError,
    BodyTimeout,
    ConnectError,
    ConnectTimeout,
    HeadTimeout,
    TooLarge,
    Unreachable,
    WireError,
)
from kvharness.wire.framing import encode_headers, parse_head
from kvharness.wire.response import Response

__all__ = [
    "BadBody",
    "BadHead",
    "BodyError",
    "BodyTimeout",
    "Client",
    "ConnectError",
    "ConnectTimeout",
    "Exchange",
    "HeadTimeout",
    "Receiver",
    "Response",
    "TooLarge",
    "Unreachable",
    "WireError",
    "encode_headers",
    "parse_head",
]

_INLINE_BODY = 64 * 1024
"""Bodies up to this size go out in the same write as the head."""


class Client:
    """Keep-alive HTTP/1.1 connections, pooled per (scheme, host, port). Create and use it
    inside one running event loop; :meth:`close` when done (or ``async with``).

    ``connect_timeout_s`` bounds connecting (TLS handshake included); ``timeout_s`` (whole
    exchange, None: unbounded) and ``read_timeout_s`` (longest silence, None: unbounded) are
    the defaults of every exchange. ``ssl_context`` verifies ``https://`` servers (default:
    the system's trust store).
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float = 10.0,
        timeout_s: float | None = None,
        read_timeout_s: float | None = None,
        idle_s: float = 4.0,
        max_idle_per_host: int = 512,
        ssl_context: _ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s
        self.read_timeout_s = read_timeout_s
        self.idle_s = idle_s
        self.max_idle_per_host = max_idle_per_host
        self.loop = asyncio.get_running_loop()
        self._ssl = ssl_context
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._targets: dict[tuple[str, str], Target] = {}
        self._all: set[Connection] = set()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- requests -------------------------------------------------------------------------

    def start(
        self,
        method: str,
        url: str,
        receiver: Receiver,
        body: bytes | bytearray = b"",
        headers: bytes = b"",
        *,
        timeout_s: float | EllipsisType | None = ...,
        read_timeout_s: float | EllipsisType | None = ...,
    ) -> Exchange:
        """Send ``body`` to ``url`` with the header lines ``headers`` (see
        :func:`encode_headers`; Host and Content-Length are added) and return the exchange;
        everything after this reaches ``receiver``. ``timeout_s`` / ``read_timeout_s``
        override the client's. Raises ValueError for a URL that is not ``http(s)://HOST``."""
        target = self._targets.get((method, url)) or self._target(method, url)
        length = b"Content-Length: %d\r\n\r\n" % len(body) if body or method != "GET" else b"\r\n"
        ex = Exchange(
            target,
            b"".join((target.prefix, headers, length)),
            body,
            receiver,
            self.timeout_s if timeout_s is ... else timeout_s,
            self.read_timeout_s if read_timeout_s is ... else read_timeout_s,
        )
        conn = self._take_idle(target.key)
        if conn is not None and len(body) <= _INLINE_BODY:
            self._write(conn, ex)
        else:
            ex.sending = self.loop.create_task(self._open_and_send(ex, conn))
        return ex

    async def request(
        self,
        method: str,
        url: str,
        body: bytes | bytearray = b"",
        headers: bytes = b"",
        *,
        timeout_s: float | EllipsisType | None = ...,
        read_timeout_s: float | EllipsisType | None = ...,
    ) -> Response:
        """Start an exchange with a :class:`Response` and return it once its head is in.
        Raises :class:`ConnectError` (or ValueError for a bad URL); the caller must
        :meth:`Response.release` what it gets."""
        resp = Response(self.loop)
        resp.exchange = self.start(
            method, url, resp, body, headers, timeout_s=timeout_s, read_timeout_s=read_timeout_s
        )
        try:
            await resp.wait_head()
        except BaseException:
            resp.release()
            raise
        return resp

    async def get(
        self, url: str, *, timeout_s: float | None = None, limit: int | None = None
    ) -> tuple[int, bytes]:
        """(status, body) of ``GET url``; ``limit`` bounds the body (else :class:`TooLarge`).
        Raises :class:`WireError`."""
        resp = await self.request("GET", url, timeout_s=timeout_s)
        try:
            return resp.status, await resp.read(limit)
        finally:
            resp.release()

    async def post(
        self,
        url: str,
        body: bytes,
        *,
        content_type: str = "application/json",
        timeout_s: float | None = None,
        limit: int | None = None,
    ) -> tuple[int, bytes]:
        """(status, body) of ``POST url``. Raises :class:`WireError`."""
        head = f"Content-Type: {content_type}\r\n".encode()
        resp = await self.request("POST", url, body, head, timeout_s=timeout_s)
        try:
            return resp.status, await resp.read(limit)
        finally:
            resp.release()

    # -- connections ----------------------------------------------------------------------

    def _target(self, method: str, url: str) -> Target:
        got = self._targets.get((method, url))
        if got is None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"not an http(s)://HOST URL: {url!r}")
            port = parts.port or (443 if parts.scheme == "https" else 80)
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            prefix = f"{method} {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n".encode()
            got = Target((parts.scheme, parts.hostname, port), prefix)
            if len(self._targets) > 4096:
                self._targets.clear()
            self._targets[(method, url)] = got
        return got

    def _take_idle(self, key: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(key)
        now = self.loop.time()
        while idle:
            conn = idle.pop()
            if conn.idle_ok and now - conn.idle_since < self.idle_s:
                return conn
            self._drop(conn)
        return None

    async def _open_and_send(self, ex: Exchange, conn: Connection | None) -> None:
        if conn is None:
            try:
                conn = await self._connect(ex.target.key)
            except ConnectError as err:
                if not ex.aborted:
                    ex.receiver.fail(err)
                return
            if ex.aborted:
                self.release(conn)
                return
        if self._write(conn, ex):
            await conn.write_body(ex)

    def _write(self, conn: Connection, ex: Exchange) -> bool:
        """Put ``ex`` on ``conn`` and write its head (and a small body); True when the body is
        left to :meth:`Connection.write_body`."""
        conn.begin(ex)
        assert conn.transport is not None
        if len(ex.body) <= _INLINE_BODY:
            conn.transport.write(ex.head + ex.body if ex.body else ex.head)
            return False
        conn.transport.write(ex.head)
        return True

    async def _connect(self, key: tuple[str, str, int]) -> Connection:
        scheme, host, port = key
        ssl: _ssl.SSLContext | None = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = _ssl.create_default_context()
            ssl = self._ssl
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await self.loop.create_connection(
                    lambda: Connection(self, key), host, port, ssl=ssl
                )
        except TimeoutError:
            raise ConnectTimeout(f"no connection within {self.connect_timeout_s:g} s") from None
        except OSError as err:
            raise Unreachable(f"cannot connect: {type(err).__name__}: {err}") from None
        self._all.add(conn)
        return conn

    def resend(self, ex: Exchange) -> None:
        """``ex``'s reused connection was closed under it before any answer: a fresh one."""
        if not ex.aborted:
            ex.sending = self.loop.create_task(self._open_and_send(ex, None))

    def discard(self, conn: Connection) -> None:
        self._all.discard(conn)

    def release(self, conn: Connection) -> None:
        if not conn.idle_ok:
            self._drop(conn)
            return
        conn.idle_since = self.loop.time()
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) >= self.max_idle_per_host:
            self._drop(conn)
            return
        idle.append(conn)

    def _drop(self, conn: Connection) -> None:
        conn.abort()
        self._all.discard(conn)

    def close(self) -> None:
        """Close every connection (exchanges in flight fail)."""
        for conn in list(self._all):
            with contextlib.suppress(Exception):
                conn.abort()
        self._all.clear()
        self._idle.clear()
