"""Live bench: drive whole agent sessions against OpenAI-compatible servers and record every turn.

Entry point :func:`run_bench` (used by ``kvharness bench``); :class:`Runner` is the session driver,
:class:`HttpTransport` the one HTTP transport (over :mod:`kvharness.wire`).
"""

from kvharness.bench.config import BenchConfig, RetryPolicy
from kvharness.bench.run import BenchResult, reset_prefix_cache, run_bench
from kvharness.bench.runner import Counts, Runner
from kvharness.bench.transport import HttpTransport, Outcome, Transport

__all__ = [
    "BenchConfig",
    "BenchResult",
    "Counts",
    "HttpTransport",
    "Outcome",
    "RetryPolicy",
    "Runner",
    "Transport",
    "reset_prefix_cache",
    "run_bench",
]
