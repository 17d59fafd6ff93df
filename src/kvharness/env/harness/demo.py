"""A tiny hand-made suite for smoke tests and examples: no package registry needed.

Each task is one small module ``calc/__init__.py`` with one injected bug and a hidden test file,
laid out exactly as the suite builder lays out real tasks (see ``task.py``). Real suites come from
``kvharness env build-suite``; this one exists so the harness, the adapters and their tests can run
anywhere in seconds.
"""

from __future__ import annotations

from pathlib import Path

from kvharness.env.task import Mutation, Task, save_task, write_suite_index

__all__ = ["DEMO_ORIGINAL", "DEMO_TESTS", "make_demo_suite", "make_demo_task"]

DEMO_ORIGINAL = '''\
"""Tiny arithmetic helpers."""


def add(a, b):
    return a + b


def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


def mean(values):
    return sum(values) / len(values)
'''

DEMO_TESTS = """\
from calc import add, clamp, mean


def test_add():
    assert add(2, 3) == 5


def test_add_zero():
    assert add(0, 0) == 0


def test_clamp_high():
    assert clamp(5, 0, 3) == 3


def test_clamp_low():
    assert clamp(-1, 0, 3) == 0


def test_mean():
    assert mean([1, 2]) == 1.5
"""

_T = "tests/test_calc.py::"
# name: (original line, mutated line, issue, FAIL_TO_PASS)
_BUGS = {
    "add": (
        "    return a + b",
        "    return a - b",
        "add(2, 3) returns -1; it should return 5.",
        ("test_add",),
    ),
    "clamp": (
        "    if x > high:",
        "    if x < high:",
        "clamp(5, 0, 3) returns 5 instead of 3: values above the upper bound are not clamped.",
        ("test_clamp_high",),
    ),
    "mean": (
        "    return sum(values) / len(values)",
        "    return sum(values) // len(values)",
        "mean([1, 2]) returns 1 instead of 1.5.",
        ("test_mean",),
    ),
}
_ALL = ("test_add", "test_add_zero", "test_clamp_high", "test_clamp_low", "test_mean")


def make_demo_task(root: Path, bug: str = "add", task_id: str | None = None) -> Task:
    """Write one demo task (``bug``: ``add``, ``clamp`` or ``mean``) under ``root`` and return it."""
    original, mutated, issue, f2p = _BUGS[bug]
    task_id = task_id or f"demo-{bug}"
    folder = root / task_id
    (folder / "repo" / "calc").mkdir(parents=True)
    (folder / "repo" / "calc" / "__init__.py").write_text(DEMO_ORIGINAL.replace(original, mutated))
    (folder / "repo" / "README.md").write_text("calc: tiny arithmetic helpers\n")
    (folder / "hidden" / "tests").mkdir(parents=True)
    (folder / "hidden" / "tests" / "test_calc.py").write_text(DEMO_TESTS)
    (folder / "fix" / "calc").mkdir(parents=True)
    (folder / "fix" / "calc" / "__init__.py").write_text(DEMO_ORIGINAL)
    line = DEMO_ORIGINAL.splitlines().index(original) + 1
    task = Task(
        id=task_id,
        package="calc",
        package_version="0",
        issue=issue,
        fail_to_pass=tuple(_T + t for t in f2p),
        pass_to_pass=tuple(_T + t for t in _ALL if t not in f2p),
        hidden_files=("tests/test_calc.py",),
        mutation=Mutation("calc/__init__.py", line, line, "demo", original, mutated),
        root=folder,
    )
    save_task(task)
    return task


def make_demo_suite(root: Path, bugs: tuple[str, ...] = ("add", "clamp")) -> list[Task]:
    """A demo suite folder at ``root`` (``suite.json`` plus one folder per bug)."""
    root.mkdir(parents=True, exist_ok=True)
    tasks = [make_demo_task(root, bug) for bug in bugs]
    write_suite_index(root, [t.id for t in tasks], {"kind": "demo"})
    return tasks
