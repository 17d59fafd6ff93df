"""One keep-alive HTTP/1.1 connection and the exchange it carries, on asyncio's Protocol API.

A streamed answer costs the bench and the gateway per chunk, so the response is parsed in
``data_received`` as bytes arrive and each piece of payload goes straight to the exchange's
:class:`Receiver`: no task, no stream object and no future per chunk. A connection carries one
:class:`Exchange` at a time and belongs to a :class:`Pool` (the client), which takes it back
when an answer ends and sends an exchange again when a reused connection turns out closed.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple, Protocol, cast

from kvharness.wire.errors import (
    BadBody,
    BadHead,
    BodyError,
    BodyTimeout,
    ConnectError,
    HeadTimeout,
    WireError,
)
from kvharness.wire.framing import DONE, MAX_HEAD, UNTIL_CLOSE, BodyFraming, Headers, parse_head

__all__ = ["Connection", "Exchange", "Pool", "Receiver", "Target"]

_WRITE_PIECE = 256 * 1024
"""A large request body is written in pieces of this many bytes, each once the socket has room,
so the transport never holds a copy of the whole body."""


class Receiver(Protocol):
    """Told what arrives for one exchange, from the event loop's callbacks (keep them short).

    ``head`` comes once, before any ``data``; then ``end`` once the body is complete, or
    ``fail`` once at any point (before the head too). Nothing is called after ``end`` or
    ``fail``.
    """

    def head(self, status: int, headers: Headers) -> None:
        """The response head."""

    def data(self, piece: bytes) -> None:
        """One piece of payload (framing removed)."""

    def end(self) -> None:
        """The body is complete (the connection is back in the pool already)."""

    def fail(self, error: WireError) -> None:
        """The exchange failed."""


class Pool(Protocol):
    """What a connection needs of the client it belongs to."""

    loop: asyncio.AbstractEventLoop

    def release(self, conn: Connection) -> None:
        """``conn`` finished an answer: keep it for reuse or close it."""

    def resend(self, ex: Exchange) -> None:
        """``ex``'s reused connection was closed under it before any answer: send it again."""

    def discard(self, conn: Connection) -> None:
        """``conn`` is closed: forget it."""


class Target(NamedTuple):
    key: tuple[str, str, int]
    """(scheme, host, port): the pool a request's connection comes from."""
    prefix: bytes
    """The request line and Host header."""


class Exchange:
    """One request in flight; the handle its starter keeps to pause, resume or abort it."""

    __slots__ = (
        "aborted",
        "body",
        "conn",
        "deadline",
        "head",
        "read_timeout_s",
        "receiver",
        "sending",
        "target",
        "timeout_s",
    )  # fmt: skip

    def __init__(
        self,
        target: Target,
        head: bytes,
        body: bytes | bytearray,
        receiver: Receiver,
        timeout_s: float | None,
        read_timeout_s: float | None,
    ) -> None:
        self.target = target
        self.head = head
        self.body = body
        self.receiver = receiver
        self.timeout_s = timeout_s
        self.read_timeout_s = read_timeout_s
        self.deadline = 0.0
        self.conn: Connection | None = None
        self.aborted = False
        self.sending: asyncio.Task[None] | None = None

    def abort(self) -> None:
        """Stop it: its connection is closed (a server then stops working on the request) and
        nothing more reaches the receiver. Safe to call at any time, more than once."""
        self.aborted = True
        if self.sending is not None and not self.sending.done():
            self.sending.cancel()
        conn = self.conn
        if conn is not None and conn.ex is self:
            conn.ex = None
            conn.abort()

    def pause(self) -> None:
        """Stop reading the server's socket (backpressure) until :meth:`resume`."""
        conn = self.conn
        if conn is not None and conn.ex is self and conn.transport is not None and not conn.closed:
            conn.transport.pause_reading()

    def resume(self) -> None:
        conn = self.conn
        if conn is not None and conn.ex is self and conn.transport is not None and not conn.closed:
            conn.transport.resume_reading()


_HEAD = -1


class Connection(asyncio.Protocol):
    """One connection; at most one exchange at a time. Parses the response as bytes arrive."""

    __slots__ = ("_buf", "_got_bytes", "_last", "_room", "_silence", "_timer", "body", "closed", "ex",
                 "idle_since", "key", "pool", "reusable", "served", "state", "transport")  # fmt: skip

    def __init__(self, pool: Pool, key: tuple[str, str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.served = 0
        """Exchanges completed on this connection."""
        self.reusable = True
        self.ex: Exchange | None = None
        self.state = DONE
        self.body = BodyFraming()
        self._buf = b""
        self._got_bytes = False
        self._last = 0.0
        self._silence = False
        """The exchange has a read timeout: the time of each arrival is kept."""
        self._timer: asyncio.TimerHandle | None = None
        self._room: asyncio.Future[None] | None = None
        """Set while the socket's send buffer is full (a large request body waits for it)."""

    # -- asyncio callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.discard(self)
        self._cancel_timer()
        self.resume_writing()
        ex = self.ex
        if ex is None:
            return
        if self.state == _HEAD:
            if not self._got_bytes and self.served:
                self.ex = None
                self.pool.resend(ex)  # the server closed a reused idle connection: once more
                return
            self._fail(ConnectError(_why(exc, "connection closed before the response head")))
        elif self.body.state == UNTIL_CLOSE:
            self._finish()
        elif self.state != DONE:
            self._fail(BodyError(_why(exc, "connection closed mid-body")))

    def pause_writing(self) -> None:
        if self._room is None:
            self._room = self.pool.loop.create_future()

    def resume_writing(self) -> None:
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)

    def data_received(self, data: bytes) -> None:
        """Parse what arrived: the head once, then the body; the payload goes to the receiver.
        (One function on purpose: this runs for every piece of every streamed answer.)"""
        ex = self.ex
        if ex is None:
            self.reusable = False  # unsolicited bytes: this connection is not reused
            return
        self._got_bytes = True
        if self._silence:
            self._last = self.pool.loop.time()
        if self._buf:
            data = self._buf + data
            self._buf = b""
        out: list[bytes] = []
        try:
            pos = 0
            if self.state == _HEAD:
                pos = self._head(data)
                if pos < 0:
                    return
            if self.state != DONE:
                pos = self.body.feed(data, pos, out)
                self.state = self.body.state
        except ValueError as err:
            bad = BadHead if self.state == _HEAD else BadBody
            self._fail(bad(f"malformed response: {err}"))
            return
        if pos < len(data):
            if self.state == DONE:
                self.reusable = False  # bytes past the end of the answer
            else:
                self._buf = data[pos:]
        if out:
            ex.receiver.data(out[0] if len(out) == 1 else b"".join(out))
        if self.state == DONE and self.ex is ex:
            self._finish()

    # -- exchange -------------------------------------------------------------------------

    def begin(self, ex: Exchange) -> None:
        """Take ``ex`` and arm its timer (the caller then writes the request)."""
        self.ex = ex
        ex.conn = self
        self.state = _HEAD
        self._got_bytes = False
        self._silence = ex.read_timeout_s is not None
        loop = self.pool.loop
        if ex.timeout_s is not None or self._silence:
            now = self._last = loop.time()
            if ex.timeout_s is not None and not ex.deadline:
                ex.deadline = now + ex.timeout_s
            at = ex.deadline if not self._silence else self._next_check(ex)
            self._timer = loop.call_at(at, self._check_time)

    async def write_body(self, ex: Exchange) -> None:
        """Write a large body a piece at a time as the socket takes it (stops early when the
        connection closes or the exchange moved on: the receiver then hears why)."""
        assert self.transport is not None
        body = memoryview(ex.body)
        for pos in range(0, len(body), _WRITE_PIECE):
            while self._room is not None and not self.closed and self.ex is ex:
                await self._room
            if self.closed or self.ex is not ex:
                return
            self.transport.write(body[pos : pos + _WRITE_PIECE])

    def _head(self, data: bytes) -> int:
        """Read response heads off ``data`` (skipping interim ones); the position after the
        final head, or -1 when it is not all in yet (what there is is kept)."""
        pos = 0
        while True:
            end = data.find(b"\r\n\r\n", pos)
            if end < 0:
                if len(data) - pos > MAX_HEAD:
                    raise ValueError("response head too large")
                self._buf = data[pos:]
                return -1
            head = parse_head(data[pos:end])
            first = head.first
            if len(first) < 2 or not first[0].startswith(b"HTTP/1.") or not first[1].isdigit():
                raise ValueError(f"bad status line {data[pos : pos + 80]!r}")
            pos = end + 4
            status = int(first[1])
            if not 100 <= status < 200:
                break
        if head.close or first[0] != b"HTTP/1.1":
            self.reusable = False
        if status in (204, 304):
            self.body.state = DONE
        else:
            self.body.start(head, until_close=True)
            if self.body.state == UNTIL_CLOSE:
                self.reusable = False
        self.state = self.body.state
        assert self.ex is not None
        self.ex.receiver.head(status, head.headers)
        return pos

    def _finish(self) -> None:
        ex = self.ex
        assert ex is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.ex = None
        self.served += 1
        self.pool.release(self)
        ex.receiver.end()

    def _fail(self, err: WireError) -> None:
        ex = self.ex
        self._cancel_timer()
        self.ex = None
        self.abort()
        if ex is not None:
            ex.receiver.fail(err)

    def _next_check(self, ex: Exchange) -> float:
        at = ex.deadline or float("inf")
        if ex.read_timeout_s is not None:
            at = min(at, self._last + ex.read_timeout_s)
        return at

    def _check_time(self) -> None:
        self._timer = None
        ex = self.ex
        if ex is None:
            return
        now = self.pool.loop.time()
        timed_out = HeadTimeout if self.state == _HEAD else BodyTimeout
        if ex.deadline and now >= ex.deadline:
            self._fail(timed_out(f"no complete answer within {ex.timeout_s:g} s"))
        elif ex.read_timeout_s is not None and now >= self._last + ex.read_timeout_s:
            self._fail(timed_out(f"no data for {ex.read_timeout_s:g} s"))
        else:
            self._timer = self.pool.loop.call_at(self._next_check(ex), self._check_time)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    @property
    def idle_ok(self) -> bool:
        return not self.closed and self.reusable and self.state == DONE and not self._buf


def _why(exc: Exception | None, default: str) -> str:
    return f"{type(exc).__name__}: {exc}" if exc is not None else default
