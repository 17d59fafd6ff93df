"""Drive a workload's sessions against servers: closed loop within a session, open loop across.

A session's turn ``i`` is *intended* to go out ``gap`` seconds after turn ``i - 1`` finished; turn
0 at the session's start. A send that goes out late is still measured from when it went out, and
its lateness (``sent - intended``) is recorded, never hidden: the next turn's intended time follows
the real finish, as an agent would. Every attempt becomes a :class:`TurnRecord` written the moment
it ends. Faults follow :class:`~kvharness.bench.config.RetryPolicy`.

The clock is the runner's (seconds from the run's start); the runner sleeps and reads it, nothing
below it does.
"""

from __future__ import annotations

import asyncio
import base64
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvharness.bench.config import BenchConfig
from kvharness.bench.payload import PayloadBuilder, encode_messages
from kvharness.bench.transport import Transport
from kvharness.bench.words import PromptWords, prompt_words
from kvharness.report.records import RecordWriter, TurnRecord
from kvharness.workload.ideal import IdealCache, engine_cached_tokens
from kvharness.workload.images import Image
from kvharness.workload.model import Arrival, Session, Workload

__all__ = ["Counts", "Runner", "resolve_arrival", "screen_urls"]


def screen_urls(folder: str | None) -> Callable[[Image], str]:
    """An image's URL for image turns: a PNG data URI of a real screenshot stamped with the
    image's hash (:func:`kvharness.bench.screens.image_png`), pages rendered once into ``folder``
    (default ``~/.cache/kvharness/screens``)."""
    from kvharness.bench.screens import image_png

    cache = Path(folder or "~/.cache/kvharness/screens").expanduser()

    def url(im: Image) -> str:
        png = image_png(im.hash, im.width, im.height, cache)
        return "data:image/png;base64," + base64.b64encode(png).decode("ascii")

    return url


@dataclass(slots=True)
class Counts:
    """Live counters (read by the progress display; mutated only by the runner)."""

    turns_total: int = 0
    turns_ok: int = 0
    attempts_failed: int = 0
    in_flight: int = 0
    sessions_active: int = 0
    sessions_done: int = 0
    sessions_abandoned: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    cpu_s: float = 0.0
    """Process CPU seconds over the run (set when it ends)."""


def resolve_arrival(cfg: BenchConfig, workload: Workload) -> Arrival:
    """The arrival process a config asks for (the workload's own when ``arrival='workload'``)."""
    if cfg.arrival == "workload":
        a = workload.arrival
        return Arrival(a.kind, a.rate, a.concurrency, a.time_scale * cfg.time_scale, a.seed)
    if cfg.arrival == "trace":
        return Arrival("trace", time_scale=cfg.time_scale)
    if cfg.arrival == "poisson":
        return Arrival("poisson", rate=cfg.rate, seed=cfg.seed)
    return Arrival("concurrent", concurrency=max(1, cfg.concurrency))


class Runner:
    """Runs turns not yet in ``finished`` ((session id, turn index) pairs) and writes records.

    ``clock()`` returns seconds on the run's clock; ``backends`` are base URLs.
    """

    def __init__(
        self,
        workload: Workload,
        cfg: BenchConfig,
        transport: Transport,
        writer: RecordWriter,
        clock: Callable[[], float],
        *,
        finished: Iterable[tuple[str, int]] = (),
        ideal: IdealCache | None = None,
        words: PromptWords | None = None,
    ) -> None:
        self.workload = workload
        self.cfg = cfg
        self.transport = transport
        self.writer = writer
        self.clock = clock
        self.finished = set(finished)
        self.ideal = ideal or IdealCache()
        self.words: PromptWords | None = None
        if cfg.text_prompts or workload.has_images:
            self.words = words or prompt_words(cfg.tokenizer)
        self.builder = PayloadBuilder(
            cfg.model or "",
            cfg.vocab_size,
            ignore_eos=cfg.ignore_eos,
            temperature=cfg.temperature,
            words=self.words.words if self.words is not None else None,
            chat=cfg.api == "chat",
            image_url=screen_urls(cfg.screens) if workload.has_images else None,
        )
        # Tokens the server adds before a text prompt (its BOS): a prefix every prompt shares.
        self._special = self.words.special_tokens if self.words is not None else 0
        self.counts = Counts()
        self._rr = 0
        self._history: dict[str, list[bytes]] = {}
        self.counts.turns_total = workload.num_turns - len(self.finished)

    # -- shared pieces -------------------------------------------------------------------------

    def _next_backend(self) -> str:
        backends = self.cfg.backends
        t = backends[self._rr % len(backends)]
        self._rr += 1
        return t

    async def _sleep_until(self, t: float) -> None:
        # Loops: an event loop's timers may fire up to a tick early by our clock (uvloop counts
        # whole milliseconds), and a turn must never go out before its intended time.
        while (delay := t - self.clock()) > 0:
            await asyncio.sleep(delay)

    def _history_of(self, s: Session) -> list[bytes]:
        h = self._history.get(s.id)
        if h is None:
            h = self._history[s.id] = encode_messages(s) if s.turns[0].messages is not None else []
        return h

    async def run_turn(
        self, s: Session, index: int, intended: float, backend: str, session: str | None = None
    ) -> float | None:
        """Send turn ``index`` of ``s`` (retrying per policy); its ``done`` time, or None if the
        session must be abandoned. ``session``: the session id to send in the session header
        (None: no header)."""
        turn = s.turns[index]
        user = session if self.cfg.session_user else None
        path, body = self.builder.request(s, index, self._history_of(s), user)
        url = backend + path
        hit = self.ideal.visit(turn.input)
        k = self._special if turn.messages is None and turn.prompt_ids is None else 0
        # The chat template's tokens around each image shift the engine's positions after it.
        wrap = self.cfg.image_wrap_tokens
        k_hit = k + wrap * sum(1 for im in turn.images if im.offset < hit.tokens)
        ideal = engine_cached_tokens(
            hit.tokens + k_hit if hit.tokens else 0,
            turn.input_tokens + k + wrap * len(turn.images),
            self.cfg.engine_block_size,
        )
        retry = self.cfg.retry
        counts = self.counts
        attempt = 0
        while True:
            await self._sleep_until(intended)
            sent = self.clock()
            counts.in_flight += 1
            out = await self.transport.stream(url, body, session)
            counts.in_flight -= 1
            self.writer.write(
                TurnRecord(
                    session=s.id,
                    turn=index,
                    replica=backend,
                    intended=intended,
                    sent=sent,
                    first_token=out.first_token,
                    done=out.done,
                    prompt_tokens=out.prompt_tokens or turn.input_tokens,
                    cached_tokens=out.cached_tokens,
                    ideal_cached_tokens=ideal,
                    output_tokens=out.output_tokens,
                    gap=turn.gap * self.cfg.time_scale,
                    tool=turn.tool,
                    error=out.error,
                    attempt=attempt,
                )
            )
            if out.error is None:
                counts.turns_ok += 1
                return out.done
            counts.attempts_failed += 1
            counts.errors[out.error.split(":", 1)[0]] += 1
            attempt += 1
            if not out.retryable or attempt >= retry.max_attempts:
                return None
            intended = self.clock() + retry.backoff_s * 2 ** (attempt - 1)

    # -- session mode --------------------------------------------------------------------------

    def _first_unfinished(self, s: Session) -> int:
        i = 0
        while i < len(s.turns) and (s.id, i) in self.finished:
            i += 1
        return i

    async def run_session(self, s: Session, start: float, first: int) -> None:
        """Turns ``first..`` of ``s``, the first intended at ``start``; one backend for all."""
        counts = self.counts
        counts.sessions_active += 1
        backend = self._next_backend()
        sid = s.id if self.cfg.session_header or self.cfg.session_user else None
        intended = done = start
        try:
            for i in range(first, len(s.turns)):
                if i > first:
                    intended = done + s.turns[i].gap * self.cfg.time_scale
                result = await self.run_turn(s, i, intended, backend, sid)
                if result is None:
                    counts.sessions_abandoned += 1
                    return
                done = result
            counts.sessions_done += 1
        finally:
            counts.sessions_active -= 1

    async def run_sessions(self) -> None:
        """Session mode: every unfinished session, started by the configured arrival process.
        Sessions resumed mid-way start at once; the others keep their arrival offsets."""
        todo = [(s, k) for s in self.workload.sessions if (k := self._first_unfinished(s)) < len(s)]
        if not todo:
            return
        arrival = resolve_arrival(self.cfg, self.workload)
        now = self.clock()
        if arrival.kind == "concurrent":
            queue = list(reversed(todo))

            async def worker() -> None:
                while queue:
                    s, k = queue.pop()
                    await self.run_session(s, self.clock(), k)

            await asyncio.gather(*(worker() for _ in range(min(arrival.concurrency, len(todo)))))
            return
        offsets = arrival.start_times([s for s, _ in todo])
        base = min((o for (s, k), o in zip(todo, offsets, strict=True) if k == 0), default=0.0)
        tasks = [
            self.run_session(s, now if k > 0 else now + (o - base), k)
            for (s, k), o in zip(todo, offsets, strict=True)
        ]
        await asyncio.gather(*tasks)

    # -- isolated mode -------------------------------------------------------------------------

    async def run_isolated(self) -> None:
        """Isolated mode: every unfinished turn as an independent request, in a seeded random order,
        ``concurrency`` at a time (default: as many as there are sessions), no gaps. A turn that
        fails is not retried beyond the policy and abandons nothing else."""
        items: list[tuple[Session, int]] = [
            (s, i)
            for s in self.workload.sessions
            for i in range(len(s.turns))
            if (s.id, i) not in self.finished
        ]
        random.Random(self.cfg.seed).shuffle(items)
        items.reverse()
        width = self.cfg.concurrency or len(self.workload.sessions)

        async def worker() -> None:
            while items:
                s, i = items.pop()
                await self.run_turn(s, i, self.clock(), self._next_backend())

        await asyncio.gather(*(worker() for _ in range(max(1, min(width, len(items))))))

    def prepare(self) -> None:
        """Materialise the prompts of every turn still to run (done before the clock matters)."""
        self.builder.prepare(
            t.input
            for s in self.workload.sessions
            for i, t in enumerate(s.turns)
            if t.messages is None and t.prompt_ids is None and (s.id, i) not in self.finished
        )
        if self.workload.has_images:
            self.builder.prepare_images(
                im
                for s in self.workload.sessions
                for i, t in enumerate(s.turns)
                if (s.id, i) not in self.finished
                for im in t.images
            )
        for s in self.workload.sessions:
            self._history_of(s)

    async def run(self) -> None:
        if self.cfg.mode == "isolated":
            await self.run_isolated()
        else:
            await self.run_sessions()


def finished_turns(records: Sequence[TurnRecord]) -> set[tuple[str, int]]:
    """(session, turn) pairs with a successful record."""
    return {(r.session, r.turn) for r in records if r.ok}
