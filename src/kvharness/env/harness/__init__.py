"""Agent harness: run agents over coding tasks against a chat endpoint and record everything.

* :mod:`.client`: streamed OpenAI chat completions with per-call token, cache and timing capture.
* :mod:`.agents`: the model's own tool calls, or scripted agents (oracle, noop, cheat) that still
  call the model every turn.
* :mod:`.loop`: one episode (:func:`run_episode`) and many at once (:func:`run_episodes`).
* :mod:`.record`: episodes as a kvharness workload (sessions and turns) and as rollouts JSONL.
* :mod:`.demo`: a tiny hand-made suite for smoke tests.

``kvharness env run`` (``cli/_env.py``) puts these together.
"""

from kvharness.env.harness.agents import AGENTS, make_agent
from kvharness.env.harness.client import ChatClient, ModelCall, ModelError, ModelReply
from kvharness.env.harness.episode import CallRecord, EpisodeResult, ToolRun
from kvharness.env.harness.loop import run_episode, run_episodes
from kvharness.env.harness.record import rollout_line, to_workload, write_rollouts

__all__ = [
    "AGENTS",
    "CallRecord",
    "ChatClient",
    "EpisodeResult",
    "ModelCall",
    "ModelError",
    "ModelReply",
    "ToolRun",
    "make_agent",
    "rollout_line",
    "run_episode",
    "run_episodes",
    "to_workload",
    "write_rollouts",
]
