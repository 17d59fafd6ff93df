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

import aiohttp
import msgspec

from kvharness.bench.sse import DONE, SSEParser, decode_chunk

__all__ = ["HttpTransport", "Outcome", "Transport"]


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
    async def stream(self, url: str, body: bytes) -> Outcome: ...

    async def close(self) -> None: ...


def _short(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


class HttpTransport:
    """Streams completions over a shared connection pool (unlimited connections, keep-alive).

    ``clock`` gives the times written into outcomes; ``gaps`` (if given) receives the seconds
    between successive streamed chunks, for inter-token statistics.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        timeout: float = 300.0,
        connect_timeout: float = 10.0,
        gaps: array[float] | None = None,
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

    async def close(self) -> None:
        await self._session.close()

    async def stream(self, url: str, body: bytes) -> Outcome:
        out = Outcome()
        try:
            async with asyncio.timeout(self._timeout):
                await self._stream(url, body, out)
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

    async def _stream(self, url: str, body: bytes, out: Outcome) -> None:
        clock = self._clock
        gaps = self._gaps
        async with self._session.post(url, data=body, headers=self._headers) as resp:
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
