"""Run the ``kvharness`` command in-process as a shell would: exit status out, never an exception."""

from __future__ import annotations

from collections.abc import Sequence

from kvharness.cli import main

__all__ = ["run_cli"]


def run_cli(argv: Sequence[str]) -> int:
    """``kvharness ARGV``'s exit status, whether it returns or argparse exits (bad options)."""
    try:
        return main(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
