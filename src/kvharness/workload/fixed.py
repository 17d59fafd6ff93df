"""Fixed-shape requests: the isolated benchmark every serving benchmark runs, one flag away.

``fixed:requests=40,input=1000,output=32`` is 40 independent requests of 1,000 prompt tokens and
32 output tokens each, what vLLM's ``bench serve --dataset-name random`` and AIPerf's synthetic
prompts send. Options:

- ``spread=F`` draws each request's input and output length uniformly from ``[x (1 - F),
  x (1 + F)]`` (vLLM's ``--random-range-ratio``); 0, the default, makes every request the same;
- ``shared_prefix=F`` makes the first ``F`` of each request's input one prefix common to all
  (a system prompt: what a prefix cache can serve), the rest unique to the request; 0 by default,
  so nothing but the engine's own tokens can hit the cache;
- ``block_size`` and ``seed`` as for the synthetic generator.

Each request is a session of one turn, all starting at time 0: a bench run sends them as fast as
its ``--concurrency`` (or ``--rate``) lets it, and reports them as requests, not as sessions.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from kvharness.workload.chain import ChainBuilder
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.synthetic import bounded, check_bounds

__all__ = ["FixedConfig", "generate_fixed"]

_TOKENS = 10_000_000


@dataclass(frozen=True)
class FixedConfig:
    """Options of ``fixed:key=value,...``; each has its help string and bounds."""

    requests: int = bounded(40, "number of requests", 1, 1_000_000)
    input: int = bounded(1000, "prompt tokens per request", 1, _TOKENS)
    output: int = bounded(32, "output tokens per request", 1, _TOKENS)
    spread: float = bounded(
        0.0, "lengths drawn uniformly from [x(1-F), x(1+F)] (0: all alike)", 0, 0.99
    )
    shared_prefix: float = bounded(
        0.0, "fraction of each input that is one prefix common to every request", 0, 1
    )
    block_size: int = bounded(128, "block size of the chains (tokens)", 1, 1 << 20)
    seed: int = bounded(0, "random seed of the spread and of the requests' contents", 0, 2**63 - 1)

    def __post_init__(self) -> None:
        check_bounds(self, "fixed")


def _draw(rng: random.Random, x: int, spread: float) -> int:
    if not spread:
        return x
    return max(1, round(rng.uniform(x * (1 - spread), x * (1 + spread))))


def generate_fixed(cfg: FixedConfig) -> Workload:
    """The workload of ``cfg`` (deterministic in it): one single-turn session per request."""
    rng = random.Random(cfg.seed)
    prefix = round(cfg.input * cfg.shared_prefix)
    sessions = []
    for i in range(cfg.requests):
        n_in, n_out = _draw(rng, cfg.input, cfg.spread), _draw(rng, cfg.output, cfg.spread)
        builder = ChainBuilder(cfg.block_size)
        shared = min(prefix, n_in)
        builder.extend_segment(0, shared)
        # Distinct from the shared prefix's seed 0 and across requests and seeds.
        builder.extend_segment(((cfg.seed + 1) << 32) + i + 1, n_in - shared)
        sessions.append(Session(f"req-{i}", (Turn(builder.chain(), n_out),), 0.0))
    meta = {"source": "fixed", "config": asdict(cfg)}
    return Workload(tuple(sessions), cfg.block_size, "fixed", Arrival("trace"), meta)
