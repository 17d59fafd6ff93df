"""The ``kvharness`` command: one subcommand per module, each registered from its own file.

A subcommand module exposes ``register(subparsers)``, which adds its parser and sets ``func`` (a
callable taking the parsed namespace and returning an exit code). Errors meant for the user are
raised as :class:`UserError` and printed as one line, with exit status 2; so are bad options
(:class:`~kvharness.cli._args.OneLineParser`) and faults of the file system (``OSError``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from kvharness import __version__
from kvharness.cli._args import OneLineParser
from kvharness.errors import UserError

__all__ = ["build_parser", "main"]

# Order here is the order in --help.
_SUBCOMMANDS = ("workload", "sim", "bench", "gateway", "env", "report")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="kvharness",
        description=(
            "Serve open models to coding agents: benchmark whole agent sessions, route by KV-cache "
            "contents, simulate clusters, and build RL environments around real coding tasks."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kvharness {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMANDS:
        module = importlib.import_module(f"kvharness.cli._{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        code: int = func(args)
    except UserError as err:
        print(f"kvharness {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as err:  # the environment's fault (disk full, a path gone), not the program's
        where = f"{err.filename}: " if err.filename is not None else ""
        print(f"kvharness {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"kvharness {args.command}: interrupted", file=sys.stderr)
        return 130
    return code
