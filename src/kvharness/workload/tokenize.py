"""Tokenisers for turning real chat messages into token ids and block chains.

:func:`load_tokenizer` takes a path to a Hugging Face ``tokenizer.json`` (or a folder holding one)
and returns it wrapped; with no path it returns :class:`ApproxTokenizer`, which needs no download:
a deterministic regex split in the manner of GPT-style pre-tokenisers (a word with its leading
space, up to 3 digits, 1-2 punctuation marks, whitespace runs; words over 8 characters cut into
6-character pieces), each piece hashed into the vocabulary. Its counts are close to a BPE
tokenizer's on English and code; for exact counts, give the model's own tokenizer.

A conversation is tokenised message by message (:func:`message_tokens`), each message rendered as
``<|role|>\\ncontent\\n``, so the tokens of a conversation extend the tokens of any prefix of it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from kvharness.errors import UserError

__all__ = [
    "ApproxTokenizer",
    "Tokenizer",
    "content_text",
    "load_hf_tokenizer",
    "load_tokenizer",
    "message_text",
    "message_tokens",
]


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...


_PIECES = re.compile(r" ?[A-Za-z]+| ?\d{1,3}| ?[^\sA-Za-z\d]{1,2}|\s+(?!\S)|\s+")


class ApproxTokenizer:
    """A download-free approximation of a BPE tokenizer (see module docstring)."""

    name = "approx"

    def __init__(self, vocab_size: int = 32000) -> None:
        self.vocab_size = vocab_size
        self._cache: dict[str, int] = {}

    def _id(self, piece: str) -> int:
        tid = self._cache.get(piece)
        if tid is None:
            digest = hashlib.blake2b(piece.encode(), digest_size=8).digest()
            tid = int.from_bytes(digest, "little") % self.vocab_size
            if len(self._cache) < 1 << 20:
                self._cache[piece] = tid
        return tid

    def encode(self, text: str) -> list[int]:
        out = []
        for m in _PIECES.finditer(text):
            piece = m.group()
            if len(piece) <= 8 or piece[-1].isspace():
                out.append(self._id(piece))
            else:
                out.extend(self._id(piece[i : i + 6]) for i in range(0, len(piece), 6))
        return out


class _HFTokenizer:
    def __init__(self, tok: Any, name: str) -> None:
        self.name = name
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._tok.encode(text, add_special_tokens=False).ids
        return ids


def load_hf_tokenizer(path: str | Path) -> Any:
    """The Hugging Face ``tokenizers.Tokenizer`` at ``path`` (``tokenizer.json`` or its folder).
    Raises UserError naming the path when there is none or it cannot be loaded."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise UserError(f"no tokenizer at {path} (expected a tokenizer.json or a folder with one)")
    from tokenizers import Tokenizer as HFTokenizer

    try:
        return HFTokenizer.from_file(str(p))
    except Exception as err:  # tokenizers raises its own exception types
        raise UserError(f"cannot load tokenizer {p}: {err}") from None


def load_tokenizer(path: str | Path | None = None) -> Tokenizer:
    """The tokenizer at ``path`` (``tokenizer.json`` or its folder), or the approximation."""
    if path is None:
        return ApproxTokenizer()
    p = Path(path)
    return _HFTokenizer(load_hf_tokenizer(p), str(p / "tokenizer.json" if p.is_dir() else p))


def content_text(message: Mapping[str, Any]) -> str:
    """A chat message's content as text (its text parts joined) and its tool calls as JSON: what
    the model wrote, when the message is a reply."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
        )
    text = str(content or "")
    calls = message.get("tool_calls")
    if calls:
        text += "\n" + json.dumps(calls, sort_keys=True)
    return text


def message_text(message: Mapping[str, Any]) -> str:
    """A chat message rendered as the text its tokens are counted from."""
    return f"<|{message.get('role', 'user')}|>\n{content_text(message)}\n"


def message_tokens(tokenizer: Tokenizer, message: Mapping[str, Any]) -> list[int]:
    return tokenizer.encode(message_text(message))
