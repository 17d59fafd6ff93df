"""Small files of a run, whole: written so that readers see the old file or the new one, never a
part, and no leftovers; read so that a damaged one is a one-line error naming it."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvharness.errors import FormatError

__all__ = ["read_json", "replacing"]


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` to write; it replaces ``path`` when the block
    succeeds and is removed when it fails, so a failed write (full disk, interrupt) leaves neither
    a partial file nor a ``.tmp``. A ``path`` that exists and is not a regular file (a symbolic
    link, ``/dev/stdout``, a FIFO) is written through as it is, never replaced."""
    target = Path(path)
    if target.is_symlink() or (target.exists() and not target.is_file()):
        yield target
        return
    tmp = target.with_name(target.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_json(path: str | Path, kind: type, what: str) -> Any:
    """The JSON value in ``path``, which must be a ``kind`` (``what`` names it in the error);
    anything else raises :class:`FormatError` naming the file (and line)."""
    where = str(path)
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise FormatError(where, err.lineno, f"bad JSON: {err.msg}") from None
    except UnicodeDecodeError as err:
        raise FormatError(where, 1, f"not UTF-8 text: {err.reason}") from None
    if not isinstance(value, kind):
        raise FormatError(where, 1, f"expected {what}")
    return value
