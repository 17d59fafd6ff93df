"""The grader's defences, each on its own, with real pytest runs in the real bubblewrap sandbox:
the report comes from outside the tree and is read without following links; canaries catch a
library that forges outcomes; the oracle still scores 1.0 on every smoke task, sync and async."""

from __future__ import annotations

import asyncio
import dataclasses
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from kvharness.env.grading import Grader, GradeResult, run_tests
from kvharness.env.sandbox import REPO_MOUNT, Limits, python_env_paths
from kvharness.env.task import Task

GraderFor = Callable[[Task], Grader]

ALL_PASS = (
    '<?xml version="1.0"?><testsuites><testsuite>'
    '<testcase classname="tests.test_ops" name="test_add"/>'
    '<testcase classname="tests.test_ops" name="test_mul"/>'
    '<testcase classname="tests.test_ops" name="test_neg"/>'
    "</testsuite></testsuites>"
)


def _both(grader: Grader, repo: Path) -> list[GradeResult]:
    """The sync and the async grading of ``repo``."""
    return [grader.grade(repo), asyncio.run(grader.agrade(repo))]


# -- the report ------------------------------------------------------------------------------


def test_a_report_planted_in_the_repository_is_ignored(
    make_mini_task: Callable[[], Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    task = make_mini_task()
    repo = task.checkout(tmp_path / "episode")
    for name in ("junit.xml", "report.xml", "mini/junit.xml"):
        (repo / name).write_text(ALL_PASS)
    for result in _both(grader_for(task), repo):
        assert result.score == 0.0 and result.tampered == ()
        assert result.fail_to_pass == {t: "failed" for t in task.fail_to_pass}


REPLACE_REPORT = textwrap.dedent(
    """\
    import os


    def pytest_unconfigure(config):
        path = config.option.xmlpath
        print("REPORT AT", path)
        forged = os.path.join(os.path.dirname(path), "forged.xml")
        with open(forged, "w") as f:
            f.write({forged!r})
        os.unlink(path)
        {make}
    """
)


@pytest.mark.parametrize(
    "make",
    [
        "os.symlink('forged.xml', path)",
        "os.symlink('/proc/self/fd/0', path)",
        "os.mkfifo(path)",
    ],
)
def test_a_report_replaced_by_a_link_or_fifo_is_not_read(
    make: str, env_venv: Path, tmp_path: Path
) -> None:
    """Code in the test process replaces the report after pytest wrote it: the grader opens it
    without following links, and never blocks on what it finds."""
    repo = tmp_path / "tree"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_one.py").write_text("def test_one():\n    assert False\n")
    (repo / "conftest.py").write_text(REPLACE_REPORT.format(forged=ALL_PASS, make=make))
    run = run_tests(
        repo,
        ["tests/test_one.py::test_one"],
        ro_paths=python_env_paths(env_venv),
        limits=Limits(timeout_s=60),
    )
    assert run.outcomes == {"tests/test_one.py::test_one": "missing"} and not run.reported
    where = next(ln for ln in run.command.stdout.splitlines() if "REPORT AT" in ln).split()[-1]
    assert not where.startswith(REPO_MOUNT + "/")  # written outside the tree under test


def test_the_report_is_written_outside_the_tree_and_read_back(
    env_venv: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "tree"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_one.py").write_text("def test_one():\n    assert False\n")
    (repo / "conftest.py").write_text(
        "def pytest_unconfigure(config):\n    print('REPORT AT', config.option.xmlpath)\n"
    )
    run = run_tests(repo, ["tests/test_one.py::test_one"], ro_paths=python_env_paths(env_venv))
    assert run.outcomes == {"tests/test_one.py::test_one": "failed"} and run.reported
    where = next(ln for ln in run.command.stdout.splitlines() if "REPORT AT" in ln).split()[-1]
    assert not where.startswith(REPO_MOUNT + "/")
    assert sorted(p.name for p in repo.rglob("*.xml")) == []


# -- nothing runs after pytest is done ------------------------------------------------------

# Rewrites the report once pytest has written it, passing only the task's own tests (their
# classname is ``tests.test_ops``) and leaving the canaries as they came out: a targeted forgery
# the canaries cannot see. ``{hook}`` is how the rewrite is made to run late.
LATE_REWRITE = textwrap.dedent(
    """

    import sys as _sys


    def _rewrite(*_):
        import xml.etree.ElementTree as ET

        path = next(a.split("=", 1)[1] for a in _sys.argv if a.startswith("--junitxml="))
        tree = ET.parse(path)
        for case in tree.iter("testcase"):
            if case.get("classname") == "tests.test_ops":
                for child in list(case):
                    case.remove(child)
        tree.write(path)


    {hook}
    """
)


@pytest.mark.parametrize(
    ("hook", "allow"),
    [
        ("import atexit\natexit.register(_rewrite)", ("atexit",)),
        (
            "class _Late:\n    def __del__(self):\n        _rewrite()\n\n\n_late = _Late()",
            ("def __del__",),
        ),
    ],
    ids=["atexit", "finaliser"],
)
def test_code_left_to_run_after_pytest_never_runs(
    make_mini_task: Callable[[], Task],
    grader_for: GraderFor,
    tmp_path: Path,
    hook: str,
    allow: tuple[str, ...],
) -> None:
    """The grader's plugin ends the test process as soon as pytest is done, so a rewrite of the
    report left to run at exit never happens (allowed through the scan, so that the exit alone
    must stop it): the bug is not fixed, and the grade says so."""
    task = dataclasses.replace(make_mini_task(), scan_allow=allow)
    repo = task.checkout(tmp_path / "episode")
    ops = repo / "mini" / "ops.py"
    ops.write_text(ops.read_text() + LATE_REWRITE.format(hook=hook))
    for result in _both(grader_for(task), repo):
        assert result.score == 0.0 and result.tampered == (), result.tampered
        assert result.fail_to_pass == {t: "failed" for t in task.fail_to_pass}


# -- canaries --------------------------------------------------------------------------------

FORGE = textwrap.dedent(
    """

    import _pytest.reports as _reports

    _made = _reports.TestReport.from_item_and_call


    def _forged(cls, item, call):
        report = _made(item, call)
        if report.when == "call":
            report.outcome = {outcome!r}
            report.longrepr = None if {outcome!r} == "passed" else "forged"
        return report


    _reports.TestReport.from_item_and_call = classmethod(_forged)
    """
)


@pytest.mark.parametrize(("outcome", "canary"), [("passed", "must fail"), ("failed", "must pass")])
def test_a_library_that_forges_every_outcome_is_caught_by_the_canaries(
    make_mini_task: Callable[[], Task],
    grader_for: GraderFor,
    tmp_path: Path,
    outcome: str,
    canary: str,
) -> None:
    # Allowed through the scan, so that the canaries alone must catch it.
    task = dataclasses.replace(make_mini_task(), scan_allow=("_pytest",))
    repo = task.checkout(tmp_path / "episode")
    ops = repo / "mini" / "ops.py"
    ops.write_text(ops.read_text() + FORGE.format(outcome=outcome))
    for result in _both(grader_for(task), repo):
        assert result.score == 0.0
        assert result.tampered and all(canary in t for t in result.tampered), result.tampered
        if outcome == "passed":
            assert result.passed_fail_to_pass == 2  # the forgery worked on the real tests
        summary = result.summary()
        assert "rejected as tampered" in summary and canary in summary
        assert not any(t.split("::")[-1] in summary for t in task.tests)


def test_the_scan_catches_the_same_forgery_without_the_allow_list(
    make_mini_task: Callable[[], Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    task = make_mini_task()
    repo = task.checkout(tmp_path / "episode")
    ops = repo / "mini" / "ops.py"
    ops.write_text(ops.read_text() + FORGE.format(outcome="passed"))
    result = grader_for(task).grade(repo)
    assert result.score == 0.0
    assert result.tampered[0] == (
        "mini/ops.py:13: imports _pytest.reports: reaches the test framework"
    )


def test_an_honest_failing_change_is_not_tampering(
    make_mini_task: Callable[[], Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    """A change that breaks the package (every test fails, the process may even die) scores 0
    without being called tampering: the canaries still came out as they must, or no report came."""
    task = make_mini_task()
    repo = task.checkout(tmp_path / "episode")
    ops = repo / "mini" / "ops.py"
    ops.write_text(ops.read_text() + "\nraise ImportError('broken on purpose')\n")
    for result in _both(grader_for(task), repo):
        assert result.score == 0.0 and result.tampered == ()
        assert set(result.fail_to_pass.values()) == {"missing"}


# -- the honest path -------------------------------------------------------------------------


def test_the_oracle_scores_one_on_every_smoke_task_sync_and_async(
    smoke_suite: list[Task], grader_for: GraderFor, tmp_path: Path
) -> None:
    for task in smoke_suite:
        repo = task.checkout(tmp_path / task.id)
        task.apply_fix(repo)
        for result in _both(grader_for(task), repo):
            assert (result.score, result.tampered) == (1.0, ()), (task.id, result.log_tail)
