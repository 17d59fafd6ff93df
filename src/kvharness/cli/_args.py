"""What every subcommand checks before it starts work: numeric options and output paths.

Numbers are checked at parse time by argparse ``type=`` factories (:func:`bounded`,
:func:`positive_int`, ...), so a bad value is refused as one line naming the option, the bound and
the value. Output paths are checked by :func:`output_dir` and :func:`output_file` before any work
starts, by creating (and removing) a probe where the output will go: a missing parent, a file
where a folder is needed or the reverse, or an unwritable place is a :class:`UserError`.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

from kvharness.configs import BLOCK_SIZE_MAX
from kvharness.errors import UserError

__all__ = [
    "BLOCK_SIZE_MAX",
    "OneLineParser",
    "bounded",
    "non_negative_int",
    "output_dir",
    "output_file",
    "positive_float",
    "positive_int",
]


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``PROG: error: MESSAGE``), exit status 2.

    A parser without subcommands takes its options anywhere among its positionals
    (``convert SPEC --to FMT OUT`` reads as ``convert --to FMT SPEC OUT``), by argparse's
    intermixed parsing; a parser with subcommands parses as argparse does, as intermixed parsing
    cannot hand the rest of the line to a subcommand. Subcommand parsers are of this class too
    (``add_subparsers`` makes its parsers of the parent's class), so every leaf intermixes.
    """

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # Older Pythons' intermixed parsing calls parse_known_args itself, twice: those inner
        # calls must parse plainly.
        if self._intermixing or self._subparsers is not None:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return super().parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _show(v: float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


N = TypeVar("N", int, float)


def bounded(
    kind: Callable[[str], N],
    lo: N | None = None,
    hi: N | None = None,
    *,
    above: bool = False,
) -> Callable[[str], N]:
    """An argparse ``type=`` for a number of ``kind`` (``int`` or ``float``) in ``[lo, hi]``;
    ``above=True`` makes ``lo`` exclusive. Floats must be finite."""
    noun = "an integer" if kind is int else "a number"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if above else '>='} {_show(lo)}")
    if hi is not None:
        parts.append(f"<= {_show(hi)}")
    want = f"{noun} {' and '.join(parts)}".strip()

    def parse(text: str) -> N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}")
        low = lo is not None and (value <= lo if above else value < lo)
        if low or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


positive_int = bounded(int, 1)
non_negative_int = bounded(int, 0)
positive_float = bounded(float, 0.0, above=True)
non_negative_float = bounded(float, 0.0)
block_size = bounded(int, 1, BLOCK_SIZE_MAX)


def _probe(folder: Path, option: str, path: Path) -> None:
    """Create and remove a file in ``folder``: the only test of writability that holds for every
    user and file system."""
    try:
        fd, name = tempfile.mkstemp(prefix=".kvharness-probe-", dir=folder)
    except OSError as err:
        raise UserError(f"{option} {path}: cannot write in {folder} ({err.strerror})") from None
    os.close(fd)
    os.unlink(name)


def _nearest_existing(path: Path, option: str, original: Path) -> Path:
    """The deepest existing ancestor of ``path`` (itself included); it must be a folder."""
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise UserError(f"{option} {original}: {p} is a file, not a folder")
            return p
    return Path(".")


def output_dir(path: str | Path, option: str) -> Path:
    """Check that folder ``path`` can be created (with its parents) or written into; creates
    nothing. Raises :class:`UserError` naming ``option`` otherwise."""
    p = Path(path)
    _probe(_nearest_existing(p.absolute(), option, p), option, p)
    return p


def output_file(path: str | Path, option: str) -> Path:
    """Check that file ``path`` can be written: its folder exists and is writable, and ``path`` is
    not a folder; a ``path`` that is not a regular file (``/dev/stdout``, a FIFO: written through,
    see :func:`kvharness.files.replacing`) must be writable itself. Creates nothing. Raises
    :class:`UserError` naming ``option`` otherwise."""
    p = Path(path)
    parent = p.absolute().parent
    if p.is_dir():
        raise UserError(f"{option} {p}: is a folder; give a file path")
    if p.exists() and not p.is_file():
        if not os.access(p, os.W_OK):
            raise UserError(f"{option} {p}: cannot be written")
        return p
    if not parent.is_dir():
        what = "is a file, not a folder" if parent.exists() else "does not exist"
        raise UserError(f"{option} {p}: the folder {parent} {what}")
    _probe(parent, option, p)
    return p
