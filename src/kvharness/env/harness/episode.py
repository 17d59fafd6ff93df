"""What one episode leaves: its model calls, its tool runs, its result (plain data).

Both ways an episode runs fill these: the harness's own loop (:mod:`.loop`) and a third-party
harness run in its place (:mod:`.mini_swe_agent`); :mod:`.record` writes and reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvharness.env.harness.client import ModelCall
from kvharness.env.reward import Submission

__all__ = ["MINI_SWE_AGENT", "CallRecord", "EpisodeResult", "ToolRun"]

MINI_SWE_AGENT = "mini-swe-agent"
"""The agent name that runs the mini-swe-agent harness (:mod:`.mini_swe_agent`), not the loop."""


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One action carried out by the environment. ``duration_s``: its wall time (s)."""

    tool: str | None
    duration_s: float
    error: str | None = None
    score: float | None = None


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call: ``appended`` are the messages added to the conversation since the previous
    call (all of them for the first), ``gap`` the tool time (s) spent between the previous call's
    end and this one, ``tools`` the tools that ran in that gap."""

    call: ModelCall
    appended: tuple[dict[str, Any], ...]
    gap: float
    tools: tuple[str, ...]


@dataclass(slots=True)
class EpisodeResult:
    """Everything about one episode. Times in seconds on the run's clock."""

    episode: str
    task_id: str
    agent: str
    reward: float = 0.0
    submissions: list[Submission] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    steps: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    tool_runs: list[ToolRun] = field(default_factory=list)
    error: str | None = None

    @property
    def start(self) -> float | None:
        """When the episode's first model call was sent (None when it made none)."""
        return self.calls[0].call.sent if self.calls else None
