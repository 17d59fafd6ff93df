"""The one transport of the bench: send a turn's request body, stream the answer, time it.

:class:`HttpTransport` sends through the wire's pooled HTTP/1.1 client
(:mod:`kvharness.wire.http`) with a receiver per request that frames the SSE stream, decodes
each chunk and stamps the first token, inter-chunk gaps and the end as bytes arrive, in the
socket's callback: no task or stream object per request. :meth:`Transport.stream` never raises
for a server's or network's fault: the :class:`Outcome` says what happened, and whether
resending could help (see :class:`~kvharness.bench.config.RetryPolicy`).
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

from kvharness.wire.framing import Headers
from kvharness.wire.http import (
    BadBody,
    BadHead,
    BodyTimeout,
    Client,
    ConnectTimeout,
    HeadTimeout,
    Unreachable,
    WireError,
)
from kvharness.wire.openai import decode_chunk
from kvharness.wire.sse import DONE, SSEParser

__all__ = ["HttpTransport", "Outcome", "Transport", "check_header_name", "header_value"]

_MAX_ERROR_BODY = 4096


@dataclass(slots=True)
class Outcome:
    """What one attempt got. Times are on the transport's clock (seconds).

    ``retryable`` is True for faults before the first token that another attempt may cure
    (connection refused/reset, timeout, 5xx, 429, stream cut before any token).
    """

    first_token: float | None = None
    done: float | None = None
    output_tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    error: str | None = None
    retryable: bool = False


class Transport(Protocol):
    async def stream(self, url: str, body: bytes, session: str | None = None) -> Outcome:
        """POST ``body`` to ``url`` and stream the answer. ``session``: a session id sent in the
        transport's session header (none when None or when the transport has no header name)."""
        ...

    async def close(self) -> None: ...


_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def check_header_name(name: str) -> str:
    """``name`` if it is a valid HTTP header name (RFC 9110 token), else ValueError."""
    if not name or not set(name) <= _TCHAR:
        raise ValueError(f"{name!r} is not a valid HTTP header name")
    return name


def header_value(session: str) -> str:
    """A session id as a header value: kept as is when it is printable ASCII without leading or
    trailing spaces, else percent-encoded (UTF-8), so no id can break a request head."""
    if session.isascii() and session.isprintable() and session.strip() == session:
        return session
    return quote(session, safe="!#$&'()*+,/:;=?@[]~-._")


def _short(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


class _Timed:
    """Receiver of one attempt: fills its :class:`Outcome` as the answer streams in."""

    __slots__ = ("chunks", "clock", "error_body", "fut", "gaps", "last", "out", "sse", "status")

    def __init__(
        self, fut: asyncio.Future[None], clock: Callable[[], float], gaps: array[float] | None
    ) -> None:
        self.fut = fut
        self.clock = clock
        self.gaps = gaps
        self.out = Outcome()
        self.sse = SSEParser()
        self.chunks = 0
        self.last = 0.0
        self.status = 0
        self.error_body = bytearray()

    def head(self, status: int, headers: Headers) -> None:
        self.status = status

    def data(self, piece: bytes) -> None:
        if self.status >= 400:
            if len(self.error_body) < _MAX_ERROR_BODY:
                self.error_body += piece
            return
        out = self.out
        if out.error is not None:
            return
        now = self.clock()
        gaps = self.gaps
        for payload in self.sse.feed(piece):
            if payload == DONE:
                out.done = now
                continue
            if not payload:
                continue
            try:
                chunk = decode_chunk(payload)
            except ValueError as err:  # msgspec.DecodeError is a ValueError
                out.error = f"bad stream: {str(err)[:100]}"
                return
            usage = chunk.usage
            if usage is not None:
                out.prompt_tokens = usage.prompt_tokens
                out.output_tokens = usage.completion_tokens
                out.cached_tokens = usage.cached_tokens
            if chunk.has_token:
                self.chunks += 1
                if out.first_token is None:
                    out.first_token = now
                elif gaps is not None:
                    gaps.append(now - self.last)
                self.last = now

    def end(self) -> None:
        out = self.out
        if self.status >= 400:
            out.error = f"http {self.status}: {_short(self.error_body.decode('utf-8', 'replace'))}"
            out.retryable = self.status >= 500 or self.status == 429
        elif out.error is None and out.done is None:
            out.error = "stream cut: response ended before [DONE]"
            out.retryable = out.first_token is None
        elif out.error is None:
            if out.first_token is None:  # nothing but empty deltas: the answer came at the end
                out.first_token = out.done
            if out.output_tokens == 0:
                out.output_tokens = self.chunks
        if out.error is not None:
            out.done = None
        if not self.fut.done():
            self.fut.set_result(None)

    def fail(self, error: WireError) -> None:
        out = self.out
        if isinstance(error, (BadHead, BadBody)):
            out.error = f"bad response: {error}"
        elif isinstance(error, (ConnectTimeout, HeadTimeout, BodyTimeout)):
            out.error = f"timeout: {error}"
            out.retryable = out.first_token is None
        elif isinstance(error, Unreachable):
            out.error = f"connection refused: {error}"
            out.retryable = True
        else:
            out.error = f"stream cut: {error}"
            out.retryable = out.first_token is None
        out.done = None
        if not self.fut.done():
            self.fut.set_result(None)


class HttpTransport:
    """Streams completions over pooled keep-alive connections (``http://`` and ``https://``).

    ``clock`` gives the times written into outcomes; ``gaps`` (if given) receives the seconds
    between successive streamed chunks, for inter-token statistics. ``timeout_s`` bounds an
    attempt from send to its last byte. ``session_header``: the header name that carries the
    ``session`` given to :meth:`stream` (its line is encoded once per session and kept; see
    :func:`header_value`). Create it inside the event loop that runs the bench.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        gaps: array[float] | None = None,
        session_header: str | None = None,
    ) -> None:
        self.clock = clock
        self.gaps = gaps
        self._client = Client(connect_timeout_s=connect_timeout_s, timeout_s=timeout_s)
        self._head = b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        self._header = (
            (check_header_name(session_header) + ": ").encode() if session_header else b""
        )
        self._lines: dict[str, bytes] = {}

    def _headers(self, session: str | None) -> bytes:
        if session is None or not self._header:
            return self._head
        line = self._lines.get(session)
        if line is None:
            value = header_value(session).encode()
            line = self._lines[session] = self._head + self._header + value + b"\r\n"
        return line

    async def stream(self, url: str, body: bytes, session: str | None = None) -> Outcome:
        fut = self._client.loop.create_future()
        timed = _Timed(fut, self.clock, self.gaps)
        ex = self._client.start("POST", url, timed, body, self._headers(session))
        try:
            await fut
        except asyncio.CancelledError:
            ex.abort()
            raise
        return timed.out

    async def close(self) -> None:
        self._client.close()
        await asyncio.sleep(0)
