"""Grader: partial credit, PASS_TO_PASS breakage, tampering, hidden tests restored — real pytest
runs in the real bubblewrap sandbox, on a hand-made task and on tasks built from a real sdist."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

import kvharness.env.sandbox as sandbox_mod
from kvharness.env.grading import Grader, GradeResult, junit_key
from kvharness.env.sandbox import SandboxUnavailable, python_env_paths
from kvharness.env.task import Task

GraderFor = Callable[[Task], Grader]


def _ops(repo: Path) -> Path:
    return repo / "mini" / "ops.py"


def _paths(result: GradeResult) -> tuple[str, ...]:
    """The file each tamper finding names (its text up to the first colon)."""
    return tuple(t.split(":")[0] for t in result.tampered)


def test_junit_key_matches_pytest_naming() -> None:
    assert junit_key("tests/test_x.py::TestA::test_b[1-a.b]") == (
        "tests.test_x.TestA",
        "test_b[1-a.b]",
    )
    assert junit_key("test_top.py::test_f") == ("test_top", "test_f")


def test_unchanged_mutant_scores_zero_fix_scores_one(
    make_mini_task: Callable[[], Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    task = make_mini_task()
    grader = grader_for(task)
    repo = task.checkout(tmp_path / "episode")
    result = grader.grade(repo)
    assert result.score == 0.0
    assert result.fail_to_pass == {t: "failed" for t in task.fail_to_pass}
    assert result.pass_to_pass == {"tests/test_ops.py::test_neg": "passed"}
    assert not result.tampered and not result.timed_out and result.duration_s > 0
    task.apply_fix(repo)
    fixed = grader.grade(repo)
    assert fixed.score == 1.0 and fixed.passed_fail_to_pass == 2
    assert "2/2 target tests pass" in fixed.summary()
    # Grading never touches the agent's repository: the hidden tests are not left in it.
    assert not (repo / "tests" / "test_ops.py").exists()


def test_half_fix_scores_half_and_breaking_pass_to_pass_scores_zero(
    make_mini_task: Callable[[], Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    task = make_mini_task()
    grader = grader_for(task)
    repo = task.checkout(tmp_path / "episode")
    ops = _ops(repo)
    ops.write_text(ops.read_text().replace("a - b", "a + b", 1))  # fix add only
    half = grader.grade(repo)
    assert half.score == 0.5
    assert half.fail_to_pass == {
        "tests/test_ops.py::test_add": "passed",
        "tests/test_ops.py::test_mul": "failed",
    }
    original = (task.fix_dir / "mini" / "ops.py").read_text()
    ops.write_text(original.replace("return -a", "return a"))  # fixes both, breaks neg
    broken = grader.grade(repo)
    assert broken.passed_fail_to_pass == 2 and broken.score == 0.0
    assert broken.broken_pass_to_pass == ["tests/test_ops.py::test_neg"]
    assert "previously passing" in broken.summary()


def test_adding_or_editing_test_files_scores_zero_even_with_the_fix(
    make_mini_task: Callable[[], Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    task = make_mini_task()
    grader = grader_for(task)
    repo = task.checkout(tmp_path / "episode")
    task.apply_fix(repo)
    # Writing the hidden test file's path with trivial tests: graded against the real ones,
    # and zeroed for touching a test file.
    (repo / "tests" / "test_ops.py").write_text("def test_add():\n    pass\n")
    result = grader.grade(repo)
    assert _paths(result) == ("tests/test_ops.py",)
    assert result.score == 0.0 and result.passed_fail_to_pass == 2
    assert "rejected as tampered: tests/test_ops.py: test file" in result.summary()


@pytest.mark.parametrize(
    ("path", "content"),
    [
        # A conftest hook that turns every failure into a pass.
        (
            "conftest.py",
            "import pytest\n@pytest.hookimpl(hookwrapper=True)\n"
            "def pytest_runtest_makereport(item, call):\n"
            "    out = yield\n    rep = out.get_result()\n    rep.outcome = 'passed'\n",
        ),
        # pytest configuration that deselects nothing but rewrites options.
        ("pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-p no:python'\n"),
        # A module shadowing pytest itself (python -m pytest runs from the repo root).
        ("pytest.py", "import sys\nsys.exit(0)\n"),
        # Deleting a visible test file.
        ("tests/test_visible.py", None),
    ],
)
def test_cheating_on_the_mutant_scores_zero(
    make_mini_task: Callable[[], Task],
    grader_for: GraderFor,
    tmp_path: Path,
    path: str,
    content: str | None,
) -> None:
    task = make_mini_task()
    repo = task.checkout(tmp_path / "episode")
    target = repo / path
    if content is None:
        target.unlink()
    else:
        target.write_text(content)
    result = grader_for(task).grade(repo)
    assert _paths(result) == (path,)
    assert result.score == 0.0
    # The originals are back for the run: the conftest / config / shadow had no effect.
    assert result.fail_to_pass == {t: "failed" for t in task.fail_to_pass}


def test_library_edits_and_scratch_files_are_not_tampering(
    make_mini_task: Callable[[], Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    task = make_mini_task()
    repo = task.checkout(tmp_path / "episode")
    task.apply_fix(repo)
    (repo / "repro.py").write_text("print(1)\n")
    clean = grader_for(task).grade(repo)
    assert clean.tampered == () and clean.score == 1.0
    (repo / "pytest.py").write_text("")
    (repo / "mini" / "test_extra.py").write_text("")
    flagged = grader_for(task).grade(repo)
    assert _paths(flagged) == ("mini/test_extra.py", "pytest.py") and flagged.score == 0.0


def test_tests_that_do_not_report_count_as_failed(
    make_mini_task: Callable[[], Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    """An id that reports nothing is not a pass. Here it does not exist, and pytest then runs
    nothing at all ("not found"), so even the fixed repository scores 0."""
    task = make_mini_task()
    ghost = dataclasses.replace(
        task, fail_to_pass=(*task.fail_to_pass, "tests/test_ops.py::test_ghost")
    )
    repo = ghost.checkout(tmp_path / "episode")
    ghost.apply_fix(repo)
    result = grader_for(ghost).grade(repo)
    assert set(result.fail_to_pass.values()) == {"missing"}
    assert result.score == 0.0
    assert "not found" in result.log_tail


def test_async_grading_of_concurrent_episodes(
    make_mini_task: Callable[[], Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    task = make_mini_task()
    grader = grader_for(task)
    repos = [task.checkout(tmp_path / f"ep{i}") for i in range(3)]
    task.apply_fix(repos[1])
    _ops(repos[2]).write_text(_ops(repos[2]).read_text().replace("a - b", "a + b", 1))

    async def main() -> list[float]:
        results = await asyncio.gather(*(grader.agrade(r) for r in repos))
        return [r.score for r in results]

    assert asyncio.run(main()) == [0.0, 1.0, 0.5]


def test_real_tasks_mutant_zero_fix_one_tampered_zero(
    smoke_suite: list[Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    task = smoke_suite[0]
    grader = grader_for(task)
    repo = task.checkout(tmp_path / "episode")
    assert grader.grade(repo).score == 0.0
    task.apply_fix(repo)
    assert grader.grade(repo).score == 1.0
    hidden = task.hidden_files[0]
    (repo / hidden).write_text("")  # an emptied copy of the hidden test file
    result = grader.grade(repo)
    assert result.score == 0.0 and _paths(result) == (hidden,)


def test_without_bwrap_grading_refuses_unless_unsafe(
    make_mini_task: Callable[[], Task],
    env_venv: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_which = sandbox_mod.shutil.which
    monkeypatch.setattr(
        sandbox_mod.shutil, "which", lambda name: None if name == "bwrap" else real_which(name)
    )
    task = make_mini_task()
    repo = task.checkout(tmp_path / "episode")
    task.apply_fix(repo)
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        Grader(task, python_env=python_env_paths(env_venv)).grade(repo)
    unsafe = Grader(task, python_env=python_env_paths(env_venv), unsafe=True)
    assert unsafe.grade(repo).score == 1.0


def test_planted_symlinks_do_not_make_grading_or_the_fix_write_outside(
    make_mini_task: Callable[[], Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    """As root on the host, grading and the oracle's fix write into the agent's tree: symlinks the
    agent planted there must not redirect those writes to host files."""
    task = make_mini_task()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.py").write_text("keep me\n")
    repo = task.checkout(tmp_path / "episode")
    (repo / "tests").rename(tmp_path / "visible-tests")
    (repo / "tests").symlink_to(outside)  # hidden tests would be written through this
    ops = repo / "mini" / "ops.py"
    ops.unlink()
    ops.symlink_to(outside / "precious.py")  # the fix would be written through this
    task.apply_fix(repo)
    assert (outside / "precious.py").read_text() == "keep me\n"
    assert not ops.is_symlink() and "a + b" in ops.read_text()
    result = grader_for(task).grade(repo)
    assert sorted(p.name for p in outside.iterdir()) == ["precious.py"]
    assert _paths(result) == ("tests", "tests/test_visible.py") and result.score == 0.0
    assert "symbolic link" in result.tampered[0]
    assert result.passed_fail_to_pass == 2  # the hidden tests did run, in the copy
