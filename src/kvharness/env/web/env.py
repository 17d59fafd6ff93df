"""The computer-use environment: a screenshot in, one mouse or keyboard action out, scored by the
hidden checks of the app's state (see ``task.py``).

``reset()`` starts the episode's own sandboxed browser on the task's app (``browser.py``) and
returns the first :class:`Observation`: the screenshot and the instruction. ``step(action)``
carries out one action (a typed :mod:`~kvharness.env.web.actions` action, or a model's reply text
to parse) and returns ``(observation, reward, terminated, truncated, info)`` as the coding
environment does:

* ``observation``: the screenshot after the action, and a line of text saying what was done or
  why it could not be (a malformed or impossible action is a step with an error, never a crash).
* ``reward``: the change in episode reward: the credited fraction of the milestones, with the last
  one (the task) counted when its check holds (on the final state, or at once with
  ``stop_on_solve``). A solved task scores 1.0 whatever order its milestones were reached in.
* ``terminated``: the agent said ``done()``, or the task was solved (``stop_on_solve``).
  ``truncated``: the step budget or ``max_wall_s`` ran out, or the browser died.
* ``info``: ``step``, ``action`` (its text form), ``error``, ``duration_s``, ``timing`` (seconds
  spent acting, settling, reading the state and taking the screenshot), ``milestones`` (names
  credited so far), ``episode_reward``, ``blocked`` (URLs the page asked for and was refused).

:class:`AsyncWebEnv` is the implementation; :class:`WebEnv` runs it on a private event loop for
synchronous callers (the Gymnasium adapter). Close an env to kill its browser.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from kvharness.env.web.actions import (
    ACTION_HELP,
    MAX_WAIT_S,
    ActionError,
    ClickAt,
    Done,
    DoubleClickAt,
    Drag,
    Key,
    Scroll,
    Type,
    Wait,
    WebAction,
    action_text,
    parse_action,
)
from kvharness.env.web.browser import Browser, BrowserError
from kvharness.env.web.task import WebTask

__all__ = ["AsyncWebEnv", "Observation", "Rect", "WebConfig", "WebEnv", "WebStep"]

_STATE_JS = "JSON.stringify(typeof window.kvhState === 'function' ? window.kvhState() : null)"
_RECT_JS = """(() => {{
  const el = document.querySelector({selector});
  if (!el) return null;
  const r = el.getBoundingClientRect();
  return [r.left, r.top, r.width, r.height, window.scrollY,
          document.scrollingElement.scrollHeight];
}})()"""


@dataclass(frozen=True, slots=True)
class WebConfig:
    """Budgets and the screen of an episode.

    ``max_steps``: actions per episode (then truncated); ``max_wall_s``: wall time from reset
    (None: no limit); ``width`` x ``height``: the viewport and screenshot size in pixels;
    ``stop_on_solve``: end the episode as soon as the task's check holds; ``action_timeout_s``:
    how long one action may take in the browser; ``accessibility``: add the page's accessibility
    tree (roles and names, as a screen reader has them) to every observation's text; ``unsafe``:
    run the browser without bubblewrap (see ``browser.py``).
    """

    max_steps: int = 40
    max_wall_s: float | None = None
    width: int = 1280
    height: int = 800
    stop_on_solve: bool = True
    action_timeout_s: float = 15.0
    accessibility: bool = False
    unsafe: bool = False

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        if not (200 <= self.width <= 4096 and 200 <= self.height <= 4096):
            raise ValueError("width and height must be 200 to 4096 pixels")


class Observation(NamedTuple):
    """What the agent sees: a PNG of the viewport, and text (the instruction at reset, then
    what the last action did)."""

    screenshot: bytes
    text: str


class WebStep(NamedTuple):
    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class Rect(NamedTuple):
    """An element's box in viewport pixels, with the document's scroll offset and height."""

    x: float
    y: float
    width: float
    height: float
    scroll_y: float
    doc_height: float

    @property
    def centre(self) -> tuple[float, float]:
        return self.x + self.width / 2, self.y + self.height / 2


class AsyncWebEnv:
    """One episode at a time on one task; ``reset`` starts a fresh browser (closing any
    previous one). Not safe for concurrent calls: run one env per episode in flight."""

    def __init__(self, task: WebTask, config: WebConfig | None = None) -> None:
        self.task = task
        self.config = config or WebConfig()
        self._browser: Browser | None = None
        self._credited = 0
        self._solved = False
        self._steps = 0
        self._start = 0.0
        self._done = True
        self._reached: list[str] = []

    # -- episode -----------------------------------------------------------------------------

    async def reset(self) -> tuple[Observation, dict[str, Any]]:
        await self.close()
        cfg = self.config
        self._browser = await Browser.launch(
            self.task.files, width=cfg.width, height=cfg.height, unsafe=cfg.unsafe
        )
        self._credited, self._solved, self._steps = 0, False, 0
        self._reached = []
        self._start = time.monotonic()
        self._done = False
        state = await self._state()
        self._advance(state)
        text = (
            f"{self.task.instruction}\n\n{ACTION_HELP}\n"
            f"The screen is {cfg.width}x{cfg.height} pixels. Budget: {cfg.max_steps} actions."
        )
        text += await self._tree()
        shot = await self._browser.screenshot()
        return Observation(shot, text), {"task": self.task.id, "milestones": list(self._reached)}

    async def _tree(self) -> str:
        if not self.config.accessibility or self._browser is None or not self._browser.alive:
            return ""
        return "\n\nAccessibility tree:\n" + await self._browser.accessibility_text()

    @property
    def episode_reward(self) -> float:
        n = len(self.task.milestones)
        return 1.0 if self._solved else self._credited / n

    async def step(self, action: WebAction | str | dict[str, Any]) -> WebStep:
        if self._done or self._browser is None:
            raise RuntimeError("the episode is over: call reset()")
        browser = self._browser
        self._steps += 1
        before = self.episode_reward
        t0 = time.monotonic()
        timing: dict[str, float] = {}
        error: str | None = None
        typed: WebAction | None = None
        try:
            typed = action if isinstance(action, tuple) else parse_action(action)
            await asyncio.wait_for(self._act(typed), self.config.action_timeout_s)
            text = f"Did {action_text(typed)}."
        except ActionError as e:
            error = text = str(e)
        except (BrowserError, TimeoutError) as e:
            error = text = f"The action failed in the browser: {e or 'it timed out'}."
        timing["action_s"] = time.monotonic() - t0
        terminated = isinstance(typed, Done)
        truncated = not browser.alive
        if not truncated:
            t = time.monotonic()
            await browser.settle()
            timing["settle_s"] = time.monotonic() - t
            t = time.monotonic()
            state = await self._state()
            timing["state_s"] = time.monotonic() - t
            self._advance(state)
            if self._check_task(state) and (terminated or self.config.stop_on_solve):
                self._solved = terminated = True
        wall_out = self.config.max_wall_s is not None and (
            time.monotonic() - self._start >= self.config.max_wall_s
        )
        if not terminated and (self._steps >= self.config.max_steps or wall_out):
            truncated = True
        t = time.monotonic()
        shot = await browser.screenshot() if browser.alive else b""
        timing["screenshot_s"] = time.monotonic() - t
        text += await self._tree()
        if terminated or truncated:
            self._done = True
        info = {
            "step": self._steps,
            "action": action_text(typed) if typed is not None else None,
            "error": error,
            "duration_s": time.monotonic() - t0,
            "timing": timing,
            "milestones": list(self._reached),
            "episode_reward": self.episode_reward,
            "blocked": list(browser.blocked),
        }
        if self._done:
            await self.close()
        return WebStep(
            Observation(shot, text), self.episode_reward - before, terminated, truncated, info
        )

    async def _act(self, action: WebAction) -> None:
        browser = self._browser
        assert browser is not None
        if isinstance(action, ClickAt | DoubleClickAt | Drag):
            self._on_screen(*action)
        if isinstance(action, ClickAt):
            await browser.click(action.x, action.y)
        elif isinstance(action, DoubleClickAt):
            await browser.click(action.x, action.y, count=2)
        elif isinstance(action, Type):
            await browser.insert_text(action.text)
        elif isinstance(action, Key):
            try:
                await browser.press(action.combo)
            except ValueError as e:
                raise ActionError(str(e)) from None
        elif isinstance(action, Scroll):
            x = self.config.width / 2 if action.x is None else action.x
            y = self.config.height / 2 if action.y is None else action.y
            self._on_screen(x, y)
            await browser.wheel(x, y, action.dx, action.dy)
        elif isinstance(action, Drag):
            await browser.drag(*action)
        elif isinstance(action, Wait):
            if not 0 <= action.seconds <= MAX_WAIT_S:
                raise ActionError(f"wait takes 0 to {MAX_WAIT_S:g} seconds")
            await asyncio.sleep(action.seconds)

    def _on_screen(self, *coords: float) -> None:
        w, h = self.config.width, self.config.height
        for x, y in zip(coords[::2], coords[1::2], strict=True):
            if not (0 <= x < w and 0 <= y < h):
                raise ActionError(
                    f"({x:g}, {y:g}) is off the screen: x must be 0 to {w - 1}, y 0 to {h - 1}"
                )

    # -- hidden state ------------------------------------------------------------------------

    async def _state(self) -> dict[str, Any]:
        assert self._browser is not None
        raw = await self._browser.evaluate(_STATE_JS)
        state = json.loads(raw) if isinstance(raw, str) else None
        return state if isinstance(state, dict) else {}

    def _advance(self, state: dict[str, Any]) -> None:
        """Credit the milestones (all but the task's own) that now hold, in order."""
        steps = self.task.milestones[:-1]
        while self._credited < len(steps) and steps[self._credited].check(state):
            self._reached.append(steps[self._credited].name)
            self._credited += 1

    def _check_task(self, state: dict[str, Any]) -> bool:
        last = self.task.milestones[-1]
        held = bool(last.check(state))
        if held and last.name not in self._reached:
            self._reached.append(last.name)
        return held

    async def locate(self, selector: str) -> Rect | None:
        """Where the first element matching ``selector`` is (None when there is none). For
        scripted agents proving a task solvable (the oracle); agents under test see only
        screenshots."""
        if self._browser is None:
            raise RuntimeError("no episode: call reset()")
        box = await self._browser.evaluate(_RECT_JS.format(selector=json.dumps(selector)))
        return None if box is None else Rect(*box)

    async def url(self) -> str:
        """The page's current URL (for tests and scripted agents, like :meth:`locate`)."""
        if self._browser is None:
            raise RuntimeError("no episode: call reset()")
        return await self._browser.url()

    async def close(self) -> None:
        """Kill the browser (idempotent); the episode, if running, is over."""
        self._done = True
        if self._browser is not None:
            browser, self._browser = self._browser, None
            await browser.close()

    async def __aenter__(self) -> AsyncWebEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class WebEnv:
    """:class:`AsyncWebEnv` for synchronous callers, on an event loop of its own."""

    def __init__(self, task: WebTask, config: WebConfig | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self.inner = AsyncWebEnv(task, config)

    @property
    def task(self) -> WebTask:
        return self.inner.task

    @property
    def config(self) -> WebConfig:
        return self.inner.config

    def reset(self) -> tuple[Observation, dict[str, Any]]:
        return self._loop.run_until_complete(self.inner.reset())

    def step(self, action: WebAction | str | dict[str, Any]) -> WebStep:
        return self._loop.run_until_complete(self.inner.step(action))

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self.inner.close())
            self._loop.close()

    def __enter__(self) -> WebEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
