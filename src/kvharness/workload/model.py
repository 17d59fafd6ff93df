"""Sessions, turns and workloads: the agent-session workload model (pure data, no I/O).

Times are seconds. A session's turns run closed loop: turn ``i`` is sent ``gap`` seconds after turn
``i - 1`` finished (its think or tool time); turn 0's ``gap`` is 0 and the session starts at its
``start``. Sessions start open loop, at their own ``start`` times or by an :class:`Arrival` process.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kvharness.workload.chain import BlockChain
from kvharness.workload.images import Image, check_images

__all__ = ["Arrival", "Image", "Message", "Session", "Turn", "Workload"]

Message = Mapping[str, Any]
"""An OpenAI chat message (``{"role": ..., "content": ...}``)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One model call of a session.

    ``input`` is the whole prompt as a block chain. ``messages`` is set for workloads with real text
    (e.g. SWE-agent): the chat messages *appended* since the previous turn (the previous assistant
    reply and tool observations included), so the full prompt of turn ``i`` is the concatenation of
    ``messages`` over turns ``0..i``. ``gap`` is the think/tool time before this turn, after the
    previous turn finished; ``tool`` names the tool that ran in that gap, when known.
    ``prompt_ids`` is set where the prompt's exact token ids are known (a recording that kept
    content): the whole prompt, ``input.num_tokens`` of them, which a replay sends as they are.
    ``images`` are the images of the whole prompt, in order: each one's placeholder tokens are a
    stretch of ``input`` (built with :meth:`~kvharness.workload.chain.ChainBuilder.extend_image`).
    """

    input: BlockChain
    output_tokens: int
    gap: float = 0.0
    tool: str | None = None
    messages: tuple[Message, ...] | None = None
    prompt_ids: tuple[int, ...] | None = None
    images: tuple[Image, ...] = ()

    def __post_init__(self) -> None:
        if self.images:
            check_images(self.images, self.input.num_tokens)
        if self.prompt_ids is not None and len(self.prompt_ids) != self.input.num_tokens:
            raise ValueError(
                f"{len(self.prompt_ids)} prompt token ids for a prompt of {self.input.num_tokens}"
            )
        if self.output_tokens < 0:
            raise ValueError(f"output_tokens must be >= 0, got {self.output_tokens}")
        if not (self.gap >= 0 and math.isfinite(self.gap)):
            raise ValueError(f"gap must be a finite number >= 0, got {self.gap}")

    @property
    def input_tokens(self) -> int:
        return self.input.num_tokens

    @property
    def image_tokens(self) -> int:
        """Placeholder tokens of the prompt's images."""
        return sum(im.tokens for im in self.images)


@dataclass(frozen=True, slots=True)
class Session:
    """An ordered list of turns. ``start`` is the arrival time (s) or None when an arrival
    process decides it; ``group`` names what it shares with other sessions (a repository)."""

    id: str
    turns: tuple[Turn, ...]
    start: float | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        if not self.turns:
            raise ValueError(f"session {self.id!r} has no turns")
        if self.start is not None and not (self.start >= 0 and math.isfinite(self.start)):
            raise ValueError(f"session {self.id!r}: start must be finite and >= 0")

    def __len__(self) -> int:
        return len(self.turns)


@dataclass(frozen=True, slots=True)
class Arrival:
    """How sessions start when the workload's own start times are not used.

    ``trace``: each session's ``start`` (scaled by ``time_scale``). ``poisson``: exponential
    inter-arrival times at ``rate`` sessions/s. ``concurrent``: keep ``concurrency`` sessions in
    flight, starting the next when one ends (a driver's rule; :meth:`start_times` gives all zeros
    and the driver gates them).
    """

    kind: Literal["trace", "poisson", "concurrent"] = "trace"
    rate: float = 1.0
    concurrency: int = 1
    time_scale: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("trace", "poisson", "concurrent"):
            raise ValueError(f"unknown arrival kind {self.kind!r}")
        if self.rate <= 0 or self.concurrency <= 0 or self.time_scale <= 0:
            raise ValueError("rate, concurrency and time_scale must be positive")

    def start_times(self, sessions: Sequence[Session]) -> list[float]:
        """Start time of each session, in the given order (seconds from the run's start)."""
        if self.kind == "trace":
            known = [s.start for s in sessions if s.start is not None]
            t0 = min(known, default=0.0)
            return [
                ((s.start - t0) if s.start is not None else 0.0) * self.time_scale for s in sessions
            ]
        if self.kind == "poisson":
            rng = random.Random(self.seed)
            t, out = 0.0, []
            for _ in sessions:
                out.append(t)
                t += rng.expovariate(self.rate)
            return out
        return [0.0] * len(sessions)


@dataclass(frozen=True, slots=True)
class Workload:
    """Sessions plus how they arrive. ``block_size`` is the chains' block size (all agree)."""

    sessions: tuple[Session, ...]
    block_size: int
    name: str = "workload"
    arrival: Arrival = field(default_factory=Arrival)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = set()
        for s in self.sessions:
            if s.id in ids:
                raise ValueError(f"duplicate session id {s.id!r}")
            ids.add(s.id)
            for t in s.turns:
                if t.input.block_size != self.block_size:
                    raise ValueError(
                        f"session {s.id!r}: chain block size {t.input.block_size} "
                        f"!= workload block size {self.block_size}"
                    )

    @property
    def num_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    @property
    def has_images(self) -> bool:
        """True when some prompt holds an image (sent to /v1/chat/completions live)."""
        return any(t.images for s in self.sessions for t in s.turns)

    @property
    def has_messages(self) -> bool:
        """True when turns carry chat messages (sent to /v1/chat/completions live, unless they
        carry token ids too)."""
        return any(t.messages is not None for s in self.sessions for t in s.turns)

    def turns(self) -> Iterator[tuple[Session, int, Turn]]:
        for s in self.sessions:
            for i, t in enumerate(s.turns):
                yield s, i, t

    def nominal_order(self) -> list[tuple[Session, int, Turn]]:
        """Turns in the order an ideal server would see them: each session starting at its
        arrival time and its turns separated by their gaps alone (no service time). Ties break
        by session order then turn index, so the order is deterministic."""
        starts = self.arrival.start_times(self.sessions)
        keyed = []
        for si, (s, t0) in enumerate(zip(self.sessions, starts, strict=True)):
            t = t0
            for i, turn in enumerate(s.turns):
                t += turn.gap
                keyed.append((t, si, i, s, turn))
        keyed.sort(key=lambda k: (k[0], k[1], k[2]))
        return [(s, i, turn) for _, _, i, s, turn in keyed]
