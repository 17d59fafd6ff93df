"""Chain tasks end to end: a suite built from the real inflection sdist and a hand-made two-module
task, graded by real pytest runs in the real bubblewrap sandbox. Milestones score as a prefix,
partial credit accumulates, a regression never pays, and a grading reruns only the milestones
whose tests import something the change touched."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

from kvharness.env.actions import EditFile, Submit
from kvharness.env.api import CodingEnv, EnvConfig
from kvharness.env.chain import ChainGrader, ChainTask, Milestone
from kvharness.env.chain.stubs import apply_stubs, make_stub
from kvharness.env.harness.agents import play_script
from kvharness.env.reward import RewardRule
from kvharness.env.sandbox import Limits, python_env_paths
from kvharness.env.task import load_task
from kvharness.errors import FormatError

pytestmark = pytest.mark.slow


def _config(env_venv: Path, submissions: int = 10, rule: str = "best") -> EnvConfig:
    return EnvConfig(
        max_steps=40,
        max_submissions=submissions,
        limits=Limits(timeout_s=120),
        python_env=python_env_paths(env_venv),
        reward=RewardRule(rule),
    )


def _play(task: ChainTask, agent: str, config: EnvConfig) -> tuple[list[float], float]:
    """Play a scripted agent's whole script; the submissions' scores and the episode reward."""
    submissions, reward = play_script(task, agent, config)
    return [s.score for s in submissions], reward


def test_the_built_suite_is_a_chain_of_at_least_five_milestones(chain_task: ChainTask) -> None:
    k = len(chain_task.milestones)
    assert k >= 5
    assert [m.function for m in chain_task.milestones][:2] == ["underscore", "humanize"]
    assert (
        "raise NotImplementedError" in (chain_task.repo_dir / "inflection/__init__.py").read_text()
    )
    for m in chain_task.milestones:
        assert m.tests and (chain_task.repo_dir / m.file).read_text().count(m.stub) == 1
    assert "`inflection.underscore`" in chain_task.issue
    assert not any("test_" in line for line in chain_task.issue.splitlines()[4:])


def test_oracle_reaches_every_milestone_in_turn_noop_none(
    chain_task: ChainTask, env_venv: Path
) -> None:
    k = len(chain_task.milestones)
    scores, reward = _play(chain_task, "oracle", _config(env_venv))
    assert scores == pytest.approx([i / k for i in range(1, k + 1)])
    assert reward == 1.0
    scores, reward = _play(chain_task, "noop", _config(env_venv))
    assert scores == [0.0] and reward == 0.0


def test_an_agent_stopped_half_way_keeps_the_milestones_it_reached(
    chain_task: ChainTask, env_venv: Path
) -> None:
    k = len(chain_task.milestones)
    half = math.ceil(k / 2)
    scores, reward = _play(chain_task, "halfway", _config(env_venv))
    assert scores == pytest.approx([i / k for i in range(1, half + 1)])
    assert reward == pytest.approx(half / k)


def test_a_regression_never_pays(chain_task: ChainTask, env_venv: Path) -> None:
    """Reach milestone 1, then restore milestones 2 and 3 while stubbing milestone 1 again: the
    later milestones count for nothing without the first, under every reward rule."""
    m1, m2, m3 = chain_task.milestones[:3]
    for rule in ("best", "last"):
        with CodingEnv(chain_task, _config(env_venv, rule=rule)) as env:
            env.reset()
            env.step(EditFile(m1.file, m1.stub, m1.original))
            first = env.step(Submit())
            assert first.reward == pytest.approx(1 / len(chain_task.milestones))
            env.step(EditFile(m2.file, m2.stub, m2.original))
            env.step(EditFile(m3.file, m3.stub, m3.original))
            env.step(EditFile(m1.file, m1.original, m1.stub))
            broken = env.step(Submit())
            assert env.submissions[-1].score == 0.0
            assert broken.reward <= 0.0
            assert env.episode_reward() == (first.reward if rule == "best" else 0.0)
            assert "milestones 0/" in broken.observation


def test_the_task_file_round_trips_and_a_fault_names_its_line(
    chain_task: ChainTask, tmp_path: Path
) -> None:
    assert load_task(chain_task.root) == chain_task
    doc = json.loads((chain_task.root / "task.json").read_text())
    doc["milestones"][1]["line"] = "nine"
    folder = tmp_path / "bad"
    folder.mkdir()
    text = json.dumps(doc, indent=2)
    (folder / "task.json").write_text(text)
    line = text[: text.index('"function"', text.index('"function"') + 1)].count("\n") + 1
    with pytest.raises(FormatError) as err:
        load_task(folder)
    assert err.value.line == line and "'line'" in str(err.value)


# A hand-made chain over two modules: milestones 1 and 2 live in mini/a.py (2 calls 1), milestone
# 3 in mini/b.py, each module judged by its own test file.
A = textwrap.dedent(
    """\
    def double(x):
        \"\"\"Twice x.\"\"\"
        return 2 * x


    def quad(x):
        \"\"\"Four times x.\"\"\"
        return double(double(x))


    def ident(x):
        return x
    """
)
B = textwrap.dedent(
    """\
    def neg(x):
        \"\"\"Minus x.\"\"\"
        return -x
    """
)
TEST_A = textwrap.dedent(
    """\
    from mini.a import double, ident, quad


    def test_double():
        assert double(3) == 6


    def test_quad():
        assert quad(3) == 12


    def test_ident():
        assert ident(3) == 3
    """
)
TEST_B = "from mini.b import neg\n\n\ndef test_neg():\n    assert neg(3) == -3\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def mini_chain(tmp_path: Path) -> ChainTask:
    root = tmp_path / "suite" / "chain-mini"
    stubs = {
        "mini/a.py": [make_stub("mini/a.py", A, "double"), make_stub("mini/a.py", A, "quad")],
        "mini/b.py": [make_stub("mini/b.py", B, "neg")],
    }
    for rel, text in (("mini/a.py", A), ("mini/b.py", B)):
        _write(root / "repo" / rel, apply_stubs(text, stubs[rel]))
        _write(root / "fix" / rel, text)
    _write(root / "repo" / "mini" / "__init__.py", "")
    _write(root / "hidden" / "tests" / "test_a.py", TEST_A)
    _write(root / "hidden" / "tests" / "test_b.py", TEST_B)
    tests = (
        "tests/test_a.py::test_double",
        "tests/test_a.py::test_quad",
        "tests/test_b.py::test_neg",
    )
    order = [*stubs["mini/a.py"], *stubs["mini/b.py"]]
    milestones = tuple(
        Milestone(s.name, s.file, s.line, s.end_line, s.original, s.stub, (t,))
        for s, t in zip(order, tests, strict=True)
    )
    task = ChainTask.of(
        milestones=milestones,
        id="chain-mini",
        package="mini",
        package_version="0",
        issue="implement double, quad and neg",
        pass_to_pass=("tests/test_a.py::test_ident",),
        hidden_files=("tests/test_a.py", "tests/test_b.py"),
        root=root,
    )
    task.save()
    return task


def test_a_grading_reruns_only_what_the_change_can_affect(
    mini_chain: ChainTask, env_venv: Path, tmp_path: Path
) -> None:
    grader = ChainGrader(
        mini_chain, python_env=python_env_paths(env_venv), limits=Limits(timeout_s=120)
    )
    repo = mini_chain.checkout(tmp_path / "episode")
    first = grader.grade(repo)
    assert first.score == 0.0 and first.tests_run == 4 and not first.cached
    m1, m2, m3 = mini_chain.milestones
    m3.apply(repo)  # mini/b.py only: mini/a.py's groups (1, 2, PASS_TO_PASS) are reused
    second = grader.grade(repo)
    assert second.cached == {1, 2} and second.pass_to_pass_cached and second.tests_run == 1
    assert second.score == 0.0 and second.reached == {3}
    assert "milestones 3 pass but count only once" in second.summary()
    m1.apply(repo)
    m2.apply(repo)
    third = grader.grade(repo)
    assert third.cached == {3} and third.tests_run == 3 and third.score == 1.0
    again = grader.grade(repo)  # nothing changed: no test process at all
    assert again.tests_run == 0 and again.cached == {1, 2, 3} and again.score == 1.0
    uncached = ChainGrader(
        mini_chain, python_env=python_env_paths(env_venv), limits=Limits(timeout_s=120), cache=False
    )
    assert uncached.grade(repo).tests_run == 4


def test_a_tampered_grading_is_never_cached(
    mini_chain: ChainTask, env_venv: Path, tmp_path: Path
) -> None:
    grader = ChainGrader(
        mini_chain, python_env=python_env_paths(env_venv), limits=Limits(timeout_s=120)
    )
    repo = mini_chain.checkout(tmp_path / "episode")
    for m in mini_chain.milestones:
        m.apply(repo)
    (repo / "conftest.py").write_text(
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n    yield\n"
    )
    forged = grader.grade(repo)
    assert forged.score == 0.0
    (repo / "conftest.py").unlink()
    honest = grader.grade(repo)
    assert honest.score == 1.0 and honest.tests_run == 4
