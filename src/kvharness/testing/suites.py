"""Task suites the benchmarks build once and reuse, under a cache folder."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

from kvharness.env.chain import SMOKE_CHAIN_SUITE, ensure_chain_suite
from kvharness.env.tasks import ensure_venv

__all__ = ["built_once", "chain_smoke_suite"]


def built_once(folder: Path, name: str, key: bytes, build: Callable[[Path], object]) -> Path:
    """``folder/<name>-<hash of key>``, built by ``build(path)`` unless a suite (its
    ``suite.json``) is there already: keyed by what defines it (a definition, the code that
    builds it), so a change to either builds anew. Safe against concurrent test sessions (a
    lock file beside it)."""
    out = folder / f"{name}-{hashlib.sha256(key).hexdigest()[:12]}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test session may be building it
        if not (out / "suite.json").exists():
            if out.exists():
                shutil.rmtree(out)
            build(out)
    return out


def chain_smoke_suite(cache: Path) -> Path:
    """The chain smoke suite (one inflection task of five milestones) in
    ``cache/chain-bench/chain-smoke``, built on first use with the tasks' venv
    (``cache/env-venv``) and sdists (``cache/sdists``)."""
    out = cache / "chain-bench" / SMOKE_CHAIN_SUITE.name
    venv = ensure_venv(cache / "env-venv", SMOKE_CHAIN_SUITE.test_deps)
    ensure_chain_suite(SMOKE_CHAIN_SUITE, out, venv=venv, cache=cache / "sdists")
    return out
