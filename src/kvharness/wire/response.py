"""The stock receiver, for callers that await: the head, then the body whole or relayed.

:class:`Response` buffers what arrives until its caller reads it whole (:meth:`Response.read`),
takes it piece by piece (:meth:`Response.first`), or hands every further piece to another
socket as it comes, with backpressure (:meth:`Response.relay`); the gateway relays streamed
answers this way without waking a task per chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec

from kvharness.wire.connection import Exchange
from kvharness.wire.errors import TooLarge, WireError
from kvharness.wire.framing import Headers

__all__ = ["Response", "Sink"]


Sink = Callable[[bytes], bool]
"""Takes one piece of payload; returns False when the receiver is gone (the relay then stops)."""


class Response:
    """A :class:`Receiver` for callers that await: the head (:meth:`wait_head`), then the body
    whole (:meth:`read`), or as it comes (:meth:`first` then :meth:`relay`). Call
    :meth:`release` when done with it (always): an answer not read to its end is aborted."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.exchange: Exchange | None = None
        self.status = 0
        self.headers: Headers = Headers(b"")
        """Response headers."""
        self.complete = False
        """The whole body has been received."""
        self.receiver_gone = False
        self._body: list[bytes] = []
        self._size = 0
        self._limit: int | None = None
        self._sink: Sink | None = None
        self._writable: Callable[[], bool] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._error: WireError | None = None
        self._has_head = False
        self._paused = False
        self._released = False

    # -- fed by the connection ------------------------------------------------------------

    def head(self, status: int, headers: Headers) -> None:
        self.status = status
        self.headers = headers
        self._has_head = True
        self._wake()

    def data(self, piece: bytes) -> None:
        sink = self._sink
        if sink is None:
            self._body.append(piece)
            self._size += len(piece)
            if self._limit is not None and self._size > self._limit:
                self._fail_now(TooLarge(f"answer over {self._limit} bytes"))
            self._wake()
        elif not sink(piece):
            self.receiver_gone = True
            self._pause()
            self._wake()
        elif self._writable is not None and not self._writable():
            self._paused = True
            self._pause()
            self._wake()

    def end(self) -> None:
        self.complete = True
        self._wake()

    def fail(self, error: WireError) -> None:
        if not self.complete and self._error is None:
            self._error = error
            self._wake()

    def _fail_now(self, error: WireError) -> None:
        self.fail(error)
        if self.exchange is not None:
            self.exchange.abort()

    def _pause(self) -> None:
        if self.exchange is not None:
            self.exchange.pause()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def _wait(self) -> None:
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # -- used by the caller ---------------------------------------------------------------

    async def wait_head(self) -> None:
        """Until the head is in. Raises :class:`ConnectError`."""
        while not self._has_head:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body; over ``limit`` bytes raises :class:`TooLarge`. Raises
        :class:`BodyError`."""
        self._limit = limit
        if limit is not None and self._size > limit:
            self._fail_now(TooLarge(f"answer over {limit} bytes"))
            raise TooLarge(f"answer over {limit} bytes")
        while not self.complete:
            if self._error is not None:
                raise self._error
            await self._wait()
        return b"".join(self._body)

    async def first(self) -> bytes:
        """The payload received so far, waiting for some; b"" when the body ended empty.
        Raises :class:`BodyError`."""
        while not self._body and not self.complete:
            if self._error is not None:
                raise self._error
            await self._wait()
        data = b"".join(self._body)
        self._body.clear()
        return data

    async def relay(self, sink: Sink, writable: Callable[[], bool]) -> bool:
        """Hand every further piece of payload to ``sink`` as it arrives, until the body ends.

        ``writable()`` says whether the receiver has room; while it has not, the server's
        socket is not read. Returns False when the sink reported its receiver gone. Raises
        :class:`BodyError`.
        """
        self._sink = sink
        self._writable = writable
        if self._body:
            data = b"".join(self._body)
            self._body.clear()
            if not sink(data):
                self.receiver_gone = True
        ex = self.exchange
        while not (self.complete or self.receiver_gone):
            if self._error is not None:
                raise self._error
            if self._paused or not writable():
                self._paused = True
                self._pause()
                while not writable() and self._error is None and not self._closed():
                    await asyncio.sleep(0.005)
                self._paused = False
                if ex is not None:
                    ex.resume()
                continue
            await self._wait()
        return not self.receiver_gone

    def _closed(self) -> bool:
        ex = self.exchange
        return ex is None or ex.conn is None or ex.conn.closed

    async def json(self) -> object:
        """The body decoded as JSON. Raises :class:`BodyError` or ValueError."""
        return msgspec.json.decode(await self.read())

    def release(self) -> None:
        """Done with the answer: one read to its end has its connection back in the pool
        already; any other is aborted (a server then stops generating it)."""
        if self._released:
            return
        self._released = True
        self._sink = None
        if not self.complete and self.exchange is not None:
            self.exchange.abort()
