"""`kvharness sim`."""

from __future__ import annotations

import argparse
from typing import Any

from kvharness.errors import UserError

HELP = "sim"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("sim", help=HELP, description=HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise UserError("not available yet")
