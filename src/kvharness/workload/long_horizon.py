"""A seeded long-horizon agent session generator: hundreds to thousands of turns over hours of
tool time, with the context compacted when it nears the model's window.

A long-horizon coding agent works one task for hours: every call re-sends the conversation (the
system prompt and the repository's map, which every session on that repository shares, the task,
then every tool output and reply so far), and the context outgrows the window long before the task
ends. Harnesses then compact it, in one of three ways (``compaction``):

- ``summarize``: one extra model call reads the whole context and writes a summary
  (``summary_tokens``; that call reuses the cached prefix), then the conversation restarts from the
  shared prefix, the task, the summary and the last ``keep_turns`` turns: the next call re-prefills
  all of it past the shared prefix;
- ``drop-outputs``: tool outputs older than the last ``keep_turns`` turns are replaced by a short
  placeholder (``placeholder_tokens``), the replies stay: the prefix breaks at the first replaced
  output; when that is not enough, the session summarizes as above;
- ``keep-last``: only the last ``keep_turns`` turns stay after the task.

A compaction happens before a call whose prompt would pass ``compact_at`` of ``window`` tokens; the
turn after it is marked ``tool="compact"``, a summarize's extra call before it ``tool="summarize"``
(its output is the summary), and the workload's meta counts compactions per session. Between compactions each prompt
extends the last, so the cost is O(new tokens / block) per turn, plus a rebuild per compaction.

Where the defaults come from: the issue's scale (500 to 2,000 turns a session, hours of tool time;
12-hour tasks are what the labs building these agents aim for) and the 128k-token window of the
open models served for agents; everything else (tool output 600 tokens median, replies 150, a tool
gap of 8 s median with a long tail, a 4,000-token system prompt, a 12,000-token repository map
shared by the sessions on one repository, a 2,000-token summary, 4 turns kept) is an estimate,
stated as such in each option's help. One ``random.Random(seed)`` draws everything.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field

from kvharness.workload.chain import ChainBuilder
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.synthetic import bounded, check_bounds

__all__ = ["COMPACTIONS", "LongHorizonConfig", "generate_long_horizon"]

COMPACTIONS = ("summarize", "drop-outputs", "keep-last")
_TOKENS = 10_000_000
_SYSTEM, _PLACEHOLDER, _SUMMARIZE = 0, 1, 2
"""Segment seeds every session shares: the system prompt, the dropped-output placeholder and the
summarize instruction."""


@dataclass(frozen=True)
class LongHorizonConfig:
    """Options of the generator; each has a help string (shown by ``kvharness workload --help``)."""

    sessions: int = bounded(16, "number of long-horizon sessions", 1, 100_000)
    repos: int = bounded(4, "repositories the sessions work on (their maps are shared)", 1, 100_000)
    turns_min: int = bounded(
        500, "fewest model calls per session (uniform between min and max)", 1, 100_000
    )
    turns_max: int = bounded(2000, "most model calls per session", 1, 100_000)
    window: int = bounded(128_000, "the model's context window, tokens", 1000, _TOKENS)
    compact_at: float = bounded(
        0.8, "compact before a prompt passes this share of the window", 0.1, 1
    )
    compaction: str = field(
        default="summarize",
        metadata={
            "help": "how the context is compacted: summarize, drop-outputs or keep-last",
            "bounds": None,
        },
    )
    keep_turns: int = bounded(4, "turns kept verbatim after a compaction (an estimate)", 0, 1000)
    summary_tokens: int = bounded(2000, "tokens of a compaction summary (an estimate)", 1, _TOKENS)
    placeholder_tokens: int = bounded(
        10, "tokens of the text replacing a dropped tool output (an estimate)", 0, 1000
    )
    system_tokens: int = bounded(
        4000, "system prompt and tool definitions, shared by all sessions (an estimate)", 1, _TOKENS
    )
    repo_tokens: int = bounded(
        12_000, "repository map, shared by the sessions on a repository (an estimate)", 0, _TOKENS
    )
    task_tokens: int = bounded(300, "task statement, one per session (an estimate)", 1, _TOKENS)
    tool_median: float = bounded(600.0, "median tool output tokens (an estimate)", 1, _TOKENS)
    tool_sigma: float = bounded(1.0, "lognormal sigma of tool output tokens (an estimate)", 0.01, 4)
    tool_max: int = bounded(20_000, "cap on one tool output, tokens (an estimate)", 1, _TOKENS)
    output_median: float = bounded(150.0, "median reply tokens (an estimate)", 1, _TOKENS)
    output_sigma: float = bounded(0.7, "lognormal sigma of reply tokens (an estimate)", 0.01, 4)
    gap_median: float = bounded(8.0, "median tool seconds between calls (an estimate)", 0, 86_400)
    gap_sigma: float = bounded(1.2, "lognormal sigma of the tool gap (an estimate)", 0.01, 4)
    rate: float = bounded(0.05, "session arrivals per second (Poisson)", 1e-9, 1e6)
    block_size: int = bounded(128, "block size of the generated chains, tokens", 1, 1 << 20)
    seed: int = bounded(0, "random seed", 0, 2**63 - 1)

    def __post_init__(self) -> None:
        if self.compaction not in COMPACTIONS:
            raise ValueError(
                f"long-horizon: compaction must be one of {', '.join(COMPACTIONS)}, "
                f"got {self.compaction!r}"
            )
        if self.turns_min > self.turns_max:
            raise ValueError("long-horizon: turns_min must be <= turns_max")
        fixed = self.system_tokens + self.repo_tokens + self.task_tokens + self.summary_tokens
        if fixed + self.tool_max + 4 * self.output_median >= self.window * self.compact_at:
            raise ValueError(
                "long-horizon: the fixed prompt, a summary and one tool output do not fit under "
                "compact_at x window: raise window or lower the token sizes"
            )
        check_bounds(self, "long-horizon")


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(max(median, 1e-9)), sigma)


class _Context:
    """One session's prompt as parts ``(kind, segment seed, tokens)``, with the builder of its
    chain kept in step while the context only grows."""

    def __init__(self, cfg: LongHorizonConfig, head: list[tuple[str, int, int]]) -> None:
        self.cfg = cfg
        self.head = head
        self.parts: list[tuple[str, int, int]] = []
        self.builder = ChainBuilder(cfg.block_size)
        self._rebuild()

    @property
    def tokens(self) -> int:
        return self.builder.num_tokens

    def add(self, kind: str, seed: int, n: int) -> None:
        self.parts.append((kind, seed, n))
        self.builder.extend_segment(seed, n)

    def _rebuild(self) -> None:
        self.builder = ChainBuilder(self.cfg.block_size)
        for _, seed, n in [*self.head, *self.parts]:
            self.builder.extend_segment(seed, n)

    def recent(self) -> list[tuple[str, int, int]]:
        """The parts of the last ``keep_turns`` turns (a turn: a tool output and its reply)."""
        keep = 2 * self.cfg.keep_turns
        return self.parts[-keep:] if keep else []

    def summarize(self, summary_seed: int) -> None:
        self.parts = [("summary", summary_seed, self.cfg.summary_tokens), *self.recent()]
        self._rebuild()

    def keep_last(self) -> None:
        self.parts = self.recent()
        self._rebuild()

    def drop_outputs(self) -> None:
        cut = len(self.parts) - 2 * self.cfg.keep_turns
        self.parts = [
            ("dropped", _PLACEHOLDER, self.cfg.placeholder_tokens)
            if kind == "tool" and i < cut
            else (kind, seed, n)
            for i, (kind, seed, n) in enumerate(self.parts)
        ]
        self._rebuild()


def generate_long_horizon(config: LongHorizonConfig | None = None) -> Workload:
    """Generate a workload (deterministic in ``config``); see the module docstring."""
    cfg = config or LongHorizonConfig()
    rng = random.Random(cfg.seed)
    seeds = iter(range(1 << 20, 1 << 62))
    repo_seeds = [next(seeds) for _ in range(cfg.repos)]
    limit = cfg.window * cfg.compact_at
    sessions = []
    compactions: dict[str, int] = {}
    t_start = 0.0
    for s in range(cfg.sessions):
        repo = s % cfg.repos
        sid = f"lh-{s}"
        head = [("system", _SYSTEM, cfg.system_tokens), ("task", next(seeds), cfg.task_tokens)]
        if cfg.repo_tokens:
            head.insert(1, ("repo", repo_seeds[repo], cfg.repo_tokens))
        ctx = _Context(cfg, head)
        n_turns = rng.randint(cfg.turns_min, cfg.turns_max)
        turns: list[Turn] = []
        gap, tool = 0.0, None
        compactions[sid] = 0
        while len(turns) < n_turns:
            out = max(1, round(_lognormal(rng, cfg.output_median, cfg.output_sigma)))
            observed = min(
                cfg.tool_max, max(1, round(_lognormal(rng, cfg.tool_median, cfg.tool_sigma)))
            )
            if turns and ctx.tokens + observed + out > limit:
                compactions[sid] += 1
                if cfg.compaction == "drop-outputs":
                    ctx.drop_outputs()
                if cfg.compaction != "drop-outputs" or ctx.tokens + observed + out > limit:
                    if cfg.compaction == "keep-last":
                        ctx.keep_last()
                    else:
                        # The summarize call: the whole context and an instruction, the summary out.
                        ctx.add("instruction", _SUMMARIZE, 40)
                        turns.append(
                            Turn(ctx.builder.chain(), cfg.summary_tokens, gap, "summarize")
                        )
                        gap = 0.0
                        ctx.summarize(next(seeds))
                tool = "compact"
            if turns:
                ctx.add("tool", next(seeds), observed)
            turns.append(Turn(ctx.builder.chain(), out, gap, tool))
            ctx.add("reply", next(seeds), out)
            gap = min(86_400.0, _lognormal(rng, cfg.gap_median, cfg.gap_sigma))
            tool = "tool"
        sessions.append(Session(sid, tuple(turns), round(t_start, 6), f"repo-{repo}"))
        t_start += rng.expovariate(cfg.rate)
    meta = {"source": "long-horizon", "config": asdict(cfg), "compactions": compactions}
    return Workload(tuple(sessions), cfg.block_size, "long-horizon", Arrival("trace"), meta)
