"""What grading takes from an agent's repository: only its change to the package's source files.

Real files on disk, built from the hand-made mini task (package ``mini``, hidden tests/test_ops.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import kvharness.env.workspace as workspace
from kvharness.env.sandbox import python_env_paths
from kvharness.env.task import Task
from kvharness.env.workspace import Staged, installed_top_level, package_dirs, stage

_SHADOWED: list[frozenset[str]] = []


@pytest.fixture(autouse=True)
def _shadowed(env_venv: Path) -> None:
    """Module names of the tasks' venv (pytest among them) and the standard library."""
    _SHADOWED[:] = [installed_top_level(python_env_paths(env_venv))]


def _stage(task: Task, repo: Path, tmp_path: Path) -> Staged:
    return stage(task, repo, tmp_path / "graded", shadowed=_SHADOWED[0])


def _named(staged: Staged) -> list[str]:
    return [t.split(":")[0] for t in staged.tampered]


@pytest.fixture
def task(make_mini_task: Callable[[], Task]) -> Task:
    return make_mini_task()


def test_package_dir_is_the_top_level_package_of_the_mutated_file(task: Task) -> None:
    assert package_dirs(task) == ("mini",)


def test_only_the_package_source_change_is_carried(task: Task, tmp_path: Path) -> None:
    repo = task.checkout(tmp_path / "episode")
    task.apply_fix(repo)
    (repo / "mini" / "helpers.py").write_text("X = 1\n")
    (repo / "mini" / "__init__.py").unlink()
    (repo / "repro.py").write_text("import mini\n")
    (repo / "notes.md").write_text("the bug is in ops\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text("junk\n")
    staged = _stage(task, repo, tmp_path)
    assert [c.path for c in staged.changes] == [
        "mini/__init__.py",
        "mini/helpers.py",
        "mini/ops.py",
    ]
    assert staged.tampered == ()  # scratch files are not tampering, just not graded
    tree = staged.tree
    assert (tree / "mini" / "ops.py").read_text() == (task.fix_dir / "mini" / "ops.py").read_text()
    assert (tree / "mini" / "helpers.py").read_text() == "X = 1\n"
    assert not (tree / "mini" / "__init__.py").exists()
    assert not (tree / "repro.py").exists() and not (tree / "notes.md").exists()
    assert not (tree / "build").exists()
    # The hidden tests are there, and the agent's repository was only read.
    assert (tree / "tests" / "test_ops.py").read_text() == (
        task.hidden_dir / "tests" / "test_ops.py"
    ).read_text()
    assert (repo / "repro.py").exists() and not (repo / "tests" / "test_ops.py").exists()


def test_unchanged_repository_carries_nothing(task: Task, tmp_path: Path) -> None:
    staged = _stage(task, task.checkout(tmp_path / "episode"), tmp_path)
    assert staged.changes == () and staged.tampered == ()


@pytest.mark.parametrize(
    ("path", "content", "reason"),
    [
        ("tests/test_ops.py", "def test_add():\n    pass\n", "test file"),
        ("mini/test_extra.py", "def test_x():\n    pass\n", "test file"),
        ("conftest.py", "import pytest\n", "conftest.py"),
        ("mini/conftest.py", "import pytest\n", "conftest.py"),
        ("pytest.ini", "[pytest]\naddopts = -p forge\n", "pytest configuration"),
        (
            "mini.egg-info/entry_points.txt",
            "[pytest11]\nforge = mini.forge\n",
            "packaging metadata",
        ),
        ("forge-1.0.dist-info/METADATA", "Name: forge\n", "packaging metadata"),
        ("mini/forge-1.0.dist-info/entry_points.txt", "[pytest11]\n", "packaging metadata"),
        ("forge.pth", "import forge\n", ".pth"),
        ("sitecustomize.py", "import forge\n", "start-up hook"),
        ("mini/usercustomize.py", "import forge\n", "start-up hook"),
        (".kvh-junit.xml", "<testsuites/>", "report"),
        ("mini/__pycache__/ops.cpython-311.pyc", "\0\0\0", "bytecode"),
        ("mini/_speedups.so", "\0ELF", "bytecode or native code"),
        ("pytest.py", "import sys\n", "shadows"),
    ],
)
def test_files_the_test_process_would_take_are_dropped_and_labelled(
    task: Task, tmp_path: Path, path: str, content: str, reason: str
) -> None:
    repo = task.checkout(tmp_path / "episode")
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(content)
    staged = _stage(task, repo, tmp_path)
    assert _named(staged) == [path]
    assert reason in staged.tampered[0]
    assert staged.changes == ()
    graded = staged.tree / path
    hidden = task.hidden_dir / path
    assert graded.read_text() == hidden.read_text() if hidden.exists() else not graded.exists()


def test_deleting_a_visible_test_is_labelled_and_the_original_stays(
    task: Task, tmp_path: Path
) -> None:
    repo = task.checkout(tmp_path / "episode")
    (repo / "tests" / "test_visible.py").unlink()
    staged = _stage(task, repo, tmp_path)
    assert _named(staged) == ["tests/test_visible.py"]
    assert (staged.tree / "tests" / "test_visible.py").exists()


def test_links_are_never_followed(task: Task, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    fixed = outside / "ops.py"
    fixed.write_text((task.fix_dir / "mini" / "ops.py").read_text())
    secret = outside / "secret.py"
    secret.write_text("TOKEN = 'host secret'\n")
    repo = task.checkout(tmp_path / "episode")
    ops = repo / "mini" / "ops.py"
    ops.unlink()
    ops.symlink_to(fixed)  # the fix, through a link
    (repo / "mini" / "leak.py").symlink_to(secret)  # a host file, through a link
    (repo / "mini" / "etc").symlink_to("/etc")  # a folder link: never walked
    (repo / ".kvh-junit.xml").symlink_to("/proc/self/fd/0")  # would block a reader
    staged = _stage(task, repo, tmp_path)
    assert _named(staged) == [".kvh-junit.xml", "mini/etc", "mini/leak.py", "mini/ops.py"]
    assert all("symbolic link" in t for t in staged.tampered)
    tree = staged.tree
    assert (tree / "mini" / "ops.py").read_text() == (task.repo_dir / "mini" / "ops.py").read_text()
    assert not (tree / "mini" / "leak.py").exists() and not (tree / "mini" / "etc").exists()
    assert "host secret" not in "".join(p.read_text() for p in tree.rglob("*.py"))


def test_fifo_binary_and_oversized_package_files_are_not_read(task: Task, tmp_path: Path) -> None:
    repo = task.checkout(tmp_path / "episode")
    os.mkfifo(repo / "mini" / "pipe.py")
    (repo / "mini" / "data.bin").write_bytes(b"\x00\x01\x02")
    (repo / "mini" / "huge.py").write_text("x = 1\n" * (workspace.MAX_SOURCE_BYTES // 4))
    done = threading.Event()
    result: list[Staged] = []

    def run() -> None:
        result.append(_stage(task, repo, tmp_path))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(60), "staging blocked on the FIFO"
    staged = result[0]
    assert staged.changes == () and staged.tampered == ()
    for name in ("pipe.py", "data.bin", "huge.py"):
        assert not (staged.tree / "mini" / name).exists()


def test_a_repository_with_too_many_entries_is_refused(
    task: Task, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace, "MAX_ENTRIES", 50)
    repo = task.checkout(tmp_path / "episode")
    for i in range(60):
        (repo / f"f{i}.txt").write_text("")
    with pytest.raises(workspace.WorkspaceTooLarge, match="more than 50 entries"):
        _stage(task, repo, tmp_path)
