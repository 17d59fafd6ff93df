"""Check a performance task: its oracle earns full reward, its reference none, and its slower
solution partial credit, each graded the way an agent's submission is."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvharness.env.perf.grading import PerfGrader, PerfGradeResult
from kvharness.env.perf.task import SOLUTION, PerfTask

__all__ = ["PerfCheck", "grade_solution", "verify_perf_task"]


def grade_solution(grader: PerfGrader, source: Path | str) -> PerfGradeResult:
    """Grade ``source`` (a solution file, or its text) as an agent's ``solution.py``."""
    with tempfile.TemporaryDirectory(prefix="kvh-perf-sub-") as tmp:
        repo = Path(tmp)
        if isinstance(source, Path):
            shutil.copyfile(source, repo / SOLUTION)
        else:
            (repo / SOLUTION).write_text(source)
        return grader.grade(repo)


@dataclass(frozen=True, slots=True)
class PerfCheck:
    oracle: PerfGradeResult
    reference: PerfGradeResult
    slower: PerfGradeResult

    @property
    def problems(self) -> list[str]:
        """What is wrong. Where speed was not measured (a Triton task without a GPU), each
        solution must be correct."""
        if not self.oracle.timed:
            return [
                f"the {name} solution was not correct: {g.summary()}"
                for name, g in (
                    ("oracle", self.oracle),
                    ("reference", self.reference),
                    ("slower", self.slower),
                )
                if not g.correct
            ]
        out = []
        if self.oracle.score < 1.0:
            out.append(f"the oracle scored {self.oracle.score:.3f}: {self.oracle.summary()}")
        if self.reference.score != 0.0:
            out.append(f"the unchanged reference scored {self.reference.score:.3f}")
        if not 0.0 < self.slower.score < 1.0:
            out.append(f"the slower solution scored {self.slower.score:.3f}, not partial credit")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_perf_task(task: PerfTask, **grader: Any) -> PerfCheck:
    """Grade the task's oracle, its unchanged reference and its slower solution."""
    g = PerfGrader(task, **grader)
    return PerfCheck(
        oracle=grade_solution(g, task.fix_dir / SOLUTION),
        reference=grade_solution(g, task.repo_dir / SOLUTION),
        slower=grade_solution(g, task.slower_dir / SOLUTION),
    )
