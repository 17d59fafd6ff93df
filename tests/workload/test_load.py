from __future__ import annotations

from pathlib import Path

import pytest

from kvharness.errors import FormatError, UserError
from kvharness.workload.load import load_workload


def test_a_name_the_system_refuses_is_a_format_error(tmp_path: Path) -> None:
    spec = str(tmp_path / ("x" * 5000))
    with pytest.raises(FormatError) as info:
        load_workload(spec)
    assert str(info.value) == f"{spec}: cannot read: File name too long"


def test_a_missing_workload_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such workload"):
        load_workload(str(tmp_path / "missing.jsonl"))


def test_the_dispatcher_passes_each_loaders_faults_through(tmp_path: Path) -> None:
    (tmp_path / "a.traj").write_text('{"history": [{"role": "user"}]}')
    with pytest.raises(FormatError, match=r"a\.traj:1: no assistant message"):
        load_workload(str(tmp_path))
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n\n")
    with pytest.raises(FormatError, match=r"t\.jsonl: no requests"):
        load_workload(str(trace))
