"""Fixtures of the env tests: the task venv and a small real suite, built once under .cache/.

``smoke_suite`` is the SMOKE_SUITE (three inflection tasks from the pinned sdist) built by the real
builder; it is reused by later sessions while its definition (hashed into the folder name) is
unchanged, as is the builder's code. ``make_mini_task`` writes a small hand-made task (two bugs, visible and hidden tests)
for grading cases a single real mutation cannot produce, such as a half fix.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import kvharness.env.tasks as tasks_pkg
from kvharness.env.api import EnvConfig
from kvharness.env.grading import Grader
from kvharness.env.harness.demo import make_demo_suite
from kvharness.env.sandbox import Limits, python_env_paths
from kvharness.env.task import Mutation, Task, load_suite, save_task
from kvharness.env.tasks import SMOKE_SUITE, build_suite, ensure_venv
from kvharness.testing.suites import built_once

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"


@pytest.fixture(scope="session")
def env_venv() -> Path:
    """The venv tasks' tests run in (pytest only), created once under .cache/env-venv."""
    return ensure_venv(CACHE / "env-venv", SMOKE_SUITE.test_deps)


@pytest.fixture(scope="session")
def smoke_suite(env_venv: Path) -> list[Task]:
    """SMOKE_SUITE built by the real builder (sdist download, mutants, sandboxed runs)."""
    # Keyed by the definition and the builder's code, so a change to either rebuilds.
    env_dir = Path(tasks_pkg.__file__).parents[1]
    builder_code = sorted(env_dir.glob("tasks/*.py")) + [
        env_dir / name for name in ("sandbox.py", "grading.py", "task.py")
    ]
    key = repr(SMOKE_SUITE).encode() + b"".join(p.read_bytes() for p in builder_code)
    out = built_once(
        CACHE / "env-test", "smoke", key,
        lambda out: build_suite(SMOKE_SUITE, out, venv=env_venv, cache=CACHE / "sdists",
                                progress=False),
    )  # fmt: skip
    return load_suite(out)


MINI_ORIGINAL = textwrap.dedent(
    """\
    def add(a, b):
        return a + b


    def mul(a, b):
        return a * b


    def neg(a):
        return -a
    """
)
MINI_MUTATED = MINI_ORIGINAL.replace("a + b", "a - b").replace("a * b", "a + b")

MINI_TESTS = textwrap.dedent(
    """\
    from mini.ops import add, mul, neg


    def test_add():
        assert add(2, 3) == 5


    def test_mul():
        assert mul(2, 3) == 6


    def test_neg():
        assert neg(4) == -4
    """
)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def make_mini_task(tmp_path: Path) -> Callable[[], Task]:
    """A task with two bugs (add subtracts, mul adds): FAIL_TO_PASS test_add + test_mul,
    PASS_TO_PASS test_neg, all in the hidden tests/test_ops.py; tests/test_visible.py and a
    pyproject.toml stay in the agent's view."""

    def make() -> Task:
        root = tmp_path / "suite" / "mini-01"
        _write(root / "repo" / "mini" / "__init__.py", "")
        _write(root / "repo" / "mini" / "ops.py", MINI_MUTATED)
        _write(root / "repo" / "tests" / "test_visible.py", "def test_visible():\n    pass\n")
        _write(root / "repo" / "pyproject.toml", '[project]\nname = "mini"\nversion = "0"\n')
        _write(root / "hidden" / "tests" / "test_ops.py", MINI_TESTS)
        _write(root / "fix" / "mini" / "ops.py", MINI_ORIGINAL)
        task = Task(
            id="mini-01",
            package="mini",
            package_version="0",
            issue="add and mul give wrong results",
            fail_to_pass=("tests/test_ops.py::test_add", "tests/test_ops.py::test_mul"),
            pass_to_pass=("tests/test_ops.py::test_neg",),
            hidden_files=("tests/test_ops.py",),
            mutation=Mutation("mini/ops.py", 2, 2, "arith", "    return a + b", "    return a - b"),
            root=root,
        )
        save_task(task)
        return task

    return make


@pytest.fixture
def grader_for(env_venv: Path) -> Callable[[Task], Grader]:
    """A Grader using the test venv, with a short timeout."""

    def make(task: Task) -> Grader:
        return Grader(task, python_env=python_env_paths(env_venv), limits=Limits(timeout_s=120))

    return make


@pytest.fixture
def demo_config(env_venv: Path) -> EnvConfig:
    """Budgets for the harness's episodes over the demo tasks, commands in the tasks' venv."""
    return EnvConfig(
        max_steps=20,
        max_submissions=3,
        limits=Limits(timeout_s=60),
        python_env=python_env_paths(env_venv),
    )


@pytest.fixture
def demo_tasks(tmp_path: Path) -> list[Task]:
    """Three tasks of the hand-made demo suite (no registry needed)."""
    return make_demo_suite(tmp_path / "suite", ("add", "clamp", "mean"))
