"""A performance task: make a slow but correct function faster without changing its results.

On disk a task is a folder of a suite (``kvharness.env.task`` holds the suite index)::

    <task id>/
      task.json            the fields of :class:`PerfTask` (the agent never sees it)
      repo/                what an episode copies for the agent: solution.py (the slow reference,
                           the file to make faster) and README.md (the task statement)
      hidden/              inputs.py (the seeded input generators) and reference.py (a pristine
                           copy of the reference: grading never takes the agent's copy of it)
      fix/solution.py      a known fast solution (the oracle)
      slower/solution.py   a correct solution well short of the target (partial credit)

Only ``solution.py`` of the agent's repository is graded (``grading.py``); the rest of its
repository is scratch space.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvharness.env._folder import TaskFolder
from kvharness.errors import FormatError

__all__ = ["BACKENDS", "PERF_TASK_FORMAT", "SOLUTION", "PerfTask", "load_perf_task"]

PERF_TASK_FORMAT = "kvharness-perf-task"
_VERSION = 1
SOLUTION = "solution.py"
"""The one file of the agent's repository that grading takes."""
BACKENDS = ("numpy", "triton")
"""``numpy``: numpy arrays in and out, timed on the CPU. ``triton``: torch tensors in and out on
the GPU (timed there), or on the CPU under ``TRITON_INTERPRET=1`` where no GPU is visible (then
correctness is checked and speed is not measured)."""

SYSTEM_PROMPT = (
    "You are a performance engineer. The working directory holds solution.py, a correct but slow "
    "implementation of one function, and README.md, which says what it computes. Make the "
    "function faster without changing its results; there is no network. `submit` grades "
    "solution.py: hidden tests on seeded random inputs check its results against the original's, "
    "and the original and your version are timed against each other in fresh processes. A "
    "correct submission scores by its speedup; an incorrect one scores 0. solution.py may use "
    "Python's standard library and the libraries README.md names, but no threads, processes or "
    "code built at run time (such a submission is rejected). You may submit more than once, "
    "within a budget."
)


@dataclass(frozen=True, slots=True)
class PerfTask(TaskFolder):
    """One performance task, as stored in ``task.json`` (``root`` and ``issue`` are not stored:
    ``issue`` is ``repo/README.md``).

    ``function``: the name ``solution.py`` defines. ``target_speedup``: the speedup (lower end of
    its 95% interval) that earns score 1. ``calls``: timed calls per process, each on fresh
    inputs. ``rtol`` / ``atol``: float outputs must match the reference's within
    ``numpy.allclose(rtol, atol, equal_nan=True)``; integer and boolean outputs exactly.
    ``origin``: the real code the kernel comes from. ``venv``: the Python environment that runs
    the task (None: the grading interpreter's). ``timeout_s``: wall limit of one process.
    """

    id: str
    function: str
    backend: str
    target_speedup: float
    calls: int
    rtol: float
    atol: float
    origin: str
    venv: str | None = None
    timeout_s: float = 120.0
    issue: str = field(default="", compare=False)
    root: Path = field(default=Path("."), compare=False)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"task {self.id}: backend must be one of {', '.join(BACKENDS)}")
        if not self.target_speedup > 1:
            raise ValueError(f"task {self.id}: target_speedup must be > 1")
        if self.calls < 1:
            raise ValueError(f"task {self.id}: calls must be >= 1")
        if self.rtol < 0 or self.atol < 0:
            raise ValueError(f"task {self.id}: tolerances must be >= 0")
        if not self.function.isidentifier():
            raise ValueError(f"task {self.id}: function must be a Python name")

    @property
    def slower_dir(self) -> Path:
        return self.root / "slower"

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def apply_fix(self, repo: Path) -> None:
        """Write the oracle's solution into ``repo``."""
        shutil.copyfile(self.fix_dir / SOLUTION, repo / SOLUTION)

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("root")
        doc.pop("issue")
        return {"format": PERF_TASK_FORMAT, "version": _VERSION, **doc}

    def save(self) -> None:
        """Write ``task.json`` into :attr:`root`."""
        (self.root / "task.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "function": str,
    "backend": str,
    "target_speedup": (int, float),
    "calls": int,
    "rtol": (int, float),
    "atol": (int, float),
    "origin": str,
}


def load_perf_task(folder: Path, doc: dict[str, Any]) -> PerfTask:
    """The task in ``folder`` from its parsed ``task.json`` ``doc``; :class:`FormatError` naming
    the file and field when something is missing or wrong."""
    path = folder / "task.json"
    if doc.get("version") != _VERSION:
        raise FormatError(
            str(path), 1, f"unsupported {PERF_TASK_FORMAT} version {doc.get('version')!r}"
        )
    for key, kind in _FIELDS.items():
        if not isinstance(doc.get(key), kind) or isinstance(doc.get(key), bool):
            raise FormatError(str(path), 1, f"field {key!r} is missing or of the wrong type")
    venv = doc.get("venv")
    if venv is not None and not isinstance(venv, str):
        raise FormatError(str(path), 1, "field 'venv' must be a path or null")
    for rel in ("repo/solution.py", "repo/README.md", "hidden/inputs.py", "hidden/reference.py"):
        if not (folder / rel).is_file():
            raise FormatError(str(folder), None, f"{rel} is missing")
    try:
        return PerfTask(
            id=doc["id"],
            function=doc["function"],
            backend=doc["backend"],
            target_speedup=float(doc["target_speedup"]),
            calls=doc["calls"],
            rtol=float(doc["rtol"]),
            atol=float(doc["atol"]),
            origin=doc["origin"],
            venv=venv,
            timeout_s=float(doc.get("timeout_s", 120.0)),
            issue=(folder / "repo" / "README.md").read_text(),
            root=folder,
        )
    except ValueError as err:
        raise FormatError(str(path), 1, str(err)) from None
