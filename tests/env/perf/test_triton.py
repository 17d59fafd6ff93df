"""A Triton candidate graded without a GPU: correctness under Triton's interpreter (torch and
triton from the vLLM environment), speed not measured."""

import json
import textwrap

import pytest

from kvharness.env.perf.grading import PerfGrader, gpu_devices
from kvharness.env.perf.task import load_perf_task
from kvharness.env.perf.verify import grade_solution
from kvharness.testing.vllm import vllm_python

from .conftest import QUICK

pytestmark = pytest.mark.vllm

REFERENCE = """\
import torch


def row_sq(x):
    return torch.stack([(row * row).sum() for row in x]) if len(x) else x.new_zeros(0)
"""

KERNEL = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _row_sq(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(v * v, axis=0))


def row_sq(x):
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _row_sq[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
"""

INPUTS = """\
import numpy as np


def cases(rng):
    return [
        (rng.standard_normal((1, 5)).astype(np.float32),),
        (rng.standard_normal((6, 33)).astype(np.float32),),
    ]


def timing(rng):
    return (rng.standard_normal((256, 256)).astype(np.float32),)
"""


@pytest.fixture
def triton_task(tmp_path):
    folder = tmp_path / "row_sq_triton"
    files = {
        "repo/solution.py": REFERENCE,
        "repo/README.md": "Make row_sq faster with a Triton kernel.\n",
        "hidden/reference.py": REFERENCE,
        "hidden/inputs.py": INPUTS,
    }
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(textwrap.dedent(text))
    doc = {
        "format": "kvharness-perf-task",
        "version": 1,
        "id": "row_sq_triton",
        "function": "row_sq",
        "backend": "triton",
        "target_speedup": 2.0,
        "calls": 3,
        "rtol": 1e-4,
        "atol": 1e-4,
        "origin": "made by the tests",
        "venv": str(vllm_python().parent.parent),
        "timeout_s": 120.0,
    }
    (folder / "task.json").write_text(json.dumps(doc))
    return load_perf_task(folder, doc)


@pytest.mark.skipif(bool(gpu_devices()), reason="this machine has a GPU: the kernel is timed")
def test_a_correct_kernel_passes_under_the_interpreter_and_is_not_timed(triton_task):
    g = grade_solution(PerfGrader(triton_task, policy=QUICK), KERNEL)
    assert g.correct and not g.timed, g.summary()
    assert g.score == 0.0
    assert "Triton's interpreter" in g.summary() and "speed not measured" in g.summary()


def test_a_wrong_kernel_fails_under_the_interpreter(triton_task):
    wrong = KERNEL.replace("tl.sum(v * v, axis=0)", "tl.sum(v, axis=0)")
    g = grade_solution(PerfGrader(triton_task, policy=QUICK), wrong)
    assert not g.correct and g.score == 0.0
    assert "case 0" in g.summary()
