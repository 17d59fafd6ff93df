"""The wire's calls for code without an event loop: the CLI's one-off requests, test helpers.

:func:`run` gives a coroutine function a fresh :class:`~kvharness.wire.http.Client` on a private
event loop, in this thread, or in a worker thread when this thread already runs a loop (a
synchronous helper called from async code), and closes the client after.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import TypeVar

from kvharness.wire.http import Client

__all__ = ["get", "post", "run"]

T = TypeVar("T")


def run(call: Callable[[Client], Awaitable[T]], *, connect_timeout_s: float = 10.0) -> T:
    """``await call(client)`` to its end and return what it returns (or raise what it raises)."""

    async def main() -> T:
        client = Client(connect_timeout_s=connect_timeout_s)
        try:
            return await call(client)
        finally:
            client.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


def get(url: str, *, timeout_s: float = 10.0, limit: int | None = None) -> tuple[int, bytes]:
    """(status, body) of ``GET url``. Raises :class:`~kvharness.wire.http.WireError`."""
    return run(lambda c: c.get(url, timeout_s=timeout_s, limit=limit), connect_timeout_s=timeout_s)


def post(url: str, body: bytes, *, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """(status, body) of ``POST url`` with a JSON ``body``. Raises
    :class:`~kvharness.wire.http.WireError`."""
    return run(lambda c: c.post(url, body, timeout_s=timeout_s), connect_timeout_s=timeout_s)
