"""Errors that carry a message meant for the user (printed as one line by the CLI)."""

from __future__ import annotations

__all__ = ["FormatError", "UserError"]


class UserError(Exception):
    """Something the user asked for cannot be done; the message says what and what to do."""


class FormatError(UserError):
    """Malformed input data; the message starts with ``FILE:LINE:`` where the fault is, or with
    ``FILE:`` when it is the file as a whole (``line`` None: unreadable, empty). It is always one
    line of printable text, whatever the input put into it."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.reason = _one_line(message)
        where = _one_line(path) if line is None else f"{_one_line(path)}:{line}"
        super().__init__(f"{where}: {self.reason}")


def _one_line(text: str) -> str:
    """``text`` with unprintable characters (newlines included) escaped, so it prints as one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
