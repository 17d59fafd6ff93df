"""What one episode leaves: its model calls, its tool runs, its result (plain data).

Both ways an episode runs fill these: the harness's own loop (:mod:`.loop`) and a third-party
harness run in its place (:mod:`.mini_swe_agent`); :mod:`.record` writes and reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvharness.env.harness.client import ModelCall
from kvharness.env.reward import Submission

__all__ = [
    "MINI_SWE_AGENT",
    "SUMMARIZE",
    "CallRecord",
    "Compaction",
    "EpisodeResult",
    "Resume",
    "ToolRun",
]

MINI_SWE_AGENT = "mini-swe-agent"
"""The agent name that runs the mini-swe-agent harness (:mod:`.mini_swe_agent`), not the loop."""


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One action carried out by the environment. ``duration_s``: its wall time (s)."""

    tool: str | None
    duration_s: float
    error: str | None = None
    score: float | None = None


SUMMARIZE = "summarize"
"""The ``purpose`` of a model call that writes a compaction's summary (not an agent step)."""


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call. Its prompt is the previous call's prompt (its first ``keep`` messages
    when ``keep`` is set: the context was compacted in between), then ``appended``: the messages
    added since (all of them for the first call). ``gap``: the tool time (s) spent between the
    previous call's end and this one; ``tools``: the tools that ran in that gap;
    ``policy_version``: the version of the policy served for this call (None: not tracked);
    ``purpose``: None for an agent's turn, :data:`SUMMARIZE` for a compaction's summary."""

    call: ModelCall
    appended: tuple[dict[str, Any], ...]
    gap: float
    tools: tuple[str, ...]
    keep: int | None = None
    policy_version: int | None = None
    purpose: str | None = None


@dataclass(frozen=True, slots=True)
class Compaction:
    """The context compacted before model call ``call`` (its index): how (``summarize``,
    ``drop-outputs`` or ``keep-last``; a ``drop-outputs`` that was not enough is a
    ``summarize``), the prompt's estimated tokens before, and how many of the conversation's
    ``messages`` the next prompt ``kept`` as they were (the rest dropped or rewritten)."""

    call: int
    kind: str
    tokens_before: int
    messages: int
    kept: int


@dataclass(frozen=True, slots=True)
class Resume:
    """The episode was resumed from its checkpoint taken after ``step`` steps and ``calls``
    model calls; the interrupted run had gone ``lost_steps`` steps past it (their side effects
    undone with the workspace, redone from the checkpoint)."""

    step: int
    calls: int
    lost_steps: int


@dataclass(slots=True)
class EpisodeResult:
    """Everything about one episode. Times in seconds on the run's clock. ``messages``: every
    message in the order it was first sent (the calls' ``appended`` in turn), then those added
    after the last call; without compaction, the final conversation."""

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
    compactions: list[Compaction] = field(default_factory=list)
    resumes: list[Resume] = field(default_factory=list)

    @property
    def start(self) -> float | None:
        """When the episode's first model call was sent (None when it made none)."""
        return self.calls[0].call.sent if self.calls else None
