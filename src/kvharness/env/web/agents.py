"""Agents for the computer-use environment: scripted ones that prove the tasks, and the model.

Each agent is asked for one action per step, given the latest observation and, when the harness
called a model for this step, the model's reply (``act(observation, reply)``):

* :class:`OracleAgent`: plays the task's oracle script, resolving each element to the centre of
  its box on screen (scrolling the document with the wheel first when it is out of view) and
  acting through the same click, type, key and drag actions as any agent; then ``done()``. Must
  score 1.0 on every task.
* :class:`HalfwayAgent`: the first half of the oracle's script, then ``done()``: partial credit,
  the milestones it reached.
* :class:`NoopAgent`: ``done()`` at once; must score 0.
* :class:`RandomAgent`: seeded random clicks, keys, typing and scrolls over the whole screen,
  never ``done()`` (the step budget ends it); must stay far below the oracle.
* :class:`ModelAgent`: the model's reply itself (the environment parses its action).

Make one agent per episode (:func:`make_web_agent`): it holds its position in a script.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

from kvharness.env.web.actions import (
    ClickAt,
    Done,
    DoubleClickAt,
    Drag,
    Key,
    Scroll,
    Type,
    WebAction,
)
from kvharness.env.web.env import AsyncWebEnv, Observation, Rect
from kvharness.env.web.task import Click, DragTo, OracleStep, Press, TypeText
from kvharness.registry import Registry

__all__ = [
    "WEB_AGENTS",
    "HalfwayAgent",
    "ModelAgent",
    "NoopAgent",
    "OracleAgent",
    "RandomAgent",
    "WebAgent",
    "make_web_agent",
]

_MARGIN = 24.0
"""Pixels kept between an element the oracle scrolls to and the viewport's edge."""


class WebAgent:
    """Base: ``act(observation, reply)`` returns this step's action (or text to parse).
    ``scripted`` agents ignore the model's reply."""

    name = "agent"
    scripted = True

    def __init__(self, env: AsyncWebEnv, seed: int = 0) -> None:
        self.env = env
        self.seed = seed

    async def act(self, observation: Observation, reply: str | None) -> WebAction | str:
        raise NotImplementedError


class NoopAgent(WebAgent):
    name = "noop"

    async def act(self, observation: Observation, reply: str | None) -> WebAction | str:
        return Done()


class _ScriptAgent(WebAgent):
    """Plays a list of oracle steps, one action per call, then ``done()``."""

    def _script(self) -> tuple[OracleStep, ...]:
        return self.env.task.oracle

    def __init__(self, env: AsyncWebEnv, seed: int = 0) -> None:
        super().__init__(env, seed)
        self._actions: AsyncIterator[WebAction] | None = None

    async def act(self, observation: Observation, reply: str | None) -> WebAction | str:
        if self._actions is None:
            self._actions = self._play()
        try:
            return await anext(self._actions)
        except StopAsyncIteration:
            return Done()

    async def _play(self) -> AsyncIterator[WebAction]:
        for step in self._script():
            if isinstance(step, TypeText):
                yield Type(step.text)
            elif isinstance(step, Press):
                yield Key(step.combo)
            elif isinstance(step, Click):
                async for action in self._bring_into_view(step.selector):
                    yield action
                x, y = (await self._find(step.selector)).centre
                yield ClickAt(x, y) if step.clicks == 1 else DoubleClickAt(x, y)
            elif isinstance(step, DragTo):
                async for action in self._bring_into_view(step.source):
                    yield action
                x0, y0 = (await self._find(step.source)).centre
                x1, y1 = (await self._find(step.target)).centre
                yield Drag(x0, y0, x1, y1)

    async def _find(self, selector: str) -> Rect:
        rect = await self.env.locate(selector)
        if rect is None:
            raise RuntimeError(f"{self.env.task.id}: the oracle's element {selector!r} is missing")
        return rect

    async def _bring_into_view(self, selector: str) -> AsyncIterator[WebAction]:
        height = self.env.config.height
        for _ in range(8):
            rect = await self._find(selector)
            _, y = rect.centre
            if _MARGIN <= y <= height - _MARGIN:
                return
            yield Scroll(0, y - height / 2)


class OracleAgent(_ScriptAgent):
    name = "oracle"


class HalfwayAgent(_ScriptAgent):
    name = "halfway"

    def _script(self) -> tuple[OracleStep, ...]:
        oracle = self.env.task.oracle
        return oracle[: len(oracle) // 2]


_KEYS = ("Enter", "Tab", "Escape", "Backspace", "ArrowDown", "ArrowUp", "Space", "Delete")
_WORDS = ("hello", "42", "test", "x", "2025-01-01", "admin", "ok")


class RandomAgent(WebAgent):
    name = "random"

    def __init__(self, env: AsyncWebEnv, seed: int = 0) -> None:
        super().__init__(env, seed)
        self._rng = random.Random(f"random-agent/{env.task.id}/{seed}")

    async def act(self, observation: Observation, reply: str | None) -> WebAction | str:
        rng, w, h = self._rng, self.env.config.width, self.env.config.height
        kind = rng.random()
        if kind < 0.6:
            return ClickAt(rng.uniform(0, w - 1), rng.uniform(0, h - 1))
        if kind < 0.75:
            return Type(rng.choice(_WORDS))
        if kind < 0.9:
            return Key(rng.choice(_KEYS))
        return Scroll(0, rng.choice((-300, 300)))


class ModelAgent(WebAgent):
    name = "model"
    scripted = False

    async def act(self, observation: Observation, reply: str | None) -> WebAction | str:
        if reply is None:
            raise RuntimeError("the model agent needs a model: run it with a client")
        return reply


WEB_AGENTS: Registry[WebAgent] = Registry(
    "web agent",
    {
        "oracle": OracleAgent,
        "halfway": HalfwayAgent,
        "noop": NoopAgent,
        "random": RandomAgent,
        "model": ModelAgent,
    },
)


def make_web_agent(name: str, env: AsyncWebEnv, seed: int = 0, **_: Any) -> WebAgent:
    """A fresh agent of kind ``name`` for one episode on ``env``."""
    return WEB_AGENTS.make(name, env, seed)
