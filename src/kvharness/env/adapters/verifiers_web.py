"""The rollout interface of verifiers-style trainers over the computer-use environment.

The same methods as :class:`~kvharness.env.adapters.verifiers.VerifiersCodingEnv`, for
:class:`~kvharness.env.web.env.AsyncWebEnv`: ``dataset`` rows whose user prompt holds the
instruction and the first screenshot (an ``image_url`` PNG data URI); ``setup_state`` opens the
task's browser; ``env_response`` carries out the action written in the last assistant message
and answers with a user message of the observation's text and the new screenshot;
``is_completed``; ``rollout`` (the whole loop with an ``openai.AsyncOpenAI``-like client); and a
``rubric`` whose ``score_rollout`` returns the episode reward (the credited fraction of the
task's milestones) with the milestones reached as a metric. ``state["web_env"]`` holds the live
environment during a rollout; ``cleanup`` kills its browser.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kvharness.env.web.env import AsyncWebEnv, Observation, WebConfig
from kvharness.env.web.harness import SYSTEM
from kvharness.env.web.task import WebTask

__all__ = ["VerifiersWebEnv", "WebRubric"]

State = dict[str, Any]
Messages = list[dict[str, Any]]


def _user(obs: Observation) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(obs.screenshot).decode()
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": obs.text},
            {"type": "image_url", "image_url": {"url": url}},
        ],
    }


class WebRubric:
    """Scores a finished rollout from its state (the environment checked the milestones)."""

    def __init__(self) -> None:
        self.reward_funcs = [self.episode_reward]
        self.reward_weights = [1.0]

    def episode_reward(self, completion: Messages, state: State, **kwargs: Any) -> float:
        return float(state.get("episode_reward", 0.0))

    async def score_rollout(
        self, prompt: Messages, completion: Messages, answer: str, state: State, **kwargs: Any
    ) -> dict[str, Any]:
        return {
            "reward": self.episode_reward(completion, state),
            "metrics": {"milestones": float(len(state.get("milestones", ())))},
        }


class VerifiersWebEnv:
    """A multi-turn screenshot environment over a list of web tasks."""

    def __init__(
        self,
        tasks: Sequence[WebTask],
        config: WebConfig | None = None,
        *,
        max_turns: int | None = None,
    ) -> None:
        if not tasks:
            raise ValueError("VerifiersWebEnv needs at least one task")
        self.config = config or WebConfig()
        self.tasks = {t.id: t for t in tasks}
        self.max_turns = max_turns if max_turns is not None else self.config.max_steps
        self.rubric = WebRubric()
        self.message_type = "chat"

    @property
    def dataset(self) -> list[dict[str, Any]]:
        """One row per task; the first screenshot comes with ``setup_state`` (each rollout's own
        browser), so the row's user prompt is the instruction alone."""
        return [
            {
                "prompt": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": task.instruction},
                ],
                "answer": "",
                "task": "kvharness-web",
                "info": {"task_id": task.id},
            }
            for task in self.tasks.values()
        ]

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        task_id = (state.get("info") or {}).get("task_id")
        if task_id not in self.tasks:
            raise KeyError(f"state.info.task_id {task_id!r} is not a task of this environment")
        env = AsyncWebEnv(self.tasks[task_id], self.config)
        obs, _ = await env.reset()
        state.update(
            web_env=env, first=_user(obs), done=False, turn=state.get("turn", 0),
            episode_reward=0.0, milestones=[],
        )  # fmt: skip
        return state

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        env: AsyncWebEnv = state["web_env"]
        last = messages[-1] if messages else {}
        step = await env.step(str(last.get("content") or ""))
        state["episode_reward"] = step.info["episode_reward"]
        state["milestones"] = step.info["milestones"]
        if step.terminated or step.truncated:
            state["done"] = True
        return [_user(step.observation)] if step.observation.screenshot else []

    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        return bool(state.get("done")) or state.get("turn", 0) >= self.max_turns

    async def cleanup(self, state: State) -> None:
        env = state.pop("web_env", None)
        if isinstance(env, AsyncWebEnv):
            await env.close()

    async def rollout(
        self,
        client: Any,
        model: str,
        prompt: Messages,
        answer: str = "",
        task: str = "kvharness-web",
        info: Mapping[str, Any] | None = None,
        sampling_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> tuple[Messages, State]:
        """Run one episode with ``client.chat.completions.create`` (an ``openai.AsyncOpenAI``)."""
        state: State = {
            "prompt": prompt, "completion": [], "answer": answer, "task": task,
            "info": dict(info or {}), "responses": [], "turn": 0,
        }  # fmt: skip
        await self.setup_state(state)
        messages = [dict(m) for m in prompt[:-1]] + [state.pop("first")]
        completion: Messages = []
        try:
            while True:
                response = await client.chat.completions.create(
                    model=model, messages=messages, **dict(sampling_args or {})
                )
                state["responses"].append(response)
                state["turn"] += 1
                reply = {"role": "assistant", "content": response.choices[0].message.content or ""}
                messages.append(reply)
                completion.append(reply)
                replies = await self.env_response(messages, state)
                messages += replies
                completion += replies
                if await self.is_completed(messages, state):
                    break
        finally:
            state["completion"] = completion
            await self.cleanup(state)
        return completion, state

    def dumps_state(self, state: State) -> str:
        """``state`` as JSON (live objects and screenshots left out)."""
        keep = {k: v for k, v in state.items() if k not in ("web_env", "responses", "first")}
        keep["completion"] = [
            {**m, "content": m["content"] if isinstance(m["content"], str) else "[screenshot]"}
            for m in state.get("completion", ())
        ]
        return json.dumps(keep, default=str)
