"""Grade a chain task: milestones scored as a prefix, results cached by what the tests import.

:class:`ChainGrader` is a :class:`~kvharness.env.grading.Grader`: staging (only the agent's change
to the package's source files is carried), the scan of that change and the random canary tests
are the base grader's, unchanged. What differs:

* **score** = ``j / K`` where ``m1..mj`` is the longest prefix of milestones whose tests all
  pass, and 0 if any PASS_TO_PASS test does not pass or anything is tampered. A milestone that
  passes after a failing one counts for nothing, so under the ``best`` reward rule a milestone
  pays when first reached on top of all earlier ones, and a submission that passes ``m3`` by
  breaking ``m1`` scores less than the one before it and earns nothing;
* **cache**: each milestone (and the PASS_TO_PASS tests of each test file) has a key, the
  :func:`~kvharness.env.chain.imports.content_key` of the static import closure of its test
  files in the staged tree (rule and limit in ``imports.py``). A grading runs only the groups
  whose key has no result from an earlier grading by this grader (one grader per episode: the
  environment makes a fresh one at every reset); the others reuse their outcomes, and are
  reported as ``cached``. The tests that do run share one pytest process with fresh canaries, as
  in the base grader; when nothing must run, no process starts (the staging and the scan still
  apply). Only outcomes of a grading with nothing tampered and a complete, trusted run (report
  read, canaries as they must be, no timeout) are cached.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kvharness.env.chain.imports import content_key, import_closure
from kvharness.env.chain.task import ChainTask
from kvharness.env.grading import Grader, GradeResult, TestRun, _collect, _Grading
from kvharness.env.sandbox import Limits
from kvharness.env.workspace import package_dirs

__all__ = ["ChainGradeResult", "ChainGrader", "MilestoneOutcome"]

_PASSED = "passed"
_P2P = "pass_to_pass"


class MilestoneOutcome(NamedTuple):
    """One milestone in one grading: ``number`` (1-based), whether all its tests ``passed``,
    whether the outcomes were ``cached`` (taken from an earlier grading, not run), and the count
    of its tests that pass out of ``total``."""

    number: int
    passed: bool
    cached: bool
    passing: int
    total: int


@dataclass(frozen=True, slots=True)
class ChainGradeResult(GradeResult):
    """A :class:`~kvharness.env.grading.GradeResult` of a chain task. ``milestones``: one
    outcome per milestone, in order; ``prefix``: how many milestones from the first all pass
    (the score is ``prefix / K`` unless PASS_TO_PASS broke or something is tampered);
    ``pass_to_pass_cached``: the PASS_TO_PASS outcomes were reused; ``tests_run``: node ids
    this grading ran (0: no test process started)."""

    milestones: tuple[MilestoneOutcome, ...]
    prefix: int
    pass_to_pass_cached: bool
    tests_run: int

    @property
    def cached(self) -> frozenset[int]:
        """Numbers (1-based) of the milestones whose outcomes were reused."""
        return frozenset(m.number for m in self.milestones if m.cached)

    @property
    def reached(self) -> frozenset[int]:
        """Numbers of the milestones that pass (in the prefix or not)."""
        return frozenset(m.number for m in self.milestones if m.passed)

    def summary(self) -> str:
        """One line for an observation: milestones reached, what is broken; no test names."""
        if self.tampered:
            return GradeResult.summary(self)
        k = len(self.milestones)
        text = f"milestones {self.prefix}/{k} reached"
        if self.prefix < k:
            nxt = self.milestones[self.prefix]
            text += f"; milestone {nxt.number}: {nxt.passing}/{nxt.total} of its tests pass"
            later = sorted(n for n in self.reached if n > nxt.number)
            if later:
                listed = ", ".join(map(str, later))
                text += f"; milestones {listed} pass but count only once every earlier one does"
        broken = len(self.broken_pass_to_pass)
        if broken:
            text += (
                f"; {broken}/{len(self.pass_to_pass)} previously passing tests now fail (score 0)"
            )
        if self.cached:
            text += f"; {len(self.cached)} milestone results reused (nothing they import changed)"
        if self.timed_out:
            text += "; the test run timed out"
        return text


class _Group(NamedTuple):
    """Tests graded together, cached under one key: a milestone's, or PASS_TO_PASS."""

    name: str
    tests: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Selection:
    """What one grading runs: the key of every group, and the groups to run."""

    keys: dict[str, str]
    stale: tuple[str, ...]


class ChainGrader(Grader):
    """Grades repositories for one :class:`ChainTask` (see the module docstring). The cache
    lives on the instance: make one per episode. ``cache=False`` runs every test at every grading
    (for measuring what the cache saves). Other arguments as :class:`Grader`."""

    def __init__(
        self,
        task: ChainTask,
        *,
        python_env: Sequence[Path] | None = None,
        limits: Limits | None = None,
        unsafe: bool = False,
        workdir: Path | None = None,
        timeout_s: float = 300.0,
        cache: bool = True,
    ) -> None:
        super().__init__(
            task,
            python_env=python_env,
            limits=limits,
            unsafe=unsafe,
            workdir=workdir,
            timeout_s=timeout_s,
        )
        self.chain = task
        self.use_cache = cache
        by_file: dict[str, list[str]] = {}
        for test in task.pass_to_pass:
            by_file.setdefault(test.split("::")[0], []).append(test)
        self._groups = [_Group(str(i + 1), m.tests) for i, m in enumerate(task.milestones)] + [
            _Group(f"{_P2P}:{f}", tuple(tests)) for f, tests in by_file.items()
        ]
        self._cache: dict[str, tuple[str, dict[str, str]]] = {}

    def _select(self, tree: Path) -> _Selection:
        roots, packages = self.chain.python_path, package_dirs(self.chain)
        keys: dict[str, str] = {}
        for group in self._groups:
            files = {t.split("::")[0] for t in group.tests}
            closure = import_closure(tree, sorted(files), roots)
            keys[group.name] = content_key(tree, closure, packages, salt=group.tests)
        stale = tuple(
            g.name
            for g in self._groups
            if not self.use_cache or self._cache.get(g.name, ("", {}))[0] != keys[g.name]
        )
        return _Selection(keys, stale)

    def _stage_selected(self, repo: Path) -> tuple[_Grading, _Selection]:
        chosen: list[_Selection] = []

        def select(tree: Path) -> list[str]:
            chosen.append(self._select(tree))
            stale = set(chosen[0].stale)
            return [t for g in self._groups if g.name in stale for t in g.tests]

        grading = self._stage(repo, select)
        return grading, chosen[0]

    def grade(self, repo: Path) -> ChainGradeResult:
        """Grade ``repo`` (left untouched); blocking. Runs only what the cache does not hold."""
        start = time.perf_counter()
        grading, selection = self._stage_selected(repo)
        try:
            plan = grading.plan
            run = (
                _collect(plan, plan.sandbox.run(plan.argv, env=plan.env))
                if selection.stale
                else None
            )
        finally:
            shutil.rmtree(grading.folder, ignore_errors=True)
        return self._chain_result(grading, selection, run, start)

    async def agrade(self, repo: Path) -> ChainGradeResult:
        """:meth:`grade` for asyncio (staging and clean-up in threads, the tests as a subprocess)."""
        start = time.perf_counter()
        grading, selection = await asyncio.to_thread(self._stage_selected, repo)
        try:
            plan = grading.plan
            run = None
            if selection.stale:
                result = await plan.sandbox.arun(plan.argv, env=plan.env)
                run = await asyncio.to_thread(_collect, plan, result)
        finally:
            await asyncio.to_thread(shutil.rmtree, grading.folder, True)
        return self._chain_result(grading, selection, run, start)

    def _chain_result(
        self, grading: _Grading, selection: _Selection, run: TestRun | None, start: float
    ) -> ChainGradeResult:
        task = self.chain
        if run is not None:
            run = grading.canaries.screen(run)
        tampered = (*grading.tampered, *(grading.canaries.verdict(run) if run else ()))
        stale = set(selection.stale)
        outcomes: dict[str, str] = {}
        for group in self._groups:
            if group.name in stale:
                assert run is not None
                outcomes.update((t, run.outcomes[t]) for t in group.tests)
            else:
                outcomes.update(self._cache[group.name][1])
        trusted = run is not None and run.reported and not run.command.timed_out
        if self.use_cache and not tampered and trusted:
            for group in self._groups:
                if group.name in stale:
                    mine = {t: outcomes[t] for t in group.tests}
                    self._cache[group.name] = (selection.keys[group.name], mine)
        milestones = []
        for i, m in enumerate(task.milestones):
            passing = sum(outcomes[t] == _PASSED for t in m.tests)
            milestones.append(
                MilestoneOutcome(
                    i + 1, passing == len(m.tests), str(i + 1) not in stale, passing, len(m.tests)
                )
            )
        prefix = next((i for i, m in enumerate(milestones) if not m.passed), len(milestones))
        p2p = {t: outcomes[t] for t in task.pass_to_pass}
        broken = any(o != _PASSED for o in p2p.values())
        score = 0.0 if tampered or broken else prefix / len(milestones)
        log = (run.command.stdout + run.command.stderr)[-2000:] if run else ""
        return ChainGradeResult(
            score=score,
            fail_to_pass={t: outcomes[t] for t in task.fail_to_pass},
            pass_to_pass=p2p,
            tampered=tampered,
            duration_s=time.perf_counter() - start,
            timed_out=run.command.timed_out if run else False,
            log_tail=log,
            milestones=tuple(milestones),
            prefix=prefix,
            pass_to_pass_cached=bool(task.pass_to_pass)
            and not any(g.startswith(_P2P) for g in stale),
            tests_run=sum(len(g.tests) for g in self._groups if g.name in stale),
        )
