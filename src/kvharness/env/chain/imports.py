"""What a milestone's tests can read: the static import closure of its test files in a tree.

**Rule.** Starting from the milestone's test files (and every ``conftest.py`` pytest loads for
them and every ``__init__.py`` it imports them through: those in the test file's folder and each
folder above it, up to the tree's root), each
Python file of the tree is parsed with ``ast`` and every ``import a.b.c`` / ``from a.b import c``
anywhere in it (also inside functions and ``try`` blocks) is resolved against the task's import
roots (``python_path``): ``a/__init__.py``, ``a/b/__init__.py`` and ``a/b/c.py`` (or
``a/b/c/__init__.py``) join the closure, as do ``a/b/c.py`` for ``from a.b import c`` when it is
a module; relative imports are resolved against the importing file's package. Names that resolve
to no file of the tree (the standard library, installed packages) are left out: they lie in the
read-only task environment, which does not change within an episode. The closure is followed to
a fixed point. Its :func:`content_key` hashes the path and bytes of every file in it, plus every
non-Python file under the package directories (data a module may read at run time).

**Limit.** Only literal import statements are seen: a module reached by a computed name
(``importlib.import_module(name)``, ``__import__``, ``exec`` of a string, a plugin entry point)
is not in the closure, so a change to such a module alone would not invalidate the milestone's
cached result. The grader's scan rejects such import machinery in the agent's own change; code of
the pristine package that imports dynamically is the remaining gap. A package whose
``__init__.py`` imports all its submodules (toolz, boltons' ``__init__`` does not) makes the
closure the whole package, so there the cache pays only for submissions that leave the package's
code unchanged.
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["content_key", "import_closure"]


def _module_file(tree: Path, roots: Sequence[str], dotted: str) -> str | None:
    """Repo-relative path of the module or package ``dotted`` under one of ``roots``."""
    parts = dotted.split(".")
    for root in roots:
        base = tree / root if root != "." else tree
        for cand in (
            base.joinpath(*parts).with_suffix(".py"),
            base.joinpath(*parts, "__init__.py"),
        ):
            if cand.is_file() and not cand.is_symlink():
                return os.path.relpath(cand, tree)
    return None


def _package_of(rel: str, roots: Sequence[str]) -> list[str] | None:
    """The dotted package (as parts) a repo-relative file belongs to, for relative imports."""
    for root in sorted(roots, key=len, reverse=True):
        prefix = "" if root == "." else root.rstrip("/") + "/"
        if rel.startswith(prefix):
            parts = rel[len(prefix) :].removesuffix(".py").split("/")
            return parts[:-1]
    return None


def _imported(tree: Path, rel: str, roots: Sequence[str]) -> set[str]:
    """Files of ``tree`` that the file ``rel`` imports (with every package on the way)."""
    try:
        module = ast.parse((tree / rel).read_bytes())
    except (SyntaxError, ValueError, OSError):
        return set()
    names: list[str] = []
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(rel, roots)
                if package is None or node.level - 1 > len(package):
                    continue
                kept = package[: len(package) - (node.level - 1)]
                base = ".".join([*kept, *([base] if base else [])])
            if base:
                names.append(base)
            names += [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
    found: set[str] = set()
    for dotted in names:
        parts = dotted.split(".")
        for i in range(1, len(parts) + 1):
            path = _module_file(tree, roots, ".".join(parts[:i]))
            if path is not None:
                found.add(path)
    return found


def _conftests(tree: Path, rel: str) -> set[str]:
    """The ``conftest.py`` and ``__init__.py`` files of ``rel``'s folder and those above it."""
    out: set[str] = set()
    folder = Path(rel).parent
    while True:
        for name in ("conftest.py", "__init__.py"):
            if (tree / folder / name).is_file():
                out.add((folder / name).as_posix())
        if folder == Path("."):
            return out
        folder = folder.parent


def import_closure(tree: Path, test_files: Iterable[str], roots: Sequence[str]) -> frozenset[str]:
    """Repo-relative paths of the Python files of ``tree`` that ``test_files`` (repo-relative)
    import, directly or not, with the test files and their conftest files (see the module
    docstring). ``roots``: the task's import roots."""
    roots = [os.path.normpath(r) for r in roots]
    todo = [os.path.normpath(f) for f in test_files]
    for f in list(todo):
        todo += sorted(_conftests(tree, f))
    seen: set[str] = set()
    while todo:
        rel = todo.pop()
        if rel in seen or not (tree / rel).is_file():
            continue
        seen.add(rel)
        todo += sorted(_imported(tree, rel, roots) - seen)
    return frozenset(seen)


def content_key(
    tree: Path, files: Iterable[str], packages: Sequence[str], salt: Iterable[str] = ()
) -> str:
    """A sha256 over ``salt`` (e.g. the node ids run), the path and bytes of each of ``files``,
    and every non-Python file under the ``packages`` folders of ``tree``."""
    data = set(files)
    for package in packages:
        base = tree / package
        if base.is_dir():
            data |= {
                p.relative_to(tree).as_posix()
                for p in base.rglob("*")
                if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts
            }
    digest = hashlib.sha256()
    for item in salt:
        digest.update(b"T" + item.encode() + b"\0")
    for rel in sorted(data):
        path = tree / rel
        body = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        digest.update(b"F" + rel.encode() + b"\0" + len(body).to_bytes(8, "big") + body)
    return digest.hexdigest()
