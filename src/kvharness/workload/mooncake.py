"""Mooncake / AIPerf ``hash_ids`` JSON Lines traces, with session inference.

One request a line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

``timestamp`` is milliseconds; ``hash_ids`` name ``block_size``-token blocks (512 for Mooncake),
chained over the whole prefix, so they map onto :class:`BlockChain` directly: there must be
``ceil(input_length / block_size)`` of them. AIPerf's extension fields are accepted: ``session_id``
(explicit sessions; no inference then) and ``delay`` (milliseconds before the turn, after the
previous one finished, used instead of timestamps within a session), and so are NVIDIA Dynamo's
agentic rows: ``request_id``, ``wait_for`` (within a session, the previous turn: the order the
rows already give), ``tool_wait_ms`` (the tool's part of the gap; the gap is ``delay`` plus it),
``branches`` and ``prefix_reset`` (metadata). A ``wait_for`` naming another session's request (a
sub-agent's spawn or join) is not kept: a workload's sessions are independent. Rows without a
``session_id`` must come in time order. Lengths, times and hashes are bounded as in
:mod:`kvharness.workload.reader` (``timestamp``, ``delay`` and ``tool_wait_ms`` >= 0); the file is
streamed.

:func:`save_mooncake` writes agentic rows, which AIPerf's and Dynamo's replays read: one row per
turn, sessions one after another, each row with its ``session_id``, ``request_id``, nominal
``timestamp`` (:func:`kvharness.workload.export.nominal_calls`), lengths and ``hash_ids``
(:class:`kvharness.workload.export.BlockIds`); a later turn adds ``wait_for`` (the previous
turn), ``delay`` (its gap, ms) and, where the workload names the tool that ran, ``tool_wait_ms``
(the whole gap, then, with ``delay`` 0). The block size is not in the rows: replay the file at the
block size the writer reports.

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

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from kvharness.errors import FormatError
from kvharness.files import replacing
from kvharness.workload import reader
from kvharness.workload.chain import BlockChain
from kvharness.workload.export import BlockIds, nominal_calls
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.reader import BlockHash, Milliseconds, Tokens
from kvharness.workload.traceformat import LoadOptions, Probe, TraceFormat

__all__ = [
    "TRACE_FORMAT",
    "MooncakeRequest",
    "infer_sessions",
    "load_mooncake",
    "read_requests",
    "save_mooncake",
]


class _Line(msgspec.Struct):
    input_length: Tokens
    output_length: Tokens
    hash_ids: tuple[BlockHash, ...]
    timestamp: Milliseconds | None = None
    session_id: str | None = None
    delay: Milliseconds | None = None
    tool_wait_ms: Milliseconds | None = None
    request_id: str | None = None

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
            if row.session_id is None and time < last_time:
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
        delay = None
        if row.delay is not None or row.tool_wait_ms is not None:
            delay = ((row.delay or 0.0) + (row.tool_wait_ms or 0.0)) / 1000.0
        out.append(MooncakeRequest(lineno, time, chain, row.output_length, row.session_id, delay))
    if not out:
        raise FormatError(where, None, "no requests: the file is empty or holds only blank lines")
    return out


def infer_sessions(chains: Sequence[BlockChain], min_shared: int = 2) -> list[list[int]]:
    """Group requests (by index, their prompts' ``chains`` in arrival order) into sessions by the
    rule in the module docstring.

    Returns sessions as lists of request indices in arrival order; every request is in exactly
    one session. O(total blocks).
    """
    # (position of A's last full block, its hash) -> indices of requests whose full chain ends there.
    ends: dict[tuple[int, int], list[int]] = {}
    has_child = [False] * len(chains)
    parent = [-1] * len(chains)
    for b, chain in enumerate(chains):
        hashes = chain.hashes
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
        k = chain.num_full_blocks
        if k >= min_shared:
            ends.setdefault((k - 1, hashes[k - 1]), []).append(b)
    sessions: list[list[int]] = []
    session_of = [-1] * len(chains)
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
            infer_sessions([r.chain for r in requests], min_shared)
            if infer
            else [[i] for i in range(len(requests))]
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


class _Row(msgspec.Struct, omit_defaults=True):
    session_id: str
    request_id: str
    timestamp: float
    input_length: int
    output_length: int
    hash_ids: list[int]
    wait_for: list[str] | None = None
    delay: float | None = None
    tool_wait_ms: float | None = None


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def save_mooncake(workload: Workload, path: str | Path) -> None:
    """Write ``workload`` as agentic Mooncake rows (see module docstring)."""
    ids = BlockIds()
    encoder = msgspec.json.Encoder()
    with replacing(path) as tmp, tmp.open("wb") as f:
        for calls in nominal_calls(workload):
            lines = []
            for call in calls:
                turn, sid = call.turn, call.session.id
                row = _Row(sid, f"{sid}:{call.index}", _ms(call.start), turn.input.num_tokens,
                           turn.output_tokens, ids.of(turn.input))  # fmt: skip
                if call.index:
                    row.wait_for = [f"{sid}:{call.index - 1}"]
                    tool = turn.tool is not None
                    row.delay = 0.0 if tool else _ms(turn.gap)
                    row.tool_wait_ms = _ms(turn.gap) if tool else None
                lines.append(encoder.encode(row))
            f.write(b"\n".join(lines) + b"\n")


def _sniff(p: Probe) -> bool:
    return p.container == "line" and bool({"hash_ids", "input_length"} & p.keys)


def _load(path: Path, options: LoadOptions) -> Workload:
    return load_mooncake(path, options.block_size or 512)


TRACE_FORMAT = TraceFormat(
    "mooncake",
    "Mooncake / AIPerf / Dynamo hash_ids JSONL: timestamps, or sessions with delays and tool "
    "waits (agentic rows)",
    _sniff,
    _load,
    save_mooncake,
)
