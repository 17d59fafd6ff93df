"""The folder layout every kind of task shares (coding tasks, ``task.py``; performance tasks,
``perf/task.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["TaskFolder"]


class TaskFolder:
    """The folders every task has under its ``root``: ``repo/`` (what an episode copies for the
    agent), ``hidden/`` (what grading adds and the agent never sees) and ``fix/`` (the oracle's
    solution)."""

    __slots__ = ()
    root: Path

    @property
    def repo_dir(self) -> Path:
        """The agent-visible snapshot (never modify it; copy it with :meth:`checkout`)."""
        return self.root / "repo"

    @property
    def hidden_dir(self) -> Path:
        return self.root / "hidden"

    @property
    def fix_dir(self) -> Path:
        return self.root / "fix"

    def checkout(self, dest: Path) -> Path:
        """Copy the agent-visible repository to ``dest`` (must not exist) and return ``dest``."""
        shutil.copytree(self.repo_dir, dest, symlinks=True)
        return dest
