"""Run one episode of a scripted or model agent and keep what it did (:class:`WebEpisode`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvharness.env.web.agents import make_web_agent
from kvharness.env.web.env import AsyncWebEnv, WebConfig
from kvharness.env.web.task import WebTask

__all__ = ["WebEpisode", "WebStepRecord", "play"]


@dataclass(frozen=True, slots=True)
class WebStepRecord:
    """One step: the action's text, its reward, error, and timing (seconds)."""

    action: str | None
    reward: float
    error: str | None
    timing: dict[str, float]
    duration_s: float


@dataclass(slots=True)
class WebEpisode:
    """What one episode did: its reward and the milestones credited, every step, how it ended,
    the browser start (``reset_s``) and wall time, and the URLs the page was refused."""

    task: str
    agent: str
    seed: int
    reward: float = 0.0
    milestones: list[str] = field(default_factory=list)
    steps: list[WebStepRecord] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    reset_s: float = 0.0
    wall_s: float = 0.0
    blocked: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def play(
    task: WebTask,
    agent: str,
    config: WebConfig | None = None,
    *,
    seed: int = 0,
    shots: Path | None = None,
) -> WebEpisode:
    """One episode of the scripted agent ``agent`` on ``task``; ``shots``: a folder to write
    each step's screenshot to (``<task>-<agent>-<step>.png``)."""
    t0 = time.monotonic()
    ep = WebEpisode(task.id, agent, seed)
    async with AsyncWebEnv(task, config) as env:
        obs, _ = await env.reset()
        ep.reset_s = time.monotonic() - t0
        who = make_web_agent(agent, env, seed)
        tag = task.id.replace("/", "-")
        step = 0
        while True:
            if shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                (shots / f"{tag}-{agent}-{step:03d}.png").write_bytes(obs.screenshot)
            result = await env.step(await who.act(obs, None))
            step += 1
            obs = result.observation
            info = result.info
            ep.steps.append(
                WebStepRecord(
                    info["action"], result.reward, info["error"], info["timing"], info["duration_s"]
                )
            )
            ep.reward = info["episode_reward"]
            ep.milestones = info["milestones"]
            ep.blocked = info["blocked"]
            if result.terminated or result.truncated:
                ep.terminated, ep.truncated = result.terminated, result.truncated
                break
    ep.wall_s = time.monotonic() - t0
    return ep
