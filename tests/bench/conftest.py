"""Factories for bench tests: small coding-agent workloads built from block chains."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kvharness.bench.config import BenchConfig, RetryPolicy
from kvharness.testing.fake_openai import FakeOpenAI
from kvharness.testing.workloads import agent_workload as _agent_workload
from kvharness.workload.chain import materialise
from kvharness.workload.format import save
from kvharness.workload.model import Workload


@pytest.fixture
def agent_workload_file(tmp_path: Path) -> Path:
    """The default :func:`agent_workload` saved in the project's workload format."""
    path = tmp_path / "agent.jsonl"
    save(_agent_workload(), path)
    return path


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """A FAKE OpenAI-compatible server on loopback (its ``plan`` may be set to inject faults)."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


def _bench_config(backends: Sequence[str], workload: Path, **kw: Any) -> BenchConfig:
    """A config for tests: fast retries, no metrics scrape, model "stub" unless given."""
    retry = RetryPolicy(max_attempts=kw.pop("max_attempts", 3),
                        backoff_s=kw.pop("backoff_s", 0.01),
                        timeout_s=kw.pop("timeout_s", 30.0))  # fmt: skip
    kw.setdefault("model", "stub")
    kw.setdefault("scrape_metrics", False)
    return BenchConfig(backends=tuple(backends), workload=str(workload), retry=retry, **kw)


def _first_ids(workload: Workload, session: int, n: int = 6, vocab: int = 1024) -> bytes:
    """The start of a session's prompt as it appears in a request body (to aim faults at it)."""
    ids = materialise(workload.sessions[session].turns[0].input, vocab)[:n]
    return b'"prompt":[' + b",".join(b"%d" % i for i in ids)


@pytest.fixture(name="agent_workload")
def agent_workload_factory() -> Callable[..., Workload]:
    """Factory: ``agent_workload(sessions=3, repos=1, repo_tokens=3000, turns=4, ...)``."""
    return _agent_workload


@pytest.fixture(name="bench_config", params=["asyncio", "uvloop"])
def bench_config_factory(request: pytest.FixtureRequest) -> Callable[..., BenchConfig]:
    """Factory: ``bench_config(backends, workload_path, **BenchConfig/RetryPolicy fields)``; tests
    using it run once per event loop (the client's protocol callbacks differ between them)."""
    loop = request.param

    def make(backends: Sequence[str], workload: Path, **kw: Any) -> BenchConfig:
        kw.setdefault("event_loop", loop)
        return _bench_config(backends, workload, **kw)

    return make


@pytest.fixture(name="first_ids")
def first_ids_factory() -> Callable[..., bytes]:
    """Factory: ``first_ids(workload, session_index)`` -> bytes that mark its requests."""
    return _first_ids
