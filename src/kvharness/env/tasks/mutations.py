"""AST mutation operators: enumerate the single-site bugs a module admits and apply one.

A mutation rewrites the source text of exactly one node (an expression, or one ``if`` statement for
``drop_if``), keeping every other byte of the file, so the diff a fix needs is one small hunk.
Only code inside function bodies is mutated: a bug in import-time code would break every test at
once and make a poor task. Each applied mutation is checked by re-parsing: the result must parse to
the intended tree (parentheses are added when the printed node would otherwise bind differently).
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Candidate", "MutationError", "apply", "candidates"]

_CMP_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_ARITH_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv,
}
_BOOL_SWAP: dict[type[ast.boolop], type[ast.boolop]] = {ast.And: ast.Or, ast.Or: ast.And}


class MutationError(ValueError):
    """The mutation cannot be applied faithfully to this source."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One possible mutation: ``operator`` applied at the ``index``-th node of an ast.walk order.

    ``function`` is the qualified name of the enclosing function (``Class.method``), used to pick
    the tests that exercise it; ``line`` is 1-based.
    """

    operator: str
    index: int
    variant: int
    line: int
    function: str

    @property
    def key(self) -> tuple[int, int, str, int]:
        return (self.line, self.index, self.operator, self.variant)


def _functions(tree: ast.Module) -> dict[int, str]:
    """Map id(node) -> qualified name of the innermost enclosing function (``Class.method``)."""
    owner: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str, func: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                visit(child, f"{name}.", name)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", func)
            else:
                if func is not None:
                    owner[id(child)] = func
                visit(child, prefix, func)

    visit(tree, "", None)
    return owner


def _is_docstring(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    parent = parents.get(id(node))
    return isinstance(parent, ast.Expr) and isinstance(node, ast.Constant)


def _is_text(node: ast.AST) -> bool:
    """A string literal or f-string: ``+`` on it is concatenation, a dull mutation target."""
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
    )


def _variants(node: ast.AST) -> Iterator[tuple[str, int]]:
    """(operator, variant) pairs applicable to ``node``."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_SWAP:
        yield "compare", 0
    elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH_SWAP:
        if not any(_is_text(side) for side in (node.left, node.right)):
            yield "arith", 0
    elif isinstance(node, ast.BoolOp):
        yield "boolop", 0
    elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 64:
        yield "off_by_one", 1
        if node.value > 0:
            yield "off_by_one", -1
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield "constant", 0
    elif isinstance(node, ast.Slice):
        if node.lower is not None:
            yield "slice", 0
        if node.upper is not None:
            yield "slice", 1
    elif isinstance(node, ast.If | ast.While) and not isinstance(node.test, ast.Constant):
        if not (isinstance(node.test, ast.Compare) and len(node.test.ops) == 1):
            yield "negate", 0  # a single comparison is negated by the compare operator
        if isinstance(node, ast.If) and not node.orelse:
            yield "drop_if", 0
    elif isinstance(node, ast.Call) and len(node.args) >= 2:
        first, second = node.args[0], node.args[1]
        simple = (ast.Name, ast.Constant, ast.Attribute)
        if (
            isinstance(first, simple)
            and isinstance(second, simple)
            and ast.dump(first) != ast.dump(second)
            and not any(isinstance(a, ast.Starred) for a in node.args[:2])
        ):
            yield "swap_args", 0


def candidates(source: str) -> list[Candidate]:
    """Every mutation site of ``source`` inside a function body, in source order."""
    tree = ast.parse(source)
    owner = _functions(tree)
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    found: list[Candidate] = []
    for index, node in enumerate(ast.walk(tree)):
        func = owner.get(id(node))
        if func is None or _is_docstring(node, parents):
            continue
        if isinstance(node, ast.Constant) and isinstance(parents.get(id(node)), ast.Slice):
            continue  # covered by the slice operator
        for op, variant in _variants(node):
            found.append(Candidate(op, index, variant, getattr(node, "lineno", 0), func))
    found.sort(key=lambda c: c.key)
    return found


def _mutate_node(node: ast.AST, cand: Candidate) -> ast.AST:
    """A mutated copy of ``node`` (an expression), or the replacement statement."""
    new = copy.deepcopy(node)
    op = cand.operator
    if op == "compare" and isinstance(new, ast.Compare):
        new.ops = [_CMP_SWAP[type(new.ops[0])]()]
    elif op == "arith" and isinstance(new, ast.BinOp):
        new.op = _ARITH_SWAP[type(new.op)]()
    elif op == "boolop" and isinstance(new, ast.BoolOp):
        new.op = _BOOL_SWAP[type(new.op)]()
    elif op == "off_by_one" and isinstance(new, ast.Constant) and isinstance(new.value, int):
        new.value = new.value + cand.variant
    elif op == "constant" and isinstance(new, ast.Constant):
        new.value = not new.value
    elif op == "slice" and isinstance(new, ast.Slice):
        if cand.variant == 0 and new.lower is not None:
            new.lower = ast.BinOp(new.lower, ast.Add(), ast.Constant(1))
        elif new.upper is not None:
            new.upper = ast.BinOp(new.upper, ast.Sub(), ast.Constant(1))
    elif op == "negate" and isinstance(new, ast.If | ast.While):
        test = new.test
        is_not = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        new.test = (
            test.operand
            if isinstance(test, ast.UnaryOp) and is_not
            else ast.UnaryOp(ast.Not(), test)
        )
    elif op == "drop_if" and isinstance(new, ast.If):
        return ast.Pass()
    elif op == "swap_args" and isinstance(new, ast.Call):
        new.args[0], new.args[1] = new.args[1], new.args[0]
    else:
        raise MutationError(f"operator {op} does not apply to {type(node).__name__}")
    return new


_SYMBOLS: dict[type[ast.AST], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Div: "/",
    ast.Mod: "%",
    ast.And: "and",
    ast.Or: "or",
}

Edit = tuple[int, int, str]
"""(begin byte, end byte, replacement text) on the encoded source."""


class _Source:
    def __init__(self, source: str) -> None:
        self.raw = source.encode()
        self.starts = [0]
        for i, b in enumerate(self.raw):
            if b == 0x0A:
                self.starts.append(i + 1)

    def begin(self, node: ast.AST) -> int:
        line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
        return self.starts[int(line) - 1] + int(col)

    def end(self, node: ast.AST) -> int:
        end_line, end_col = node.end_lineno, node.end_col_offset  # type: ignore[attr-defined]
        if end_line is None or end_col is None:
            raise MutationError("node without an end position")
        return int(self.starts[end_line - 1] + end_col)

    def text(self, node: ast.AST) -> str:
        return self.raw[self.begin(node) : self.end(node)].decode()

    def swap_symbol(self, left: ast.AST, right: ast.AST, old: str, new: str) -> Edit:
        """Replace operator ``old`` by ``new`` in the text between two operands."""
        begin, end = self.end(left), self.begin(right)
        between = self.raw[begin:end].decode()
        word = old[0].isalpha()
        pattern = rf"(?<![\w]){re.escape(old)}(?![\w])" if word else re.escape(old)
        found = list(re.finditer(pattern, between))
        if len(found) != 1:
            raise MutationError(f"operator {old!r} not found once between operands")
        m = found[0]
        return (begin, end, between[: m.start()] + new + between[m.end() :])

    def apply(self, edits: list[Edit]) -> str:
        raw = self.raw
        for begin, end, text in sorted(edits, reverse=True):
            raw = raw[:begin] + text.encode() + raw[end:]
        return raw.decode()


def _edit_options(src: _Source, node: ast.AST, new: ast.AST, cand: Candidate) -> list[list[Edit]]:
    """Alternative text edits realising the mutation; the first that re-parses right wins."""
    op = cand.operator
    if op == "compare" and isinstance(node, ast.Compare) and isinstance(new, ast.Compare):
        old_s, new_s = _SYMBOLS[type(node.ops[0])], _SYMBOLS[type(new.ops[0])]
        return [[src.swap_symbol(node.left, node.comparators[0], old_s, new_s)]]
    if op == "arith" and isinstance(node, ast.BinOp) and isinstance(new, ast.BinOp):
        old_s, new_s = _SYMBOLS[type(node.op)], _SYMBOLS[type(new.op)]
        return [[src.swap_symbol(node.left, node.right, old_s, new_s)]]
    if op == "boolop" and isinstance(node, ast.BoolOp) and isinstance(new, ast.BoolOp):
        old_s, new_s = _SYMBOLS[type(node.op)], _SYMBOLS[type(new.op)]
        pairs = zip(node.values, node.values[1:], strict=False)
        return [[src.swap_symbol(a, b, old_s, new_s) for a, b in pairs]]
    if op in ("off_by_one", "constant") and isinstance(new, ast.Constant):
        return [[(src.begin(node), src.end(node), repr(new.value))]]
    if op == "slice" and isinstance(node, ast.Slice):
        bound = node.lower if cand.variant == 0 else node.upper
        assert bound is not None
        delta = " + 1" if cand.variant == 0 else " - 1"
        text = src.text(bound)
        return [
            [(src.begin(bound), src.end(bound), text + delta)],
            [(src.begin(bound), src.end(bound), f"({text}){delta}")],
        ]
    if op == "negate" and isinstance(node, ast.If | ast.While):
        span = (src.begin(node.test), src.end(node.test))
        test = node.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):  # `not x` -> `x`
            text = src.text(test.operand)
            return [[(*span, text)], [(*span, f"({text})")]]
        text = src.text(test)
        return [[(*span, f"not {text}")], [(*span, f"not ({text})")]]
    if op == "drop_if" and isinstance(node, ast.If):
        return [[(src.begin(node), src.end(node), "pass")]]
    if op == "swap_args" and isinstance(node, ast.Call):
        a, b = node.args[0], node.args[1]
        return [
            [
                (src.begin(a), src.end(a), src.text(b)),
                (src.begin(b), src.end(b), src.text(a)),
            ]
        ]
    raise MutationError(f"operator {op} does not apply to {type(node).__name__}")


def apply(source: str, cand: Candidate) -> tuple[str, int, int]:
    """Apply ``cand`` to ``source``; return (mutated source, first line, last line), the line
    range of the original source that was rewritten. Raises MutationError."""
    tree = ast.parse(source)
    node = list(ast.walk(tree))[cand.index]
    new = _mutate_node(node, cand)
    expected_tree = copy.deepcopy(tree)
    _replace_in_parent(expected_tree, list(ast.walk(expected_tree))[cand.index], new)
    expected = ast.dump(expected_tree)
    src = _Source(source)
    for edits in _edit_options(src, node, new, cand):
        mutated = src.apply(edits)
        try:
            if ast.dump(ast.parse(mutated)) == expected:
                first = min(src.raw[:b].count(b"\n") for b, _, _ in edits) + 1
                last = max(src.raw[:e].count(b"\n") for _, e, _ in edits) + 1
                return mutated, first, last
        except SyntaxError:
            continue
    raise MutationError(f"cannot write {cand.operator} at line {cand.line} faithfully")


def _replace_in_parent(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is old:
                        value[i] = new
                        return
    raise MutationError("node has no parent")
