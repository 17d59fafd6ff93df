"""``kvharness env web run``: episodes of one agent over the web task suite, results as they go.

Each finished episode is appended to ``DIR/episodes.jsonl`` at once (reward, milestones, every
step's action, error and timing; with a model server, the episode's model calls as one workload
session line), so a killed run loses only the episodes in flight, and ``--resume DIR`` runs just
the episodes that file does not hold yet. At the end ``DIR/summary.json`` holds the figures
(:func:`summarise`) and, when a model was called, ``DIR/workload.jsonl`` the rollouts as a
multimodal workload for ``kvharness bench`` and ``kvharness sim``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvharness.configs import opt
from kvharness.env.harness.client import ChatClient
from kvharness.env.web.env import WebConfig
from kvharness.env.web.harness import episode_session, run_episode
from kvharness.env.web.play import WebEpisode, WebStepRecord, play
from kvharness.env.web.task import WebTask
from kvharness.errors import FormatError
from kvharness.jsonl import open_append
from kvharness.workload.format import dumps_lines, load
from kvharness.workload.model import Arrival, Workload

__all__ = [
    "EPISODES",
    "WebRunConfig",
    "episode_from_doc",
    "read_episodes",
    "run_suite",
    "summarise",
    "write_workload",
]

EPISODES = "episodes.jsonl"


@dataclass(frozen=True, slots=True)
class WebRunConfig:
    """A web-environment run: which episodes, which agent, which screen, which server."""

    agent: str = opt(
        "oracle",
        help="who acts: oracle (solves every task), halfway (the oracle's first half), noop, "
        "random, or model (the model's replies, parsed as actions; needs --backend)",
    )
    families: str | None = opt(
        None, help="comma-separated task families", default_means="all", metavar="NAMES"
    )
    seeds: str = opt("0", help="variant seeds: a list or ranges, e.g. 0-4,9", metavar="SEEDS")
    concurrency: int = opt(2, help="episodes in flight (one browser each)", lo=1, metavar="N")
    max_steps: int = opt(40, help="actions per episode", lo=1, hi=10_000, metavar="N")
    width: int = opt(1280, help="screen width, pixels", lo=200, hi=4096, metavar="PX")
    height: int = opt(800, help="screen height, pixels", lo=200, hi=4096, metavar="PX")
    backend: str | None = opt(
        None,
        help="OpenAI-compatible server of a vision-language model: called before every action "
        "with the conversation and screenshots (scripted agents still act by script)",
        default_means="no model calls",
        metavar="URL",
    )
    model: str | None = opt(
        None, help="model name", default_means="the backend's first", metavar="NAME"
    )
    max_tokens: int = opt(64, help="completion tokens per model call", lo=1, metavar="N")
    keep_screens: int | None = opt(
        None,
        help="keep only the last K screenshots in the prompt (older ones become a line of text)",
        default_means="all",
        lo=1,
        metavar="K",
    )
    accessibility: bool = opt(
        False, help="add the page's accessibility tree (roles and names) to every observation"
    )
    block_size: int = opt(16, help="block size of the recorded workload, tokens", lo=1, metavar="B")
    unsafe_no_sandbox: bool = opt(
        False, help="run the browsers without bubblewrap (and its URL policy): no isolation!"
    )

    def env_config(self) -> WebConfig:
        return WebConfig(
            max_steps=self.max_steps,
            width=self.width,
            height=self.height,
            accessibility=self.accessibility,
            unsafe=self.unsafe_no_sandbox,
        )


def _key(task: str, agent: str, seed: int) -> str:
    return f"{task}|{agent}|{seed}"


def read_episodes(path: Path) -> list[dict[str, Any]]:
    """The episode lines of ``path`` (none if it does not exist); a torn last line is dropped,
    any other bad line is a :class:`FormatError` naming it."""
    if not path.exists():
        return []
    out = []
    lines = path.read_bytes().split(b"\n")
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            doc["task"], doc["agent"], doc["reward"]
        except (ValueError, KeyError, TypeError) as err:
            if lineno == len(lines):
                break
            raise FormatError(str(path), lineno, f"not an episode line: {err}") from None
        out.append(doc)
    return out


async def run_suite(
    tasks: Sequence[WebTask],
    cfg: WebRunConfig,
    out: Path,
    *,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every task's episode not yet in ``out/episodes.jsonl``, ``cfg.concurrency`` at a time,
    appending each as it finishes; returns all the file's episodes, in task order."""
    path = out / EPISODES
    done = {_key(d["task"], d["agent"], d["seed"]) for d in read_episodes(path)}
    todo = [t for t in tasks if _key(t.id, cfg.agent, 0) not in done]
    sink = open_append(path)
    gate = asyncio.Semaphore(cfg.concurrency)
    config = cfg.env_config()
    origin = time.perf_counter()
    client = (
        ChatClient(cfg.backend, cfg.model, max_tokens=cfg.max_tokens)
        if cfg.backend is not None
        else None
    )

    async def one(task: WebTask) -> None:
        async with gate:
            session_line = None
            if client is None:
                ep = await play(task, cfg.agent, config)
            else:
                ep, calls = await run_episode(
                    task, cfg.agent, client, config, keep_screens=cfg.keep_screens, t0=origin
                )
                session = await episode_session(ep, calls, client, cfg.block_size)
                if session is not None:
                    lines = list(
                        dumps_lines(Workload((session,), cfg.block_size, "web", Arrival("trace")))
                    )
                    session_line = json.loads(lines[1])
            doc = {**ep.to_dict(), "session": session_line}
            sink.write(json.dumps(doc).encode() + b"\n")
            sink.flush()
            if on_done is not None:
                on_done(doc)

    try:
        await asyncio.gather(*(one(t) for t in todo))
    finally:
        sink.close()
        if client is not None:
            await client.close()
    order = {t.id: i for i, t in enumerate(tasks)}
    episodes = [d for d in read_episodes(path) if d["agent"] == cfg.agent]
    return sorted(episodes, key=lambda d: order.get(d["task"], len(order)))


def write_workload(episodes: Sequence[dict[str, Any]], block_size: int, path: Path) -> int:
    """Write the episodes' recorded sessions as one workload (sessions in start order); the
    number of sessions written (0: nothing written)."""
    sessions = [d["session"] for d in episodes if d.get("session")]
    if not sessions:
        return 0
    header = next(
        dumps_lines(
            Workload(
                (), block_size, "web-rollouts", Arrival("trace"), {"source": "kvharness env web"}
            )
        )
    )
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        f.write(header)
        for s in sorted(sessions, key=lambda s: (s.get("start") or 0.0, s["id"])):
            f.write(json.dumps(s).encode() + b"\n")
    load(tmp)  # what bench and sim will read: check it before it replaces a good file
    tmp.replace(path)
    return len(sessions)


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarise(episodes: Sequence[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """A run's figures: mean reward and solved count, per family too; each step's time (the
    action, the settle, the state read, the screenshot) p50/p90; episodes per minute of wall."""
    steps = [WebStepRecord(**s) for d in episodes for s in d["steps"]]
    per_family: dict[str, list[float]] = {}
    for d in episodes:
        per_family.setdefault(d["task"].split("/")[0], []).append(d["reward"])
    n = len(episodes)
    return {
        "episodes": n,
        "mean_reward": sum(d["reward"] for d in episodes) / n if n else 0.0,
        "solved": sum(1 for d in episodes if d["reward"] == 1.0),
        "steps": len(steps),
        "invalid_actions": sum(1 for s in steps if s.error),
        "step_s_p50": _pct([s.duration_s for s in steps], 50),
        "step_s_p90": _pct([s.duration_s for s in steps], 90),
        "screenshot_s_p50": _pct([s.timing.get("screenshot_s", 0.0) for s in steps], 50),
        "screenshot_s_p90": _pct([s.timing.get("screenshot_s", 0.0) for s in steps], 90),
        "reset_s_p50": _pct([d["reset_s"] for d in episodes], 50),
        "wall_s": wall_s,
        "episodes_per_min": 60.0 * n / wall_s if wall_s > 0 else None,
        "families": {f: sum(r) / len(r) for f, r in sorted(per_family.items())},
    }


def episode_from_doc(doc: dict[str, Any]) -> WebEpisode:
    """An episode line back as a :class:`WebEpisode` (its session line left out)."""
    fields = {k: v for k, v in doc.items() if k != "session"}
    fields["steps"] = [WebStepRecord(**s) for s in fields["steps"]]
    return WebEpisode(**fields)
