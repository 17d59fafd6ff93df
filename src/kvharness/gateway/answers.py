"""The gateway's own answers: OpenAI-style errors, and the response a stream is relayed in."""

from __future__ import annotations

from aiohttp import web

from kvharness.wire.openai import error_body

__all__ = ["RelayResponse", "error_response"]


def error_response(
    status: int,
    message: str,
    kind: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An OpenAI-style error answer."""
    return web.Response(
        status=status,
        body=error_body(message, kind, status, param),
        content_type="application/json",
        headers=headers,
    )


class RelayResponse(web.StreamResponse):
    """A streamed answer whose head goes out with its first piece (one send, not two), as
    aiohttp's own ``web.Response`` does; the class attribute is aiohttp's switch for it."""

    _send_headers_immediately = False
