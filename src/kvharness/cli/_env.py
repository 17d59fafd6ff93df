"""`kvharness env`."""

from __future__ import annotations

import argparse
from typing import Any

from kvharness.errors import UserError

HELP = "env"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("env", help=HELP, description=HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise UserError("not available yet")
