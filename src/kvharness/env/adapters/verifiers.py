"""The rollout interface of verifiers-style trainers, over :class:`AsyncCodingEnv`.

Trainers built on the ``verifiers`` library (GRPO over multi-turn tool environments) drive an
environment through a handful of methods, which :class:`VerifiersCodingEnv` provides by name,
without importing ``verifiers``:

* ``dataset``: rows ``{"prompt": [system, user], "answer": "", "task": "kvharness-coding",
  "info": {"task_id": ...}}``, one per task;
* ``oai_tools``: the OpenAI tool schemas the model is offered;
* ``async setup_state(state)``: starts an episode (a fresh repository copy) for
  ``state["info"]["task_id"]``;
* ``async env_response(messages, state) -> list of tool messages``: runs the tool calls of the
  last assistant message;
* ``async is_completed(messages, state) -> bool``: the episode terminated or truncated, the model
  answered without a tool call, or ``max_turns`` model turns were taken;
* ``async rollout(client, model, prompt, answer, task, info, sampling_args) -> (completion,
  state)``: the whole loop with an ``openai.AsyncOpenAI``-like client;
* ``rubric``: :class:`CodingRubric`, whose ``score_rollout(prompt, completion, answer, state,
  ...)`` returns ``{"reward": ..., "metrics": {...}}`` (the episode reward under the configured
  rule; the best and last scores and the submission count as metrics).

``state["coding_env"]`` holds the live environment during a rollout; ``cleanup(state)`` (called at
the end of :meth:`rollout`) deletes its repository copy and keeps the submissions in
``state["submissions"]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kvharness.env.actions import TOOL_SCHEMAS
from kvharness.env.api import AsyncCodingEnv, EnvConfig
from kvharness.env.reward import Submission, episode_reward
from kvharness.env.task import AnyTask

__all__ = ["CodingRubric", "VerifiersCodingEnv"]

State = dict[str, Any]
Messages = list[dict[str, Any]]


class CodingRubric:
    """Scores a finished rollout from its state (the environment graded the submissions)."""

    def __init__(self, config: EnvConfig) -> None:
        self.config = config
        self.reward_funcs = [self.episode_reward]
        self.reward_weights = [1.0]

    def episode_reward(self, completion: Messages, state: State, **kwargs: Any) -> float:
        """Reward function in the verifiers signature: the episode reward of ``state``."""
        subs: Sequence[Submission] = state.get("submissions", ())
        return episode_reward(subs, self.config.reward)

    async def score_rollout(
        self,
        prompt: Messages,
        completion: Messages,
        answer: str,
        state: State,
        task: str = "default",
        info: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        subs: Sequence[Submission] = state.get("submissions", ())
        reward = self.episode_reward(completion, state)
        return {
            "reward": reward,
            "metrics": {
                "episode_reward": reward,
                "best_score": max((s.score for s in subs), default=0.0),
                "last_score": subs[-1].score if subs else 0.0,
                "submissions": float(len(subs)),
            },
        }

    async def score_rollouts(
        self,
        prompts: Sequence[Messages],
        completions: Sequence[Messages],
        answers: Sequence[str],
        states: Sequence[State],
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Batch form: ``{"reward": [...], "metrics": {name: [...]}}``."""
        scores = [
            await self.score_rollout(p, c, a, s)
            for p, c, a, s in zip(prompts, completions, answers, states, strict=True)
        ]
        metrics = (
            {k: [sc["metrics"][k] for sc in scores] for k in scores[0]["metrics"]} if scores else {}
        )
        return {"reward": [sc["reward"] for sc in scores], "metrics": metrics}


class VerifiersCodingEnv:
    """A multi-turn tool environment over a list of tasks (see the module docstring)."""

    def __init__(
        self,
        tasks: Sequence[AnyTask],
        config: EnvConfig | None = None,
        *,
        max_turns: int | None = None,
        system_prompt: str | None = None,
    ) -> None:
        if not tasks:
            raise ValueError("VerifiersCodingEnv needs at least one task")
        self.config = config or EnvConfig()
        self.tasks = {t.id: t for t in tasks}
        self.max_turns = max_turns if max_turns is not None else 2 * self.config.max_steps
        self.system_prompt = system_prompt
        self.oai_tools = [dict(t) for t in TOOL_SCHEMAS]
        self.rubric = CodingRubric(self.config)
        self.message_type = "chat"

    @property
    def dataset(self) -> list[dict[str, Any]]:
        """One row per task (the user prompt is the issue, as ``reset`` gives it)."""
        rows = []
        for task in self.tasks.values():
            budget = (
                f"Budget: {self.config.max_steps} actions, "
                f"{self.config.max_submissions} submissions."
            )
            rows.append(
                {
                    "prompt": [
                        {"role": "system", "content": self.system_prompt or task.system_prompt},
                        {"role": "user", "content": f"{task.issue.strip()}\n\n{budget}"},
                    ],
                    "answer": "",
                    "task": "kvharness-coding",
                    "info": {"task_id": task.id},
                }
            )
        return rows

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        task_id = (state.get("info") or {}).get("task_id")
        if task_id not in self.tasks:
            raise KeyError(f"state.info.task_id {task_id!r} is not a task of this environment")
        env = AsyncCodingEnv(self.tasks[task_id], self.config)
        await env.reset()
        state.update(coding_env=env, submissions=[], done=False, turn=state.get("turn", 0))
        return state

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        env: AsyncCodingEnv = state["coding_env"]
        out: Messages = []
        last = messages[-1] if messages else {}
        for i, call in enumerate(last.get("tool_calls") or ()):
            call = dict(call)
            if hasattr(call.get("function"), "model_dump"):  # an openai SDK object
                call["function"] = call["function"].model_dump()
            step = await env.step(call)
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call.get("id") or f"call_{i}",
                    "content": step.observation,
                }
            )
            state["submissions"] = list(env.submissions)
            if step.terminated or step.truncated:
                state["done"] = True
                break
        return out

    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        if state.get("done") or state.get("turn", 0) >= self.max_turns:
            return True
        last = messages[-1] if messages else {}
        return last.get("role") == "assistant" and not last.get("tool_calls")

    async def cleanup(self, state: State) -> None:
        env = state.pop("coding_env", None)
        if isinstance(env, AsyncCodingEnv):
            state["submissions"] = list(env.submissions)
            env.close()

    async def rollout(
        self,
        client: Any,
        model: str,
        prompt: Messages,
        answer: str = "",
        task: str = "kvharness-coding",
        info: Mapping[str, Any] | None = None,
        sampling_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> tuple[Messages, State]:
        """Run one episode with ``client.chat.completions.create`` (an ``openai.AsyncOpenAI``)."""
        state: State = {
            "prompt": prompt,
            "completion": [],
            "answer": answer,
            "task": task,
            "info": dict(info or {}),
            "responses": [],
            "turn": 0,
        }
        await self.setup_state(state)
        messages = [dict(m) for m in prompt]
        completion: Messages = []
        try:
            while True:
                response = await client.chat.completions.create(
                    model=model,
                    messages=messages,
                    tools=self.oai_tools,
                    **dict(sampling_args or {}),
                )
                state["responses"].append(response)
                state["turn"] += 1
                msg = response.choices[0].message
                assistant: dict[str, Any] = {"role": "assistant", "content": msg.content or ""}
                if msg.tool_calls:
                    assistant["tool_calls"] = [
                        {
                            "id": tc.id,
                            "type": "function",
                            "function": {
                                "name": tc.function.name,
                                "arguments": tc.function.arguments,
                            },
                        }
                        for tc in msg.tool_calls
                    ]
                messages.append(assistant)
                completion.append(assistant)
                if await self.is_completed(messages, state):
                    break
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
        """``state`` as JSON (submissions and scalar fields; live objects left out)."""
        keep = {k: v for k, v in state.items() if k not in ("coding_env", "responses")}
        keep["submissions"] = [
            {"step": s.step, "elapsed": s.elapsed, "score": s.score}
            for s in state.get("submissions", ())
        ]
        return json.dumps(keep, default=str)
