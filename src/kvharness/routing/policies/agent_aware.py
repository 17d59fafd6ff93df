"""``agent_aware``: kvharness's own policy for agent sessions.

What an agent session looks like to a router: dozens of turns, each re-sending a long and growing
context, separated by tool runs. The policy is built on four facts that follow:

1. **The context is the cost.** A turn routed where its session's previous turn ran re-prefills
   only the new tail; anywhere else it re-prefills the whole context. So a session has a *home*
   and moves only when staying costs more, all told, than re-prefilling elsewhere.
2. **Idle is not gone.** Between turns a session holds no request (its tool is running), but its
   context sits in its home's cache and it will be back. So a replica's load counts, besides the
   KV of its running requests, the contexts of sessions homed there and between turns, weighted by
   the observed chance that a session returns (learned online: sessions that came back vs
   sessions quiet for ``session_idle_s``). A session whose home expired during a long pause gets
   it back if its context is still cached there (``rehome_fraction`` of the prompt).
3. **A turn's time is prefill wait plus decode contention.** Every choice compares, in seconds::

       cost(r) = ttft(r) + contention(r) + burden(r)
       ttft(r)       = (prefill tokens queued on r + tokens r must prefill for this request
                        + KV shortfall on r) / prefill rate of r
       contention(r) = context_cost x expected decode steps x resident context tokens on r
                        / prefill rate of r
       burden(r)     = (externality x requests on r + weight(r)) x prefill(r)
       weight(r)     = requests expected to arrive at r within prefill(r) / 2
       prefill(r)    = tokens to prefill on r / prefill rate of r

   ``contention``: every decode step reads the KV of every sequence in the batch, so co-resident
   context slows the session's own decode for as long as it runs; ``context_cost`` is a context
   token's KV read per step in prefill-token equivalents (about kv_bytes x prefill rate / HBM
   bandwidth). Expected decode steps: the mean output tokens per session so far, or what the
   session has already had when more (long sessions last). ``burden``: a chunked-prefill engine
   runs the prefill inside the steps of the requests already there (running, or batched with it
   in the same step), so each of them waits for it (``externality``, 1); and a request arriving
   at r while the prefill runs waits for what is left of it, on average half of it, so the
   replica's time is worth the requests expected to arrive in it, over two, seconds of their
   wait per second of prefill. How many arrive (:meth:`expected_arrivals`): r's arrival rate,
   every request routed to it in the last ``rate_window_s`` seconds (exponentially weighted),
   times the prefill's length; in a cluster with replicas to spare an idle replica's rate is
   nil, and its time is free, so the work spreads; in front of a few replicas that each carry
   many sessions, a replica's own sessions keep coming back, and a session starting while the
   shared repository context it needs is being prefilled on one replica waits for it there
   rather than prefilling it again on another. ``rate_window_s`` (10 s) holds many turns of a
   busy replica (they come every second or so) and is short against a session (minutes), so the
   rate follows sessions as they arrive, move and finish. ``compute_weight``, when given,
   replaces ``weight(r)`` with that constant (an override, for ablations).
4. **Moving has hysteresis.** A session with a home ``h`` stays unless the best replica ``b``
   costs less by more than ``move_slack_s`` and by a factor ``move_ratio``; ``b``'s cost
   includes re-prefilling the context, ``h``'s does not count the session's own context.

**Placement.** A request without a session id goes to the least ``ttft``. A new session goes to
the least ``cost`` among replicas whose resident context plus its own fits ``memory_target`` of
the KV (when any does). Only eligible replicas are considered: a session whose home is not
eligible is placed anew.

**Inputs.** The matched prefix per replica and :class:`ReplicaState`'s
``pending_prefill_tokens``, ``running``, ``used_blocks``, ``capacity_blocks`` and
``prefill_tokens_per_s``. A rate of 0 is taken as the mean of the measured replicas' rates (or
``default_prefill_tokens_per_s`` when none is measured); with ``pooled_rate``, for replicas known
to be alike, that mean is used for all, since a rate learnt from time to first token mixes a
replica's speed with what it was busy with.

**State.** Mutates only its own session table.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest

__all__ = ["AgentAware"]


@dataclass(slots=True)
class _Home:
    replica: int
    blocks: int
    """KV blocks the session's context needs (last prompt plus its output), at the home."""
    last_seen: float
    out: int = 0
    """Output tokens of its turns so far (its decode steps)."""
    inflight: int = 0


class AgentAware(Policy):
    """Session homes with bounded load, moved only when queueing costs more than re-prefill."""

    name = "agent_aware"

    def __init__(
        self,
        context_cost: float = 1.5e-4,
        move_slack_s: float = 0.5,
        move_ratio: float = 1.5,
        session_idle_s: float = 30.0,
        memory_target: float = 0.9,
        decode_cost_tokens: float = 0.0,
        default_prefill_tokens_per_s: float = 10_000.0,
        rehome_fraction: float = 0.5,
        max_former_sessions: int = 100_000,
        externality: float = 1.0,
        compute_weight: float | None = None,
        pooled_rate: bool = True,
        rate_window_s: float = 10.0,
    ) -> None:
        if context_cost < 0 or move_ratio < 1 or default_prefill_tokens_per_s <= 0:
            raise ValueError("need context_cost >= 0, move_ratio >= 1, a positive default rate")
        if not rate_window_s > 0:
            raise ValueError(f"need rate_window_s > 0 (seconds), got {rate_window_s}")
        if externality < 0 or (compute_weight is not None and compute_weight < 0):
            raise ValueError(
                f"need externality >= 0 and compute_weight >= 0 (seconds of wait per second of "
                f"prefill), got {externality:g} and {compute_weight}"
            )
        self.context_cost = context_cost
        self.move_slack_s = move_slack_s
        self.move_ratio = move_ratio
        self.session_idle_s = session_idle_s
        self.memory_target = memory_target
        self.decode_cost_tokens = decode_cost_tokens
        self.default_prefill_tokens_per_s = default_prefill_tokens_per_s
        self.rehome_fraction = rehome_fraction
        self.max_former_sessions = max_former_sessions
        self.externality = externality
        self.compute_weight = compute_weight
        self.pooled_rate = pooled_rate
        self.rate_window_s = rate_window_s
        self._homes: dict[str, _Home] = {}
        self._expiry: list[tuple[float, str]] = []  # (last_seen + idle, session), lazily checked
        self._sessions: dict[int, int] = {}  # replica -> live sessions homed there
        # replica -> KV blocks of the contexts of sessions homed there and between turns
        self._idle: dict[int, int] = {}
        # replica -> (arrivals, exponentially decayed over rate_window_s, as of when; first when)
        self._arrivals: dict[int, tuple[float, float, float]] = {}
        # replica -> KV blocks of the contexts of sessions with a request in flight there
        self._busy: dict[int, int] = {}
        self._returns = 0  # turns of sessions seen before
        self._expiries = 0  # sessions quiet for session_idle_s
        self._block_size = 16  # the engines' block size, as last seen in choose()
        self._mean_rate = default_prefill_tokens_per_s  # mean measured rate, as of choose()
        # session -> home it had when it expired (a pause longer than session_idle_s); bounded
        self._former: OrderedDict[str, tuple[int, int]] = OrderedDict()  # -> (replica, output)
        self._out_total = 0  # output tokens of all session turns routed
        self._seen = 0  # distinct sessions routed
        self._turns = 0  # session turns routed

    # --- estimates -------------------------------------------------------------------------

    def ttft(self, request: RouteRequest, r: ReplicaState, matched: int) -> float:
        """Estimated seconds to first token of ``request`` on ``r`` given ``matched`` blocks."""
        bs = r.block_size
        new = max(0, request.prompt_tokens - matched * bs)
        need = math.ceil(new / bs)
        short = max(0, r.used_blocks + need - r.capacity_blocks)
        work = r.pending_prefill_tokens + new + self.decode_cost_tokens * r.running + short * bs
        rate = self._rate(r)
        return work / rate

    def burden(
        self, request: RouteRequest, replica: int, r: ReplicaState, matched: int, now: float
    ) -> float:
        """Seconds the prefill of ``request`` on ``r`` (index ``replica``) adds to the waits of
        others: each request already there, running or queued (a chunked-prefill engine runs it
        inside their steps), waits ``externality`` times its length; the requests expected to
        arrive while it runs (:meth:`weight`) wait for the rest of it."""
        new = max(0, request.prompt_tokens - matched * r.block_size)
        seconds = new / self._rate(r)
        return (self.externality * r.outstanding + self.weight(replica, seconds, now)) * seconds

    def weight(self, replica: int, seconds: float, now: float) -> float:
        """Seconds of wait per second of ``seconds`` of prefill on ``replica`` that requests
        still to come pay: those expected to arrive in that time, over two (each waits for what
        is left of it, half on average), or ``compute_weight`` when set."""
        if self.compute_weight is not None:
            return self.compute_weight
        return 0.5 * self.expected_arrivals(replica, seconds, now)

    def expected_arrivals(self, replica: int, seconds: float, now: float) -> float:
        """Requests expected to reach ``replica`` within ``seconds`` of ``now``: its arrival rate
        (:meth:`arrival_rate`) times ``seconds``."""
        return self.arrival_rate(replica, now) * max(0.0, seconds)

    def arrival_rate(self, replica: int, now: float) -> float:
        """Requests per second routed to ``replica``, exponentially weighted over
        ``rate_window_s`` (while the replica has been seen for less, over what there is)."""
        count, first = self._arrivals_as_of(replica, now)
        window = self.rate_window_s
        span = -math.expm1(-max(0.0, now - first) / window)  # the share of the window seen
        if span <= 0:
            return 0.0
        return count / (window * span)

    def _arrivals_as_of(self, replica: int, now: float) -> tuple[float, float]:
        """(arrivals at ``replica``, exponentially decayed to ``now``; when the first came)."""
        count, at, first = self._arrivals.get(replica, (0.0, now, now))
        return count * math.exp(-max(0.0, now - at) / self.rate_window_s), first

    def _rate(self, r: ReplicaState) -> float:
        """Prefill tokens per second assumed for ``r``: its measured rate, or with
        ``pooled_rate`` (or none measured yet) the mean of the measured replicas'."""
        if self.pooled_rate or not r.prefill_tokens_per_s:
            return self._mean_rate
        return r.prefill_tokens_per_s

    def homed_sessions(self, replica: int) -> int:
        return self._sessions.get(replica, 0)

    def home_of(self, session_id: str) -> int | None:
        home = self._homes.get(session_id)
        return None if home is None else home.replica

    # --- choice ----------------------------------------------------------------------------

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        self._expire(now)
        self._block_size = max(1, replicas[eligible[0]].block_size)
        known = [
            replicas[i].prefill_tokens_per_s for i in eligible if replicas[i].prefill_tokens_per_s
        ]
        # A replica not yet measured is taken to be like the measured ones (replicas are alike),
        # not as fast as a constant: that would make it look idle next to a measured busy one.
        self._mean_rate = sum(known) / len(known) if known else self.default_prefill_tokens_per_s
        t = {i: self.ttft(request, replicas[i], matched_blocks[i]) for i in eligible}
        x = {i: self.burden(request, i, replicas[i], matched_blocks[i], now) for i in eligible}
        fastest = min(eligible, key=lambda i: (t[i], replicas[i].outstanding, i))
        sid = request.session_id
        if sid is None:
            return Decision(fastest, "least_time")
        home = self._homes.get(sid)
        former = self._former.get(sid)
        h = home.replica if home is not None else former[0] if former is not None else None
        if h is not None and home is None:
            # The home expired during a long pause: keep it if the context is still cached there.
            cached = matched_blocks[h] * replicas[h].block_size if h in t else 0
            if cached < self.rehome_fraction * request.prompt_tokens:
                h = None
        if h in t:
            own = home.blocks if home is not None and not home.inflight else 0
            steps = self.expected_decode_steps(request, home.out if home is not None else 0)
            cost = {
                i: t[i]
                + x[i]
                + self.contention(
                    replicas[i], steps, self.resident_blocks(i, replicas[i], own if i == h else 0)
                )
                for i in eligible
            }
            b = min(eligible, key=lambda i: (cost[i], i))
            if (
                b != h
                and cost[h] > cost[b] + self.move_slack_s
                and cost[h] > self.move_ratio * cost[b]
            ):
                return Decision(b, "spill" if t[h] > t[b] else "rebalance")
            return Decision(h, "affinity")
        return Decision(self._place(request, replicas, matched_blocks, eligible, t, x), "place")

    def resident_blocks(self, replica: int, r: ReplicaState, exclude: int = 0) -> float:
        """Context a session on ``r`` will share decode steps with: KV of the requests running
        there, plus the contexts of sessions homed there between turns (``exclude`` blocks of
        them are the asking session's own), weighted by the chance that a session returns."""
        idle = max(0, self._idle.get(replica, 0) - exclude)
        busy = max(r.used_blocks, self._busy.get(replica, 0))
        return busy + self.return_probability() * idle

    def contention(self, r: ReplicaState, steps: float, blocks: float) -> float:
        """Seconds that ``blocks`` of co-resident context on ``r`` cost a session expecting
        ``steps`` more decode steps: each step reads their KV (``context_cost`` prefill-token
        equivalents per context token and step)."""
        rate = self._rate(r)
        return self.context_cost * steps * blocks * r.block_size / rate

    def return_probability(self) -> float:
        """Estimated chance that a session between turns sends another (Laplace-smoothed)."""
        return (self._returns + 1) / (self._returns + self._expiries + 2)

    def expected_decode_steps(self, request: RouteRequest, had: int = 0) -> float:
        """Decode steps the session of ``request`` is expected to run from now on: this turn's
        output, plus, if it returns (:meth:`return_probability`), what later turns produce: the
        mean output of a session beyond its first turn so far, or, when more, what the session
        has had already (``had`` tokens: long sessions last)."""
        later = 0.0
        if self._seen and self._turns:
            later = max(0.0, self._out_total / self._seen - self._out_total / self._turns)
        return request.max_output_tokens + self.return_probability() * max(later, had)

    def _place(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        matched: Sequence[int],
        among: Sequence[int],
        t: dict[int, float],
        x: dict[int, float],
    ) -> int:
        need = self._context_blocks(request)
        load = {i: self.resident_blocks(i, replicas[i]) for i in among}
        # Blocks already cached there need no room (they are resident either way).
        fits = [
            i
            for i in among
            if load[i] + need - matched[i] <= self.memory_target * replicas[i].capacity_blocks
        ]
        steps = self.expected_decode_steps(request)
        return min(
            fits or among,
            key=lambda i: (t[i] + x[i] + self.contention(replicas[i], steps, load[i]), i),
        )

    # --- bookkeeping -----------------------------------------------------------------------

    def on_routed(self, request: RouteRequest, replica: int, now: float) -> None:
        count, first = self._arrivals_as_of(replica, now)
        self._arrivals[replica] = (count + 1, now, first)
        sid = request.session_id
        if sid is None:
            return
        self._out_total += request.max_output_tokens
        self._turns += 1
        home = self._homes.get(sid)
        if home is None:
            former = self._former.pop(sid, None)
            if former is None:
                self._seen += 1
            else:
                self._returns += 1
            home = self._homes[sid] = _Home(replica, 0, now, out=former[1] if former else 0)
            self._sessions[replica] = self._sessions.get(replica, 0) + 1
        else:
            if home.inflight:
                self._busy[home.replica] -= home.blocks
            else:
                self._returns += 1
                self._idle[home.replica] -= home.blocks
            if home.replica != replica:
                self._sessions[home.replica] -= 1
                self._sessions[replica] = self._sessions.get(replica, 0) + 1
                home.replica = replica
        home.blocks = self._context_blocks(request)
        self._busy[replica] = self._busy.get(replica, 0) + home.blocks
        home.out += request.max_output_tokens
        home.inflight += 1
        home.last_seen = now

    def on_finished(self, request: RouteRequest, replica: int, now: float) -> None:
        sid = request.session_id
        home = self._homes.get(sid) if sid is not None else None
        if home is None or sid is None or not home.inflight:
            return
        home.inflight -= 1
        home.last_seen = now
        if not home.inflight:
            self._busy[home.replica] -= home.blocks
            self._idle[home.replica] = self._idle.get(home.replica, 0) + home.blocks
            heapq.heappush(self._expiry, (now + self.session_idle_s, sid))

    def _context_blocks(self, request: RouteRequest) -> int:
        """KV blocks the session holds once this turn is done: prompt plus output."""
        return len(request.block_hashes) + math.ceil(request.max_output_tokens / self._block_size)

    def _expire(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] <= now:
            _, sid = heapq.heappop(self._expiry)
            home = self._homes.get(sid)
            if home is None or home.inflight or home.last_seen + self.session_idle_s > now:
                continue
            self._expiries += 1
            self._idle[home.replica] -= home.blocks
            self._sessions[home.replica] -= 1
            del self._homes[sid]
            self._former[sid] = (home.replica, home.out)
            if len(self._former) > self.max_former_sessions:
                self._former.popitem(last=False)
