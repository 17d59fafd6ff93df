"""Seeded draws more than one app makes."""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["pairs_with_namesakes"]


def pairs_with_namesakes(
    rng: random.Random, firsts: Sequence[str], seconds: Sequence[str], count: int
) -> list[tuple[str, str]]:
    """``count`` distinct ``(first, second)`` pairs in draw order, of which pair 2 shares pair
    0's first part and pair 3 its second part (a contact's first name, a message's sender:
    distractors a target must be told apart from). Draws from ``rng`` only."""
    pairs: list[tuple[str, str]] = []
    while len(pairs) < count:
        pair = (rng.choice(firsts), rng.choice(seconds))
        if pair not in pairs:
            pairs.append(pair)
    a, b = pairs[0]
    pairs[2] = (a, next(x for x in rng.sample(seconds, len(seconds)) if (a, x) not in pairs))
    pairs[3] = (next(x for x in rng.sample(firsts, len(firsts)) if (x, b) not in pairs), b)
    return pairs
