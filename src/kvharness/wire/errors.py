"""The wire's faults, told apart as its callers need them.

Before the head
    :class:`ConnectError`: the server failed before the response head. :class:`Unreachable`
    (no connection, nothing sent: safe to send the request elsewhere; :class:`ConnectTimeout`
    when connecting timed out); :class:`HeadTimeout` (silent past the read timeout or the
    exchange's deadline: the server may still be working on the request, so it is not safe to
    resend); :class:`BadHead` (not HTTP/1.x).

In the body
    :class:`BodyError`: the body broke off. :class:`BodyTimeout` (silence or deadline, as above),
    :class:`BadBody` (malformed framing), :class:`TooLarge` (over the caller's limit).
"""

from __future__ import annotations

__all__ = [
    "BadBody",
    "BadHead",
    "BodyError",
    "BodyTimeout",
    "ConnectError",
    "ConnectTimeout",
    "HeadTimeout",
    "TooLarge",
    "Unreachable",
    "WireError",
]


class WireError(Exception):
    """An exchange failed; the message says how, in a few words."""


class ConnectError(WireError):
    """The server could not be reached, or closed or failed before its response head."""


class Unreachable(ConnectError):
    """No connection could be made (refused, no route, TLS handshake failed)."""


class ConnectTimeout(Unreachable):
    """No connection within the connect timeout (nothing was sent)."""


class HeadTimeout(ConnectError):
    """No response head within the read timeout or the exchange's deadline."""


class BadHead(ConnectError):
    """The response head is not HTTP/1.x."""


class BodyError(WireError):
    """The response body broke off (connection lost, bad framing, silence, too large)."""


class BodyTimeout(BodyError):
    """The server fell silent mid-body for the read timeout, or the deadline passed."""


class BadBody(BodyError):
    """The body's framing is malformed (chunk sizes, bytes past a declared length)."""


class TooLarge(BodyError):
    """The body is longer than the caller's limit (the connection is closed)."""
