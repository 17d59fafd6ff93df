"""The computer-use agent loop against a model server, and its rollouts as a multimodal workload.

:func:`run_episode` plays one episode: before every action it sends the model the conversation so
far (a system prompt with the instruction and the action syntax, then per step a user message with
the observation's text and its screenshot as an ``image_url`` PNG data URI, and the model's own
replies), then asks the agent for the action given the reply (the model agent takes the reply
itself; scripted agents act by their script, and their action is what the conversation records as
the assistant's reply, so the server's load is that of a real agent). ``keep_screens=K`` keeps
only the last K screenshots in the prompt and replaces older ones by a line of text, as
computer-use harnesses do; this rewrites the middle of the prompt on every step, which the
recorded workload shows as lost prefix.

:func:`episode_session` turns an episode's model calls into a workload :class:`Session`: each
call's prompt is the server's own token ids (vLLM's ``/tokenize`` of the same messages, images
expanded by the model's processor), with each screenshot's placeholder span found by aligning
those ids with the ids of the same messages without images, and named by the PNG's content hash
(:meth:`~kvharness.workload.chain.ChainBuilder.extend_image`). When no screenshot was dropped the
conversation only grows, so each turn also carries the messages it appended (with the PNGs
inline) and ``kvharness bench`` replays the very conversation; otherwise the turn carries its
images' sizes and hashes and bench sends screens of the same size in their place.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvharness.env.harness.client import ChatClient, ModelCall
from kvharness.env.web.actions import action_text
from kvharness.env.web.agents import make_web_agent
from kvharness.env.web.env import AsyncWebEnv, WebConfig
from kvharness.env.web.play import WebEpisode, WebStepRecord
from kvharness.env.web.task import WebTask
from kvharness.workload.chain import ChainBuilder
from kvharness.workload.images import Image
from kvharness.workload.model import Arrival, Session, Turn, Workload

__all__ = [
    "DROPPED",
    "SYSTEM",
    "WebCall",
    "episode_session",
    "image_hash",
    "image_spans",
    "run_episode",
    "to_workload",
]

SYSTEM = (
    "You operate a web browser to carry out a task. After each action you get a screenshot of "
    "the screen. Act one step at a time."
)
DROPPED = "[an earlier screenshot, no longer shown]"


def image_hash(png: bytes) -> int:
    """A screenshot's 64-bit content hash (equal PNG bytes, equal hashes)."""
    return int.from_bytes(hashlib.blake2b(png, digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class WebCall:
    """One model call: its measurements, the messages it sent (PNG data URIs inline), the
    screenshots in them (``(hash, width, height)`` in prompt order), and the tool time before it
    (the previous action and its observation, seconds)."""

    call: ModelCall
    messages: tuple[dict[str, Any], ...]
    images: tuple[tuple[int, int, int], ...]
    gap: float


@dataclass(slots=True)
class _Conversation:
    """The messages of an episode, with each user turn's screenshot kept beside it (as its data
    URI, encoded once) so older ones can be dropped from the prompt."""

    system: str
    turns: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    shots: list[tuple[str, int]] = field(default_factory=list)

    def add_observation(self, text: str, png: bytes) -> None:
        self.turns.append(("user", {"text": text, "shot": len(self.shots)}))
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        self.shots.append((url, image_hash(png)))

    def add_reply(self, text: str) -> None:
        self.turns.append(("assistant", {"text": text}))

    def messages(
        self, keep: int | None, size: tuple[int, int]
    ) -> tuple[list[dict[str, Any]], list[tuple[int, int, int]]]:
        first_kept = 0 if keep is None else max(0, len(self.shots) - keep)
        out: list[dict[str, Any]] = [{"role": "system", "content": self.system}]
        images: list[tuple[int, int, int]] = []
        for role, part in self.turns:
            if role == "assistant":
                out.append({"role": "assistant", "content": part["text"]})
                continue
            k = part["shot"]
            content: list[dict[str, Any]] = [{"type": "text", "text": part["text"]}]
            if k >= first_kept:
                url, h = self.shots[k]
                content.append({"type": "image_url", "image_url": {"url": url}})
                images.append((h, *size))
            else:
                content.append({"type": "text", "text": DROPPED})
            out.append({"role": "user", "content": content})
        return out, images


async def run_episode(
    task: WebTask,
    agent: str,
    client: ChatClient,
    config: WebConfig | None = None,
    *,
    seed: int = 0,
    keep_screens: int | None = None,
    t0: float | None = None,
) -> tuple[WebEpisode, list[WebCall]]:
    """One episode with a model call before every action (see the module docstring).
    ``t0``: the run's origin on ``time.perf_counter`` (call times are relative to it)."""
    origin = time.perf_counter() if t0 is None else t0
    start = time.monotonic()
    ep = WebEpisode(task.id, agent, seed)
    calls: list[WebCall] = []
    async with AsyncWebEnv(task, config) as env:
        cfg = env.config
        obs, _ = await env.reset()
        ep.reset_s = time.monotonic() - start
        who = make_web_agent(agent, env, seed)
        convo = _Conversation(SYSTEM)
        convo.add_observation(obs.text, obs.screenshot)
        gap = 0.0
        while True:
            messages, images = convo.messages(keep_screens, (cfg.width, cfg.height))
            reply = await client.complete(messages, t0=origin)
            text = str(reply.message.get("content") or "")
            calls.append(WebCall(reply.call, tuple(messages), tuple(images), gap))
            action = await who.act(obs, text)
            if who.scripted:  # a script's action stands for the reply it did not read
                assert not isinstance(action, str)
                recorded = action_text(action)
            else:
                recorded = text
            convo.add_reply(recorded)
            result = await env.step(action)
            info = result.info
            ep.steps.append(
                WebStepRecord(
                    info["action"], result.reward, info["error"], info["timing"], info["duration_s"]
                )
            )
            ep.reward, ep.milestones, ep.blocked = (
                info["episode_reward"], info["milestones"], info["blocked"],
            )  # fmt: skip
            gap = info["duration_s"]
            if result.terminated or result.truncated:
                ep.terminated, ep.truncated = result.terminated, result.truncated
                break
            obs = result.observation
            convo.add_observation(obs.text, obs.screenshot)
    ep.wall_s = time.monotonic() - start
    return ep, calls


def _without_images(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            m = {**m, "content": [p for p in content if p.get("type") != "image_url"]}
        out.append(dict(m))
    return out


def _resume(with_images: Sequence[int], without: Sequence[int], i: int, j: int) -> int | None:
    """The first position after ``i`` where ``with_images`` agrees again with ``without[j:]``
    for a run of tokens: 8 where the text goes on that long, shorter runs only when no 8-token
    agreement exists (text between two images can be short; an image's expansion can hold
    tokens that also occur in text, so a single equal token is the last resort)."""
    longest = min(8, len(without) - j)
    for run in [longest, *(r for r in (4, 2, 1) if r < longest)]:
        tail = list(without[j : j + run])
        for e in range(i + 1, len(with_images) - run + 1):
            if list(with_images[e : e + run]) == tail:
                return e
    return None


def image_spans(
    with_images: Sequence[int], without: Sequence[int], count: int
) -> list[tuple[int, int]]:
    """``(offset, tokens)`` of each of ``count`` images in a prompt's token ids, given the ids of
    the same prompt without them: the stretches of ``with_images`` that ``without`` lacks (each
    ends where the two agree again, see :func:`_resume`). ValueError when they do not align.
    Each image costs a scan of the prompt after it at worst."""
    spans: list[tuple[int, int]] = []
    i = j = 0
    n, m = len(with_images), len(without)
    while i < n:
        if j < m and with_images[i] == without[j]:
            i += 1
            j += 1
            continue
        end = n if j == m else _resume(with_images, without, i, j)
        if end is None:
            raise ValueError(f"the prompt's ids do not align with its text at token {i}")
        spans.append((i, end - i))
        i = end
    if len(spans) != count:
        raise ValueError(f"found {len(spans)} image spans for {count} images")
    return spans


async def episode_session(
    ep: WebEpisode, calls: Sequence[WebCall], client: ChatClient, block_size: int
) -> Session | None:
    """The episode's model calls as a session (see the module docstring); None without calls."""
    if not calls:
        return None
    append_only = all(
        list(b.messages[: len(a.messages)]) == list(a.messages)
        for a, b in itertools.pairwise(calls)
    )
    turns = []
    for k, c in enumerate(calls):
        ids = await client.tokenize(c.messages)
        bare = await client.tokenize(_without_images(c.messages))
        spans = image_spans(ids, bare, len(c.images))
        builder = ChainBuilder(block_size)
        images, pos = [], 0
        for (offset, n), (h, w, hgt) in zip(spans, c.images, strict=True):
            builder.extend_tokens(ids[pos:offset])
            builder.extend_image(h, n)
            images.append(Image(offset, n, w, hgt, h))
            pos = offset + n
        builder.extend_tokens(ids[pos:])
        prev = len(calls[k - 1].messages) if k else 0
        turns.append(
            Turn(
                input=builder.chain(),
                output_tokens=c.call.completion_tokens,
                gap=c.gap,
                tool="browser" if k else None,
                messages=tuple(c.messages[prev:]) if append_only else None,
                images=tuple(images),
            )
        )
    start = max(0.0, calls[0].call.sent)
    return Session(f"{ep.task}/{ep.agent}/{ep.seed}", tuple(turns), start=start, group=ep.task)


async def to_workload(
    episodes: Sequence[tuple[WebEpisode, Sequence[WebCall]]],
    client: ChatClient,
    *,
    block_size: int = 16,
    name: str = "web-rollouts",
    meta: Mapping[str, Any] | None = None,
) -> Workload:
    """Every episode's model calls as a multimodal workload, start times as recorded."""
    sessions = []
    for ep, calls in episodes:
        session = await episode_session(ep, calls, client, block_size)
        if session is not None:
            sessions.append(session)
    full = {"source": "kvharness env web", "tokenizer": "server", **(meta or {})}
    return Workload(tuple(sessions), block_size, name, Arrival("trace"), full)
