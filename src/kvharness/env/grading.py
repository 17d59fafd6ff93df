"""Grade a repository against a task's hidden tests, with partial credit.

:meth:`Grader.grade` takes the agent's repository (never modified), and

1. compares its protected files with the task snapshot: any added, changed or deleted test file
   (``test_*.py``, ``*_test.py``, anything under a ``tests``/``test`` folder), ``conftest.py``,
   pytest configuration (``pytest.ini``, ``tox.ini``, ``setup.cfg``, ``pyproject.toml``), or a new
   top-level module that would shadow an installed one (``pytest.py``, ``sitecustomize.py``...)
   marks the submission *tampered*, and it scores 0;
2. copies the repository to a fresh folder, restores the snapshot's protected files and lays the
   hidden test files over it (so deleted or edited tests are back as they were);
3. runs FAIL_TO_PASS + PASS_TO_PASS in a fresh sandbox (pytest, junit XML report) and reads each
   test's outcome; a test that did not report (not collected, crashed run, timeout) has failed.

Score: the fraction of FAIL_TO_PASS tests passing, and 0 if any PASS_TO_PASS test does not pass.

Known limit: the package's code runs inside the pytest process, so a hostile agent could patch
pytest from the library it edits; the tampering check covers the files pytest reads, not that.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kvharness.env.sandbox import REPO_MOUNT, CommandResult, Limits, Sandbox, python_env_paths
from kvharness.env.task import Task, safe_destination

__all__ = [
    "GradeResult",
    "Grader",
    "TestRun",
    "junit_key",
    "protected_changes",
    "run_tests",
    "suite_python_env",
]

_REPORT = ".kvh-junit.xml"
_CONFIG_FILES = frozenset({"pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})
_SHADOW_EXTRA = frozenset({"sitecustomize", "usercustomize", "conftest"})
_PASSED = "passed"


def junit_key(nodeid: str) -> tuple[str, str]:
    """The (classname, name) pytest's junit XML gives the test with this node id."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def _parse_junit(path: Path) -> dict[tuple[str, str], str]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    outcomes: dict[tuple[str, str], str] = {}
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
    return outcomes


def _messages(path: Path) -> dict[tuple[str, str], str]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    out: dict[tuple[str, str], str] = {}
    for case in root.iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error"):
                key = (case.get("classname", ""), case.get("name", ""))
                out.setdefault(key, child.get("message") or (child.text or "")[:500])
    return out


@dataclass(frozen=True, slots=True)
class TestRun:
    """Outcome of running a list of node ids once: ``outcomes[nodeid]`` is passed / failed /
    error / skipped / missing; ``messages[nodeid]`` the failure message where there is one."""

    __test__ = False  # not a pytest test class

    outcomes: dict[str, str]
    messages: dict[str, str]
    command: CommandResult

    def passed(self, nodeid: str) -> bool:
        return self.outcomes.get(nodeid) == _PASSED


def _pytest_argv(
    task_command: Sequence[str], nodeids: Iterable[str], extra: Sequence[str]
) -> list[str]:
    return [
        *task_command,
        "-q",
        "-o",
        "addopts=",
        "-o",
        "junit_family=xunit1",
        f"--junitxml={REPO_MOUNT}/{_REPORT}",
        *extra,
        *nodeids,
    ]


def _pythonpath(root: str, python_path: Sequence[str]) -> str:
    return ":".join(os.path.normpath(f"{root}/{p}") for p in python_path)


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
    """Run pytest on ``nodeids`` (or whatever ``extra_args`` select) in a sandbox over ``repo``.

    ``repo`` is used in place (the junit report is written into it, and tests may write files):
    pass a copy. Every requested node id gets an outcome; unreported ones are ``missing``.
    """
    sandbox = Sandbox(repo, ro_paths=ro_paths, limits=limits, unsafe=unsafe)
    report = repo / _REPORT
    report.unlink(missing_ok=True)
    argv = _pytest_argv(test_command, nodeids, extra_args)
    if unsafe:
        argv = [a.replace(f"{REPO_MOUNT}/", f"{repo}/") for a in argv]
    env = {"PYTHONPATH": _pythonpath(sandbox.workdir, python_path), "PYTHONHASHSEED": "0"}
    result = sandbox.run(argv, env=env)
    return _collect(report, nodeids, result)


def _collect(report: Path, nodeids: Sequence[str], result: CommandResult) -> TestRun:
    by_key = _parse_junit(report)
    messages = _messages(report)
    outcomes: dict[str, str] = {}
    texts: dict[str, str] = {}
    if nodeids:
        for nid in nodeids:
            key = junit_key(nid)
            outcomes[nid] = by_key.get(key, "missing")
            if key in messages:
                texts[nid] = messages[key]
    else:  # selection by extra_args: report every test under its junit key
        for (cls, name), outcome in by_key.items():
            outcomes[f"{cls}::{name}"] = outcome
    return TestRun(outcomes, texts, result)


# -- tampering -------------------------------------------------------------------------------


def _is_protected(rel: str) -> bool:
    parts = rel.split("/")
    name = parts[-1]
    if name in _CONFIG_FILES and len(parts) == 1:
        return True
    if name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py"):
        return True
    return any(p in ("tests", "test", "testing") for p in parts[:-1])


def _files(root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".git")]
        for name in filenames:
            full = Path(dirpath) / name
            out[full.relative_to(root).as_posix()] = full
    return out


def _installed_top_level(ro_paths: Sequence[Path]) -> frozenset[str]:
    names = set(sys.stdlib_module_names) | _SHADOW_EXTRA
    for base in ro_paths:
        for site in base.glob("lib/python3*/site-packages"):
            for entry in site.iterdir():
                stem = entry.name.split(".")[0].split("-")[0]
                if entry.suffix in (".py", "") or entry.is_dir():
                    names.add(stem)
    return frozenset(names)


def protected_changes(
    snapshot: Path,
    repo: Path,
    *,
    python_path: Sequence[str] = (".",),
    shadowed: frozenset[str] = frozenset(),
) -> list[str]:
    """Repo-relative paths where ``repo`` differs from ``snapshot`` in a way that can change
    what the tests see (see the module docstring); empty when the submission is clean."""
    before, after = _files(snapshot), _files(repo)
    changed: list[str] = []
    for rel in sorted(set(before) | set(after)):
        if not _is_protected(rel) and not rel.endswith(".pth"):
            continue
        a, b = before.get(rel), after.get(rel)
        if a is None or b is None or not filecmp.cmp(a, b, shallow=False):
            changed.append(rel)
    roots = {os.path.normpath(p) for p in python_path} | {"."}
    for rel in sorted(set(after) - set(before)):
        for root in roots:
            if root != "." and not rel.startswith(root + "/"):
                continue
            sub = rel if root == "." else rel[len(root) + 1 :]
            first = sub.split("/")[0]
            if first.removesuffix(".py") in shadowed and (first.endswith(".py") or "/" in sub):
                changed.append(rel)
    return sorted(set(changed))


# -- grader ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GradeResult:
    """One grading. ``score`` in [0, 1]; ``fail_to_pass`` / ``pass_to_pass`` map node id to
    outcome; ``tampered`` lists protected paths the agent changed (non-empty means score 0);
    ``duration_s`` is the whole grading (copy + sandboxed test run), wall seconds."""

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
            return f"score 0: test files or test configuration were modified ({len(self.tampered)} paths)"
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


class Grader:
    """Grades repositories for one task. ``python_env``: host paths mounted read-only for the test
    run (default :func:`suite_python_env`). ``limits``: sandbox limits (the timeout is raised to
    ``timeout_s``). ``workdir``: where grading copies go (default: the system temp dir)."""

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
        self._shadowed = _installed_top_level(self.python_env)

    def _stage(self, repo: Path) -> tuple[Path, list[str]]:
        task = self.task
        tampered = protected_changes(
            task.repo_dir, repo, python_path=task.python_path, shadowed=self._shadowed
        )
        tmp = Path(tempfile.mkdtemp(prefix=f"kvh-grade-{task.id}-", dir=self.workdir))
        copy = tmp / "repo"
        shutil.copytree(
            repo, copy, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__")
        )
        snapshot = _files(task.repo_dir)
        for rel in tampered:  # put protected files back as they were (even though score is 0)
            dest = safe_destination(copy, rel)
            if rel in snapshot:
                shutil.copyfile(snapshot[rel], dest)
        for rel, src in _files(task.hidden_dir).items():
            shutil.copyfile(src, safe_destination(copy, rel))
        return copy, tampered

    def _result(self, run: TestRun, tampered: list[str], start: float) -> GradeResult:
        task = self.task
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
            tuple(tampered),
            time.perf_counter() - start,
            run.command.timed_out,
            log,
        )

    def grade(self, repo: Path) -> GradeResult:
        """Grade ``repo`` (left untouched) in a fresh sandbox; blocking."""
        start = time.perf_counter()
        copy, tampered = self._stage(repo)
        try:
            run = run_tests(
                copy,
                self.task.tests,
                python_path=self.task.python_path,
                test_command=self.task.test_command,
                ro_paths=self.python_env,
                limits=self.limits,
                unsafe=self.unsafe,
            )
        finally:
            shutil.rmtree(copy.parent, ignore_errors=True)
        return self._result(run, tampered, start)

    async def agrade(self, repo: Path) -> GradeResult:
        """:meth:`grade` for asyncio (the copy runs in a thread, the tests as a subprocess)."""
        import asyncio

        start = time.perf_counter()
        copy, tampered = await asyncio.to_thread(self._stage, repo)
        try:
            sandbox = Sandbox(
                copy, ro_paths=self.python_env, limits=self.limits, unsafe=self.unsafe
            )
            report = copy / _REPORT
            argv = _pytest_argv(self.task.test_command, self.task.tests, ())
            if self.unsafe:
                argv = [a.replace(f"{REPO_MOUNT}/", f"{copy}/") for a in argv]
            env = {
                "PYTHONPATH": _pythonpath(sandbox.workdir, self.task.python_path),
                "PYTHONHASHSEED": "0",
            }
            result = await sandbox.arun(argv, env=env)
            run = _collect(report, self.task.tests, result)
        finally:
            await asyncio.to_thread(shutil.rmtree, copy.parent, True)
        return self._result(run, tampered, start)
