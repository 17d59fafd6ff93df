"""The harness benchmark's figures: task results and serving cost of one env run, side by side.

What a team choosing an open model for its agents compares, per model x deployment: how many
episodes resolved their task (a submission passing every hidden test), the partial credit (the
mean of each episode's best submission score), steps, the tokens the agent cost (prompt, cached,
output), the wall time and how the episodes' time splits between model calls and tool runs
(summed over episodes, which run side by side), and
the cost of one resolved task in tokens and in replica-seconds (the deployment's replicas times
the run's wall time, over resolved episodes).

:func:`summarise` computes a :class:`HarnessSummary` from episodes; ``kvharness env run`` writes
it to ``harness.json`` and ``harness.html`` in its folder; :func:`render_table` and
:func:`render_html` lay one or more side by side (``kvharness report compare`` of env runs).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
from rich.table import Table

from kvharness.env.harness.episode import EpisodeResult
from kvharness.errors import UserError

__all__ = [
    "HARNESS_JSON",
    "HarnessSummary",
    "load_summary",
    "render_html",
    "render_table",
    "summarise",
]

HARNESS_JSON = "harness.json"
RESOLVED = 1.0
"""The submission score that counts as resolving the task (every hidden test passes)."""


class HarnessSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One run's figures (see the module docstring). Times in seconds; the per-resolved costs
    are None when nothing was resolved."""

    label: str
    agent: str
    model: str
    endpoint: str
    replicas: int
    tasks: int
    episodes: int
    resolved: int
    partial_credit: float
    mean_reward: float
    steps: float
    """Mean actions per episode."""
    model_calls: int
    valid_actions: int
    """Actions that parsed as one of the environment's tools (the rest cost a step, or for a
    reply with no tool call a nudge)."""
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    wall_s: float
    model_s: float
    """Model-call time summed over calls (sent to done)."""
    tool_s: float
    """Tool-run time summed over runs."""
    errors: int
    tokens_per_resolved: float | None
    replica_seconds_per_resolved: float | None

    @property
    def cached_ratio(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def _best(ep: EpisodeResult) -> float:
    return max((s.score for s in ep.submissions), default=0.0)


def summarise(
    episodes: Sequence[EpisodeResult],
    *,
    wall_s: float,
    replicas: int,
    label: str,
    agent: str,
    model: str,
    endpoint: str,
) -> HarnessSummary:
    """The figures of ``episodes``, run in ``wall_s`` on ``replicas`` replicas."""
    n = len(episodes)
    calls = [c.call for ep in episodes for c in ep.calls]
    resolved = sum(_best(ep) >= RESOLVED for ep in episodes)
    prompt = sum(c.prompt_tokens for c in calls)
    output = sum(c.completion_tokens for c in calls)
    return HarnessSummary(
        label=label,
        agent=agent,
        model=model,
        endpoint=endpoint,
        replicas=replicas,
        tasks=len({ep.task_id for ep in episodes}),
        episodes=n,
        resolved=resolved,
        partial_credit=sum(map(_best, episodes)) / n if n else 0.0,
        mean_reward=sum(ep.reward for ep in episodes) / n if n else 0.0,
        steps=sum(ep.steps for ep in episodes) / n if n else 0.0,
        model_calls=len(calls),
        valid_actions=sum(t.tool is not None for ep in episodes for t in ep.tool_runs),
        prompt_tokens=prompt,
        cached_tokens=sum(c.cached_tokens or 0 for c in calls),
        output_tokens=output,
        wall_s=wall_s,
        model_s=sum(c.done - c.sent for c in calls),
        tool_s=sum(t.duration_s for ep in episodes for t in ep.tool_runs),
        errors=sum(ep.error is not None for ep in episodes),
        tokens_per_resolved=(prompt + output) / resolved if resolved else None,
        replica_seconds_per_resolved=replicas * wall_s / resolved if resolved else None,
    )


def load_summary(folder: Path) -> HarnessSummary:
    """The summary an env run wrote in ``folder``."""
    path = folder / HARNESS_JSON
    try:
        return msgspec.json.decode(path.read_bytes(), type=HarnessSummary)
    except FileNotFoundError:
        raise UserError(f"{folder} is not an env run folder (no {HARNESS_JSON})") from None
    except (OSError, msgspec.DecodeError) as err:
        raise UserError(f"{path}: not a harness summary ({err})") from None


def _count(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _seconds(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f} s"


_Row = tuple[str, Callable[[HarnessSummary], str]]
ROWS: tuple[_Row, ...] = (
    ("agent", lambda s: s.agent),
    ("model", lambda s: s.model),
    (
        "deployment",
        lambda s: f"{s.endpoint} ({s.replicas} replica{'s' if s.replicas != 1 else ''})",
    ),
    ("tasks / episodes", lambda s: f"{s.tasks} / {s.episodes}"),
    ("resolved", lambda s: f"{s.resolved} ({s.resolved / s.episodes:.0%})" if s.episodes else "0"),
    ("partial credit (mean best score)", lambda s: f"{s.partial_credit:.3f}"),
    ("mean reward", lambda s: f"{s.mean_reward:.3f}"),
    ("steps per episode", lambda s: f"{s.steps:.1f}"),
    ("model calls", lambda s: _count(s.model_calls)),
    ("valid actions per model call", lambda s: _per(s.valid_actions, s.model_calls)),
    ("prompt tokens", lambda s: _count(s.prompt_tokens)),
    ("cached tokens", lambda s: f"{_count(s.cached_tokens)} ({s.cached_ratio:.1%})"),
    ("output tokens", lambda s: _count(s.output_tokens)),
    ("wall time", lambda s: _seconds(s.wall_s)),
    ("time in model calls", lambda s: _share(s.model_s, s.model_s + s.tool_s)),
    ("time in tool runs", lambda s: _share(s.tool_s, s.model_s + s.tool_s)),
    ("tokens per resolved task", lambda s: _count(s.tokens_per_resolved)),
    ("replica-seconds per resolved task", lambda s: _seconds(s.replica_seconds_per_resolved)),
    ("episodes with errors", lambda s: str(s.errors)),
)
"""The table's rows: label, cell text."""


def _per(n: int, d: int) -> str:
    return f"{n / d:.2f} ({n}/{d})" if d else "-"


def _share(part: float, whole: float) -> str:
    return f"{part:,.1f} s ({part / whole:.0%})" if whole > 0 else _seconds(part)


def render_table(summaries: Sequence[HarnessSummary], title: str = "harness benchmark") -> Table:
    """One column per run."""
    table = Table(title=title)
    table.add_column("")
    for s in summaries:
        table.add_column(s.label, justify="right")
    for name, cell in ROWS:
        table.add_row(name, *(cell(s) for s in summaries))
    return table


def render_html(summaries: Sequence[HarnessSummary], title: str = "harness benchmark") -> str:
    """A self-contained page with the same table."""
    esc = html.escape
    head = "".join(f"<th>{esc(s.label)}</th>" for s in summaries)
    rows = "".join(
        f"<tr><th>{esc(name)}</th>{''.join(f'<td>{esc(cell(s))}</td>' for s in summaries)}</tr>"
        for name, cell in ROWS
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}"
        "th,td{padding:.3em .8em;border-bottom:1px solid #ddd}td{text-align:right}"
        "th{text-align:left;font-weight:600}"
        f"</style></head><body><h1>{esc(title)}</h1>"
        f"<table><tr><th></th>{head}</tr>{rows}</table></body></html>\n"
    )
