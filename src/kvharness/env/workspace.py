"""What grading takes from an agent's repository: its change to the package's text source files.

The agent's repository is read as data, never trusted and never followed: it is walked with
``lstat`` (a symbolic link is recorded as a link, never read through), and a file is read only when
it is a regular file, opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat``.

**The package's source files** of a task are the repo-relative paths that

* lie under the *package directory*: the top-level package that holds the mutated file, under its
  ``python_path`` root (``inflection/`` for ``inflection/__init__.py``; for a top-level module
  ``six.py``, that file alone);
* are not test code (a ``test_*.py`` / ``*_test.py`` / ``conftest.py`` file, anything under a
  ``tests`` / ``test`` / ``testing`` folder), packaging metadata (anything under ``*.egg-info`` /
  ``*.dist-info``), interpreter start-up hooks (``*.pth``, ``sitecustomize``, ``usercustomize``) or
  bytecode (anything under ``__pycache__``, ``*.pyc`` / ``*.pyo``);
* are, in the agent's repository, regular files of UTF-8 text (no NUL byte) of at most
  :data:`MAX_SOURCE_BYTES` each.

:func:`stage` builds a grading tree from the task's pristine repository with exactly the agent's
change to those files applied (added, edited, deleted); nothing else the agent wrote reaches it.
Everything else the agent changed is dropped, and labelled *tampered* (with the reason) when it is
something the test process would have taken had it been carried: test files, ``conftest.py``,
pytest configuration, packaging metadata, ``.pth`` files, ``sitecustomize`` / ``usercustomize``,
bytecode or native modules, a file named like the grader's report, a new top-level module that
shadows an installed or standard one, and any symbolic link. Other files (a ``reproduce.py`` at the
root, notes, build output) are simply not graded.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from kvharness.env.task import Task, safe_destination

__all__ = [
    "MAX_ENTRIES",
    "MAX_SOURCE_BYTES",
    "REPORT_NAME",
    "Change",
    "Staged",
    "WorkspaceTooLarge",
    "installed_top_level",
    "package_dirs",
    "protected_reason",
    "read_regular",
    "stage",
]

MAX_SOURCE_BYTES = 1 << 20
"""A larger file under the package directory is not source: it is dropped (and not graded)."""

MAX_ENTRIES = 100_000
"""Files, folders and links a repository may hold for grading (a bound on the host's walk)."""

REPORT_NAME = ".kvh-junit.xml"
"""Where the old design wrote its junit report; a file of this name is reported as tampering."""

_TEST_DIRS = frozenset({"tests", "test", "testing"})
_CONFIG_FILES = frozenset(
    {
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
    }
)
_STARTUP_HOOKS = frozenset({"sitecustomize", "usercustomize"})
_COMPILED = (".pyc", ".pyo", ".so", ".pyd")
_SKIP_DIRS = frozenset({".git"})


class WorkspaceTooLarge(OSError):
    """The repository holds more entries than :data:`MAX_ENTRIES`; it is not graded."""


@dataclass(frozen=True, slots=True)
class _Entry:
    kind: str  # "file", "link", "dir" or "other"
    size: int
    target: str = ""  # a link's target text


@dataclass(frozen=True, slots=True)
class Change:
    """One carried source file: ``before`` is the pristine text (None: the agent added it),
    ``after`` the agent's (None: the agent deleted it). Bytes, as read."""

    path: str
    before: bytes | None
    after: bytes | None


@dataclass(frozen=True, slots=True)
class Staged:
    """A grading tree and what went into it: ``changes`` carried, ``tampered`` one
    ``"PATH: reason"`` line per dropped change that the test process would have taken."""

    tree: Path
    changes: tuple[Change, ...]
    tampered: tuple[str, ...]


def _open_regular(path: Path) -> BinaryIO | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        return None
    return f


def read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (a link is never followed; a FIFO never
    blocks) of at most ``limit`` bytes, else None."""
    f = _open_regular(path)
    if f is None:
        return None
    with f:
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def _same_bytes(a: Path, b: Path) -> bool:
    fa, fb = _open_regular(a), _open_regular(b)
    try:
        if fa is None or fb is None:
            return False
        while True:
            x, y = fa.read(1 << 16), fb.read(1 << 16)
            if x != y:
                return False
            if not x:
                return True
    finally:
        for f in (fa, fb):
            if f is not None:
                f.close()


def _walk(root: Path) -> dict[str, _Entry]:
    """Every entry under ``root`` by repo-relative POSIX path, without following links."""
    out: dict[str, _Entry] = {}
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(root / rel_dir if rel_dir else root) as it:
            for entry in it:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                if len(out) >= MAX_ENTRIES:
                    raise WorkspaceTooLarge(f"the repository holds more than {MAX_ENTRIES} entries")
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    out[rel] = _Entry("link", 0, os.readlink(entry.path))
                elif stat.S_ISDIR(info.st_mode):
                    out[rel] = _Entry("dir", 0)
                    if entry.name not in _SKIP_DIRS:
                        stack.append(rel)
                elif stat.S_ISREG(info.st_mode):
                    out[rel] = _Entry("file", info.st_size)
                else:
                    out[rel] = _Entry("other", 0)
    return out


def package_dirs(task: Task) -> tuple[str, ...]:
    """The task's package directories (or single top-level module), repo-relative."""
    mutated = os.path.normpath(task.mutation.file)
    for root in sorted((os.path.normpath(p) for p in task.python_path), key=len, reverse=True):
        prefix = "" if root == "." else root + "/"
        if mutated.startswith(prefix):
            return (prefix + mutated[len(prefix) :].split("/")[0],)
    return (mutated.split("/")[0],)


def _in_package(rel: str, packages: Sequence[str]) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in packages)


def protected_reason(rel: str) -> str | None:
    """Why a change at ``rel`` would reach the test process if it were carried (None: it would
    not, or only as package source)."""
    path = PurePosixPath(rel)
    name, parts = path.name, path.parts
    if any(p.endswith((".egg-info", ".dist-info")) for p in parts):
        return "packaging metadata (can register pytest plugins)"
    if name == "conftest.py":
        return "conftest.py (loaded by pytest)"
    if name.startswith("test_") or name.endswith("_test.py") or _TEST_DIRS & set(parts[:-1]):
        return "test file"
    if name in _CONFIG_FILES:
        return "pytest configuration"
    if name.endswith(".pth"):
        return "path configuration file (.pth, run at start-up)"
    if name.split(".")[0] in _STARTUP_HOOKS or _STARTUP_HOOKS & set(parts[:-1]):
        return "interpreter start-up hook"
    if name == REPORT_NAME:
        return "named like the grader's test report"
    if "__pycache__" in parts or name.endswith(_COMPILED):
        return "bytecode or native code"
    return None


def installed_top_level(python_env: Iterable[Path]) -> frozenset[str]:
    """Top-level module names a new module in an import root would shadow: the standard
    library's and those installed in the tasks' environment."""
    names = set(sys.stdlib_module_names) | _STARTUP_HOOKS | {"conftest"}
    for base in python_env:
        for site in base.glob("lib/python3*/site-packages"):
            for entry in site.iterdir():
                names.add(entry.name.split(".")[0].split("-")[0])
    return frozenset(names)


def _shadows(rel: str, roots: Sequence[str], shadowed: frozenset[str]) -> bool:
    for root in roots:
        prefix = "" if root == "." else root + "/"
        if not rel.startswith(prefix):
            continue
        sub = rel[len(prefix) :].split("/")
        if sub[0].removesuffix(".py") in shadowed and (sub[0].endswith(".py") or len(sub) > 1):
            return True
    return False


def _text(data: bytes | None) -> bool:
    if data is None or b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _label(rel: str, added: bool, roots: Sequence[str], shadowed: frozenset[str]) -> str | None:
    reason = protected_reason(rel)
    if reason is not None:
        return f"{rel}: {reason} changed (not graded)"
    if added and _shadows(rel, roots, shadowed):
        return f"{rel}: new module shadows an installed or standard module (not graded)"
    return None


def _content(root: Path, rel: str, entry: _Entry | None) -> bytes | None:
    if entry is None or entry.kind != "file" or entry.size > MAX_SOURCE_BYTES:
        return None
    return read_regular(root / rel, MAX_SOURCE_BYTES)


def _same(root_a: Path, root_b: Path, rel: str, a: _Entry | None, b: _Entry | None) -> bool:
    if a is None or b is None:
        return a is b
    if (a.kind, a.size, a.target) != (b.kind, b.size, b.target):
        return False
    return a.kind != "file" or _same_bytes(root_a / rel, root_b / rel)


def stage(task: Task, repo: Path, dest: Path, *, shadowed: frozenset[str]) -> Staged:
    """Build at ``dest`` (must not exist) the task's pristine repository with the agent's change to
    the package's source files (``repo``, only read) applied and the hidden tests laid over it."""
    pristine, agent = _walk(task.repo_dir), _walk(repo)
    packages = package_dirs(task)
    roots = [os.path.normpath(p) for p in task.python_path]
    shutil.copytree(task.repo_dir, dest, symlinks=True)
    changes: list[Change] = []
    tampered: list[str] = []
    for rel in sorted(set(pristine) | set(agent)):
        mine, theirs = pristine.get(rel), agent.get(rel)
        if _same(task.repo_dir, repo, rel, mine, theirs):
            continue
        if theirs is not None and theirs.kind == "link":
            tampered.append(f"{rel}: symbolic link (never followed, not graded)")
            continue
        kinds = {e.kind for e in (mine, theirs) if e is not None}
        if "dir" in kinds and "file" not in kinds:
            continue  # a folder added or removed: its files are judged one by one
        before, after = _content(task.repo_dir, rel, mine), _content(repo, rel, theirs)
        source = _in_package(rel, packages) and protected_reason(rel) is None
        gone = theirs is None or theirs.kind == "dir"
        if source and (_text(after) or gone) and before != after:
            changes.append(Change(rel, before if _text(before) else None, after))
            target = safe_destination(dest, rel)
            if after is not None:
                target.write_bytes(after)
            continue
        label = _label(rel, mine is None, roots, shadowed)
        if label is not None:
            tampered.append(label)
    for rel in task.hidden_files:
        shutil.copyfile(task.hidden_dir / rel, safe_destination(dest, rel))
    return Staged(dest, tuple(changes), tuple(tampered))
