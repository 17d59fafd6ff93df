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
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvharness.env.actions import TOOL_SCHEMAS, action_to_tool_call
from kvharness.env.api import AsyncCodingEnv, EnvConfig
from kvharness.env.harness.agents import make_agent
from kvharness.env.harness.client import ChatClient, ModelError
from kvharness.env.harness.episode import MINI_SWE_AGENT, CallRecord, EpisodeResult, ToolRun
from kvharness.env.harness.mini_swe_agent import run_mini_episode
from kvharness.env.task import AnyTask
from kvharness.errors import UserError

__all__ = ["run_episode", "run_episodes"]

NUDGE = "No tool was called. Use the tools to work on the repository, and `submit` when done."


async def run_episode(
    task: AnyTask,
    agent_name: str,
    client: ChatClient,
    config: EnvConfig,
    *,
    episode: str,
    t0: float,
) -> EpisodeResult:
    """Run one episode of ``task`` with a fresh agent ``agent_name``. The model's failures and
    any fault of the environment on this task end the episode with ``error`` set; a
    :class:`UserError` (no sandbox, unreadable suite) propagates. ``t0``: the run's origin on
    ``time.perf_counter``."""
    result = EpisodeResult(episode, task.id, agent_name)
    env = AsyncCodingEnv(task, config)
    agent = make_agent(agent_name, task)
    messages: list[dict[str, Any]] = []
    try:
        obs, _ = await env.reset()
        messages += [
            {"role": "system", "content": task.system_prompt},
            {"role": "user", "content": obs},
        ]
        pending = list(messages)
        gap, tools = 0.0, list[str]()
        ncall = 0
        while ncall < 2 * config.max_steps:
            if agent.finished:
                break
            ncall += 1
            reply = await client.complete(
                messages, TOOL_SCHEMAS, tool_choice=agent.tool_choice, t0=t0
            )
            result.calls.append(CallRecord(reply.call, tuple(pending), gap, tuple(tools)))
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
            messages.append(assistant)
            pending, gap, tools = [assistant], 0.0, []
            if not actions:
                nudge = {"role": "user", "content": NUDGE}
                messages.append(nudge)
                pending.append(nudge)
                continue
            done = False
            for call, action in zip(calls, actions, strict=True):
                step = await env.step(action)
                info = step.info
                run = ToolRun(info["tool"], info["duration_s"], info["error"], info.get("score"))
                result.tool_runs.append(run)
                gap += run.duration_s
                tools.append(run.tool or "invalid")
                tool_msg = {"role": "tool", "tool_call_id": call["id"], "content": step.observation}
                messages.append(tool_msg)
                pending.append(tool_msg)
                result.steps += 1
                if step.terminated or step.truncated:
                    result.terminated, result.truncated = step.terminated, step.truncated
                    done = True
                    break
            if done:
                break
        else:
            result.truncated = True
    except ModelError as err:
        result.error = f"model: {err}"
    except UserError:
        raise  # a setup fault (no sandbox, bad suite): every episode would fail alike
    except Exception as err:  # one broken task must not take a long run down with it
        result.error = f"env: {type(err).__name__}: {err}"
    finally:
        result.submissions = list(env.submissions)
        result.reward = env.episode_reward()
        result.messages = messages
        env.close()
    return result


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
) -> list[EpisodeResult]:
    """Run ``repeats`` episodes of every task (``<task id>/<k>``), but none named in ``skip``, at
    most ``concurrency`` at once; results in task order. ``on_done`` is called as each episode
    finishes (e.g. to append it to a file). The run's clock reads ``origin`` seconds at the
    start (a resumed run continues the clock of the episodes it skips). ``agent_name``
    ``mini-swe-agent`` runs that third-party harness instead of this loop
    (:mod:`.mini_swe_agent`), its trajectory files under ``trajectories``."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    gate = asyncio.Semaphore(concurrency)
    t0 = time.perf_counter() - origin

    async def one(task: AnyTask, k: int) -> EpisodeResult:
        async with gate:
            if agent_name == MINI_SWE_AGENT:
                res = await run_mini_episode(
                    task, client, config, episode=f"{task.id}/{k}", t0=t0,
                    trajectories=trajectories,
                )  # fmt: skip
            else:
                res = await run_episode(
                    task, agent_name, client, config, episode=f"{task.id}/{k}", t0=t0
                )
        if on_done is not None:
            on_done(res)
        return res

    jobs = [one(task, k) for task in tasks for k in range(repeats) if f"{task.id}/{k}" not in skip]
    return list(await asyncio.gather(*jobs))
