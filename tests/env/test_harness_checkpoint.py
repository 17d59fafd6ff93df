"""Episode checkpoints on disk: a workspace and a state round-trip exactly, links are never
followed, a failed write leaves the last checkpoint, a bad file is named."""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest

from kvharness.env.harness.checkpoint import CHECKPOINT, Checkpointer, CheckpointPlan
from kvharness.errors import FormatError


def _tree(root: Path) -> dict[str, object]:
    """Everything under ``root``: file bytes and modes, link targets, folders."""
    out: dict[str, object] = {}
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(here) / name
            rel = path.relative_to(root).as_posix()
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("X = 1\n")
    (repo / "pkg" / "sub" / "data.bin").write_bytes(bytes(range(256)))
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "outside").symlink_to("/etc")
    (repo / "inside").symlink_to("pkg/mod.py")
    (repo / "empty").mkdir()
    return repo


def test_a_workspace_and_its_state_round_trip(workspace: Path, tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path / "ck")
    assert ckpt.load() is None
    before = _tree(workspace)
    os.mkfifo(workspace / "pipe")  # an agent-made FIFO cannot be archived: listed, skipped
    ckpt.save({"steps": 7, "note": ["a", {"b": 1}]}, workspace)
    saved = ckpt.load()
    assert saved is not None
    assert saved.state["steps"] == 7 and saved.state["note"] == ["a", {"b": 1}]
    assert saved.state["skipped"] == ["pipe"]
    target = tmp_path / "fresh"
    target.mkdir()
    (target / "stale.txt").write_text("from the fresh checkout")
    saved.restore_repo(target)
    assert _tree(target) == before
    assert not (Path("/etc") / "mod.py").exists()


def test_a_failed_write_leaves_the_last_checkpoint(workspace: Path, tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path / "ck")
    ckpt.save({"steps": 1}, workspace)
    with pytest.raises(TypeError):
        ckpt.save({"steps": 2, "bad": object()}, workspace)
    assert sorted(p.name for p in ckpt.folder.iterdir()) == [CHECKPOINT]
    saved = ckpt.load()
    assert saved is not None and saved.state["steps"] == 1


def test_due_every_n_steps_or_m_seconds(workspace: Path, tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path / "ck", every_steps=3, every_s=3600)
    assert not ckpt.due(0) and not ckpt.due(2) and ckpt.due(3)
    ckpt.save({"steps": 3}, workspace)
    assert not ckpt.due(3) and not ckpt.due(5) and ckpt.due(6)
    soon = Checkpointer(tmp_path / "ck2", every_steps=100, every_s=1e-9)
    assert soon.due(1) and not soon.due(0)
    assert soon.due(0, calls=2)  # model calls alone move an episode on too
    soon.save({"steps": 0, "calls": 2}, workspace)
    assert not soon.due(0, calls=2) and soon.due(0, calls=3)


def test_progress_marks_and_clear(tmp_path: Path) -> None:
    ckpt = CheckpointPlan(tmp_path / "all").for_episode("task-1/0")
    assert ckpt.folder == tmp_path / "all" / "task-1" / "0"
    assert ckpt.progress() is None
    ckpt.mark(4)
    assert ckpt.progress() == 4
    ckpt.clear()
    assert not ckpt.folder.exists()
    with pytest.raises(ValueError, match="bad episode name"):
        CheckpointPlan(tmp_path).folder("../x/0")


def test_a_file_that_is_not_a_checkpoint_is_named(tmp_path: Path, workspace: Path) -> None:
    ckpt = Checkpointer(tmp_path / "ck")
    ckpt.folder.mkdir()
    ckpt.path.write_bytes(b"not a tar")
    with pytest.raises(FormatError, match=CHECKPOINT):
        ckpt.load()
    with tarfile.open(ckpt.path, "w") as tar:
        tar.add(workspace / "pkg" / "mod.py", "state.json")
    with pytest.raises(FormatError, match="not an episode checkpoint"):
        ckpt.load()


def test_prune_removes_only_the_folders_left_empty(workspace: Path, tmp_path: Path) -> None:
    plan = CheckpointPlan(tmp_path / "all")
    plan.for_episode("a/0").save({"steps": 1}, workspace)
    plan.for_episode("a/1").mark(3)
    plan.for_episode("a/1").clear()
    plan.for_episode("b/0").mark(1)
    plan.for_episode("b/0").clear()
    plan.prune()
    assert sorted(p.relative_to(plan.root).as_posix() for p in plan.root.rglob("*")) == [
        "a",
        "a/0",
        "a/0/checkpoint.tar",
    ]
    plan.for_episode("a/0").clear()
    plan.prune()
    assert not plan.root.exists()
