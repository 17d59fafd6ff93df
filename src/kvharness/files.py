"""Writing a file whole: readers see the old file or the new one, never a part, and no leftovers."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["replacing"]


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` to write; it replaces ``path`` when the block
    succeeds and is removed when it fails, so a failed write (full disk, interrupt) leaves neither
    a partial file nor a ``.tmp``."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
