"""Turning functions into stubs, and ordering them so later ones call earlier ones.

A stub keeps the function's decorators, signature and docstring and replaces the rest of its body
by ``raise NotImplementedError`` (at the body's indentation). Only top-level ``def`` functions
defined once in their module are stubbed.

**Order.** The chosen functions are sorted topologically by the static call graph among them: a
function comes after every chosen function of the same module whose name its body mentions
(``titleize`` mentions ``humanize`` and ``underscore``, so both come first). Ties, and functions
with no such relation (other modules are not followed), keep the order the chain names them in.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Stub", "StubError", "apply_stubs", "chain_order", "make_stub"]


@dataclass(frozen=True, slots=True)
class Stub:
    """Function ``name`` of ``file``: lines ``line..end_line`` (1-based, decorators included) of
    the original source are ``original`` and become ``stub``; ``calls``: names of other
    top-level functions of the module its body mentions; ``doc``: its docstring's first paragraph, on one line."""

    file: str
    name: str
    line: int
    end_line: int
    original: str
    stub: str
    calls: frozenset[str]
    doc: str


_MAX_SUMMARY = 200


class StubError(ValueError):
    """The function cannot be stubbed (absent, defined twice, a one-line body)."""


def make_stub(file: str, source: str, name: str) -> Stub:
    """The stub of top-level function ``name`` in ``source`` (the text of ``file``)."""
    module = ast.parse(source)
    defs = [
        n
        for n in module.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    ]
    if len(defs) != 1:
        raise StubError(f"{file}: {len(defs)} top-level definitions of {name}")
    node = defs[0]
    top = {n.name for n in module.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    lines = source.splitlines(keepends=True)
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    end = node.end_lineno or node.lineno
    first = node.body[0]
    if first.lineno == node.lineno:
        raise StubError(f"{file}: {name} has its body on the line of its signature")
    doc = ast.get_docstring(node)
    keep = (first.end_lineno or first.lineno) if doc is not None else first.lineno - 1
    if doc is not None and len(node.body) == 1:
        raise StubError(f"{file}: {name} has nothing but a docstring")
    indent = lines[first.lineno - 1][: first.col_offset]
    stub = "".join(lines[start - 1 : keep]) + f"{indent}raise NotImplementedError\n"
    original = "".join(lines[start - 1 : end])
    if not original.endswith("\n"):
        original += "\n"
    calls = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & top - {name}
    paragraph = (doc or "").strip().split("\n\n")[0]
    summary = " ".join(paragraph.split())
    if len(summary) > _MAX_SUMMARY:
        summary = summary[: _MAX_SUMMARY - 3].rstrip() + "..."
    return Stub(file, name, start, end, original, stub, frozenset(calls), summary)


def apply_stubs(source: str, stubs: Sequence[Stub]) -> str:
    """``source`` with every stub (all of one file) in place of its function."""
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    for s in sorted(stubs, key=lambda s: s.line, reverse=True):
        lines[s.line - 1 : s.end_line] = [s.stub]
    return "".join(lines)


def chain_order(stubs: Sequence[Stub]) -> list[Stub]:
    """``stubs`` in milestone order (see the module docstring); ValueError on a call cycle."""
    pending = list(stubs)
    done: list[Stub] = []
    while pending:
        waiting = {(p.file, p.name) for p in pending}
        for s in pending:
            if not {(s.file, c) for c in s.calls} & waiting:
                break
        else:
            names = ", ".join(p.name for p in pending)
            raise ValueError(f"the chosen functions call each other in a cycle: {names}")
        pending.remove(s)
        done.append(s)
    return done
