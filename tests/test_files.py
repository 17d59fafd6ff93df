"""Whole-file writes: the old file or the new one, never a part, and no .tmp left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kvharness.files import replacing


def test_the_new_file_replaces_the_old_on_success(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_text("old")
    with replacing(path) as tmp:
        tmp.write_text("new")
        assert path.read_text() == "old"
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_tmp(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_text("old")
    with pytest.raises(OSError, match="No space left"), replacing(path) as tmp:
        tmp.write_text("ne")
        raise OSError(28, "No space left on device")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


def test_a_link_or_a_fifo_is_written_through_never_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    with replacing(link) as out:
        out.write_text("new")
    assert link.is_symlink() and real.read_text() == "new"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with replacing(fifo) as out:
            out.write_text("through")
        assert os.read(reader, 100) == b"through"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link.txt", "real.txt"]
