"""What one client may make the gateway hold: request bodies within a shared byte budget, read
with a bound on silence.

Every body the gateway reads is counted against one :class:`ByteBudget` from its first byte until
the request is done (forwarded and answered), so the bytes held at once over all requests stay
under ``max_buffered_bytes`` whatever the clients send. A body that would not fit is refused at
once (503 with Retry-After), not queued: a client holding a slot never makes another one wait.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

__all__ = ["BodyRefused", "ByteBudget", "read_body"]


class BodyRefused(Exception):
    """The body cannot be taken; ``status`` (408, 413, 503) and the message go to the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class ByteBudget:
    """Bytes of request bodies held at once, over all requests; never above ``limit``."""

    limit: int
    held: int = 0

    def take(self, n: int) -> bool:
        """Count ``n`` more bytes held if they fit (True), else change nothing (False)."""
        if self.held + n > self.limit:
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        """Stop counting ``n`` bytes taken before."""
        self.held -= n
        assert self.held >= 0, "gave back more bytes than were taken"


async def read_body(
    request: web.Request, budget: ByteBudget, max_bytes: int, idle_timeout_s: float
) -> tuple[bytearray, int]:
    """The request's body and the bytes counted for it in ``budget`` (the caller gives them back
    when done with the request, also when this raises after taking some: see ``taken``).

    A declared ``Content-Length`` is checked and counted before any byte is read; a chunked body
    is counted as it arrives. Raises :class:`BodyRefused`: 413 over ``max_bytes``, 503 when the
    budget is spent, 408 when the client is silent for ``idle_timeout_s`` seconds mid-body.
    """
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise BodyRefused(413, _too_large(declared, max_bytes))
    taken = declared or 0
    if not budget.take(taken):
        raise _busy(budget)
    try:
        buf = bytearray()  # grown in place: large buffers are remapped, not copied, as they grow
        while chunk := await _next_chunk(request, idle_timeout_s):
            buf += chunk
            over = len(buf) - taken
            if over > 0:
                if len(buf) > max_bytes:
                    raise BodyRefused(413, _too_large(len(buf), max_bytes))
                if not budget.take(over):
                    raise _busy(budget)
                taken += over
        if declared is not None and len(buf) < declared:
            raise BodyRefused(400, f"the request body ended after {len(buf)} of {declared} bytes")
        return buf, taken
    except TimeoutError:
        budget.give(taken)
        raise BodyRefused(
            408, f"the request body stalled: nothing received for {idle_timeout_s:g} s"
        ) from None
    except BaseException:
        budget.give(taken)
        raise


async def _next_chunk(request: web.Request, idle_timeout_s: float) -> bytes:
    async with asyncio.timeout(idle_timeout_s):
        return await request.content.readany()


def _too_large(size: int, max_bytes: int) -> str:
    return (
        f"request body of {size} bytes is over the gateway's limit of {max_bytes} bytes "
        "(--max-body-bytes)"
    )


def _busy(budget: ByteBudget) -> BodyRefused:
    return BodyRefused(
        503,
        f"the gateway holds {budget.held} bytes of other requests' bodies, its limit is "
        f"{budget.limit} (--max-buffered-bytes); retry later",
    )
