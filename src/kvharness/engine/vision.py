"""Vision encoders: what an image costs a vision-language model, and the per-replica encoder cache.

**The encoder.** A :class:`VisionSpec` is a ViT as Qwen2-VL / Qwen2.5-VL build one: the image is
cut into ``patch`` x ``patch`` pixel patches (each a ``temporal_patch``-frame stack of
``channels`` colours, embedded by one linear map), ``layers`` pre-norm transformer blocks
(attention with a fused, biased QKV projection; a gated SiLU MLP), then a merger that
concatenates ``merge`` x ``merge`` neighbouring patches into one placeholder token and maps it
through a two-layer MLP to the language model's width. An image of ``tokens`` placeholder tokens
is ``P = tokens * merge**2`` patches. With ``h`` the hidden size, ``i`` the MLP size, ``m = h *
merge**2`` and ``o`` the output width, its FLOPs are::

    2 P (c_in h + layers (4 h^2 + 3 h i)) + 2 (P / merge^2)(m^2 + m o)     linear layers
  + 4 h (full_layers P^2 + window_layers P min(P, w))                      attention

``c_in = channels * temporal_patch * patch**2``; attention is bidirectional within one image
(each image is its own sequence), ``4 h`` FLOPs per query-key pair (scores and values, all heads).
Qwen2.5-VL attends within windows of ``window`` pixels (``w = (window / patch)**2`` patches) in
all but its ``full_layers``; a window at the image's edge can hold fewer patches, which
``P min(P, w)`` ignores (it is exact when the merged grid's sides are multiples of the window,
and a few percent high otherwise). Linear layers dominate: on Qwen2.5-VL's encoder attention is
8% of the FLOPs of a 1,260-token screenshot (5,040 patches, 7.0 TFLOPs) and 15% of a 1080p image
at the processor's default size (2,691 tokens, 16.3 TFLOPs): the full-attention layers grow as
``P^2``.

The bytes an encoding step moves are the encoder's weights once (bf16) plus activations: each
layer's kernels read their inputs and write their outputs once, ``18 h + 6 i`` bf16 values per
patch per layer (the QKV, output, gate-up and down projections, attention, the SiLU product,
two norms with their residual adds). :class:`~kvharness.engine.cost.CostModel` turns these into
seconds with the text model's roofline and efficiencies (bf16 peak: vision towers are kept in
bf16 by the FP8 checkpoints vLLM serves).

**The encoder cache** (:class:`EncoderCache`) is vLLM v1's ``EncoderCacheManager``: encoder
outputs keyed by image content hash, ``capacity`` placeholder tokens in all. An entry is
referenced by the requests that still need it (from the step that encodes it, or finds it
cached, until their prefill has computed past the image); unreferenced entries stay cached and
are evicted oldest-unreferenced first, only when an allocation needs the room. ``budget`` is the
encoder tokens one step may compute. vLLM's defaults (``compute_mm_encoder_budget`` in
``vllm/v1/core/encoder_cache_manager.py``): both are ``max(max_num_batched_tokens, the model's
largest image)``, the largest image being 16,384 tokens for Qwen2.5-VL's processor
(``max_pixels = 16384 * 28 * 28``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["QWEN25_VL_VIT", "EncoderCache", "EncoderInput", "VisionSpec"]


@dataclass(frozen=True, slots=True)
class VisionSpec:
    """A ViT image encoder (see the module docstring for the shape it describes and its costs).

    ``window`` is the attention window in pixels (0: every layer attends to the whole image);
    ``full_layers`` the indices of the layers that attend to the whole image when windows are
    used. ``max_image_tokens`` is the largest image the model's processor emits, in placeholder
    tokens (it sets vLLM's default encoder cache size).
    """

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    out_hidden: int
    patch: int = 14
    temporal_patch: int = 2
    merge: int = 2
    window: int = 0
    full_layers: tuple[int, ...] = ()
    channels: int = 3
    max_image_tokens: int = 16384

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.intermediate, self.heads, self.out_hidden) < 1:
            raise ValueError(f"{self.name}: layer counts and sizes must be >= 1")
        if self.hidden % self.heads:
            raise ValueError(f"{self.name}: hidden {self.hidden} is not a multiple of heads")
        if min(self.patch, self.temporal_patch, self.merge, self.channels) < 1:
            raise ValueError(f"{self.name}: patch, merge and channels must be >= 1")
        if self.window < 0 or (self.window and self.window % self.patch):
            raise ValueError(f"{self.name}: window must be 0 or a multiple of the patch size")
        if any(not 0 <= k < self.layers for k in self.full_layers):
            raise ValueError(f"{self.name}: full_layers must index its {self.layers} layers")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def window_patches(self) -> int:
        """Patches in one attention window (0 when there are no windows)."""
        return (self.window // self.patch) ** 2

    @property
    def num_full_layers(self) -> int:
        """Layers that attend to the whole image."""
        return len(set(self.full_layers)) if self.window else self.layers

    @property
    def patch_in(self) -> int:
        """Values in one patch as the embedding reads it."""
        return self.channels * self.temporal_patch * self.patch**2

    @property
    def params(self) -> int:
        """Parameters, counted from the shape: patch embedding (no bias), per layer QKV and
        output projections with biases, a gated MLP with biases and two RMSNorms, and the merger
        (an RMSNorm and two biased linear layers)."""
        h, i, o = self.hidden, self.intermediate, self.out_hidden
        m = h * self.merge**2
        block = (3 * h * h + 3 * h) + (h * h + h) + 2 * (h * i + i) + (i * h + h) + 2 * h
        merger = h + (m * m + m) + (m * o + o)
        return self.patch_in * h + self.layers * block + merger

    def patches(self, tokens: int) -> int:
        """Patches of an image of ``tokens`` placeholder tokens."""
        return tokens * self.merge**2

    def attention_pairs(self, patches: int) -> float:
        """Query-key pairs over all layers for one image of ``patches`` patches."""
        p = float(patches)
        full = self.num_full_layers
        windowed = self.layers - full
        w = self.window_patches
        return full * p * p + (windowed * p * min(p, float(w)) if windowed else 0.0)

    def flops(self, patches: int) -> float:
        """FLOPs to encode one image of ``patches`` patches (formula in the module docstring)."""
        h, i = self.hidden, self.intermediate
        m = h * self.merge**2
        linear = 2.0 * patches * (self.patch_in * h + self.layers * (4 * h * h + 3 * h * i))
        merger = 2.0 * (patches / self.merge**2) * (m * m + m * self.out_hidden)
        return linear + merger + 4.0 * h * self.attention_pairs(patches)

    def activation_values(self, patches: int) -> float:
        """bf16 values the layers read and write for one image (see the module docstring)."""
        return float(patches) * self.layers * (18 * self.hidden + 6 * self.intermediate)


QWEN25_VL_VIT = VisionSpec(
    "qwen2.5-vl-vit",
    layers=32,
    hidden=1280,
    intermediate=3420,
    heads=16,
    out_hidden=3584,
    patch=14,
    temporal_patch=2,
    merge=2,
    window=112,
    full_layers=(7, 15, 23, 31),
)
"""Qwen2.5-VL's vision encoder, from the ``vision_config`` of Qwen/Qwen2.5-VL-7B-Instruct's
``config.json`` (depth 32, hidden 1280, intermediate 3420, 16 heads, patch 14, temporal patch 2,
spatial merge 2, window 112, ``fullatt_block_indexes`` 7/15/23/31, ``out_hidden_size`` 3584).
The 3B and 72B models share it with another ``out_hidden`` (2048, 8192): 0.677B parameters for
the 7B model's, 0.700B for the 72B's."""


class EncoderInput(NamedTuple):
    """An image in an engine request: placeholder tokens ``[offset, offset + tokens)`` of the
    prompt, and its content hash (the encoder cache's key)."""

    offset: int
    tokens: int
    hash: int

    @property
    def end(self) -> int:
        return self.offset + self.tokens


class EncoderCache:
    """Encoder outputs of one replica, keyed by image hash, sized in placeholder tokens.

    Mutated by the scheduler only. ``free`` is the room no entry holds; ``freeable`` adds the
    room of entries no request references (evictable); a referrer is any hashable (the scheduler
    passes the request). Every operation is O(1) but eviction, which is O(entries evicted).
    Counters: ``hits`` (images a request found here instead of
    encoding them), ``encoded`` / ``encoded_tokens`` (images and their tokens encoded),
    ``prefix_cached`` (images wholly inside a request's prefix-cache hit when it was first
    scheduled: they cost nothing), ``evictions``.
    """

    __slots__ = (
        "_lru",
        "_refs",
        "_size",
        "budget",
        "capacity",
        "encoded",
        "encoded_tokens",
        "evictions",
        "free",
        "freeable",
        "hits",
        "prefix_cached",
    )

    def __init__(self, capacity: int, budget: int) -> None:
        if capacity < 1 or budget < 1:
            raise ValueError(f"encoder cache sizes must be >= 1 token: {capacity}, {budget}")
        self.capacity = capacity
        self.budget = budget
        """Encoder tokens one engine step may compute."""
        self.free = capacity
        self.freeable = capacity
        self._refs: dict[int, set[Hashable]] = {}
        self._size: dict[int, int] = {}
        self._lru: OrderedDict[int, int] = OrderedDict()
        """Unreferenced entries (hash -> tokens), oldest first."""
        self.hits = 0
        self.encoded = 0
        self.encoded_tokens = 0
        self.prefix_cached = 0
        self.evictions = 0

    def __contains__(self, image_hash: int) -> bool:
        return image_hash in self._refs

    def __len__(self) -> int:
        return len(self._refs)

    def holds(self, req: Hashable, image_hash: int) -> bool:
        """Whether ``req`` references the entry of ``image_hash``."""
        refs = self._refs.get(image_hash)
        return refs is not None and req in refs

    def acquire(self, req: Hashable, image_hash: int) -> bool:
        """Reference the entry of ``image_hash`` for ``req`` if it is cached; False if not."""
        refs = self._refs.get(image_hash)
        if refs is None:
            return False
        if not refs:
            self.freeable -= self._lru.pop(image_hash)
        refs.add(req)
        return True

    def can_allocate(self, tokens: int) -> bool:
        """Whether ``tokens`` more fit, evicting unreferenced entries if need be."""
        return tokens <= self.free or tokens <= self.freeable

    def allocate(self, req: Hashable, image_hash: int, tokens: int) -> None:
        """Store an image encoded for ``req`` (referenced by it), evicting the oldest
        unreferenced entries until it fits. Call only after :meth:`can_allocate` said yes."""
        while tokens > self.free:
            old, size = self._lru.popitem(last=False)
            del self._refs[old]
            del self._size[old]
            self.free += size
            self.evictions += 1
        self._refs[image_hash] = {req}
        self._size[image_hash] = tokens
        self.free -= tokens
        self.freeable -= tokens
        self.encoded += 1
        self.encoded_tokens += tokens

    def release(self, req: Hashable, image_hash: int) -> None:
        """Drop ``req``'s reference (no-op when it holds none); an entry left unreferenced stays
        cached, newest in eviction order."""
        refs = self._refs.get(image_hash)
        if not refs or req not in refs:
            return
        refs.discard(req)
        if not refs:
            size = self._size[image_hash]
            self._lru[image_hash] = size
            self.freeable += size

    def release_all(self, req: Hashable, images: Iterable[EncoderInput]) -> None:
        for im in images:
            self.release(req, im.hash)
