"""Whole-file writes: the old file or the new one, never a part, and no .tmp left behind."""

from __future__ import annotations

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
