"""Engine block hashes renamed to the gateway's own.

Engines name blocks with their own hash (algorithm, seed and version dependent). The gateway names
blocks with the project's chained hash over token ids (:func:`kvharness.workload.chain.
chain_hashes`), so :class:`HashTranslator` maps each engine hash to the gateway's hash using the
``token_ids`` that ``BlockStored`` carries. This keeps routing correct whatever hash algorithm or
``PYTHONHASHSEED`` the engines run with, at the cost of one dict entry per cached block.

A block holding an image's placeholder tokens is named by its tokens and the event's
``extra_keys`` for it, the ``(identifier, offset)`` of each image it touches
(:func:`kvharness.gateway.images.image_block_hash`): the identifier is the gateway's own name of
the image when the gateway forwarded it as the part's uuid, so the translated hash is the one
the gateway computed for the prompt. LoRA names and cache salts are not part of the gateway's
names (such blocks alias the plain ones).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvharness.engine.events import BlockKeys, BlockRemoved, BlockStored, KVEvent
from kvharness.gateway.images import PlacedImage, block_image_keys, image_block_hash
from kvharness.workload.chain import ROOT_HASH, block_hash

__all__ = ["HashTranslator"]


class HashTranslator:
    """Maps one replica's engine block hashes to the gateway's own chained hashes.

    :meth:`translate` turns an engine event into the same event named by gateway hashes, or None
    when nothing of it is known (a removal of blocks never seen, a store under an unknown parent).
    Several engine hashes may map to one gateway hash (the engine mixes extra keys such as a LoRA
    name or cache salt into its hash); a gateway hash is removed only when its last engine hash is.

    After lost events (:meth:`start_recovery`) a stored block's parent may be unknown. The gateway
    then reports what it routes (:meth:`learn_route`: each full block's content, keyed by its
    unchained hash, and its parent's gateway hash), so a store continuing a prefix stored during
    the gap is still named. Recording stops after ``recovery_stores`` stores went through without
    needing it. Mutates its own tables only; the engine hash of a block names a fixed token prefix,
    so the map stays valid across gaps and is cleared only when the engine's cache is.
    """

    __slots__ = (
        "_count",
        "_learned",
        "_map",
        "_quiet",
        "max_learned",
        "recovering",
        "recovery_stores",
    )

    def __init__(self, max_learned: int = 200_000, recovery_stores: int = 256) -> None:
        self._map: dict[int, int] = {}
        self._count: dict[int, int] = {}
        self._learned: dict[int, int] = {}
        self._quiet = 0
        self.max_learned = max_learned
        self.recovery_stores = recovery_stores
        self.recovering = False

    def __len__(self) -> int:
        return len(self._map)

    def clear(self) -> None:
        self._map.clear()
        self._count.clear()

    def start_recovery(self) -> None:
        self.recovering = True
        self._quiet = 0

    def stop_recovery(self) -> None:
        """Every block the engine holds is known again: stop learning routes, forget them."""
        self.recovering = False
        self._learned.clear()

    def learn_route(
        self,
        own_hashes: Sequence[int],
        token_ids: Sequence[int],
        block_size: int,
        images: Sequence[PlacedImage] = (),
    ) -> None:
        """Record a routed prompt's full blocks (only while recovering; O(blocks) when so)."""
        if not self.recovering:
            return
        learned = self._learned
        parent = ROOT_HASH
        for i, own in enumerate(own_hashes):
            start, end = i * block_size, (i + 1) * block_size
            keys = block_image_keys(images, start, end) if images else []
            content = _named(ROOT_HASH, token_ids[start:end], keys)
            learned[content] = parent
            parent = own
        while len(learned) > self.max_learned:
            del learned[next(iter(learned))]

    def translate(self, event: KVEvent) -> KVEvent | None:
        if isinstance(event, BlockStored):
            return self._stored(event)
        if isinstance(event, BlockRemoved):
            gone = []
            for h in event.block_hashes:
                own = self._map.pop(h, None)
                if own is None:
                    continue
                left = self._count[own] - 1
                if left:
                    self._count[own] = left
                else:
                    del self._count[own]
                    gone.append(own)
            return BlockRemoved(tuple(gone), event.medium) if gone else None
        self.clear()
        return event

    def _parent(self, event: BlockStored) -> int | None:
        own = (
            ROOT_HASH if event.parent_block_hash is None else self._map.get(event.parent_block_hash)
        )
        if own is not None:
            self._quiet += 1
            if self.recovering and self._quiet >= self.recovery_stores:
                self.stop_recovery()
            return own
        assert event.parent_block_hash is not None
        self._quiet = 0
        if not self.recovering or not event.block_hashes:
            return None
        first = event.extra_keys[0] if event.extra_keys else None
        content = _named(ROOT_HASH, event.token_ids[: event.block_size], _image_keys(first))
        own = self._learned.get(content)
        if own is not None:
            self._map[event.parent_block_hash] = own
            self._count[own] = self._count.get(own, 0) + 1
        return own

    def _stored(self, event: BlockStored) -> BlockStored | None:
        size = event.block_size
        n = len(event.block_hashes)
        if size <= 0 or len(event.token_ids) < n * size:
            raise ValueError(
                f"BlockStored with {n} blocks of {size} tokens carries {len(event.token_ids)} token ids"
            )
        parent = self._parent(event)
        if parent is None:
            return None
        first_parent = parent
        own_hashes = []
        extra = event.extra_keys
        for i, engine_hash in enumerate(event.block_hashes):
            keys = _image_keys(extra[i]) if extra else []
            parent = _named(parent, event.token_ids[i * size : (i + 1) * size], keys)
            own_hashes.append(parent)
            if engine_hash not in self._map:
                self._map[engine_hash] = parent
                self._count[parent] = self._count.get(parent, 0) + 1
        return BlockStored(
            tuple(own_hashes),
            None if event.parent_block_hash is None else first_parent,
            event.token_ids,
            size,
            event.medium,
            extra,
        )


def _image_keys(keys: BlockKeys) -> list[tuple[str, int]]:
    """The images' ``(identifier, offset)`` among one block's extra keys."""
    return [k for k in keys if isinstance(k, tuple)] if keys else []


def _named(parent: int, token_ids: Sequence[int], keys: Sequence[tuple[str, int]]) -> int:
    return image_block_hash(parent, token_ids, keys) if keys else block_hash(parent, token_ids)
