"""The agent loop: episodes of tool calls against a chat endpoint, many at once, all recorded.

One episode (:func:`run_episode`): reset an :class:`AsyncCodingEnv`, then repeat: send the whole
conversation (system prompt, issue, every assistant message and tool result so far) with the tool
schemas to the model; ask the agent which actions to take given the reply; run them in the
environment; append the assistant message and one ``tool`` message per action. It ends when the
environment terminates or truncates, when the agent is finished (a script played out: the
do-nothing agent stops after its one submission), when the model fails, or after
``2 * max_steps`` model calls (a model that never calls a tool).

Every model call is kept as a :class:`~.episode.CallRecord` (its measurements, the messages
appended to the conversation since the previous call, and the tool time in between), every tool
run as a :class:`~.episode.ToolRun`; :mod:`.record` turns them into a workload and a rollouts
file. ``mini-swe-agent`` runs that third-party harness (:mod:`.mini_swe_agent`) instead of this
loop, into the same records.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvharness.env.actions import TOOL_SCHEMAS, action_to_tool_call
from kvharness.env.api import AsyncCodingEnv, EnvConfig
from kvharness.env.harness.agents import Agent, make_agent
from kvharness.env.harness.checkpoint import Checkpointer, CheckpointPlan, Saved
from kvharness.env.harness.client import ChatClient, ModelCall, ModelError
from kvharness.env.harness.context import (
    SUMMARY_REQUEST,
    ContextConfig,
    drop_outputs,
    estimate_tokens,
    first_difference,
    keep_last,
    with_summary,
)
from kvharness.env.harness.episode import (
    MINI_SWE_AGENT,
    SUMMARIZE,
    CallRecord,
    Compaction,
    EpisodeResult,
    Resume,
    ToolRun,
)
from kvharness.env.harness.mini_swe_agent import run_mini_episode
from kvharness.env.harness.record import episode_from_line, rollout_doc
from kvharness.env.task import AnyTask
from kvharness.errors import FormatError, UserError

__all__ = ["MODEL_ERROR", "keeps_checkpoint", "run_episode", "run_episodes"]

NUDGE = "No tool was called. Use the tools to work on the repository, and `submit` when done."


@dataclass(slots=True)
class _Conversation:
    """The conversation between model calls. ``messages``: what the next call sends;
    ``new_from``: where the messages added since the last call's prompt begin (that prompt is
    ``messages[:new_from]`` unless ``keep`` is set: a compaction kept only its first ``keep``
    messages); ``gap``, ``tools``: the tool time and tools since the last call; ``calls``: the
    agent's model calls so far (a compaction's summary call is not one)."""

    messages: list[dict[str, Any]]
    new_from: int = 0
    keep: int | None = None
    gap: float = 0.0
    tools: list[str] = field(default_factory=list)
    calls: int = 0

    def append(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    def record(
        self, call: ModelCall, version: int | None, purpose: str | None = None
    ) -> CallRecord:
        """The record of the call just made with :attr:`messages`; what follows is new."""
        rec = CallRecord(
            call,
            tuple(self.messages[self.new_from :]),
            self.gap,
            tuple(self.tools),
            keep=self.keep,
            policy_version=version,
            purpose=purpose,
        )
        self.new_from, self.keep, self.gap, self.tools = len(self.messages), None, 0.0, []
        return rec

    def replace(self, messages: list[dict[str, Any]]) -> int:
        """Send ``messages`` next instead (a compaction); how many of the last prompt's
        messages they keep."""
        last = self.messages[: self.new_from]
        kept = first_difference(last, messages)
        if kept < len(last):
            self.keep = kept if self.keep is None else min(kept, self.keep)
        self.messages, self.new_from = messages, min(kept, self.new_from)
        return kept

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "new_from": self.new_from,
            "keep": self.keep,
            "gap": self.gap,
            "tools": self.tools,
            "calls": self.calls,
        }


async def run_episode(
    task: AnyTask,
    agent_name: str,
    client: ChatClient,
    config: EnvConfig,
    *,
    episode: str,
    t0: float,
    context: ContextConfig | None = None,
    checkpoint: Checkpointer | None = None,
    policy_version: Callable[[], Awaitable[int]] | None = None,
) -> EpisodeResult:
    """Run one episode of ``task`` with a fresh agent ``agent_name``. The model's failures and
    any fault of the environment on this task end the episode with ``error`` set; a
    :class:`UserError` (no sandbox, unreadable suite, a checkpoint of another episode)
    propagates. ``t0``: the run's origin on ``time.perf_counter``.

    ``context``: compact the conversation near the window (:mod:`.context`). ``checkpoint``:
    resume from the checkpoint in its folder when there is one, and write one whenever it is
    due (:mod:`.checkpoint`). ``policy_version``: awaited before every model call, it returns
    the policy version the call is made under (recorded with the call); it may wait, at that
    step boundary, until a new version is served."""
    result = EpisodeResult(episode, task.id, agent_name)
    env = AsyncCodingEnv(task, config)
    agent = make_agent(agent_name, task)
    conv = _Conversation([])
    try:
        obs, _ = await env.reset()
        saved = None if checkpoint is None else await asyncio.to_thread(checkpoint.load)
        if saved is None:
            conv.messages += [
                {"role": "system", "content": task.system_prompt},
                {"role": "user", "content": obs},
            ]
        else:
            assert checkpoint is not None
            conv = await _resume(saved, checkpoint, env, agent, result)
        while conv.calls < 2 * config.max_steps:
            if agent.finished:
                break
            if checkpoint is not None and checkpoint.due(result.steps, len(result.calls)):
                state = _state(result, conv, agent, env)
                await asyncio.to_thread(checkpoint.save, state, env.repo)
            if context is not None:
                await _compact(conv, context, client, result, t0, policy_version)
            version = None if policy_version is None else await policy_version()
            conv.calls += 1
            reply = await client.complete(
                conv.messages, TOOL_SCHEMAS, tool_choice=agent.tool_choice, t0=t0
            )
            result.calls.append(conv.record(reply.call, version))
            ncall = conv.calls
            actions = agent.decide(reply.message)
            assistant: dict[str, Any] = {"role": "assistant", "content": reply.message["content"]}
            if agent.scripted:
                calls = [
                    action_to_tool_call(a, f"call_{ncall}_{i}")  # type: ignore[arg-type]
                    for i, a in enumerate(actions)
                ]
            else:
                calls = [_with_id(c, f"call_{ncall}_{i}") for i, c in enumerate(actions)]
                actions = list(calls)
            if calls:
                assistant["tool_calls"] = calls
            conv.append(assistant)
            if not actions:
                conv.append({"role": "user", "content": NUDGE})
                continue
            done = False
            for call, action in zip(calls, actions, strict=True):
                step = await env.step(action)
                info = step.info
                run = ToolRun(info["tool"], info["duration_s"], info["error"], info.get("score"))
                result.tool_runs.append(run)
                conv.gap += run.duration_s
                conv.tools.append(run.tool or "invalid")
                conv.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": step.observation}
                )
                result.steps += 1
                if checkpoint is not None:
                    checkpoint.mark(result.steps)
                if step.terminated or step.truncated:
                    result.terminated, result.truncated = step.terminated, step.truncated
                    done = True
                    break
            if done:
                break
        else:
            result.truncated = True
    except ModelError as err:
        result.error = f"{MODEL_ERROR}{err}"
    except UserError:
        raise  # a setup fault (no sandbox, bad suite): every episode would fail alike
    except Exception as err:  # one broken task must not take a long run down with it
        result.error = f"env: {type(err).__name__}: {err}"
    finally:
        result.submissions = list(env.submissions)
        result.reward = env.episode_reward()
        result.messages = _log(result, conv)
        env.close()
    return result


MODEL_ERROR = "model: "
"""How the error of an episode a model failure ended begins (such an episode keeps its
checkpoint, and ``env run --resume`` runs it again from there)."""


def _log(result: EpisodeResult, conv: _Conversation) -> list[dict[str, Any]]:
    """Every message in the order it was first sent, then those sent after the last call."""
    sent = [m for rec in result.calls for m in rec.appended]
    return sent + conv.messages[conv.new_from :] if result.calls else list(conv.messages)


def _state(
    result: EpisodeResult, conv: _Conversation, agent: Agent, env: AsyncCodingEnv
) -> dict[str, Any]:
    """The checkpoint document of the episode as it stands (see :mod:`.checkpoint`)."""
    result.messages = _log(result, conv)
    return {
        "episode": result.episode,
        "task": result.task_id,
        "agent": result.agent,
        "steps": result.steps,
        "calls": len(result.calls),
        "result": rollout_doc(result),
        "conversation": conv.to_json(),
        "agent_state": agent.state(),
        "env": env.counters(),
    }


async def _resume(
    saved: Saved,
    checkpoint: Checkpointer,
    env: AsyncCodingEnv,
    agent: Agent,
    result: EpisodeResult,
) -> _Conversation:
    """Restore the episode from ``saved`` into the freshly reset ``env``, ``agent`` and
    ``result``; the conversation to go on with."""
    state = saved.state
    mine = (result.episode, result.task_id, result.agent)
    theirs = (state.get("episode"), state.get("task"), state.get("agent"))
    if mine != theirs:
        raise UserError(
            f"{saved.path} is the checkpoint of episode {theirs[0]} of task {theirs[1]} by "
            f"agent {theirs[2]}, not of {mine[0]} by {mine[2]}; remove it to start afresh"
        )
    try:
        before = episode_from_line(state["result"])
        c = state["conversation"]
        conv = _Conversation(
            list(c["messages"]), int(c["new_from"]), c["keep"], float(c["gap"]),
            list(c["tools"]), int(c["calls"]),
        )  # fmt: skip
        await asyncio.to_thread(saved.restore_repo, env.repo)
        env.restore_counters(state["env"])
        agent.restore(state["agent_state"])
    except (KeyError, TypeError, ValueError) as err:
        raise FormatError(str(saved.path), 1, f"not an episode checkpoint ({err!r})") from None
    result.calls, result.tool_runs = before.calls, before.tool_runs
    result.steps, result.compactions = before.steps, before.compactions
    progress = checkpoint.progress()
    lost = 0 if progress is None else max(0, progress - before.steps)
    result.resumes = [*before.resumes, Resume(before.steps, len(before.calls), lost)]
    checkpoint.mark(result.steps)
    return conv


async def _compact(
    conv: _Conversation,
    context: ContextConfig,
    client: ChatClient,
    result: EpisodeResult,
    t0: float,
    policy_version: Callable[[], Awaitable[int]] | None,
) -> None:
    """Compact the conversation when the next prompt would pass the mark (:mod:`.context`)."""
    last = result.calls[-1].call.prompt_tokens if result.calls else 0
    counted = conv.new_from if result.calls else 0
    tokens = estimate_tokens(conv.messages, counted, last)
    if tokens <= context.limit:
        return
    before = list(conv.messages)
    kind = context.compaction
    turns = context.keep_turns
    new = None
    if kind == "keep-last":
        new = keep_last(before, turns)
    elif kind == "drop-outputs":
        new = drop_outputs(before, turns)
        if estimate_tokens(new) > context.limit:
            new = None
    if new is None:
        kind = "summarize"
        conv.append({"role": "user", "content": SUMMARY_REQUEST})
        version = None if policy_version is None else await policy_version()
        reply = await client.complete(
            conv.messages,
            TOOL_SCHEMAS,
            tool_choice="none",
            t0=t0,
            max_tokens=context.summary_tokens,
        )
        result.calls.append(conv.record(reply.call, version, SUMMARIZE))
        new = with_summary(before, str(reply.message.get("content") or ""), turns)
    kept = conv.replace([dict(m) for m in new])
    result.compactions.append(Compaction(len(result.calls), kind, tokens, len(before), kept))


def _with_id(call: Any, fallback: str) -> dict[str, Any]:
    out = dict(call) if isinstance(call, Mapping) else {"function": call}
    if not out.get("id"):
        out["id"] = fallback
    out.setdefault("type", "function")
    return out


async def run_episodes(
    tasks: Sequence[AnyTask],
    agent_name: str,
    client: ChatClient,
    config: EnvConfig,
    *,
    concurrency: int = 4,
    repeats: int = 1,
    on_done: Callable[[EpisodeResult], None] | None = None,
    skip: Collection[str] = (),
    origin: float = 0.0,
    trajectories: Path | None = None,
    context: ContextConfig | None = None,
    checkpoints: CheckpointPlan | None = None,
) -> list[EpisodeResult]:
    """Run ``repeats`` episodes of every task (``<task id>/<k>``), but none named in ``skip``, at
    most ``concurrency`` at once; results in task order. ``on_done`` is called as each episode
    finishes (e.g. to append it to a file). The run's clock reads ``origin`` seconds at the
    start (a resumed run continues the clock of the episodes it skips). ``agent_name``
    ``mini-swe-agent`` runs that third-party harness instead of this loop
    (:mod:`.mini_swe_agent`), its trajectory files under ``trajectories``. ``context`` and
    ``checkpoints`` as :func:`run_episode`'s, each episode in its own folder of the plan; an
    episode's checkpoint is removed once ``on_done`` has recorded it, unless a model failure
    ended it (a resumed run goes on from there)."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    gate = asyncio.Semaphore(concurrency)
    t0 = time.perf_counter() - origin

    async def one(task: AnyTask, k: int) -> EpisodeResult:
        episode = f"{task.id}/{k}"
        ckpt = None if checkpoints is None else checkpoints.for_episode(episode)
        async with gate:
            if agent_name == MINI_SWE_AGENT:
                res = await run_mini_episode(
                    task, client, config, episode=episode, t0=t0, trajectories=trajectories
                )
            else:
                res = await run_episode(
                    task, agent_name, client, config, episode=episode, t0=t0,
                    context=context, checkpoint=ckpt,
                )  # fmt: skip
        if on_done is not None:
            on_done(res)
        if ckpt is not None and not keeps_checkpoint(res):
            ckpt.clear()
        return res

    jobs = [one(task, k) for task in tasks for k in range(repeats) if f"{task.id}/{k}" not in skip]
    return list(await asyncio.gather(*jobs))


def keeps_checkpoint(result: EpisodeResult) -> bool:
    """True when ``result``'s episode is to be resumed, not done: a model failure ended it."""
    return result.error is not None and result.error.startswith(MODEL_ERROR)
