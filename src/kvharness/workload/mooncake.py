"""Mooncake / AIPerf ``hash_ids`` JSON Lines traces, with session inference.

One request a line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

``timestamp`` is milliseconds; ``hash_ids`` name ``block_size``-token blocks (512 for Mooncake),
chained over the whole prefix, so they map onto :class:`BlockChain` directly: there must be
``ceil(input_length / block_size)`` of them. AIPerf's extension fields are accepted: ``session_id``
(explicit sessions; no inference then) and ``delay`` (milliseconds before the turn, used instead of
timestamps within a session). Lengths, times and hashes are bounded as in
:mod:`kvharness.workload.reader` (``timestamp`` and ``delay`` >= 0); the file is streamed.

**Session inference** (when no ``session_id`` is given). Request B continues an earlier request A
when A's *full* blocks are a prefix of B's blocks and they share at least ``min_shared`` blocks (block
0 is a system prompt every request shares). A's parent candidates are looked up in O(len(B)) via
(position, hash) keys, since a chained hash at a position names the whole prefix up to it. Among the
candidates with the longest shared prefix, B takes the most recent one that has no continuation yet
(a session is a chain of turns; a request whose candidates all continue already, e.g. a retry or a
branch, starts a session of its own). A turn's ``gap`` is the arrival interval to its predecessor:
the trace records no service times.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from kvharness.errors import FormatError
from kvharness.workload import reader
from kvharness.workload.chain import BlockChain
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.reader import BlockHash, Milliseconds, Tokens

__all__ = ["MooncakeRequest", "infer_sessions", "load_mooncake", "read_requests"]


class _Line(msgspec.Struct):
    input_length: Tokens
    output_length: Tokens
    hash_ids: tuple[BlockHash, ...]
    timestamp: Milliseconds | None = None
    session_id: str | None = None
    delay: Milliseconds | None = None

    def __post_init__(self) -> None:
        reader.check_hashes(self.hash_ids)


_decoder = msgspec.json.Decoder(_Line)


@dataclass(frozen=True, slots=True)
class MooncakeRequest:
    line: int
    time: float
    """Arrival time in seconds (timestamp / 1000), or the cumulative delay within its session."""
    chain: BlockChain
    output_tokens: int
    session_id: str | None
    delay: float | None


def read_requests(path: str | Path, block_size: int = 512) -> list[MooncakeRequest]:
    """Parse and validate every line, streaming; raise :class:`FormatError` naming the first bad
    one, or the file when it holds no request."""
    where = str(path)
    out: list[MooncakeRequest] = []
    last_time = float("-inf")
    for lineno, raw in reader.lines(path):
        row = reader.decode(_decoder, raw, where, lineno)
        if row.timestamp is None and row.session_id is None:
            raise FormatError(where, lineno, "missing timestamp (needed without session_id)")
        time = 0.0
        if row.timestamp is not None:
            time = row.timestamp / 1000.0
            if time < last_time:
                raise FormatError(
                    where,
                    lineno,
                    f"time goes backwards: timestamp {row.timestamp} after {last_time * 1000:g}",
                )
            last_time = time
        need = -(-row.input_length // block_size)
        if len(row.hash_ids) != need:
            raise FormatError(
                where,
                lineno,
                f"{len(row.hash_ids)} hash_ids, but input_length {row.input_length} at block "
                f"size {block_size} needs {need}",
            )
        chain = BlockChain(block_size, row.hash_ids, row.input_length)
        delay = None if row.delay is None else row.delay / 1000.0
        out.append(MooncakeRequest(lineno, time, chain, row.output_length, row.session_id, delay))
    if not out:
        raise FormatError(where, None, "no requests: the file is empty or holds only blank lines")
    return out


def infer_sessions(requests: list[MooncakeRequest], min_shared: int = 2) -> list[list[int]]:
    """Group requests (by index) into sessions by the rule in the module docstring.

    Returns sessions as lists of request indices in arrival order; every request is in exactly
    one session. O(total blocks).
    """
    # (position of A's last full block, its hash) -> indices of requests whose full chain ends there.
    ends: dict[tuple[int, int], list[int]] = {}
    has_child = [False] * len(requests)
    parent = [-1] * len(requests)
    for b, req in enumerate(requests):
        hashes = req.chain.hashes
        for j in range(len(hashes), min_shared - 1, -1):
            cands = ends.get((j - 1, hashes[j - 1])) if j > 0 else None
            if not cands:
                continue
            free = [a for a in cands if not has_child[a]]
            if free:
                a = free[-1]
                parent[b] = a
                has_child[a] = True
            break
        k = req.chain.num_full_blocks
        if k >= min_shared:
            ends.setdefault((k - 1, hashes[k - 1]), []).append(b)
    sessions: list[list[int]] = []
    session_of = [-1] * len(requests)
    for b, p in enumerate(parent):
        if p < 0:
            session_of[b] = len(sessions)
            sessions.append([b])
        else:
            session_of[b] = session_of[p]
            sessions[session_of[b]].append(b)
    return sessions


def load_mooncake(
    path: str | Path, block_size: int = 512, infer: bool = True, min_shared: int = 2
) -> Workload:
    """Load a ``hash_ids`` trace as a workload; session starts keep the trace's arrival times."""
    requests = read_requests(path, block_size)
    groups: list[list[int]]
    if any(r.session_id is not None for r in requests):
        by_id: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            by_id.setdefault(r.session_id if r.session_id is not None else f"#{i}", []).append(i)
        groups = list(by_id.values())
        names = list(by_id)
    else:
        groups = (
            infer_sessions(requests, min_shared) if infer else [[i] for i in range(len(requests))]
        )
        names = [f"mc-{g[0]}" for g in groups]
    sessions = []
    for name, group in zip(names, groups, strict=True):
        turns = []
        prev_time = requests[group[0]].time
        for k, i in enumerate(group):
            r = requests[i]
            if k == 0:
                gap = 0.0
            elif r.delay is not None:
                gap = r.delay
            else:
                gap = max(0.0, r.time - prev_time)
            prev_time = r.time
            turns.append(Turn(r.chain, r.output_tokens, gap))
        sessions.append(Session(name, tuple(turns), requests[group[0]].time))
    sessions.sort(key=lambda s: s.start or 0.0)
    meta = {"source": "mooncake", "path": str(path), "requests": len(requests)}
    return Workload(tuple(sessions), block_size, Path(path).stem, Arrival("trace"), meta)
