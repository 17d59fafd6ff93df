"""The batch scheduler of one replica, after vLLM v1's: a token budget per step, running requests
first (decodes and unfinished prefill chunks, in arrival order), then the waiting queue FIFO with
chunked prefill, and preemption by recompute (the latest running request) when blocks run out.

``schedule(now)`` returns a :class:`Plan` and allocates the blocks it needs; the caller executes
the plan (the simulator with the cost model) and calls ``postprocess(plan, end)``, which advances
the requests and returns the finished ones. Nothing here reads a clock.

With ``attention="cascade"`` (or ``track_shared=True``) the scheduler keeps a
:class:`~kvharness.engine.cascade.SharedBlocks` over its decoding requests: a request joins when
it is first scheduled as a decode (O(its prompt blocks), once) and leaves when it finishes or is
preempted, so a step stays O(requests in the batch), never O(blocks); only a step that leaves some
decoding request out (the token budget ran out first) counts its decodes' blocks afresh.

**Images** (with an :class:`~kvharness.engine.vision.EncoderCache`, as vLLM v1 schedules them):
when a request's chunk ``[computed, computed + n)`` reaches an image's placeholder tokens that
are not computed yet (not prefix-cached, not consumed by an earlier chunk), the whole image is
encoded in that step, unless its output is in the encoder cache (the same screenshot seen by
this replica before, or by another request of this step) or this request already holds it (an
earlier chunk encoded it). An image that does not fit (the step's encoder budget or the cache's
room, after evicting unreferenced entries) cuts the chunk just before it; a chunk that would then
be empty is not scheduled (a waiting request stays at the head of the queue: ``blocked =
"encoder"``). The request references each image it needs until its prefill has computed past
the image, or it is preempted or finishes. A step's images are :attr:`Plan.encodes` and
:attr:`StepBatch.encoder_images`. Cost: O(images the chunk reaches) per scheduled request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from kvharness.engine.block_pool import BlockPool
from kvharness.engine.cascade import ATTENTIONS, SharedBlocks
from kvharness.engine.cost import StepBatch
from kvharness.engine.eviction import CpuTier, EvictionPolicy
from kvharness.engine.request import Request
from kvharness.engine.vision import EncoderCache, EncoderInput

__all__ = ["Plan", "Scheduler", "SchedulerConfig"]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """vLLM's knobs of the same names."""

    max_num_batched_tokens: int = 8192
    """Token budget of one step (prefill chunk tokens + one per decode)."""
    max_num_seqs: int = 256
    """Most requests running at once."""

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError("max_num_batched_tokens and max_num_seqs must be >= 1")


@dataclass(slots=True)
class Plan:
    """One step: ``items`` are (request, tokens to compute) in batch order.

    ``blocked`` says why waiting requests were left waiting (``"blocks"``, ``"seqs"``,
    ``"budget"``, ``"encoder"``) or is None when none were. ``load_seconds`` is CPU-tier transfer
    time the step waits for. ``shared_kv`` is the KV tokens decode attention reads from blocks
    that several of the batch's decode sequences share (0 unless the scheduler tracks sharing).
    ``encodes`` are (request, placeholder tokens) of each image the step encodes.
    """

    items: list[tuple[Request, int]]
    batch: StepBatch
    all_decode: bool
    blocked: str | None
    preempted: bool
    load_seconds: float = 0.0
    shared_kv: int = 0
    encodes: tuple[tuple[Request, int], ...] = ()


class Scheduler:
    """Running list + waiting queue over one block pool. Mutates requests and the pool.

    ``attention`` names the decode kernel (:data:`~kvharness.engine.cascade.ATTENTIONS`);
    ``merge_tokens`` is the cascade path's merge cost per sharing sequence (KV tokens);
    ``track_shared`` counts shared blocks for :attr:`Plan.shared_kv` under ``default`` too.
    ``encoder`` is the replica's encoder cache (None: a text-only model; images are ignored).
    """

    def __init__(
        self,
        pool: BlockPool,
        config: SchedulerConfig,
        eviction: EvictionPolicy,
        cpu_tier: CpuTier | None = None,
        *,
        attention: str = "default",
        merge_tokens: int = 0,
        track_shared: bool = False,
        encoder: EncoderCache | None = None,
    ) -> None:
        if attention not in ATTENTIONS:
            raise ValueError(
                f"unknown attention {attention!r}; choose from {', '.join(ATTENTIONS)}"
            )
        self.attention = attention
        self._cascade = attention == "cascade"
        self._merge = merge_tokens
        self.shared: SharedBlocks | None = SharedBlocks() if self._cascade or track_shared else None
        """Block references among decoding requests (None when sharing is not tracked)."""
        self.pool = pool
        self.config = config
        self.eviction = eviction
        self.cpu_tier = cpu_tier
        self.encoder = encoder
        eviction.bind(pool)
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.pending_prefill = 0
        """Prefill tokens admitted or waiting but not yet computed (estimated for waiting ones)."""
        self.num_preemptions = 0
        # (request, pool.frees) of the last admission refused for blocks: until a block is freed
        # the answer cannot change (allocation only consumes), so it is not worked out again.
        self._refused: tuple[Request, int] | None = None

    def add(self, req: Request, est_cached_tokens: int = 0) -> None:
        """Queue ``req``; ``est_cached_tokens`` estimates its prefix hit for the load figures."""
        req.pending = max(0, req.prompt_tokens - est_cached_tokens)
        self.pending_prefill += req.pending
        self.waiting.append(req)

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def _blocks_for(self, tokens: int) -> int:
        bs = self.pool.block_size
        return (tokens + bs - 1) // bs

    def _preempt(self, victim: Request) -> None:
        if self.shared is not None:
            self.shared.discard(victim)
        if self.encoder is not None and victim.images:
            self.encoder.release_all(victim, victim.images[victim.image_cursor :])
            victim.image_cursor = 0
        self.pool.free(victim.blocks)
        victim.blocks = []
        victim.num_hashed = 0
        victim.num_computed = 0
        victim.preemptions += 1
        self.num_preemptions += 1
        self.pending_prefill += victim.num_tokens - victim.pending
        victim.pending = victim.num_tokens
        self.waiting.appendleft(victim)

    def _cache_prompt_blocks(self, req: Request, upto_tokens: int) -> None:
        full = min(upto_tokens // self.pool.block_size, len(req.block_hashes))
        start = req.num_hashed
        if full > start:
            hashes = req.block_hashes
            parent = hashes[start - 1] if start else None
            self.pool.cache(req.blocks[start:full], hashes[start:full], parent)
            req.num_hashed = full

    def schedule(self, now: float) -> Plan:
        """Form the next step's batch. Allocates blocks, may preempt; see the module docstring."""
        cfg, pool, ev = self.config, self.pool, self.eviction
        ev.expire(now)
        budget = cfg.max_num_batched_tokens
        items: list[tuple[Request, int]] = []
        running = self.running
        preempted = False
        all_decode = True
        prefill_tokens = decode_seqs = decode_ctx = prefill_kv = 0
        prefill_pairs = 0.0
        shared = self.shared
        decoders: list[Request] = []
        i = 0
        enc = self.encoder
        enc_budget = enc.budget if enc is not None else 0
        encodes: list[tuple[Request, int]] = []
        work: tuple[list[EncoderInput], list[EncoderInput]] | None
        while i < len(running) and budget > 0:
            r = running[i]
            n = min(r.num_tokens - r.num_computed, budget)
            work = None
            if enc is not None and r.images and r.num_computed < r.prompt_tokens:
                n, hits, todo = self._images_for(enc, r, r.num_computed, n, enc_budget)
                if n == 0:
                    enc.release_all(r, hits)
                    i += 1
                    continue
                work = hits, todo
            need = self._blocks_for(r.num_computed + n) - len(r.blocks)
            while need > pool.num_free and ev.release_one(now):
                pass
            scheduled = True
            while need > pool.num_free:
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is r:
                    scheduled = False
                    break
            if not scheduled:
                break
            if need > 0:
                r.blocks.extend(pool.allocate(need))
            if work is not None and enc is not None:
                enc_budget -= self._encode(enc, r, *work, encodes)
            self._account_prefix(r, n)
            items.append((r, n))
            budget -= n
            c = r.num_computed
            if n == 1 and c == r.num_tokens - 1 and r.generated > 0:
                decode_seqs += 1
                decode_ctx += c + 1
                if shared is not None:
                    decoders.append(r)
                    if r not in shared:
                        shared.add(r)
            else:
                all_decode = False
                prefill_tokens += n
                prefill_pairs += n * (c + (n + 1) / 2)
                prefill_kv += c + n
            i += 1

        blocked: str | None = None
        load = 0.0
        if preempted:
            blocked = "blocks" if self.waiting else None
        waiting = self.waiting
        while waiting and not preempted:
            if budget <= 0:
                blocked = "budget"
                break
            if len(running) >= cfg.max_num_seqs:
                blocked = "seqs"
                break
            r = waiting[0]
            refused = self._refused
            if refused is not None and refused[0] is r and refused[1] == pool.frees:
                blocked = "blocks"
                break
            bs = pool.block_size
            limit = (r.num_tokens - 1) // bs
            hit = pool.match(r.block_hashes, limit)
            n_cpu = 0
            if self.cpu_tier is not None and len(hit) < limit:
                n_cpu = self.cpu_tier.match(r.block_hashes, len(hit), limit)
            computed = (len(hit) + n_cpu) * bs
            n = min(r.num_tokens - computed, budget)
            work = None
            if enc is not None and r.images:
                n, hits, todo = self._images_for(enc, r, computed, n, enc_budget)
                if n == 0:
                    enc.release_all(r, hits)
                    blocked = "encoder"
                    break
                work = hits, todo
            need = self._blocks_for(computed + n) - len(hit)
            evictable_hits = pool.num_evictable(hit)
            while need + evictable_hits > pool.num_free and ev.release_one(now):
                # Released pins stay cached: the hits are the same, maybe fewer of them held.
                evictable_hits = pool.num_evictable(hit)
            if need + evictable_hits > pool.num_free:
                blocked = "blocks"
                if work is not None and enc is not None:
                    # The chunk depends on the encoder cache too: no memo of the refusal.
                    enc.release_all(r, work[0])
                else:
                    self._refused = (r, pool.frees)
                break
            waiting.popleft()
            pool.touch(hit)
            r.blocks = hit + pool.allocate(need)
            r.num_hashed = len(hit)
            r.num_computed = computed
            if n_cpu:
                load += self.cpu_tier.load_seconds(n_cpu) if self.cpu_tier is not None else 0.0
                self._cache_prompt_blocks(r, computed)
            if work is not None and enc is not None:
                enc_budget -= self._encode(enc, r, *work, encodes)
                skipped = self._consume_images(enc, r)
                if r.cached_tokens is None:
                    enc.prefix_cached += skipped
            if r.cached_tokens is None:
                r.cached_tokens = computed
                r.scheduled = now
            self.pending_prefill -= r.pending
            r.pending = r.num_tokens - computed
            self.pending_prefill += r.pending
            ev.on_admit(r, now)
            running.append(r)
            self._account_prefix(r, n)
            items.append((r, n))
            budget -= n
            all_decode = False
            prefill_tokens += n
            prefill_pairs += n * (computed + (n + 1) / 2)
            prefill_kv += computed + n

        images = tuple(t for _, t in encodes) if encodes else ()
        if shared is None or not decode_seqs:
            batch = StepBatch(
                prefill_tokens, prefill_pairs, prefill_kv, decode_seqs, decode_ctx, None, images
            )
            decode_only = all_decode and bool(items)
            return Plan(items, batch, decode_only, blocked, preempted, load, 0, tuple(encodes))
        if len(shared) != decode_seqs:  # some decoding request was left out of this step
            shared = SharedBlocks(decoders)
        bs = self.pool.block_size
        kv_read: int | None = None
        shared_kv = shared.shared_reads * bs
        if self._cascade and shared.duplicates:
            cascade = decode_ctx - shared.duplicates * bs + self._merge * shared.sharers
            if cascade < decode_ctx:
                kv_read = cascade
                shared_kv -= shared.duplicates * bs
        batch = StepBatch(
            prefill_tokens, prefill_pairs, prefill_kv, decode_seqs, decode_ctx, kv_read, images
        )
        return Plan(items, batch, all_decode, blocked, preempted, load, shared_kv, tuple(encodes))

    @staticmethod
    def _images_for(
        enc: EncoderCache, r: Request, start: int, n: int, budget: int
    ) -> tuple[int, list[EncoderInput], list[EncoderInput]]:
        """The chunk ``[start, start + n)`` of ``r`` cut where an image cannot be encoded, the
        images it finds in the encoder cache (referenced for ``r`` now) and those to encode.
        Changes nothing else; see the module docstring for the rules."""
        hits: list[EncoderInput] = []
        todo: list[EncoderInput] = []
        images = r.images
        end = start + n
        pending = 0
        planned: set[int] = set()
        for k in range(r.image_cursor, len(images)):
            im = images[k]
            if im.offset >= end:
                break
            h = im.hash
            if im.end <= start or h in planned or enc.holds(r, h):
                continue
            if enc.acquire(r, h):
                hits.append(im)
                planned.add(h)
                continue
            if im.tokens > budget - pending or not enc.can_allocate(im.tokens + pending):
                n = im.offset - start if start < im.offset else 0
                break
            todo.append(im)
            planned.add(h)
            pending += im.tokens
        return n, hits, todo

    @staticmethod
    def _encode(
        enc: EncoderCache,
        r: Request,
        hits: list[EncoderInput],
        todo: list[EncoderInput],
        encodes: list[tuple[Request, int]],
    ) -> int:
        """Commit a scheduled chunk's images: count its hits, store the ones it encodes (now
        referenced by ``r``) and add them to the step. Returns the encoder tokens used."""
        enc.hits += len(hits)
        used = 0
        for im in todo:
            enc.allocate(r, im.hash, im.tokens)
            encodes.append((r, im.tokens))
            used += im.tokens
        return used

    @staticmethod
    def _consume_images(enc: EncoderCache, r: Request) -> int:
        """Release the images ``r``'s prefill has computed past; returns how many it passed."""
        images = r.images
        k = start = r.image_cursor
        done = r.num_computed
        while k < len(images) and images[k].end <= done:
            enc.release(r, images[k].hash)
            k += 1
        r.image_cursor = k
        return k - start

    def _account_prefix(self, r: Request, n: int) -> None:
        # Blocks become findable when scheduled (as in vLLM), before the step computes them.
        if r.num_hashed < len(r.block_hashes):
            self._cache_prompt_blocks(r, min(r.num_computed + n, r.prompt_tokens))
        if r.pending:
            done = min(n, r.pending)
            r.pending -= done
            self.pending_prefill -= done

    def postprocess(self, plan: Plan, end: float) -> list[Request]:
        """Apply a step that ended at ``end``: advance, sample, finish. Returns finished requests
        (their blocks already released through the eviction policy)."""
        finished: list[Request] = []
        enc = self.encoder
        for r, n in plan.items:
            r.num_computed += n
            if enc is not None and r.images and r.image_cursor < len(r.images):
                self._consume_images(enc, r)
            if r.num_computed == r.num_tokens:
                r.generated += 1
                if r.first_token is None:
                    r.first_token = end
                if r.generated >= r.output_tokens:
                    r.done = end
                    finished.append(r)
        if finished:
            self._finish(finished, end)
        return finished

    def _finish(self, finished: list[Request], end: float) -> None:
        done = set(map(id, finished))
        self.running = [r for r in self.running if id(r) not in done]
        shared = self.shared
        enc = self.encoder
        for r in finished:
            if shared is not None:
                shared.discard(r)
            if enc is not None and r.images:
                enc.release_all(r, r.images[r.image_cursor :])
            self.eviction.on_finish(r, end)

    def advance_decode(self, reqs: list[Request], k: int, end: float) -> list[Request]:
        """Apply ``k`` decode steps to ``reqs`` at once (the first step's blocks are already
        allocated). Returns those finished at ``end``."""
        pool = self.pool
        bs = pool.block_size
        finished: list[Request] = []
        for r in reqs:
            c = r.num_computed + k
            need = (c + bs - 1) // bs - len(r.blocks)
            if need > 0:
                r.blocks.extend(pool.allocate(need))
            r.num_computed = c
            r.generated += k
            if r.generated >= r.output_tokens:
                r.done = end
                finished.append(r)
        if finished:
            self._finish(finished, end)
        return finished

    def decode_block_limit(self, reqs: list[Request], k_max: int) -> int:
        """Most steps (<= ``k_max``, >= 1) the decode batch ``reqs`` can run before it needs more
        blocks than are free; the first step's blocks are already allocated."""
        bs = self.pool.block_size
        free = self.pool.num_free

        def need(m: int) -> int:
            total = 0
            for r in reqs:
                extra = (r.num_computed + m + bs - 1) // bs - len(r.blocks)
                if extra > 0:
                    total += extra
            return total

        if need(k_max) <= free:
            return k_max
        lo, hi = 1, k_max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if need(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo
