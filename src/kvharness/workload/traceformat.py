"""What a trace format is: its name, how a file is recognised, and how it is read and written.

The types every loader declares itself with (``TRACE_FORMAT``); :mod:`kvharness.workload.formats`
holds the registry of them and the detection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kvharness.workload.conversation import MessageTokens, as_message_tokens
from kvharness.workload.model import Workload

__all__ = ["LoadOptions", "Probe", "Sharing", "TraceFormat"]

Sharing = Literal["hashes", "content", "none"]


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """``block_size``: tokens per hash id of a ``hash_ids`` trace (None: the format's own);
    ``tokenizer``: a ``tokenizer.json`` (or its folder) for formats that carry text (None: the
    built-in approximation)."""

    block_size: int | None = None
    tokenizer: str | None = None
    _tokens: list[MessageTokens] = field(default_factory=list, repr=False, compare=False)

    def message_tokens(self) -> MessageTokens:
        """The tokenizer, loaded on first use and then shared by every file one load reads: a
        folder of trajectories loads it once and tokenises a message they all repeat once."""
        if not self._tokens:
            self._tokens.append(as_message_tokens(self.tokenizer))
        return self._tokens[0]


@dataclass(frozen=True, slots=True)
class Probe:
    """What a file starts with. ``first_line``: its first non-blank line as text (up to 64 KiB);
    ``keys``: the top-level keys of its first JSON object — the object on its first line, the
    whole document, or the first element of a top-level array; ``container``: which of those it
    was (``line``, ``document``, ``array``), or None when the file starts with no JSON object."""

    path: Path
    first_line: str
    keys: frozenset[str]
    container: Literal["line", "document", "array"] | None
    values: dict[str, Any]
    """The first object's scalar (string, number, boolean) values, by key."""


@dataclass(frozen=True, slots=True)
class TraceFormat:
    """A trace format: ``sniff`` says whether a probed file is one; ``load`` reads one file;
    ``save`` writes a workload (absent where the format cannot hold one). ``per_session`` formats
    hold one session a file, so a folder of them is one workload; ``suffixes`` are the file names
    such a folder's files end with."""

    name: str
    summary: str
    sniff: Callable[[Probe], bool]
    load: Callable[[Path, LoadOptions], Workload]
    save: Callable[[Workload, Path], None] | None = None
    sharing: Sharing = "hashes"
    """How its files let prefix sharing be known, unless a loaded file's meta says otherwise."""
    per_session: bool = False
    suffixes: tuple[str, ...] = ()
