"""Errors that carry a message meant for the user (printed as one line by the CLI)."""

from __future__ import annotations

__all__ = ["FormatError", "UserError", "decode_error_message"]


class UserError(Exception):
    """Something the user asked for cannot be done; the message says what and what to do."""


class FormatError(UserError):
    """Malformed input data; the message starts with ``FILE:LINE:`` where the fault is."""

    def __init__(self, path: str, line: int, message: str) -> None:
        self.path = path
        self.line = line
        self.reason = message
        super().__init__(f"{path}:{line}: {message}")


def decode_error_message(err: Exception) -> str:
    """One line for a msgspec decode error: schema faults as msgspec words them, else bad JSON."""
    import msgspec

    if isinstance(err, msgspec.ValidationError):
        return str(err)
    return f"bad JSON: {err}"
