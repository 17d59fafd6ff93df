"""Episode checkpoints: the whole state of an episode, written atomically as it goes.

An episode's checkpoint is one file, ``<folder>/checkpoint.tar``: a tar archive holding
``state.json`` (the conversation as it will next be sent, the record of every model call, tool
run, submission and compaction so far, the step and call counters, the agent's own state, the
environment's counters and the policy version of every call) and ``repo/``, the agent's
workspace exactly as it was (files with their modes, folders, symbolic links never followed;
FIFOs, sockets and devices an agent made cannot be archived and are listed in the state as
``skipped``). It is written to a temporary name, flushed to disk (``fsync``), and renamed over
the last one, so whatever stops the writer (``kill -9``, a power cut) leaves the previous
checkpoint or the new one, never a torn one.

When: at a step boundary, before a model call, once ``every_steps`` steps or ``every_s``
seconds have passed since the last checkpoint (:meth:`Checkpointer.due`). A checkpoint taken
there holds no half-done action: every tool call of the last reply has run and its result is in
the conversation. Resuming (:func:`.loop.run_episode` with a checkpointer whose folder holds
one) restores the workspace and the counters, then goes on with the next model call; the steps
taken after the checkpoint by the interrupted run are lost with their side effects (the
workspace is the checkpoint's), and redone. A submission is scored once: those before the
checkpoint are restored with their scores, those after it never counted.

``<folder>/progress`` holds the steps the live episode has taken, rewritten after every step
(not synced: it only tells a resume how many steps it lost, :class:`~.episode.Resume`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvharness.errors import FormatError

__all__ = ["CHECKPOINT", "CHECKPOINT_FORMAT", "CheckpointPlan", "Checkpointer", "Saved"]

CHECKPOINT = "checkpoint.tar"
CHECKPOINT_FORMAT = "kvharness-checkpoint"
_VERSION = 1
_STATE = "state.json"
_REPO = "repo"
_PROGRESS = "progress"


@dataclass(frozen=True, slots=True)
class Saved:
    """A checkpoint as read back: its ``state`` document, and the archive it came from."""

    state: dict[str, Any]
    path: Path

    def restore_repo(self, repo: Path) -> None:
        """Make ``repo`` (an existing folder) exactly the workspace the checkpoint holds."""
        for child in list(repo.iterdir()):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        prefix = _REPO + "/"
        with tarfile.open(self.path) as tar:
            for member in tar.getmembers():
                if not member.name.startswith(prefix):
                    continue
                member.name = member.name[len(prefix) :]
                # Our own archive of a workspace: links may point anywhere (as the agent left
                # them), but no member may land outside ``repo``.
                tar.extract(member, repo, filter="tar")


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _add_tree(tar: tarfile.TarFile, root: Path) -> list[str]:
    """Archive ``root`` under ``repo/`` without following links; the special files skipped."""
    skipped: list[str] = []
    tar.add(root, _REPO, recursive=False)
    for here, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            path = Path(here) / name
            rel = path.relative_to(root).as_posix()
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
                tar.add(path, f"{_REPO}/{rel}", recursive=False)
            else:
                skipped.append(rel)
    return skipped


class Checkpointer:
    """The checkpoint of one episode in ``folder`` (see the module docstring): a checkpoint is
    due every ``every_steps`` steps or ``every_s`` seconds, whichever comes first."""

    def __init__(self, folder: Path, *, every_steps: int = 5, every_s: float = 60.0) -> None:
        if every_steps < 1 or every_s <= 0:
            raise ValueError("every_steps must be >= 1 and every_s > 0")
        self.folder = folder
        self.every_steps = every_steps
        self.every_s = every_s
        self._last_steps = self._last_calls = 0
        self._last_time = time.monotonic()

    @property
    def path(self) -> Path:
        return self.folder / CHECKPOINT

    def load(self) -> Saved | None:
        """The checkpoint in the folder (None when there is none); :class:`FormatError` when
        the file is not one."""
        path = self.path
        if not path.is_file():
            return None
        try:
            with tarfile.open(path) as tar:
                member = tar.extractfile(_STATE)
                if member is None:
                    raise KeyError(_STATE)
                state = json.loads(member.read())
        except (tarfile.TarError, KeyError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise FormatError(str(path), 1, f"not an episode checkpoint ({err})") from None
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise FormatError(str(path), 1, f"not a {CHECKPOINT_FORMAT} archive")
        if state.get("version") != _VERSION:
            raise FormatError(str(path), 1, f"unsupported version {state.get('version')!r}")
        self._note(state)
        return Saved(state, path)

    def due(self, steps: int, calls: int = 0) -> bool:
        """True when a checkpoint is due after ``steps`` steps and ``calls`` model calls: every
        ``every_steps`` steps, or after ``every_s`` seconds once anything moved (a model that
        calls no tool still builds a conversation worth keeping)."""
        if steps - self._last_steps >= self.every_steps:
            return True
        moved = (steps, calls) != (self._last_steps, self._last_calls)
        return moved and time.monotonic() - self._last_time >= self.every_s

    def save(self, state: dict[str, Any], repo: Path) -> None:
        """Write ``state`` (a JSON document; its ``steps`` and ``calls`` count the steps and
        model calls so far) and the workspace
        ``repo`` as the episode's checkpoint, atomically and durably. Blocking."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / (CHECKPOINT + ".tmp")
        try:
            with tmp.open("wb") as f:
                with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    skipped = _add_tree(tar, repo)
                    doc = {"format": CHECKPOINT_FORMAT, "version": _VERSION, **state}
                    doc["skipped"] = skipped
                    data = json.dumps(doc).encode()
                    info = tarfile.TarInfo(_STATE)
                    info.size, info.mtime = len(data), int(time.time())
                    tar.addfile(info, io.BytesIO(data))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.folder)
        self._note(state)

    def _note(self, state: dict[str, Any]) -> None:
        """Count from the checkpoint ``state`` (just written or read)."""
        self._last_steps = int(state.get("steps", 0))
        self._last_calls = int(state.get("calls", 0))
        self._last_time = time.monotonic()

    def mark(self, steps: int) -> None:
        """Note that the live episode has taken ``steps`` steps (see the module docstring)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / (_PROGRESS + ".tmp")
        tmp.write_text(f"{steps}\n")
        os.replace(tmp, self.folder / _PROGRESS)  # a reader never sees it half written

    def progress(self) -> int | None:
        """The steps the last live run of the episode had taken (None: unknown)."""
        try:
            return int((self.folder / _PROGRESS).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def clear(self) -> None:
        """Remove the episode's checkpoint folder (the episode's result is recorded)."""
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class CheckpointPlan:
    """Where a run keeps its episodes' checkpoints (``root/<task id>/<k>``) and how often."""

    root: Path
    every_steps: int = 5
    every_s: float = 60.0

    def folder(self, episode: str) -> Path:
        """The checkpoint folder of ``episode`` (``<task id>/<k>``)."""
        parts = Path(episode).parts
        if not parts or Path(episode).is_absolute() or ".." in parts:
            raise ValueError(f"bad episode name {episode!r}")
        return self.root.joinpath(*parts)

    def prune(self) -> None:
        """Remove the folders under :attr:`root` (and itself) that no checkpoint is left in."""
        if not self.root.is_dir():
            return
        for here, _, _ in sorted(os.walk(self.root), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):  # not empty: a checkpoint lives there
                os.rmdir(here)

    def for_episode(self, episode: str) -> Checkpointer:
        return Checkpointer(
            self.folder(episode), every_steps=self.every_steps, every_s=self.every_s
        )
