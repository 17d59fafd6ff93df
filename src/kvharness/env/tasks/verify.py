"""Check a built suite's invariants by grading each task twice, as an agent's repository would be.

For every task: the unchanged repository (the mutant) must fail every FAIL_TO_PASS test and pass
every PASS_TO_PASS test (so it scores 0), and the repository with the known fix applied must pass
all listed tests (score 1.0). Both runs go through :class:`~kvharness.env.grading.Grader`, so the
hidden tests, the sandbox and the test venv are the ones episodes get.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvharness.env.grading import Grader, GradeResult
from kvharness.env.task import Task

__all__ = ["TaskCheck", "verify_task"]


@dataclass(frozen=True, slots=True)
class TaskCheck:
    """The two gradings of one task and what, if anything, is wrong with them."""

    task_id: str
    mutant: GradeResult
    fixed: GradeResult
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_task(task: Task, *, grader_factory: Callable[[Task], Grader] = Grader) -> TaskCheck:
    """Grade ``task``'s mutant and its known fix; list every invariant that does not hold."""
    grader = grader_factory(task)
    work = Path(tempfile.mkdtemp(prefix=f"kvh-verify-{task.id}-"))
    try:
        repo = task.checkout(work / "repo")
        mutant = grader.grade(repo)
        task.apply_fix(repo)
        fixed = grader.grade(repo)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    problems: list[str] = []
    still = [t for t, o in mutant.fail_to_pass.items() if o == "passed"]
    if still:
        problems.append(f"mutant passes FAIL_TO_PASS {still}")
    if mutant.broken_pass_to_pass:
        problems.append(f"mutant fails PASS_TO_PASS {mutant.broken_pass_to_pass}")
    bad = [t for t, o in {**fixed.fail_to_pass, **fixed.pass_to_pass}.items() if o != "passed"]
    if bad:
        problems.append(f"original fails {bad}")
    if fixed.score != 1.0 or mutant.score != 0.0:
        problems.append(f"scores mutant {mutant.score} / fixed {fixed.score}, want 0 / 1")
    return TaskCheck(task.id, mutant, fixed, tuple(problems))
