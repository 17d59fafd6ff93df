"""The engine replicas behind a gateway, and everything said to them besides proxied requests.

Health
    ``GET /health`` on every replica every ``health_interval_s``; the results go to the
    :class:`~kvharness.gateway.router.Router`, the one owner of health, which takes a replica out
    after ``unhealthy_after`` failures in a row and back in on the first success. A request that
    cannot reach a replica makes it suspect (out until a check passes).

Discovery and load
    At start, each replica's ``/metrics`` gives its block size and KV blocks (unless
    configured); with ``scrape_interval_s`` its queue and KV usage are read on and handed to the
    router.

KV events
    One :class:`~kvharness.gateway.kv_subscriber.KVEventSubscriber` task per replica that
    publishes them, feeding the prefix index (``mark_stale`` drops a replica's entries after
    events were lost mid-stream; joining an engine's stream late drops nothing).

Tokenizer probe
    Whether a replica tokenises text as the gateway does, asked once of its ``/tokenize`` (again
    after it was confirmed down), before prompts go to it as token ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any

from kvharness.gateway.config import GatewayConfig
from kvharness.gateway.kv_subscriber import KVEventSubscriber
from kvharness.gateway.router import Router
from kvharness.gateway.tokenizer import EngineTokenizer
from kvharness.routing.index import PrefixIndex
from kvharness.wire import vllm
from kvharness.wire.http import Client, WireError

__all__ = ["PROBE_TEXT", "Replicas"]

log = logging.getLogger(__name__)

PROBE_TEXT = (
    "kvharness: def f(x):\n\treturn x ** 2  # ASCII, digits 0123456789, tabs and   spaces,\n"
    "ünïcödé, 日本語, emoji \U0001f680, <|begin_of_text|> <s> </s> [INST] <|im_start|>\n\n"
)
"""Text whose tokens a replica must give as the gateway does before prompts go to it as ids."""


class Replicas:
    """The gateway's replicas (``urls``, in the router's order). :meth:`start` in the running
    loop with the gateway's client, :meth:`stop` when done. Mutates the router's health, load
    and capacity views and the index (through the KV events)."""

    def __init__(
        self,
        config: GatewayConfig,
        router: Router,
        tokenizer: EngineTokenizer | None,
    ) -> None:
        self.config = config
        self.router = router
        self.index: PrefixIndex = router.index
        self.states = router.states
        self.urls = [s.name for s in self.states]
        self.tokenizer = tokenizer
        events = {k.rstrip("/"): v for k, v in config.kv_events.items()}
        replays = {k.rstrip("/"): v for k, v in config.kv_replay.items()}
        self.subscribers: list[KVEventSubscriber | None] = [
            KVEventSubscriber(
                url,
                events[url],
                apply=functools.partial(self.index.apply, i),
                mark_stale=functools.partial(self.index.mark_stale, i),
                replay_endpoint=replays.get(url),
                topic=config.kv_topic,
            )
            if url in events
            else None
            for i, url in enumerate(self.urls)
        ]
        self.alike: list[bool | None] = [None] * len(self.urls)
        """Whether replica i tokenises text as the gateway does (None: not found out yet)."""
        self._probes: dict[int, asyncio.Task[bool | None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._event_tasks: dict[int, asyncio.Task[None]] = {}
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        assert self._client is not None, "Replicas.start() first"
        return self._client

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, client: Client) -> int | None:
        """Discover the replicas, subscribe to their events, start checking their health (and
        load); returns the block size they report when it was not configured (else None)."""
        self._client = client
        block_size = await self._discover()
        if self.config.forward_token_ids and self.tokenizer is not None:
            for i in range(len(self.urls)):
                self._start_probe(i)  # so a replica that differs is reported at once
        for i, sub in enumerate(self.subscribers):
            if sub is not None:
                self.start_events(i)
        self._tasks.append(asyncio.create_task(self._health_loop()))
        if self.config.scrape_interval_s > 0:
            self._tasks.append(asyncio.create_task(self._scrape_loop()))
        return block_size

    async def stop(self) -> None:
        for i in list(self._event_tasks):
            await self.stop_events(i)
        tasks: list[asyncio.Task[Any]] = [*self._tasks, *self._probes.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def start_events(self, i: int) -> None:
        """(Re)subscribe to replica ``i``'s KV events (no-op if it has none or already runs)."""
        sub = self.subscribers[i]
        if sub is None or i in self._event_tasks:
            return
        sub.open()
        self._event_tasks[i] = asyncio.create_task(sub.run())

    async def stop_events(self, i: int) -> None:
        """Unsubscribe from replica ``i``'s KV events; what it publishes meanwhile is lost (a
        later :meth:`start_events` sees the gap and recovers as configured)."""
        task = self._event_tasks.pop(i, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _discover(self) -> int | None:
        """Read block size and cache size from the replicas unless configured."""
        cfg = self.config
        if cfg.block_size is not None and cfg.capacity_blocks is not None:
            return None
        texts = await self.metrics_texts(timeout_s=5.0)
        infos = [vllm.cache_config(t) if t is not None else vllm.EngineInfo(None, None)
                 for t in texts]  # fmt: skip
        found = None
        sizes = {i.block_size for i in infos if i.block_size}
        if cfg.block_size is None and sizes:
            if len(sizes) > 1:
                log.warning("replicas report different block sizes %s; using the first", sizes)
            found = next(i.block_size for i in infos if i.block_size)
            for s in self.states:
                s.block_size = found
        if cfg.capacity_blocks is None:
            for i, (s, info) in enumerate(zip(self.states, infos, strict=True)):
                if info.num_gpu_blocks:
                    s.capacity_blocks = info.num_gpu_blocks
                    if cfg.lru_blocks is None:
                        # What decisions alone assume cached is bounded by the replica's KV.
                        self.index.set_lru_capacity(i, info.num_gpu_blocks)
        return found

    # -- health and load --------------------------------------------------------------------

    async def _health_loop(self) -> None:
        while True:
            await self.check_health()
            await asyncio.sleep(self.config.health_interval_s)

    async def check_health(self) -> list[bool]:
        """Probe every replica once and report each result to the router."""
        timeout = self.config.health_timeout_s
        results = await asyncio.gather(
            *(vllm.healthy(self.client, u, timeout_s=timeout) for u in self.urls)
        )
        for i, ok in enumerate(results):
            news = self.router.report_health(i, ok)
            if news.changed:
                if ok:
                    log.warning("replica %s is back", self.urls[i])
                else:
                    log.warning("replica %s failed %d health checks: out", self.urls[i],
                                self.config.unhealthy_after)  # fmt: skip
            if news.forgotten:
                self.alike[i] = None  # it may come back as another engine
        return list(results)

    def suspect(self, i: int, why: str) -> None:
        """A request could not reach replica ``i``: out until a health check passes."""
        if self.router.suspect(i):
            log.warning("replica %s out: %s", self.urls[i], why)

    async def _scrape_loop(self) -> None:
        while True:
            for i, text in enumerate(await self.metrics_texts(timeout_s=2.0)):
                load = vllm.engine_load(text) if text is not None else None
                if load is not None:
                    self.router.observe_engine(i, load.waiting, load.kv_usage)
            await asyncio.sleep(self.config.scrape_interval_s)

    async def metrics_texts(self, timeout_s: float | None = None) -> list[str | None]:
        """Each replica's ``/metrics`` text, read now from all at once (None where it did not
        answer 200 in time)."""
        timeout = self.config.health_timeout_s if timeout_s is None else timeout_s
        return list(
            await asyncio.gather(
                *(vllm.metrics_text(self.client, u, timeout_s=timeout) for u in self.urls)
            )
        )

    async def models(self) -> list[dict[str, Any]]:
        """The models the healthy replicas list, each id once (first replica's entry kept)."""
        timeout = self.config.health_timeout_s

        async def one(url: str) -> list[dict[str, Any]]:
            try:
                return await vllm.models(self.client, url, timeout_s=timeout)
            except WireError:
                return []

        healthy = [u for i, u in enumerate(self.urls) if self.router.healthy[i]]
        seen: dict[str, dict[str, Any]] = {}
        for listed in await asyncio.gather(*(one(u) for u in healthy)):
            for mdl in listed:
                seen.setdefault(mdl["id"], mdl)
        return list(seen.values())

    # -- the tokenizer probe ----------------------------------------------------------------

    async def tokenizes_alike(self, i: int) -> bool:
        """Whether replica ``i`` tokenises text as the gateway does, found out once per replica
        (again after it was confirmed down) by asking its ``/tokenize`` (vLLM's) for
        :data:`PROBE_TEXT`; an unreachable replica is asked again next time."""
        known = self.alike[i]
        if known is not None:
            return known
        found = await asyncio.shield(self._start_probe(i))
        return bool(found)

    def _start_probe(self, i: int) -> asyncio.Task[bool | None]:
        """The probe of replica ``i``'s tokenizer under way, started if none is; its answer
        (None when the replica could not be asked) is kept in :attr:`alike`."""
        task = self._probes.get(i)
        if task is None:
            task = self._probes[i] = asyncio.create_task(self._probe_tokenizer(i))

            def done(t: asyncio.Task[bool | None]) -> None:
                self._probes.pop(i, None)
                if not t.cancelled() and t.exception() is None and t.result() is not None:
                    self.alike[i] = t.result()

            task.add_done_callback(done)
        return task

    async def _probe_tokenizer(self, i: int) -> bool | None:
        assert self.tokenizer is not None
        url = self.urls[i]
        try:
            tokens = await vllm.tokenize(
                self.client, url, {"prompt": PROBE_TEXT, "add_special_tokens": True},
                timeout_s=5.0,
            )  # fmt: skip
        except vllm.Unexpected as err:
            log.warning("replica %s does not tokenise on request (%s): its text prompts are "
                        "sent as text", url, err)  # fmt: skip
            return False
        except WireError:
            return None
        if tokens != self.tokenizer.encode_ids(PROBE_TEXT, add_special_tokens=True):
            log.warning("replica %s tokenises text unlike --tokenizer %s: its text prompts are "
                        "sent as text", url, self.tokenizer.path)  # fmt: skip
            return False
        return True

    # -- status -----------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """Per replica: health, load, cache and index, KV events (JSON-able)."""
        out = []
        for i, (url, s, sub) in enumerate(
            zip(self.urls, self.states, self.subscribers, strict=True)
        ):
            entry: dict[str, Any] = {
                "url": url,
                "healthy": self.router.healthy[i],
                "inflight": self.router.inflight[i],
                "pending_prefill_tokens": s.pending_prefill_tokens,
                "prefill_tokens_per_s": round(s.prefill_tokens_per_s, 1),
                "capacity_blocks": s.capacity_blocks,
                "index_blocks": self.index.cached_blocks(i),
                "kv_events": None,
            }
            if sub is not None:
                st = sub.stats
                entry["kv_events"] = {
                    "endpoint": sub.endpoint,
                    "batches": st.batches,
                    "events": st.events,
                    "gaps": st.gaps,
                    "replays": st.replays,
                    "stale_marks": st.stale_marks,
                    "last_seq": st.last_seq,
                    "joined_at": st.joined_at,
                    "late_joins": st.late_joins,
                    "missed_at_join": st.missed_at_join,
                    "lag_s": round(st.last_lag_s, 4),
                    "age_s": round(time.time() - st.last_batch_at, 3) if st.last_batch_at else None,
                    "recovering": sub.translator.recovering,
                }
            out.append(entry)
        return out
