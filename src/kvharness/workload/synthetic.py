"""A seeded synthetic coding-agent workload generator.

Calibrated to published statistics of real coding-agent sessions (shared/traces/README.md: real
Claude Code / Codex sessions, TraceLab 2026): about 84 steps a session, about 96% of input tokens
served from cache, a median append of 700-800 tokens a step at 64k-256k contexts, tool latency
median 125-626 ms with a heavy tail reaching minutes. Structure:

- one system prompt shared by every session;
- ``repos`` repositories, each a large context shared by the sessions working on it;
- per session a task message, then steps: the model's reply (``output_tokens``) and the tool's
  output are appended to the context before the next call; the gap before a call is the tool's run
  time, drawn per tool (read/grep/edit are fast, bash slower, test runs slow with a Pareto tail).

Everything is drawn from one ``random.Random(seed)``: the same config gives the same workload.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, fields
from typing import TypeVar

from kvharness.workload.chain import ChainBuilder
from kvharness.workload.model import Arrival, Session, Turn, Workload

__all__ = ["TOOLS", "SyntheticConfig", "bounded", "check_bounds", "generate"]


T = TypeVar("T")


def bounded(default: T, help: str, lo: float, hi: float) -> T:
    """A generator option: a dataclass field with its help string and its bounds ``[lo, hi]``
    (the CLI shows both; :func:`check_bounds` checks them)."""
    return field(default=default, metadata={"help": help, "bounds": (lo, hi)})


def check_bounds(config: object, name: str) -> None:
    """Raise ValueError naming the first option of ``config`` (a dataclass of :func:`bounded`
    fields, spelled ``name:...``) outside its bounds."""
    for f in fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        if f.metadata.get("bounds") is None:  # a named choice, checked by its config
            continue
        lo, hi = f.metadata["bounds"]
        if not lo <= value <= hi:  # NaN fails too
            raise ValueError(f"{name} option {f.name} must be in [{lo:g}, {hi:g}], got {value}")


_TOKENS = 10_000_000
"""Bound on every token count (a context of ten million tokens)."""


@dataclass(frozen=True)
class SyntheticConfig:
    """Options of the generator; each has a help string (shown by ``kvharness workload --help``)."""

    sessions: int = bounded(
        32, "number of agent sessions (about 0.4 MB each at the defaults)", 1, 100_000
    )
    repos: int = bounded(4, "repositories; sessions are spread over them", 1, 100_000)
    steps_median: float = bounded(
        70.0, "median model calls per session (lognormal; mean ~84)", 1, 10_000
    )
    steps_sigma: float = bounded(0.6, "lognormal sigma of calls per session", 0.01, 4)
    steps_max: int = bounded(300, "cap on calls per session", 1, 10_000)
    system_tokens: int = bounded(2000, "system prompt tokens, shared by all sessions", 1, _TOKENS)
    repo_tokens_median: float = bounded(24000.0, "median repository context tokens", 1, _TOKENS)
    task_tokens: int = bounded(400, "task description tokens, one per session", 1, _TOKENS)
    append_median: float = bounded(600.0, "median tool-output tokens appended per step", 1, _TOKENS)
    append_sigma: float = bounded(0.9, "lognormal sigma of appended tokens", 0.01, 4)
    output_median: float = bounded(150.0, "median output tokens per call", 1, _TOKENS)
    output_sigma: float = bounded(0.7, "lognormal sigma of output tokens", 0.01, 4)
    rewrite_prob: float = bounded(
        0.06, "chance per step that the harness rewrites history (compaction): a miss", 0, 1
    )
    max_context: int = bounded(
        256_000, "a session ends when its context would exceed this", 1, _TOKENS
    )
    rate: float = bounded(0.2, "session arrivals per second (Poisson)", 1e-6, 1e6)
    block_size: int = bounded(128, "block size of the generated chains (tokens)", 1, 1 << 20)
    seed: int = bounded(0, "random seed", 0, 2**63 - 1)

    def __post_init__(self) -> None:
        check_bounds(self, "synthetic")


@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    weight: float
    gap_median: float  # seconds
    gap_sigma: float
    tail_prob: float  # chance of a Pareto-tailed long run
    tail_min: float  # seconds
    append_scale: float  # multiplies the appended tokens


TOOLS: tuple[_Tool, ...] = (
    _Tool("read", 0.30, 0.08, 0.8, 0.00, 0.0, 1.5),
    _Tool("grep", 0.15, 0.15, 0.9, 0.00, 0.0, 0.8),
    _Tool("edit", 0.25, 0.12, 0.6, 0.00, 0.0, 0.4),
    _Tool("bash", 0.20, 0.60, 1.2, 0.03, 10.0, 1.0),
    _Tool("test", 0.10, 4.00, 1.0, 0.10, 30.0, 1.2),
)
_PARETO_ALPHA = 1.5


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(median), sigma)


def _tool_gap(rng: random.Random, tool: _Tool) -> float:
    gap = _lognormal(rng, tool.gap_median, tool.gap_sigma)
    if tool.tail_prob and rng.random() < tool.tail_prob:
        gap += tool.tail_min * rng.paretovariate(_PARETO_ALPHA)
    return min(gap, 1800.0)


def _build(block_size: int, segments: list[tuple[int, int]]) -> ChainBuilder:
    builder = ChainBuilder(block_size)
    for seed, n in segments:
        builder.extend_segment(seed, n)
    return builder


def generate(config: SyntheticConfig | None = None) -> Workload:
    """Generate a workload (deterministic in ``config``)."""
    cfg = config or SyntheticConfig()
    rng = random.Random(cfg.seed)
    repo_tokens = [
        max(1, int(_lognormal(rng, cfg.repo_tokens_median, 0.5))) for _ in range(cfg.repos)
    ]
    weights = [t.weight for t in TOOLS]
    sessions = []
    t_start = 0.0
    seeds = iter(range(1 << 20, 1 << 62))  # distinct segment seeds; 0 and small ints are shared
    for s in range(cfg.sessions):
        repo = rng.randrange(cfg.repos)
        # The context as (seed, tokens) segments: system prompt, repository, task, then steps.
        segments = [
            (0, cfg.system_tokens),
            (1 + repo, repo_tokens[repo]),
            (next(seeds), cfg.task_tokens),
        ]
        builder = _build(cfg.block_size, segments)
        steps = min(
            cfg.steps_max, max(2, round(_lognormal(rng, cfg.steps_median, cfg.steps_sigma)))
        )
        turns: list[Turn] = []
        gap, tool_name = 0.0, None
        for _ in range(steps):
            out = max(1, int(_lognormal(rng, cfg.output_median, cfg.output_sigma)))
            turns.append(Turn(builder.chain(), out, gap, tool_name))
            tool = rng.choices(TOOLS, weights)[0]
            append = max(
                1, int(_lognormal(rng, cfg.append_median, cfg.append_sigma) * tool.append_scale)
            )
            if builder.num_tokens + out + append + cfg.output_median > cfg.max_context:
                break
            for n in (out, append):
                segments.append((next(seeds), n))
                builder.extend_segment(*segments[-1])
            if len(segments) > 4 and rng.random() < cfg.rewrite_prob:
                # Compaction: history after a random step is replaced by a summary half its size.
                cut = rng.randrange(3, len(segments) - 1)
                dropped = sum(n for _, n in segments[cut:])
                segments[cut:] = [(next(seeds), max(1, dropped // 2))]
                builder = _build(cfg.block_size, segments)
            gap, tool_name = _tool_gap(rng, tool), tool.name
        sessions.append(Session(f"syn-{s}", tuple(turns), round(t_start, 6), f"repo-{repo}"))
        t_start += rng.expovariate(cfg.rate)
    meta = {"source": "synthetic", "config": asdict(cfg)}
    return Workload(tuple(sessions), cfg.block_size, "synthetic", Arrival("trace"), meta)
