"""``agent_aware``: kvharness's own policy for agent sessions.

What an agent session looks like to a router: dozens of turns, each re-sending a long and growing
context, separated by tool runs. Three facts follow, and the policy is built on them:

1. **The context is the cost.** A turn routed where its session's previous turn ran re-prefills
   only the new tail; anywhere else it re-prefills the whole context. So a session has a *home*,
   and it stays there unless waiting at home would cost more than re-prefilling elsewhere.
2. **Instantaneous load lies.** Between turns a session holds no request (its tool is running),
   but it will be back within seconds, and its context sits in its home's cache. Balancing by
   in-flight requests alone packs many "idle" sessions on one replica; they then return together
   and queue, or evict each other's contexts. So homes are balanced by the sessions they hold
   (a bounded load, as in consistent hashing with bounded loads) and by the KV their contexts
   need, counted until a session has been quiet for ``session_idle_s``.
3. **Time, not counts.** Every choice compares an estimated time to first token::

       ttft(r) ~ (pending prefill tokens on r + tokens r must prefill for this request
                  + decode_cost_tokens x running requests on r + KV shortfall on r) / prefill rate

   with the request's cached prefix on ``r`` (from the prefix index) deciding the second term.

Rules, per request:

* Session with a live home ``h``: stay at ``h`` unless the best other replica ``b`` is faster by
  more than ``move_slack_s`` and by a factor ``move_ratio`` (hysteresis: moving costs the cached
  context at ``h``). A move re-homes the session at ``b``.
* New session (or one whose home expired or failed): among replicas whose homed sessions stay
  within ``load_factor`` x the mean, and whose homed KV fits ``memory_target`` of capacity (when
  any does), take the fastest by ``ttft``; shared prefixes (a repository, a system prompt) pull
  sessions to where they are cached.
* No session id: route by ``ttft`` alone (it is then a cache- and queue-aware least-time policy).

Inputs: :attr:`ReplicaState.pending_prefill_tokens`, ``running``, ``used_blocks``,
``capacity_blocks``, ``prefill_tokens_per_s`` (``default_prefill_tokens_per_s`` when 0) and the
matched prefix per replica. Mutates only its own session table.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest, register_policy
from kvharness.routing.policies._common import candidates

__all__ = ["AgentAware"]


@dataclass(slots=True)
class _Home:
    replica: int
    blocks: int
    """KV blocks the session's context needs (last prompt plus its output), at the home."""
    last_seen: float
    inflight: int = 0


@register_policy
class AgentAware(Policy):
    """Session homes with bounded load, moved only when queueing costs more than re-prefill."""

    name = "agent_aware"

    def __init__(
        self,
        load_factor: float = 1.25,
        move_slack_s: float = 0.5,
        move_ratio: float = 2.0,
        session_idle_s: float = 120.0,
        memory_target: float = 0.9,
        decode_cost_tokens: float = 0.0,
        default_prefill_tokens_per_s: float = 10_000.0,
    ) -> None:
        if load_factor < 1 or move_ratio < 1 or default_prefill_tokens_per_s <= 0:
            raise ValueError("need load_factor >= 1, move_ratio >= 1, a positive default rate")
        self.load_factor = load_factor
        self.move_slack_s = move_slack_s
        self.move_ratio = move_ratio
        self.session_idle_s = session_idle_s
        self.memory_target = memory_target
        self.decode_cost_tokens = decode_cost_tokens
        self.default_prefill_tokens_per_s = default_prefill_tokens_per_s
        self._homes: dict[str, _Home] = {}
        self._expiry: list[tuple[float, str]] = []  # (last_seen + idle, session), lazily checked
        self._sessions: dict[int, int] = {}  # replica -> live sessions homed there
        self._blocks: dict[int, int] = {}  # replica -> KV blocks of those sessions' contexts
        self._block_size = 16  # the engines' block size, as last seen in choose()

    # --- estimates -------------------------------------------------------------------------

    def ttft(self, request: RouteRequest, r: ReplicaState, matched: int) -> float:
        """Estimated seconds to first token of ``request`` on ``r`` given ``matched`` blocks."""
        bs = r.block_size
        new = max(0, request.prompt_tokens - matched * bs)
        need = math.ceil(new / bs)
        short = max(0, r.used_blocks + need - r.capacity_blocks)
        work = r.pending_prefill_tokens + new + self.decode_cost_tokens * r.running + short * bs
        rate = r.prefill_tokens_per_s or self.default_prefill_tokens_per_s
        return work / rate

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
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        self._expire(now)
        among = candidates(replicas)
        self._block_size = max(1, replicas[among[0]].block_size)
        t = {i: self.ttft(request, replicas[i], matched_blocks[i]) for i in among}
        fastest = min(among, key=lambda i: (t[i], replicas[i].outstanding, i))
        sid = request.session_id
        if sid is None:
            return Decision(fastest, "least_time")
        home = self._homes.get(sid)
        if home is not None and home.replica in t:
            h = home.replica
            if fastest == h or not (
                t[h] > t[fastest] + self.move_slack_s and t[h] > t[fastest] * self.move_ratio
            ):
                return Decision(h, "affinity")
            return Decision(fastest, "spill")
        return Decision(self._place(request, replicas, among, t), "place")

    def _place(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        among: list[int],
        t: dict[int, float],
    ) -> int:
        total = sum(self._sessions.get(i, 0) for i in among) + 1
        cap = math.ceil(self.load_factor * total / len(among))
        ok = [i for i in among if self._sessions.get(i, 0) < cap] or among
        need = self._context_blocks(request)
        fits = [
            i
            for i in ok
            if self._blocks.get(i, 0) + need <= self.memory_target * replicas[i].capacity_blocks
        ]
        pool = fits or ok
        return min(pool, key=lambda i: (t[i], self._sessions.get(i, 0), i))

    # --- bookkeeping -----------------------------------------------------------------------

    def on_routed(self, request: RouteRequest, replica: int, now: float) -> None:
        sid = request.session_id
        if sid is None:
            return
        blocks = self._context_blocks(request)
        home = self._homes.get(sid)
        if home is None:
            home = self._homes[sid] = _Home(replica, 0, now)
            self._sessions[replica] = self._sessions.get(replica, 0) + 1
        elif home.replica != replica:
            self._unhome(home)
            home.replica = replica
            home.blocks = 0
            self._sessions[replica] = self._sessions.get(replica, 0) + 1
        self._blocks[replica] = self._blocks.get(replica, 0) + blocks - home.blocks
        home.blocks = blocks
        home.inflight += 1
        home.last_seen = now

    def on_finished(self, request: RouteRequest, replica: int, now: float) -> None:
        sid = request.session_id
        home = self._homes.get(sid) if sid is not None else None
        if home is None or sid is None:
            return
        home.inflight = max(0, home.inflight - 1)
        home.last_seen = now
        heapq.heappush(self._expiry, (now + self.session_idle_s, sid))

    def _context_blocks(self, request: RouteRequest) -> int:
        """KV blocks the session holds once this turn is done: prompt plus output."""
        return len(request.block_hashes) + math.ceil(request.max_output_tokens / self._block_size)

    def _unhome(self, home: _Home) -> None:
        self._sessions[home.replica] -= 1
        self._blocks[home.replica] -= home.blocks

    def _expire(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] <= now:
            _, sid = heapq.heappop(self._expiry)
            home = self._homes.get(sid)
            if home is None or home.inflight or home.last_seen + self.session_idle_s > now:
                continue
            self._unhome(home)
            del self._homes[sid]
