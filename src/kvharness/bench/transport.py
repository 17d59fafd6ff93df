"""The one transport of the bench: send a request body, stream the answer, time it.

:class:`HttpTransport` speaks HTTP/1.1 to OpenAI-compatible servers through one pooled aiohttp
session. :meth:`Transport.stream` never raises for a server's or network's fault: the outcome says
what happened, and whether resending could help (see :class:`~kvharness.bench.config.RetryPolicy`).
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

import aiohttp
import msgspec

from kvharness.bench.sse import DONE, SSEParser, decode_chunk

__all__ = ["HttpTransport", "Outcome", "Transport", "check_header_name", "header_value"]


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


class HttpTransport:
    """Streams completions over a shared connection pool (unlimited connections, keep-alive).

    ``clock`` gives the times written into outcomes; ``gaps`` (if given) receives the seconds
    between successive streamed chunks, for inter-token statistics. ``session_header``: the header
    name that carries the ``session`` given to :meth:`stream` (see :func:`header_value`).
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
        self._clock = clock
        self._timeout = timeout
        self._gaps = gaps
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, force_close=False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        self._header = check_header_name(session_header) if session_header else None
        self._by_session: dict[str, dict[str, str]] = {}

    async def close(self) -> None:
        await self._session.close()

    def _headers_for(self, session: str | None) -> dict[str, str]:
        if session is None or self._header is None:
            return self._headers
        h = self._by_session.get(session)
        if h is None:
            h = self._by_session[session] = {**self._headers, self._header: header_value(session)}
        return h

    async def stream(self, url: str, body: bytes, session: str | None = None) -> Outcome:
        out = Outcome()
        try:
            async with asyncio.timeout(self._timeout):
                await self._stream(url, body, self._headers_for(session), out)
        except TimeoutError:
            out.error = f"timeout: no answer within {self._timeout:g} s"
            out.retryable = out.first_token is None
        except aiohttp.ClientConnectorError as err:
            out.error = f"connection refused: {_short(str(err))}"
            out.retryable = True
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as err:
            out.error = f"stream cut: {_short(str(err) or type(err).__name__)}"
            out.retryable = out.first_token is None
        except (aiohttp.ClientError, OSError) as err:
            out.error = f"connection error: {_short(str(err) or type(err).__name__)}"
            out.retryable = out.first_token is None
        except msgspec.DecodeError as err:
            out.error = f"bad stream: {_short(str(err))}"
        if out.error is not None:
            out.done = None
        return out

    async def _stream(self, url: str, body: bytes, headers: dict[str, str], out: Outcome) -> None:
        clock = self._clock
        gaps = self._gaps
        async with self._session.post(url, data=body, headers=headers) as resp:
            if resp.status >= 400:
                text = await resp.text(errors="replace")
                out.error = f"http {resp.status}: {_short(text)}"
                out.retryable = resp.status >= 500 or resp.status == 429
                return
            parser = SSEParser()
            chunks = 0
            last = 0.0
            finished = False
            async for data in resp.content.iter_any():
                now = clock()
                for payload in parser.feed(data):
                    if payload == DONE:
                        finished = True
                        continue
                    if not payload:
                        continue
                    chunk = decode_chunk(payload)
                    if chunk.usage is not None:
                        u = chunk.usage
                        out.prompt_tokens = u.prompt_tokens
                        out.output_tokens = u.completion_tokens
                        out.cached_tokens = u.cached_tokens
                    if chunk.has_token:
                        chunks += 1
                        if out.first_token is None:
                            out.first_token = now
                        elif gaps is not None:
                            gaps.append(now - last)
                        last = now
            if not finished:
                out.error = "stream cut: connection closed before [DONE]"
                out.retryable = out.first_token is None
                return
            out.done = clock()
            if out.first_token is None:  # nothing but empty deltas: the answer came at the end
                out.first_token = out.done
            if out.output_tokens == 0:
                out.output_tokens = chunks
