"""Words for text prompts: hash-only turns sent as text, one word per token.

A text prompt is the chain's materialised token ids mapped to words, each preceded by a space
(``"".join(" " + words[i] for i in ids)``), so a prefix chain's text is a string prefix of the
longer chain's text. With the server's own tokenizer (:func:`prompt_words` given a path) the words
are vocabulary entries that tokenise to exactly one token each, also when run together, so the
server sees exactly the chain's token count plus the special tokens its tokenizer adds (a BOS), and
ideal cached tokens stay exact. Without one, the built-in word list of
:func:`~kvharness.workload.chain.materialise_text` is used and token counts are approximate.
"""

from __future__ import annotations

import bisect
import functools
import random
from dataclasses import dataclass
from typing import Any

from kvharness.errors import UserError
from kvharness.workload.chain import default_words
from kvharness.workload.tokenize import load_hf_tokenizer

__all__ = ["MIN_WORDS", "PromptWords", "prompt_words", "tokenizer_words"]

MIN_WORDS = 64
"""Fewest single-token words a tokenizer must offer for text prompts."""
_MARKERS = ("\u0120", "\u2581")  # byte-level BPE's "Ġ" and SentencePiece's "▁": a leading space
_ROUNDS = 6
_REPEATS = 4


@dataclass(frozen=True, slots=True)
class PromptWords:
    """The words of text prompts. ``special_tokens``: tokens the server's tokenizer adds to a plain
    prompt (its BOS; 0 when unknown). ``exact``: one word is verified to be one token."""

    words: tuple[str, ...]
    special_tokens: int = 0
    exact: bool = False
    source: str = "built-in"


def _misfits(tok: Any, words: list[str], rng: random.Random) -> set[str]:
    """Words that do not come out as exactly one token in a long random run of all of them."""
    seq = words * _REPEATS
    rng.shuffle(seq)
    starts, pos = [], 0
    for w in seq:
        starts.append(pos)
        pos += len(w) + 1
    enc = tok.encode("".join(" " + w for w in seq), add_special_tokens=False)
    per_word = [0] * len(seq)
    for start, end in enc.offsets:
        if end > start:  # a token covering characters: charge it to the word it starts in
            per_word[bisect.bisect_right(starts, start) - 1] += 1
    bad = {w for w, n in zip(seq, per_word, strict=True) if n != 1}
    if not bad and len(enc.ids) != len(seq):  # offsets disagree with the count: trust neither
        raise UserError(f"tokenizer gives {len(enc.ids)} tokens for {len(seq)} one-token words")
    return bad


def tokenizer_words(tokenizer: Any, *, min_words: int = MIN_WORDS, seed: int = 0) -> PromptWords:
    """Single-token words of a ``tokenizers.Tokenizer``: vocabulary entries of ASCII letters (a
    leading-space marker stripped), in sorted order, whose ``" " + word`` encodes to exactly one
    token, and that stay one token each in long seeded random runs of them (words that do not are
    dropped; up to a few rounds). Raises UserError when fewer than ``min_words`` qualify.
    Cost: one encode per vocabulary word plus a few encodes of the whole list."""
    cands = set()
    for entry in tokenizer.get_vocab():
        w = entry[1:] if entry.startswith(_MARKERS) else entry
        if w.isascii() and w.isalpha():
            cands.add(w)
    ordered = sorted(cands)
    encs = tokenizer.encode_batch([" " + w for w in ordered], add_special_tokens=False)
    words = [w for w, e in zip(ordered, encs, strict=True) if len(e.ids) == 1]
    rng = random.Random(seed)
    for _ in range(_ROUNDS):
        if len(words) < min_words:
            break
        bad = _misfits(tokenizer, words, rng)
        if not bad:
            sample = "".join(" " + w for w in words[:8])
            plain = len(tokenizer.encode(sample, add_special_tokens=False).ids)
            special = len(tokenizer.encode(sample, add_special_tokens=True).ids) - plain
            return PromptWords(tuple(words), special_tokens=special, exact=True)
        words = [w for w in words if w not in bad]
    raise UserError(
        f"the tokenizer has only {len(words)} words that are one token each (need {min_words}) "
        "for --prompt-format text; drop --tokenizer to use the built-in word list (approximate)"
    )


@functools.lru_cache(maxsize=8)
def prompt_words(tokenizer_path: str | None) -> PromptWords:
    """The words text prompts use: from the tokenizer at ``tokenizer_path`` (a ``tokenizer.json``
    or its folder; exact), else the built-in list (approximate). Cached per path."""
    if tokenizer_path is None:
        return PromptWords(default_words())
    pw = tokenizer_words(load_hf_tokenizer(tokenizer_path))
    return PromptWords(pw.words, pw.special_tokens, pw.exact, source=str(tokenizer_path))
