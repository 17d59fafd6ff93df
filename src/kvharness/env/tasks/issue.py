"""Issue text for a task, written from the failing behaviour only.

The text names the misbehaving scenarios (from the failing tests' names, humanised) and what went
wrong (the first line of each failure message), as a user filing a bug would. It never names the
mutated file, line or operator, nor the hidden test files' paths.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["issue_text", "scenario"]

_MAX_MESSAGE = 220
_ADDRESS = re.compile(r"(?<![0-9A-Za-z])(0x|x)[0-9a-fA-F]{8,}")
"""An object address in a repr, also as pytest shortens it (``<mod....x7ffff61cd490>``)."""


def scenario(nodeid: str) -> str:
    """``tests/test_x.py::FooTests::test_bar_baz[2-3]`` -> ``Foo: bar baz (case 2-3)``."""
    path, bracket, params = nodeid.partition("[")
    parts = path.split("::")[1:]
    words: list[str] = []
    for part in parts:
        name = re.sub(r"^(test_?|Test)", "", part)
        name = re.sub(r"(Tests?|TestCase)$", "", name)
        name = name.replace("_", " ").strip()
        if name:
            words.append(name)
    text = ": ".join(words) or path
    if bracket:
        text += f" (case {params.rstrip(']')})"
    return text


def _first_line(message: str) -> str:
    for line in message.splitlines():
        line = _ADDRESS.sub(r"\1...", line.strip())
        if line:
            return line if len(line) <= _MAX_MESSAGE else line[: _MAX_MESSAGE - 3] + "..."
    return "fails"


def issue_text(
    package: str, version: str, module: str, failures: Sequence[tuple[str, str]], total: int
) -> str:
    """The issue for a bug in ``module`` (import name) of ``package`` ``version``; ``failures`` are
    (node id, failure message) pairs of some failing tests, ``total`` how many fail in all."""
    shown = list(failures[:4])
    lines = [
        f"# Wrong results from `{module}` ({package} {version})",
        "",
        f"Some behaviour of `{module}` is broken in this checkout of {package} {version}. "
        f"{total} of the project's own checks fail; for example:",
        "",
    ]
    for nodeid, message in shown:
        lines.append(f"- {scenario(nodeid)}: `{_first_line(message)}`")
    if total > len(shown):
        lines.append(f"- ... and {total - len(shown)} more like these")
    lines += [
        "",
        "Expected: the behaviour the package documents (and had before this regression). "
        "Please fix the library code; the test suite is not part of this checkout and must "
        "not be changed.",
    ]
    return "\n".join(lines) + "\n"
