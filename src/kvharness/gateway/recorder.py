"""The gateway's side of ``--record``: each routed request as a recording's request.

:class:`Recorder` turns what the pipeline knows of a request (its hashed prompt, its session, where
it went and why, how it ended) into an :class:`~kvharness.workload.recording.Observed` for the
:class:`~kvharness.workload.recording.RecordingWriter`, which appends it at once. The pipeline
makes a :class:`Pending` per request when it has been routed and calls :meth:`Pending.done`
exactly when the answer is complete but before its last byte leaves (so a client that saw its
answer end finds the request recorded), or with the status of however else the request ended.

The recorded chain is the whole prompt: the gateway routes on at most a replica's capacity of
blocks, and hashes only full blocks, so the blocks past the routed ones are hashed here from the
token ids, and a last partial block named by its tokens; where there are no token ids (prompts
hashed approximately, without a tokenizer) they are named by a salt unique to the request, so
they match nothing, as an uncacheable tail should.

A chat prompt's images are recorded where the gateway placed them (:func:`recorded_images`), so
a replay sends an image of each one's size at its place, and the same image wherever it was.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from kvharness.gateway.prompt_hasher import HashedPrompt
from kvharness.wire.openai import Usage
from kvharness.workload.chain import ROOT_HASH, BlockChain, block_hash, chain_hashes, digest
from kvharness.workload.images import Image
from kvharness.workload.recording import Observed, RecordingWriter

__all__ = ["CLIENT_GONE", "Pending", "Recorder", "recorded_chain", "recorded_images"]

CLIENT_GONE = 499
"""Status recorded for a request whose client left before its answer ended (nginx's use)."""


def recorded_chain(hashed: HashedPrompt, block_size: int) -> BlockChain:
    """The whole prompt of ``hashed`` as a chain at ``block_size`` (see the module docstring)."""
    n, bs = hashed.num_tokens, block_size
    full = list(hashed.block_hashes[: n // bs])
    ids = hashed.token_ids if len(hashed.token_ids) == n else None
    salt = b""
    if len(full) < n // bs:
        parent = full[-1] if full else ROOT_HASH
        if ids is not None:
            full += chain_hashes(ids[: n - n % bs], bs, parent, start=len(full) * bs)
        else:
            salt = os.urandom(8)
            for i in range(len(full), n // bs):
                parent = digest(parent, salt + i.to_bytes(8, "little"))
                full.append(parent)
    if n % bs:
        parent = full[-1] if full else ROOT_HASH
        if ids is not None:
            full.append(block_hash(parent, ids[n - n % bs :]))
        else:
            full.append(digest(parent, salt or os.urandom(8)))
    return BlockChain(bs, tuple(full), n)


def recorded_images(hashed: HashedPrompt) -> tuple[Image, ...]:
    """The images of ``hashed`` as a workload's: where their placeholders are, their pixel size,
    and a 64-bit hash of the name the engine knows each by (equal names, equal hashes). Images
    whose size was not read are left out."""
    return tuple(
        Image(im.offset, im.length, im.width, im.height, _name_hash(im.name))
        for im in hashed.images
        if im.width > 0 and im.height > 0
    )


def _name_hash(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


class Recorder:
    """Records the gateway's routed requests into ``writer`` (see the module docstring)."""

    def __init__(self, writer: RecordingWriter) -> None:
        self.writer = writer

    def begin(
        self,
        *,
        arrival: float,
        session: str | None,
        named: bool,
        hashed: HashedPrompt,
        block_size: int,
        path: str,
        model: str | None,
        body: bytes | bytearray,
    ) -> Pending:
        """A request about to be routed: ``session`` as the client named it (``named``) or the
        hasher inferred it (None: infer it from the prompt here)."""
        chain = recorded_chain(hashed, block_size)
        w = self.writer
        if session is None:
            session = w.infer_session(chain)
        elif not named:
            session = f"{session}-r{w.run}"  # the hasher's auto-N restart with the gateway
        ids: Sequence[int] | None = None
        messages: Sequence[Mapping[str, Any]] | None = None
        if w.content:
            ids = hashed.token_ids if len(hashed.token_ids) == chain.num_tokens else None
            messages = _messages(body)
        images = recorded_images(hashed)
        return Pending(self, session, not named, arrival, chain, path, model, ids, messages, images)

    def status(self) -> dict[str, Any]:
        w = self.writer
        return {
            "folder": str(w.folder),
            "part": w.part.name if w.part is not None else None,
            "part_bytes": w.part_bytes,
            "requests": w.requests,
            "content": w.content,
        }

    def close(self) -> None:
        self.writer.close()


def _messages(body: bytes | bytearray) -> Sequence[Mapping[str, Any]] | None:
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    messages = decoded.get("messages") if isinstance(decoded, dict) else None
    return messages if isinstance(messages, list) else None


class Pending:
    """One request being recorded: :meth:`routed` on each attempt, :meth:`done` once (later
    calls are ignored)."""

    __slots__ = (
        "_ids", "_images", "_messages", "_recorder", "arrival", "chain", "finished", "inferred",
        "model", "path", "reason", "replica", "session",
    )  # fmt: skip

    def __init__(
        self,
        recorder: Recorder,
        session: str,
        inferred: bool,
        arrival: float,
        chain: BlockChain,
        path: str,
        model: str | None,
        ids: Sequence[int] | None,
        messages: Sequence[Mapping[str, Any]] | None,
        images: tuple[Image, ...] = (),
    ) -> None:
        self._recorder = recorder
        self.session = session
        self.inferred = inferred
        self.arrival = arrival
        self.chain = chain
        self.path = path
        self.model = model
        self._ids = ids
        self._messages = messages
        self._images = images
        self.replica: str | None = None
        self.reason: str | None = None
        self.finished = False

    def routed(self, replica: str, reason: str) -> None:
        self.replica, self.reason = replica, reason

    def done(self, status: int, usage: Usage | None = None) -> None:
        """Write the request now, ended with ``status`` and the engine's ``usage``."""
        if self.finished:
            return
        self.finished = True
        self._recorder.writer.write(
            Observed(
                session=self.session,
                inferred=self.inferred,
                arrival=self.arrival,
                end=time.time(),
                chain=self.chain,
                status=status,
                path=self.path,
                model=self.model,
                replica=self.replica,
                reason=self.reason,
                prompt_tokens=usage.prompt_tokens if usage is not None else None,
                cached_tokens=usage.cached_tokens if usage is not None else None,
                output_tokens=usage.completion_tokens if usage is not None else None,
                token_ids=self._ids,
                messages=self._messages,
                images=self._images,
            )
        )
