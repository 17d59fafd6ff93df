"""Errors that carry a message meant for the user (printed as one line by the CLI)."""

from __future__ import annotations

__all__ = ["FormatError", "UserError"]


class UserError(Exception):
    """Something the user asked for cannot be done; the message says what and what to do."""


class FormatError(UserError):
    """Malformed input data; the message starts with ``FILE:LINE:`` where the fault is, or with
    ``FILE:`` when it is the file as a whole (``line`` None: unreadable, empty)."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.reason = message
        super().__init__(f"{path}: {message}" if line is None else f"{path}:{line}: {message}")
