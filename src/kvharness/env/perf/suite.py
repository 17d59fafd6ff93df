"""The bundled performance tasks, and the suite folder built from them.

Each task's sources live in ``tasks/<id>/`` of this package: ``meta.json`` (the fields of
:class:`~kvharness.env.perf.task.PerfTask` but ``id``), ``README.md`` (the statement),
``reference.py`` (slow and correct), ``fast.py`` (the oracle), ``slower.py`` (correct, well short
of the target) and ``inputs.py`` (``cases(rng)`` and ``timing(rng)``). :func:`build_perf_suite`
lays them out as a suite (``task.py`` describes the layout) that ``kvharness env run``, the
environments and the adapters load like a coding suite.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from kvharness.env.perf.task import SOLUTION, PerfTask, load_perf_task
from kvharness.env.task import write_suite_index
from kvharness.errors import UserError

__all__ = ["SOURCES", "build_perf_suite", "bundled_tasks"]

SOURCES = Path(__file__).with_name("tasks")
"""Where the bundled tasks' sources are."""


def bundled_tasks() -> list[str]:
    """Ids of the bundled tasks, sorted."""
    return sorted(p.name for p in SOURCES.iterdir() if (p / "meta.json").is_file())


def build_perf_suite(
    out: Path, *, torch_venv: Path | None = None, only: Sequence[str] | None = None
) -> tuple[list[PerfTask], list[str]]:
    """Write the suite of the bundled tasks (or of ``only``) to ``out``; returns the tasks and
    the ids left out. Numpy tasks run in this interpreter's environment; ``triton`` tasks need
    ``torch_venv``, an environment with torch and triton (``.venv-vllm`` has both), and are left
    out without one."""
    ids = bundled_tasks()
    if only:
        unknown = sorted(set(only) - set(ids))
        if unknown:
            raise UserError(f"no bundled task {', '.join(unknown)}; choose from {', '.join(ids)}")
        ids = [i for i in ids if i in only]
    if torch_venv is not None and not (torch_venv / "bin" / "python").exists():
        raise UserError(f"{torch_venv}: not a Python environment (no bin/python)")
    out.mkdir(parents=True, exist_ok=True)
    tasks, skipped = [], []
    for task_id in ids:
        src = SOURCES / task_id
        meta = json.loads((src / "meta.json").read_text())
        if meta["backend"] == "triton":
            if torch_venv is None:
                skipped.append(task_id)
                continue
            meta["venv"] = str(torch_venv.absolute())
        else:
            meta["venv"] = sys.prefix
        folder = out / task_id
        if folder.exists():
            shutil.rmtree(folder)
        for rel, name in (
            ("repo", "reference.py"),
            ("hidden", "reference.py"),
            ("hidden", "inputs.py"),
            ("fix", "fast.py"),
            ("slower", "slower.py"),
        ):
            (folder / rel).mkdir(parents=True, exist_ok=True)
            dest = SOLUTION if name in ("fast.py", "slower.py") or rel == "repo" else name
            shutil.copyfile(src / name, folder / rel / dest)
        shutil.copyfile(src / "README.md", folder / "repo" / "README.md")
        doc = {"format": "kvharness-perf-task", "version": 1, "id": task_id, **meta}
        (folder / "task.json").write_text(json.dumps(doc, indent=2) + "\n")
        tasks.append(load_perf_task(folder, doc))
    write_suite_index(out, [t.id for t in tasks], {"kind": "perf", "skipped": skipped})
    return tasks, skipped
