"""The performance grader on a real sandbox: correct and faster pays, anything else does not."""

import math
import textwrap

import pytest

from kvharness.env.perf.grading import PerfGrader
from kvharness.env.perf.verify import grade_solution

from .conftest import FAST, QUICK, REFERENCE, SLOWER, write_task


@pytest.fixture
def grader(perf_task):
    return PerfGrader(perf_task, policy=QUICK)


def test_the_oracle_earns_full_reward(grader):
    g = grade_solution(grader, FAST)
    assert g.correct and g.timed, g.summary()
    assert g.score == 1.0, g.summary()
    assert g.speedup.low >= 4.0
    assert g.reference_s > g.candidate_s > 0
    assert g.reference_spread is not None and g.reference_spread >= 0
    assert "target 4x" in g.summary()


def test_the_unchanged_reference_earns_nothing(grader):
    g = grade_solution(grader, REFERENCE)
    assert g.correct and g.timed
    assert g.score == 0.0
    assert 0.5 < g.speedup.estimate < 2.0


def test_correct_but_short_of_the_target_earns_partial_credit(tmp_path):
    """A correct solution faster than the reference but short of the target is paid by how
    far it got, on a log scale, from what its rounds prove (the interval's lower end)."""
    task = write_task(tmp_path / "far", target=1000.0)
    g = grade_solution(PerfGrader(task, policy=QUICK), SLOWER)
    assert g.correct and g.speedup.low > 1.05, g.summary()
    assert 0.0 < g.score < 1.0
    assert g.score == pytest.approx(math.log(g.speedup.low / 1.05) / math.log(1000.0 / 1.05))


def test_a_wrong_answer_scores_zero_and_says_which_case(grader):
    wrong = FAST.replace('"ij,ij->i", x, x)', '"ij,ij->i", x, x) + 1e-3')
    g = grade_solution(grader, wrong)
    assert not g.correct and g.score == 0.0
    assert g.summary().startswith("score 0: incorrect: case ")


def test_an_exception_scores_zero_with_its_message(grader):
    g = grade_solution(grader, "def row_sq(x):\n    raise ValueError('nope')\n")
    assert not g.correct and g.score == 0.0
    assert "ValueError: nope" in g.summary()


def test_missing_function_or_file_scores_zero(grader, tmp_path):
    g = grade_solution(grader, "def other(x):\n    return x\n")
    assert g.score == 0.0 and not g.correct
    assert grader.grade(tmp_path).score == 0.0  # no solution.py at all
    assert "missing" in grader.grade(tmp_path).summary()


def test_a_candidate_slower_than_the_reference_scores_zero(grader):
    slow = REFERENCE.replace("total += v * v", "total += sum([v * v] * 2) / 2")
    g = grade_solution(grader, slow)
    assert g.correct and g.score == 0.0
    assert g.speedup.estimate < 1.0


def test_a_hanging_candidate_is_stopped_and_scores_zero(perf_task):
    """A timed call may take ten times the reference's (at least 5 s), then the grading ends."""
    hang = FAST.replace(
        "def row_sq(x):\n",
        "_large = []\n\n\ndef row_sq(x):\n"
        "    _large.extend([1] if x.size > 10_000 else [])\n"
        "    while len(_large) > 1:\n"
        "        pass\n",
    )
    g = grade_solution(PerfGrader(perf_task, policy=QUICK), hang)
    assert g.score == 0.0 and not g.correct
    assert "took too long" in g.summary()


def test_printing_does_not_break_the_exchange(grader):
    chatty = FAST.replace(
        "    return np.einsum", "    print('D 0')\n    print('O 12')\n    return np.einsum"
    )
    g = grade_solution(grader, chatty)
    assert g.score == 1.0, g.summary()


def test_only_solution_py_is_taken(grader, tmp_path):
    (tmp_path / "solution.py").write_text(
        "import numpy as np\nimport helper\n\n\ndef row_sq(x):\n    return helper.f(x)\n"
    )
    (tmp_path / "helper.py").write_text("def f(x):\n    return (x * x).sum(axis=1)\n")
    (tmp_path / "numpy.py").write_text("raise SystemExit('shadowed')\n")
    g = grader.grade(tmp_path)
    assert g.score == 0.0 and "ModuleNotFoundError" in g.summary()


def test_the_summary_never_names_hidden_inputs(grader):
    g = grade_solution(grader, "def row_sq(x):\n    return x.sum(axis=1)\n")
    text = g.summary()
    assert "timing" not in text and "seed" not in text
    assert text.startswith("score 0: incorrect")


def test_grading_stops_as_soon_as_the_policy_is_settled(perf_task):
    """Any interval is tight enough for ``rel_ci=inf``: the grader stops at ``min_rounds``, not
    at ``max_rounds`` (which intervals settle is ``test_stats``'s to check, on fixed ratios)."""
    from kvharness.env.perf.stats import TimingPolicy

    policy = TimingPolicy(min_rounds=2, max_rounds=6, rel_ci=math.inf)
    g = grade_solution(PerfGrader(perf_task, policy=policy), FAST)
    assert g.speedup.rounds == 2


def test_inputs_are_fresh_for_every_grading(perf_task, tmp_path):
    """A candidate that records its inputs to a file it can keep would see new ones each time:
    it cannot: nothing it writes outlives its process (the sandbox keeps no files)."""
    spy = textwrap.dedent(
        """\
        import numpy as np
        from pathlib import Path


        def row_sq(x):
            log = Path("seen.txt")
            n = int(log.read_text()) if log.exists() else 0
            log.write_text(str(n + 1))
            if n:
                return np.zeros(x.shape[0])
            return np.einsum("ij,ij->i", x, x)
        """
    )
    g = grade_solution(PerfGrader(perf_task, policy=QUICK), spy)
    assert not g.correct  # the second case in the same process sees its own note
    assert not (perf_task.repo_dir / "seen.txt").exists()


def test_a_rounds_timed_calls_run_pinned_to_one_cpu(grader):
    """Both sides of a round run on the same one CPU, so a busier CPU slows both alike: this
    candidate raises on a timed call (the large inputs) unless it is pinned to one CPU."""
    pinned = "import os\n\n" + FAST.replace(
        "def row_sq(x):\n",
        "def row_sq(x):\n"
        "    if x.size > 10_000 and len(os.sched_getaffinity(0)) != 1:\n"
        "        raise RuntimeError('not pinned')\n",
    )
    g = grade_solution(grader, pinned)
    assert g.correct and g.score == 1.0, g.summary()
