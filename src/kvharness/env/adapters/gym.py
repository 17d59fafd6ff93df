"""Gymnasium adapters: ``gymnasium.make("kvharness/CodingEnv-v0", task=...)``, and
``gymnasium.make("kvharness/WebEnv-v0", task="signup-form/0")`` for the computer-use environment
(:class:`GymWebEnv`).

Observations and actions are text (``gymnasium.spaces.Text``): an observation is the tool's output
(the issue text after ``reset``), an action is an OpenAI tool call as JSON text
(``{"name": "bash", "arguments": {"command": "ls"}}``; a typed action or a dict works too).
``Text`` spaces hold a fixed character set, so characters outside printable ASCII, tab and newline
are replaced by ``?`` in observations (the :class:`~kvharness.env.api.CodingEnv` underneath keeps
them). ``reward``, ``terminated``, ``truncated`` and ``info`` are the environment's own (see
``api.py``): step rewards sum to the episode reward under the configured rule, except that the
step's wall time is moved out of ``info`` into ``env.unwrapped.last_duration_s``, so that equal
seeds and actions give equal ``info`` (Gymnasium's determinism check).

The id is registered on import of this module (``import kvharness.env.adapters.gym``), or by
Gymnasium itself given the module-qualified id:
``gymnasium.make("kvharness.env.adapters.gym:kvharness/CodingEnv-v0", task=...)``.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from kvharness.env.actions import Action
from kvharness.env.api import CodingEnv, EnvConfig
from kvharness.env.task import AnyTask, load_task

__all__ = [
    "CHARSET",
    "ENV_ID",
    "WEB_ENV_ID",
    "GymCodingEnv",
    "GymWebEnv",
    "register",
    "register_web",
]

ENV_ID = "kvharness/CodingEnv-v0"
CHARSET = frozenset(string.printable)
"""Characters of observations and actions: printable ASCII, with tab and newline."""


def _sanitise(text: str, limit: int) -> str:
    return "".join(c if c in CHARSET else "?" for c in text[:limit])


class GymCodingEnv(gymnasium.Env[str, str]):
    """A :class:`CodingEnv` as a ``gymnasium.Env``.

    ``task``: a :class:`Task`, or the path of a task folder (or, with ``task_id``, of a suite
    folder). ``config``: an :class:`EnvConfig`; keyword arguments not named here override its
    fields (``max_steps=20``). ``render_mode="ansi"``: :meth:`render` returns the last
    observation.
    """

    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012 - Gymnasium's documented class attribute

    def __init__(
        self,
        task: AnyTask | str | Path,
        task_id: str | None = None,
        config: EnvConfig | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        if isinstance(task, str | Path):
            folder = Path(task) / task_id if task_id else Path(task)
            task = load_task(folder)
        base = config or EnvConfig()
        if overrides:
            fields = {f: getattr(base, f) for f in base.__dataclass_fields__}
            unknown = set(overrides) - set(fields)
            if unknown:
                raise TypeError(f"unknown EnvConfig field(s): {', '.join(sorted(unknown))}")
            base = EnvConfig(**{**fields, **overrides})
        self.env = CodingEnv(task, base)
        self.render_mode = render_mode
        self._limit = base.max_observation_chars + 100
        self.observation_space = spaces.Text(self._limit, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(1 << 16, min_length=0, charset=CHARSET)
        self._last = ""
        self.last_duration_s = 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options=options)
        self._last = _sanitise(obs, self._limit)
        return self._last, info

    def step(
        self, action: str | Mapping[str, Any] | Action
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._last = _sanitise(obs, self._limit)
        self.last_duration_s = info.pop("duration_s")
        return self._last, reward, terminated, truncated, info

    def render(self) -> str | None:
        return self._last if self.render_mode == "ansi" else None

    def close(self) -> None:
        self.env.close()


def register() -> None:
    """Register :data:`ENV_ID` with Gymnasium (idempotent)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point=f"{__name__}:GymCodingEnv")


register()


WEB_ENV_ID = "kvharness/WebEnv-v0"


class GymWebEnv(gymnasium.Env[dict[str, Any], str]):
    """The computer-use :class:`~kvharness.env.web.env.WebEnv` as a ``gymnasium.Env``.

    Observations are ``{"screenshot": uint8 array (height, width, 3), "text": str}``; an action
    is the call a model writes (``"click(412, 230)"``, see ``web/actions.py``), a typed action or
    a ``{"action": name, "args": [...]}`` mapping. ``task``: a
    :class:`~kvharness.env.web.task.WebTask` or its id (``"signup-form/3"``); keyword
    arguments override :class:`~kvharness.env.web.env.WebConfig` fields. As for the coding
    environment, the step's wall time moves from ``info`` to ``last_duration_s`` (with the
    timing breakdown), so equal actions give equal ``info``. ``render_mode="rgb_array"``:
    :meth:`render` returns the last screenshot.
    """

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012 - Gymnasium's documented class attribute

    def __init__(self, task: Any, render_mode: str | None = None, **overrides: Any) -> None:
        from kvharness.env.web.apps import task as web_task
        from kvharness.env.web.env import WebConfig, WebEnv

        self.env = WebEnv(web_task(task) if isinstance(task, str) else task, WebConfig(**overrides))
        cfg = self.env.config
        self.render_mode = render_mode
        self.observation_space = spaces.Dict(
            {
                "screenshot": spaces.Box(0, 255, (cfg.height, cfg.width, 3), dtype=np.uint8),
                "text": spaces.Text(1 << 14, min_length=0, charset=CHARSET),
            }
        )
        self.action_space = spaces.Text(1 << 12, min_length=0, charset=CHARSET)
        self._last: Any = None
        self.last_duration_s = 0.0

    def _observe(self, obs: Any) -> dict[str, Any]:
        import io

        from PIL import Image

        cfg = self.env.config
        if obs.screenshot:
            pixels = np.asarray(Image.open(io.BytesIO(obs.screenshot)).convert("RGB"))
        else:  # the browser died: a black screen
            pixels = np.zeros((cfg.height, cfg.width, 3), dtype=np.uint8)
        self._last = pixels
        return {"screenshot": pixels, "text": _sanitise(obs.text, 1 << 14)}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.env.reset()
        return self._observe(obs), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.last_duration_s = info.pop("duration_s")
        self.last_timing = info.pop("timing")
        return self._observe(obs), reward, terminated, truncated, info

    def render(self) -> Any:
        return self._last if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        self.env.close()


def register_web() -> None:
    """Register :data:`WEB_ENV_ID` with Gymnasium (idempotent)."""
    if WEB_ENV_ID not in gymnasium.registry:
        gymnasium.register(id=WEB_ENV_ID, entry_point=f"{__name__}:GymWebEnv")


register_web()
