"""The gateway's routing core: replica bookkeeping around a policy and the prefix index.

Pure: no sockets, no clock (``now`` is passed in, seconds on any monotonic clock). The HTTP server
calls :meth:`Router.route` for each request, then :meth:`Router.dispatched`, :meth:`first_token`
and :meth:`finished` as the request goes; health checks call :meth:`set_healthy`. The policy is the
same object the simulator drives; it sees one :class:`ReplicaState` per replica, kept here, and
chooses among the replicas :meth:`Router.admissible` lets through.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kvharness.routing.base import Policy, ReplicaState, RouteRequest
from kvharness.routing.index import PrefixIndex

__all__ = ["Flight", "HealthNews", "NoReplica", "Overloaded", "Routed", "Router"]


class Routed(NamedTuple):
    replica: int
    reason: str
    matched_blocks: int


class Overloaded(NamedTuple):
    """Every healthy replica is at its queue limit."""

    retry_after_s: float


class NoReplica(NamedTuple):
    """No healthy replica is left to try."""

    tried: int


class HealthNews(NamedTuple):
    """What a health report changed."""

    changed: bool
    """The replica went in (a check passed) or out (``unhealthy_after`` failed in a row)."""
    forgotten: bool
    """It is confirmed down: its index entries were dropped (it will come back empty)."""


@dataclass(slots=True)
class Flight:
    """One request in flight on a replica, as the router accounts for it."""

    request: RouteRequest
    replica: int
    new_prefill_tokens: int
    blocks: int
    sent_at: float
    ahead_tokens: int = 0
    """Prompt tokens queued for prefill on the replica before this one (the router's count)."""
    prefilled: bool = False


class Router:
    """Routes hashed requests with ``policy`` over ``states``, using and feeding ``index``.

    ``max_queue`` bounds the requests in flight per replica (a replica at it is not offered to the
    policy; when all are, :meth:`route` answers :class:`Overloaded`); a replica down is not
    offered either. The router is the one owner of the replicas' health, :attr:`healthy`:
    :meth:`report_health` takes each check's result (a replica is out after ``unhealthy_after``
    failures in a row, in again after one success), :meth:`suspect` takes a replica out that a
    request could not reach.

    Each decision feeds the index at once (:meth:`PrefixIndex.record_routed`): the replica will
    hold the prompt's blocks once it has prefilled them, and requests that arrive before its KV
    events say so (sessions starting together on a shared repository context) should see them
    there; events then confirm them, or remove them when the engine evicts. For replicas without
    events, decisions are all the index has, bounded by its LRU capacity. Mutates ``states``,
    ``index`` and the policy's own state.
    """

    def __init__(
        self,
        policy: Policy,
        states: Sequence[ReplicaState],
        index: PrefixIndex,
        *,
        max_queue: int = 256,
        retry_after_s: float = 1.0,
        rate_alpha: float = 0.2,
        unhealthy_after: int = 2,
    ) -> None:
        if index.num_replicas != len(states):
            raise ValueError(f"index has {index.num_replicas} replicas, {len(states)} states given")
        self.policy = policy
        self.states = list(states)
        self.index = index
        self.max_queue = max_queue
        self.retry_after_s = retry_after_s
        self.rate_alpha = rate_alpha
        self.unhealthy_after = unhealthy_after
        self.inflight = [0] * len(states)
        self.healthy = [True] * len(states)
        self._fails = [0] * len(states)
        self._forgotten = [False] * len(states)

    def admissible(self, i: int) -> bool:
        """Replica ``i`` may take a request: healthy and below ``max_queue`` in flight."""
        return self.healthy[i] and self.inflight[i] < self.max_queue

    def route(
        self, request: RouteRequest, now: float, exclude: frozenset[int] = frozenset()
    ) -> Routed | Overloaded | NoReplica:
        """Pick a replica for ``request`` among healthy, not-full replicas not in ``exclude``."""
        states = self.states
        n = len(states)
        eligible = [i for i in range(n) if i not in exclude and self.admissible(i)]
        if not eligible:
            if any(self.healthy[i] and i not in exclude for i in range(n)):
                return Overloaded(self.retry_after_s)
            return NoReplica(len(exclude))
        matched = self.index.match(request.block_hashes)
        for i, s in enumerate(states):
            s.cached_blocks = self.index.cached_blocks(i)
        replica, reason = self.policy.choose(request, states, eligible, matched, now)
        if replica not in eligible:
            # The policy broke its contract; route by prefix then load rather than fail.
            replica = max(eligible, key=lambda i: (matched[i], -self.inflight[i], -i))
            reason = "fallback"
        return Routed(replica, reason, matched[replica])

    def dispatched(self, request: RouteRequest, routed: Routed, now: float) -> Flight:
        """The request was sent to ``routed.replica``: account for it and tell the policy."""
        i = routed.replica
        s = self.states[i]
        bs = max(1, s.block_size)
        new = max(0, request.prompt_tokens - routed.matched_blocks * bs)
        blocks = math.ceil((request.prompt_tokens + request.max_output_tokens) / bs)
        ahead = s.pending_prefill_tokens
        self.inflight[i] += 1
        s.running += 1
        s.pending_prefill_tokens += new
        s.used_blocks += blocks
        self.index.record_routed(i, request.block_hashes)
        self.policy.on_routed(request, i, now)
        return Flight(request, i, new, blocks, now, ahead)

    def first_token(self, flight: Flight, now: float) -> None:
        """The replica started answering: the prompt is prefilled; learn its prefill rate.

        The first token waited for the prefills queued ahead of it as well as its own, so the
        rate is the tokens of both over the time to first token (the prompt's own tokens over it
        would read a busy replica as a slow one)."""
        if flight.prefilled:
            return
        flight.prefilled = True
        s = self.states[flight.replica]
        s.pending_prefill_tokens = max(0, s.pending_prefill_tokens - flight.new_prefill_tokens)
        elapsed = now - flight.sent_at
        if flight.new_prefill_tokens >= 4 * s.block_size and elapsed > 0:
            rate = (flight.ahead_tokens + flight.new_prefill_tokens) / elapsed
            old = s.prefill_tokens_per_s
            s.prefill_tokens_per_s = rate if old <= 0 else old + self.rate_alpha * (rate - old)

    def finished(self, flight: Flight, now: float) -> None:
        """The request ended on its replica (answered, failed or abandoned)."""
        if not flight.prefilled:
            flight.prefilled = True
            s = self.states[flight.replica]
            s.pending_prefill_tokens = max(0, s.pending_prefill_tokens - flight.new_prefill_tokens)
        i = flight.replica
        s = self.states[i]
        self.inflight[i] = max(0, self.inflight[i] - 1)
        if s.running > 0:
            s.running -= 1
        else:
            s.waiting = max(0, s.waiting - 1)
        s.used_blocks = max(0, s.used_blocks - flight.blocks)
        self.policy.on_finished(flight.request, i, now)

    def observe_engine(self, i: int, waiting: int, kv_usage: float) -> None:
        """The replica's own report: requests it has queued and the fraction of KV in use.

        The gateway's in-flight count stays the total; the engine's queue splits it into running
        and waiting, and its KV usage replaces the estimate from requests' sizes.
        """
        s = self.states[i]
        s.waiting = max(0, min(waiting, self.inflight[i]))
        s.running = self.inflight[i] - s.waiting
        s.used_blocks = round(kv_usage * s.capacity_blocks)

    def report_health(self, i: int, ok: bool) -> HealthNews:
        """One health check's result for replica ``i``. A pass puts it back in; the
        ``unhealthy_after``-th failure in a row takes it out and confirms it down (its index
        entries are dropped: it comes back with an empty cache, perhaps another engine)."""
        if ok:
            self._fails[i] = 0
            self._forgotten[i] = False
            return HealthNews(self.set_healthy(i, True), False)
        self._fails[i] += 1
        if self._fails[i] < self.unhealthy_after:
            return HealthNews(False, False)
        changed = self.set_healthy(i, False)
        forgotten = not self._forgotten[i]
        if forgotten:
            self.forget(i)
            self._forgotten[i] = True
        return HealthNews(changed, forgotten)

    def suspect(self, i: int) -> bool:
        """A request could not reach replica ``i``: out until a health check passes (one that
        fails instead confirms it down). Returns whether it was in."""
        self._fails[i] = self.unhealthy_after
        return self.set_healthy(i, False)

    def set_healthy(self, i: int, healthy: bool) -> bool:
        """Mark replica ``i`` up or down (offered to the policy or not); returns whether that
        changed anything. Its index entries stay: see :meth:`forget`."""
        if self.healthy[i] == healthy:
            return False
        self.healthy[i] = healthy
        return True

    def forget(self, i: int) -> None:
        """Replica ``i`` lost its cache (confirmed down, so it will come back empty): drop its
        index entries. Not done on a single failed request: a replica that is only suspected keeps
        its cache, and with it what the index knows."""
        self.index.mark_stale(i)
