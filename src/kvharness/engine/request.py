"""A request inside the engine model: what it asks for and how far it has got."""

from __future__ import annotations

from typing import Any

from kvharness.engine.vision import EncoderInput

__all__ = ["Request"]


class Request:
    """One generation request. Mutated by the scheduler; read by whoever submitted it.

    Token accounting follows vLLM v1: ``num_tokens = prompt_tokens + generated`` tokens are known,
    ``num_computed`` of them have KV in cache. A step computes ``num_tokens - num_computed`` (or a
    chunk of it) and, when that reaches ``num_tokens``, samples one more token. Preemption (by
    recompute) sets ``num_computed`` back to 0 and keeps what was generated.

    ``block_hashes`` are the chained hashes of the prompt's full blocks at the engine block size.
    Times (seconds, the caller's clock): ``scheduled`` is the start of the first step that ran it,
    ``first_token`` the end of the step that sampled its first token, ``done`` the end of the step
    that sampled its last. ``cached_tokens`` is the prefix-cache hit at its first scheduling.
    ``next_tool`` / ``last_turn`` tell an agent-aware eviction policy what follows it.

    ``images`` are the prompt's images in prompt order, at the engine's token positions (each one's
    placeholder tokens a stretch of the prompt); ``image_cursor`` is the first of them the prefill
    has not yet computed past. ``encoder_seconds`` is the vision-encoder time of the steps that
    encoded its images (its share when a step encoded several), so that its TTFT splits into
    queue (``scheduled - arrival``), encoder and the rest.
    """

    __slots__ = (
        "arrival",
        "block_hashes",
        "blocks",
        "cached_tokens",
        "done",
        "encoder_seconds",
        "first_token",
        "generated",
        "id",
        "image_cursor",
        "images",
        "last_turn",
        "next_tool",
        "num_computed",
        "num_hashed",
        "output_tokens",
        "pending",
        "preemptions",
        "prompt_tokens",
        "scheduled",
        "session",
        "tag",
    )

    def __init__(
        self,
        id: str,
        block_hashes: tuple[int, ...],
        prompt_tokens: int,
        output_tokens: int,
        arrival: float,
        *,
        session: str | None = None,
        next_tool: str | None = None,
        last_turn: bool = True,
        tag: Any = None,
        images: tuple[EncoderInput, ...] = (),
    ) -> None:
        if prompt_tokens <= 0:
            raise ValueError(f"request {id!r}: prompt_tokens must be > 0")
        if images and images[-1].end > prompt_tokens:
            raise ValueError(f"request {id!r}: an image ends past the prompt's {prompt_tokens}")
        self.id = id
        self.block_hashes = block_hashes
        self.prompt_tokens = prompt_tokens
        # An engine always samples at least one token.
        self.output_tokens = max(1, output_tokens)
        self.arrival = arrival
        self.session = session
        self.next_tool = next_tool
        self.last_turn = last_turn
        self.tag = tag
        self.images = images
        self.image_cursor = 0
        self.encoder_seconds = 0.0
        self.num_computed = 0
        self.generated = 0
        self.num_hashed = 0
        """Leading blocks of ``blocks`` already named in the prefix cache."""
        self.blocks: list[int] = []
        self.pending = 0
        """Prefill tokens still to compute, as counted in the replica's load figures."""
        self.cached_tokens: int | None = None
        self.scheduled: float | None = None
        self.first_token: float | None = None
        self.done: float | None = None
        self.preemptions = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def finished(self) -> bool:
        return self.generated >= self.output_tokens

    @property
    def decoding(self) -> bool:
        """True when the next step computes exactly one token (the last sampled)."""
        return self.generated > 0 and self.num_computed == self.num_tokens - 1

    def __repr__(self) -> str:
        return (
            f"Request({self.id!r}, prompt={self.prompt_tokens}, computed={self.num_computed}, "
            f"generated={self.generated}/{self.output_tokens}, blocks={len(self.blocks)})"
        )
