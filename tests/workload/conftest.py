from __future__ import annotations

from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"


@pytest.fixture(scope="session")
def traces() -> Path:
    assert TRACES.is_dir(), f"shared traces not found at {TRACES}"
    return TRACES
