"""Images in prompts: where a screenshot sits in a turn's tokens, and how many tokens it takes.

A vision-language model's processor turns an image into a run of placeholder tokens (Qwen2-VL's
``<|image_pad|>``) whose embeddings the vision encoder fills in. To the KV cache those tokens are
like any others, except that two different images give the *same* placeholder ids: vLLM's prefix
cache therefore mixes the image's content hash into the hash of every block the placeholders touch
(``generate_block_hash_extra_keys`` in ``vllm/v1/core/kv_cache_utils.py``). kvharness's chains do
the same (:meth:`kvharness.workload.chain.ChainBuilder.extend_image`): an image's content hash is
the content of its placeholder tokens, so identical screenshots share blocks and different ones
stop the shared prefix at the first block they touch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Image", "check_images", "grid_tokens", "tile_grid"]


@dataclass(frozen=True, slots=True)
class Image:
    """An image in a prompt: its placeholder tokens are ``[offset, offset + tokens)`` of the
    prompt; ``width`` x ``height`` its pixel size as sent; ``hash`` a 64-bit hash of its content
    (equal images, equal hashes)."""

    offset: int
    tokens: int
    width: int
    height: int
    hash: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.tokens <= 0:
            raise ValueError(f"an image needs offset >= 0 and tokens > 0, got {self}")
        if self.width <= 0 or self.height <= 0:
            raise ValueError(
                f"an image needs a positive pixel size, got {self.width}x{self.height}"
            )
        if not 0 <= self.hash < 2**64:
            raise ValueError(f"an image hash is a 64-bit unsigned int, got {self.hash}")

    @property
    def end(self) -> int:
        """The position after its last placeholder token."""
        return self.offset + self.tokens


def check_images(images: Sequence[Image], num_tokens: int) -> None:
    """Raise ValueError unless ``images`` are in prompt order, do not overlap and lie within a
    prompt of ``num_tokens`` tokens."""
    end = 0
    for im in images:
        if im.offset < end:
            raise ValueError(f"image at token {im.offset} overlaps or precedes the one before it")
        end = im.end
    if end > num_tokens:
        raise ValueError(f"an image ends at token {end}, past the prompt's {num_tokens} tokens")


def grid_tokens(
    width: int,
    height: int,
    *,
    patch: int = 14,
    merge: int = 2,
    min_pixels: int = 56 * 56,
    max_pixels: int = 28 * 28 * 1280,
) -> int:
    """Placeholder tokens of a ``width`` x ``height`` image for a Qwen2-VL-style processor.

    The image is resized so that each side is a multiple of ``patch * merge`` (nearest) and its
    area lies within ``[min_pixels, max_pixels]`` (scaled down or up, keeping the aspect ratio);
    the vision encoder cuts it into ``patch``-pixel patches and merges ``merge`` x ``merge`` of them
    into one token. The defaults are those of transformers' Qwen2-VL image processor (checked
    against it in ``tests/testing/test_tiny_vlm.py``); the released Qwen2.5-VL checkpoints'
    ``preprocessor_config.json`` raise ``max_pixels`` to 16384 tokens' worth, where a 1080p frame
    takes 2,691 tokens instead of 1,222. With the defaults
    a 1280x800 screenshot becomes 1260x784 pixels, 45 x 28 = 1,260 tokens; 1280x720 gives 1,196.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if max(width, height) > 200 * min(width, height):
        raise ValueError(f"aspect ratio of {width}x{height} is over 200 (the processor refuses)")
    f = patch * merge
    h = max(f, round(height / f) * f)
    w = max(f, round(width / f) * f)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(f, math.floor(height / beta / f) * f)
        w = max(f, math.floor(width / beta / f) * f)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / f) * f
        w = math.ceil(width * beta / f) * f
    return (h // f) * (w // f)


def tile_grid(
    width: int, height: int, *, longest: int, tile: int, max_side: int = 4096
) -> tuple[int, int]:
    """``(rows, cols)`` of ``tile``-pixel tiles an Idefics3 / SmolVLM processor cuts a ``width`` x
    ``height`` image into, besides its global view; ``(0, 0)`` when it fits in one tile.

    The image is resized so that its longer side is ``longest`` (up or down) and the shorter keeps
    the aspect ratio, truncated and then rounded up to even; a side over ``max_side`` (the
    processor's absolute bound) is then brought down to it, keeping the ratio."""
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    aspect = width / height
    if width >= height:
        w, h = longest, int(longest / aspect)
        h += h % 2
    else:
        w, h = int(longest * aspect), longest
        w += w % 2
    w, h = max(w, 1), max(h, 1)
    aspect = w / h
    if w >= h and w > max_side:
        w, h = max_side, int(max_side / aspect)
    elif h > w and h > max_side:
        w, h = int(max_side * aspect), max_side
    rows, cols = math.ceil(max(h, 1) / tile), math.ceil(max(w, 1) / tile)
    return (0, 0) if rows == 1 and cols == 1 else (rows, cols)
