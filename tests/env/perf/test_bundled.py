"""Every bundled performance task, built as a suite and graded for real: its oracle earns the
full reward, its unchanged reference nothing, its slower solution partial credit. A Triton task,
on a machine without a GPU, is checked for correctness under Triton's interpreter only."""

import json

import pytest

from kvharness.env.perf.grading import PerfGrader, gpu_devices
from kvharness.env.perf.stats import TimingPolicy
from kvharness.env.perf.suite import SOURCES, build_perf_suite, bundled_tasks
from kvharness.env.perf.task import SOLUTION
from kvharness.env.perf.verify import grade_solution, verify_perf_task
from kvharness.testing.vllm import vllm_python

pytestmark = pytest.mark.slow

POLICY = TimingPolicy(min_rounds=4, max_rounds=6, rel_ci=0.25)
NUMPY = [
    t
    for t in bundled_tasks()
    if json.loads((SOURCES / t / "meta.json").read_text())["backend"] == "numpy"
]
TRITON = [t for t in bundled_tasks() if t not in NUMPY]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """The bundled suite; its Triton tasks only where the vLLM environment (torch, triton) is
    there (`make test` builds it; `make unit` runs no test that needs them)."""
    out = tmp_path_factory.mktemp("perf") / "suite"
    try:
        torch_venv = vllm_python().parent.parent
    except RuntimeError:
        torch_venv = None
    tasks, _ = build_perf_suite(out, torch_venv=torch_venv)
    return {t.id: t for t in tasks}


def test_there_are_at_least_twelve_numpy_tasks_and_a_triton_one():
    assert len(NUMPY) >= 12 and TRITON


@pytest.mark.parametrize("task_id", NUMPY)
def test_oracle_full_reference_none_slower_partial(suite, task_id):
    check = verify_perf_task(suite[task_id], policy=POLICY)
    assert check.ok, check.problems


@pytest.mark.vllm
@pytest.mark.skipif(bool(gpu_devices()), reason="this machine has a GPU: the kernels are timed")
@pytest.mark.parametrize("task_id", TRITON)
def test_triton_solutions_are_correct_under_the_interpreter(suite, task_id):
    task = suite[task_id]
    grader = PerfGrader(task, policy=POLICY)
    for folder in (task.fix_dir, task.slower_dir, task.repo_dir):
        g = grade_solution(grader, folder / SOLUTION)
        assert g.correct and not g.timed, g.summary()
    wrong = (task.fix_dir / SOLUTION).read_text().replace("tl.exp(", "tl.exp(2.0 * ")
    assert wrong != (task.fix_dir / SOLUTION).read_text()
    assert not grade_solution(grader, wrong).correct
