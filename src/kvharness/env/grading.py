"""Grade an agent's change against a task's hidden tests, with partial credit.

:meth:`Grader.grade` (blocking) and :meth:`Grader.agrade` (asyncio) take the agent's repository,
never modify it and never follow a link in it, and

1. **grade what the agent changed, nothing else:** build a fresh tree from the task's pristine
   repository, apply only the agent's change to the package's text source files and lay the hidden
   tests over it (``workspace.py`` defines those files precisely). Every other change the agent
   made is dropped; one the test process would have taken (a test file, ``conftest.py``, pytest
   configuration, packaging metadata, ``.pth``, ``sitecustomize``, bytecode, a shadowing module, a
   symbolic link...) is reported in ``tampered`` and scores 0. Scratch files are simply not graded;
2. **check the change itself:** the added and changed lines of the carried ``.py`` files are read
   with ``ast`` for code that reaches the test framework or the interpreter's exit, import or frame
   machinery (``scan.py``; a task may allow listed constructs in ``task.json`` ``scan_allow``);
   each finding is reported in ``tampered`` as ``FILE:LINE: reason`` and scores 0;
3. **run the tests so that they take nothing from the repository but the code under test:** a
   fresh sandbox runs FAIL_TO_PASS + PASS_TO_PASS with plugin autoloading off
   (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``; the task's ``test_command`` names its plugins), no
   configuration file (``-c /dev/null``, ``--rootdir`` the tree), no bytecode written or taken, and
   the junit report written to a folder the grader creates for this run alone, mounted outside the
   repository tree; the report is opened without following links, only if it is a regular file
   under :data:`MAX_REPORT_BYTES`, and parsed off the event loop in :meth:`Grader.agrade`. The
   grader's own plugin ends the process the moment pytest is done with it (``os._exit``), so no
   code the package left to run later (an ``atexit`` handler, a finaliser, a thread) can rewrite
   the report after pytest wrote it;
4. **detect what one process cannot prevent:** canary tests with names drawn at random for each
   grading run in the same pytest process, beside the hidden tests: two must pass, two must fail.
   A report in which they do not come out so was forged (the package's code patched pytest or
   rewrote the report); the result is ``tampered`` and scores 0. A report that holds none of them
   (pytest stopped before running any test) is not trusted at all: no test counts as reported.

A test that did not report (not collected, crashed run, timeout) has failed. Score: the fraction
of FAIL_TO_PASS tests passing; 0 if any PASS_TO_PASS test does not pass or anything is tampered.

Remaining limit: the package's code still runs inside the pytest process, while the tests run.
An attack that forges only the outcomes of the task's own tests (their names are public, upstream)
and not the canaries, *during* the run (patching pytest, or a concurrent writer racing pytest's
own write of the report) with constructs the scan does not know, is not caught; the scan's table
is the place to close such a way once it is found. Conftest files and configuration of the
*pristine* repository are trusted as they are.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kvharness.env.sandbox import CommandResult, Limits, Sandbox, python_env_paths
from kvharness.env.scan import scan_changes
from kvharness.env.task import Task
from kvharness.env.workspace import Staged, installed_top_level, read_regular, stage

__all__ = [
    "MAX_REPORT_BYTES",
    "GradeResult",
    "Grader",
    "TestRun",
    "junit_key",
    "run_tests",
    "suite_python_env",
]

MAX_REPORT_BYTES = 16 << 20
"""A larger junit report is not read: every test in it counts as not reported."""

_REPORT_MOUNT = "/kvh/report"
_REPORT_FILE = "junit.xml"
_EXIT_PLUGIN = "kvh_grading_exit"
_EXIT_PLUGIN_SOURCE = '''"""Loaded by kvharness's grader into every graded pytest run: once the tests ran (exit
status 0 or 1), the process ends the moment pytest is done with it (os._exit after the last
pytest_unconfigure), so nothing the code under test left behind (atexit handlers, finalisers,
weakref callbacks, threads) runs after pytest wrote its report. A session that did not run its
tests (a usage or internal error) ends as pytest ends it, so that its error is printed: its report
holds no canaries, and is not trusted."""

import os
import sys

import pytest

_status = [1]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _status[0] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if _status[0] not in (0, 1):
        return
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(_status[0])
'''
"""The grader's own pytest plugin (trusted: it is written by the grader, mounted read-only and
loaded before any code under test is imported)."""
_PASSED = "passed"
_TEST_ENV = {
    "PYTHONHASHSEED": "0",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
}


def junit_key(nodeid: str) -> tuple[str, str]:
    """The (classname, name) pytest's junit XML gives the test with this node id."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


_Outcomes = dict[tuple[str, str], str]


def _parse_junit(data: bytes | None) -> tuple[_Outcomes, dict[tuple[str, str], str]] | None:
    """Outcome and failure message per (classname, name); None when there is no readable report."""
    if data is None:
        return None
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return None
    outcomes: _Outcomes = {}
    messages: dict[tuple[str, str], str] = {}
    for case in root.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        tags = {child.tag for child in case}
        if "error" in tags:
            outcome = "error"
        elif "failure" in tags:
            outcome = "failed"
        elif "skipped" in tags:
            outcome = "skipped"
        else:
            outcome = _PASSED
        # A test reported twice (call failed, then teardown error) keeps its worst outcome.
        if outcomes.get(key, _PASSED) == _PASSED:
            outcomes[key] = outcome
        for child in case:
            if child.tag in ("failure", "error"):
                messages.setdefault(key, child.get("message") or (child.text or "")[:500])
    return outcomes, messages


@dataclass(frozen=True, slots=True)
class TestRun:
    """Outcome of running a list of node ids once: ``outcomes[nodeid]`` is passed / failed /
    error / skipped / missing; ``messages[nodeid]`` the failure message where there is one;
    ``reported`` whether a readable report came back at all."""

    __test__ = False  # not a pytest test class

    outcomes: dict[str, str]
    messages: dict[str, str]
    command: CommandResult
    reported: bool = True

    def passed(self, nodeid: str) -> bool:
        return self.outcomes.get(nodeid) == _PASSED


@dataclass(frozen=True, slots=True)
class _Planned:
    """One sandboxed pytest run, ready to start: ``report`` is the host path of its junit file."""

    sandbox: Sandbox
    argv: list[str]
    env: dict[str, str]
    report: Path
    nodeids: tuple[str, ...]


def _plan(
    repo: Path,
    scratch: Path,
    nodeids: Sequence[str],
    *,
    python_path: Sequence[str],
    test_command: Sequence[str],
    ro_paths: Sequence[Path],
    limits: Limits | None,
    unsafe: bool,
    extra_args: Sequence[str],
) -> _Planned:
    """The run of ``nodeids`` on ``repo``. ``scratch``, a fresh folder that nothing in ``repo``
    can reach, gets ``report/`` (the junit report; any report already there is removed) and
    ``plugin/`` (the grader's exit plugin, mounted read-only and first on the path)."""
    report_dir, plugin_dir = scratch / "report", scratch / "plugin"
    report_dir.mkdir(mode=0o700, exist_ok=True)
    plugin_dir.mkdir(exist_ok=True)
    (plugin_dir / f"{_EXIT_PLUGIN}.py").write_text(_EXIT_PLUGIN_SOURCE)
    sandbox = Sandbox(
        repo,
        ro_paths=(plugin_dir, *ro_paths),
        limits=limits,
        unsafe=unsafe,
        persist=False,
        exports=[(report_dir, _REPORT_MOUNT)],
    )
    report = report_dir / _REPORT_FILE
    report.unlink(missing_ok=True)
    root = sandbox.workdir
    argv = [
        *test_command,
        *("-p", _EXIT_PLUGIN),
        "-q",
        "-c",
        "/dev/null",
        f"--rootdir={root}",
        "-o",
        "junit_family=xunit1",
        "--continue-on-collection-errors",
        f"--junitxml={sandbox.path_of(report_dir)}/{_REPORT_FILE}",
        *extra_args,
        *nodeids,
    ]
    paths = [str(plugin_dir.resolve()), *(os.path.normpath(f"{root}/{p}") for p in python_path)]
    pythonpath = ":".join(paths)
    env = {**_TEST_ENV, "PYTHONPATH": pythonpath}
    return _Planned(sandbox, argv, env, report, tuple(nodeids))


def _collect(plan: _Planned, result: CommandResult) -> TestRun:
    parsed = _parse_junit(read_regular(plan.report, MAX_REPORT_BYTES))
    by_key, messages = parsed if parsed is not None else ({}, {})
    outcomes: dict[str, str] = {}
    texts: dict[str, str] = {}
    if plan.nodeids:
        for nid in plan.nodeids:
            key = junit_key(nid)
            outcomes[nid] = by_key.get(key, "missing")
            if key in messages:
                texts[nid] = messages[key]
    else:  # selection by extra_args: report every test under its junit key
        for (cls, name), outcome in by_key.items():
            outcomes[f"{cls}::{name}"] = outcome
    return TestRun(outcomes, texts, result, parsed is not None)


def run_tests(
    repo: Path,
    nodeids: Sequence[str],
    *,
    python_path: Sequence[str] = (".",),
    test_command: Sequence[str] = ("python", "-m", "pytest", "-p", "no:cacheprovider"),
    ro_paths: Sequence[Path] = (),
    limits: Limits | None = None,
    unsafe: bool = False,
    extra_args: Sequence[str] = (),
) -> TestRun:
    """Run pytest on ``nodeids`` (or whatever ``extra_args`` select) in a sandbox over ``repo``,
    as grading does (see the module docstring). ``repo`` is used in place (tests may write files
    in it): pass a copy. Every requested node id gets an outcome; unreported ones are
    ``missing``."""
    with tempfile.TemporaryDirectory(prefix="kvh-report-") as scratch:
        plan = _plan(
            repo,
            Path(scratch),
            nodeids,
            python_path=python_path,
            test_command=test_command,
            ro_paths=ro_paths,
            limits=limits,
            unsafe=unsafe,
            extra_args=extra_args,
        )
        return _collect(plan, plan.sandbox.run(plan.argv, env=plan.env))


# -- canaries --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Canaries:
    """Tests with random names in one module at the tree's root: ``must_pass`` / ``must_fail``
    node ids. Written fresh for each grading."""

    module: str
    must_pass: tuple[str, str]
    must_fail: tuple[str, str]

    @classmethod
    def draw(cls) -> _Canaries:
        module = f"test_{secrets.token_hex(6)}.py"
        names = [f"test_{secrets.token_hex(6)}" for _ in range(4)]
        return cls(
            module,
            (f"{module}::{names[0]}", f"{module}::{names[1]}"),
            (f"{module}::{names[2]}", f"{module}::{names[3]}"),
        )

    def source(self) -> str:
        a, b = secrets.randbelow(1000) + 1, secrets.randbelow(1000) + 1
        p1, p2 = (t.split("::")[1] for t in self.must_pass)
        f1, f2 = (t.split("::")[1] for t in self.must_fail)
        return (
            f"def {p1}():\n    assert {a} + {b} == {a + b}\n\n\n"
            f"def {f1}():\n    assert {a} == {a + b}\n\n\n"
            f"def {f2}():\n    raise RuntimeError({b})\n\n\n"
            f"def {p2}():\n    pass\n"
        )

    def order(self, tests: Sequence[str]) -> list[str]:
        """Node ids to run: canaries on both sides of ``tests``."""
        return [self.must_pass[0], self.must_fail[0], *tests, self.must_fail[1], self.must_pass[1]]

    def screen(self, run: TestRun) -> TestRun:
        """``run``, or, when its report holds none of the canaries (pytest stopped before running
        any test: a module of the hidden tests failed to import), the run with no test reported:
        outcomes from a report without canaries are not trusted."""
        if all(run.outcomes[t] == "missing" for t in (*self.must_pass, *self.must_fail)):
            return replace(run, outcomes=dict.fromkeys(run.outcomes, "missing"), reported=False)
        return run

    def verdict(self, run: TestRun) -> list[str]:
        """Why the run's report cannot be trusted (empty: the canaries came out as they must).
        A run with no report has no outcome to forge and scores 0 anyway."""
        if not run.reported:
            return []
        out = [
            f"canary test {i + 1} (must pass) came out {run.outcomes[t]}: the test outcomes were "
            "forged by code in the test process"
            for i, t in enumerate(self.must_pass)
            if run.outcomes[t] != _PASSED
        ]
        out += [
            f"canary test {i + 3} (must fail) came out {run.outcomes[t]}: the test outcomes were "
            "forged by code in the test process"
            for i, t in enumerate(self.must_fail)
            if run.outcomes[t] != "failed"
        ]
        return out


# -- grader ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GradeResult:
    """One grading. ``score`` in [0, 1]; ``fail_to_pass`` / ``pass_to_pass`` map node id to
    outcome; ``tampered``: one human-readable line per reason the submission was rejected (naming
    the file and line, or the canary, and why), non-empty means score 0; ``duration_s`` is the whole
    grading (staging + sandboxed test run), wall seconds."""

    score: float
    fail_to_pass: dict[str, str]
    pass_to_pass: dict[str, str]
    tampered: tuple[str, ...]
    duration_s: float
    timed_out: bool
    log_tail: str

    @property
    def passed_fail_to_pass(self) -> int:
        return sum(o == _PASSED for o in self.fail_to_pass.values())

    @property
    def broken_pass_to_pass(self) -> list[str]:
        return [t for t, o in self.pass_to_pass.items() if o != _PASSED]

    def summary(self) -> str:
        """One line for an observation (no hidden test names)."""
        if self.tampered:
            more = f" (and {len(self.tampered) - 1} more)" if len(self.tampered) > 1 else ""
            return f"score 0: the submission was rejected as tampered: {self.tampered[0]}{more}"
        text = f"{self.passed_fail_to_pass}/{len(self.fail_to_pass)} target tests pass"
        broken = len(self.broken_pass_to_pass)
        if broken:
            text += (
                f"; {broken}/{len(self.pass_to_pass)} previously passing tests now fail (score 0)"
            )
        if self.timed_out:
            text += "; the test run timed out"
        return text


def suite_python_env(task: Task) -> tuple[Path, ...]:
    """The Python environment a task's tests run with: the suite's venv recorded in
    ``suite.json`` (``meta.venv``) when present, else this interpreter's environment."""
    index = task.root.parent / "suite.json"
    if index.exists():
        venv = json.loads(index.read_text()).get("meta", {}).get("venv")
        if venv and (Path(venv) / "bin" / "python").exists():
            return python_env_paths(Path(venv))
    return python_env_paths(Path(sys.prefix))


@dataclass(frozen=True, slots=True)
class _Grading:
    """A staged grading: the folder to remove afterwards, the run, its canaries, and the
    tamper findings known before the run."""

    folder: Path
    plan: _Planned
    canaries: _Canaries
    tampered: tuple[str, ...]


class Grader:
    """Grades repositories for one task. ``python_env``: host paths mounted read-only for the test
    run (default :func:`suite_python_env`). ``limits``: sandbox limits (the timeout is raised to
    ``timeout_s``). ``workdir``: where grading trees go (default: the system temp dir)."""

    def __init__(
        self,
        task: Task,
        *,
        python_env: Sequence[Path] | None = None,
        limits: Limits | None = None,
        unsafe: bool = False,
        workdir: Path | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        self.task = task
        self.python_env = tuple(python_env) if python_env is not None else suite_python_env(task)
        base = limits or Limits()
        self.limits = replace(
            base, timeout_s=max(base.timeout_s, timeout_s), cpu_s=max(base.cpu_s, int(timeout_s))
        )
        self.unsafe = unsafe
        self.workdir = workdir
        self._shadowed = installed_top_level(self.python_env)

    def _stage(self, repo: Path, select: Callable[[Path], Sequence[str]] | None = None) -> _Grading:
        """Stage ``repo``, scan the change, write fresh canaries and plan the run of the task's
        tests (or of ``select(staged tree)``, for a grader that runs fewer of them)."""
        task = self.task
        folder = Path(tempfile.mkdtemp(prefix=f"kvh-grade-{task.id}-", dir=self.workdir))
        try:
            staged: Staged = stage(task, repo, folder / "repo", shadowed=self._shadowed)
            findings = scan_changes(staged.changes, task.scan_allow)
            canaries = _Canaries.draw()
            (staged.tree / canaries.module).write_text(canaries.source())
            plan = _plan(
                staged.tree,
                folder,
                canaries.order(task.tests if select is None else select(staged.tree)),
                python_path=task.python_path,
                test_command=task.test_command,
                ro_paths=self.python_env,
                limits=self.limits,
                unsafe=self.unsafe,
                extra_args=(),
            )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return _Grading(folder, plan, canaries, (*staged.tampered, *findings))

    def _result(self, grading: _Grading, run: TestRun, start: float) -> GradeResult:
        task = self.task
        run = grading.canaries.screen(run)
        tampered = (*grading.tampered, *grading.canaries.verdict(run))
        f2p = {t: run.outcomes[t] for t in task.fail_to_pass}
        p2p = {t: run.outcomes[t] for t in task.pass_to_pass}
        passed = sum(o == _PASSED for o in f2p.values())
        broken = any(o != _PASSED for o in p2p.values())
        score = 0.0 if tampered or broken else passed / len(f2p)
        log = (run.command.stdout + run.command.stderr)[-2000:]
        return GradeResult(
            score,
            f2p,
            p2p,
            tampered,
            time.perf_counter() - start,
            run.command.timed_out,
            log,
        )

    def grade(self, repo: Path) -> GradeResult:
        """Grade ``repo`` (left untouched) in a fresh sandbox; blocking."""
        start = time.perf_counter()
        grading = self._stage(repo)
        try:
            plan = grading.plan
            run = _collect(plan, plan.sandbox.run(plan.argv, env=plan.env))
        finally:
            shutil.rmtree(grading.folder, ignore_errors=True)
        return self._result(grading, run, start)

    async def agrade(self, repo: Path) -> GradeResult:
        """:meth:`grade` for asyncio: staging, reading the report and clean-up run in threads,
        the tests as a subprocess, so the event loop never waits on the agent's files."""
        start = time.perf_counter()
        grading = await asyncio.to_thread(self._stage, repo)
        try:
            plan = grading.plan
            result = await plan.sandbox.arun(plan.argv, env=plan.env)
            run = await asyncio.to_thread(_collect, plan, result)
        finally:
            await asyncio.to_thread(shutil.rmtree, grading.folder, True)
        return self._result(grading, run, start)
