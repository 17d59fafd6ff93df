"""A small performance task made by the tests: per-row sums of squares."""

import json
import textwrap
from pathlib import Path

import pytest

from kvharness.env.perf.stats import TimingPolicy
from kvharness.env.perf.task import PerfTask, load_perf_task

REFERENCE = '''\
"""Per-row sum of squares, one element at a time."""

import numpy as np


def row_sq(x):
    out = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        total = 0.0
        for v in x[i].tolist():
            total += v * v
        out[i] = total
    return out
'''

FAST = """\
import numpy as np


def row_sq(x):
    return np.einsum("ij,ij->i", x, x)
"""

SLOWER = """\
import numpy as np


def row_sq(x):
    out = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        row = x[i]
        out[i] = float(row @ row) + 0.0 * sum(row[: min(len(row), 20)].tolist())
    return out
"""

INPUTS = """\
import numpy as np


def cases(rng):
    return [
        (np.zeros((0, 3)),),
        (np.ones((1, 1)),),
        (rng.standard_normal((7, 5)),),
        (rng.standard_normal((3, 0)),),
        (rng.standard_normal((64, 33)) * 1e3,),
    ]


def timing(rng):
    return (rng.standard_normal((4000, 120)),)
"""


def write_task(root: Path, *, reference=REFERENCE, fast=FAST, slower=SLOWER, target=4.0):
    folder = root / "row_sq"
    for rel, text in {
        "repo/solution.py": reference,
        "repo/README.md": "Make row_sq in solution.py faster: per-row sums of squares.\n",
        "hidden/reference.py": reference,
        "hidden/inputs.py": INPUTS,
        "fix/solution.py": fast,
        "slower/solution.py": slower,
    }.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(textwrap.dedent(text))
    doc = {
        "format": "kvharness-perf-task",
        "version": 1,
        "id": "row_sq",
        "function": "row_sq",
        "backend": "numpy",
        "target_speedup": target,
        "calls": 3,
        "rtol": 1e-9,
        "atol": 1e-9,
        "origin": "made by the tests",
        "timeout_s": 60.0,
    }
    (folder / "task.json").write_text(json.dumps(doc))
    return load_perf_task(folder, doc)


QUICK = TimingPolicy(min_rounds=2, max_rounds=4, rel_ci=0.25, budget_s=30.0)
"""Enough rounds to tell 1x from 20x; the precise figures are the benchmark's. The tests' task
asks for 4x: SLOWER is about 2.4x, FAST about 100x in-process, so that neither the per-call cost
of the timing exchange nor a loaded machine brings FAST's proven speedup near the target."""


@pytest.fixture
def perf_task(tmp_path) -> PerfTask:
    return write_task(tmp_path / "suite")
