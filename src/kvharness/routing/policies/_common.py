"""Helpers shared by the built-in policies (not part of the public surface)."""

from __future__ import annotations

import hashlib

__all__ = ["stable_hash"]


def stable_hash(key: str | int) -> int:
    """A 64-bit hash that is the same in every process (unlike ``hash()`` of a str)."""
    data = key.to_bytes(8, "little", signed=False) if isinstance(key, int) else key.encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
