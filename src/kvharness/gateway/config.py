"""The gateway's configuration: one frozen record, resolved once and shown at ``/status``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = ["GatewayConfig"]


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Everything ``kvharness gateway`` can be told. Times in seconds, sizes in tokens/blocks."""

    backends: tuple[str, ...]
    """Base URLs of the OpenAI-compatible replicas (``http://host:port``)."""
    policy: str = "agent_aware"
    """Routing policy name (see ``kvharness.routing.registry.available_policies``)."""
    policy_options: Mapping[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8080
    """Port to listen on; 0 picks a free one."""
    tokenizer: str | None = None
    """Model directory (or tokenizer.json) whose tokenizer and chat template the engines use."""
    chat_template: str | None = None
    """A Jinja chat template file overriding the model's."""
    block_size: int | None = None
    """Engine KV block size in tokens; None: read from the replicas' /metrics (default 16)."""
    capacity_blocks: int | None = None
    """KV blocks per replica; None: read from the replicas' /metrics (default 10,000)."""
    kv_events: Mapping[str, str] = field(default_factory=dict)
    """Backend URL -> vLLM's KV-event endpoint as vLLM was given it (tcp://*:P or tcp://HOST:P)."""
    kv_replay: Mapping[str, str] = field(default_factory=dict)
    """Backend URL -> vLLM's KV-event replay endpoint."""
    kv_topic: str = ""
    """KV-event topic to subscribe to ("" takes all)."""
    lru_blocks: int | None = None
    """For backends without KV events: blocks the router assumes each one caches (its LRU)."""
    max_queue: int = 256
    """Requests in flight per replica before it is considered full; all full -> 429."""
    retry_after_s: float = 1.0
    max_attempts: int = 3
    """Replicas tried per request (failures before the answer started are retried)."""
    health_interval_s: float = 2.0
    health_timeout_s: float = 2.0
    unhealthy_after: int = 2
    """Failed health checks in a row that take a replica out."""
    connect_timeout_s: float = 5.0
    read_timeout_s: float | None = 600.0
    """Longest silence from a replica while answering (before its answer's head, or between two
    pieces of it); past it the client gets 504 (or, mid-stream, an SSE error event). Long enough
    for a non-streamed answer of thousands of tokens from a loaded engine; None waits forever."""
    max_body_bytes: int = 64 * 1024 * 1024
    """Largest request body taken, bytes; a larger one is answered 413."""
    max_buffered_bytes: int = 256 * 1024 * 1024
    """Bytes of request bodies held at once over all requests (each from its first byte until it
    is answered); a body that does not fit is answered 503 with Retry-After."""
    client_timeout_s: float = 15.0
    """A client must send a request's head within this many seconds of connecting or of its
    previous answer (idle keep-alive connections are closed after it too), and its body without
    falling silent this long (else 408)."""
    api_key: str | None = field(default=None, repr=False)
    """When set, every endpoint but ``/health`` wants it as ``Authorization: Bearer KEY`` or
    ``x-api-key: KEY`` (else 401); never shown at ``/status``."""
    forward_client_auth: bool = False
    """With ``api_key``: also send the client's ``Authorization`` / ``x-api-key`` on to the
    replicas (by default the gateway's key stops at the gateway). Without ``api_key`` they are
    always forwarded."""
    session_headers: tuple[str, ...] = ("x-session-id",)
    scrape_interval_s: float = 0.0
    """Read each replica's own load (vLLM /metrics: waiting requests, KV usage) this often; 0: off,
    load is then the gateway's own count of requests in flight."""
    verify_hashing_every: int = 0
    """Check every n-th incremental tokenisation against a full one (0: never)."""
    forward_token_ids: bool = True
    """Send a text completion's prompt to the replica as the token ids the gateway tokenised it
    to, sparing the engine tokenising it again; only with ``tokenizer`` (without it the gateway
    has no ids), and only to replicas whose ``/tokenize`` gives the gateway's tokens for a probe
    text (others get the text)."""

    def __post_init__(self) -> None:
        if not self.backends:
            raise ValueError("at least one backend is needed")
        for url in self.backends:
            _check_backend(url)
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535 (0: any free port), got {self.port}")
        if self.max_body_bytes < 1 or self.max_buffered_bytes < self.max_body_bytes:
            raise ValueError(
                f"need 1 <= max_body_bytes ({self.max_body_bytes}) <= max_buffered_bytes "
                f"({self.max_buffered_bytes})"
            )
        timeouts = {
            "client_timeout_s": self.client_timeout_s,
            "read_timeout_s": self.read_timeout_s,
        }
        for name, value in timeouts.items():
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("the API key is empty")
        if self.max_queue < 1 or self.max_attempts < 1 or self.unhealthy_after < 1:
            raise ValueError("max_queue, max_attempts and unhealthy_after must be >= 1")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        unknown = set(self.kv_events) - set(self.backends)
        unknown |= set(self.kv_replay) - set(self.backends)
        if unknown:
            raise ValueError(f"KV-event endpoints given for unknown backends: {sorted(unknown)}")

    def to_dict(self) -> dict[str, Any]:
        """The configuration as JSON-able values; the API key only as whether one is set."""
        out = asdict(self)
        out["policy_options"] = dict(self.policy_options)
        out["api_key"] = "set" if self.api_key is not None else None
        return out


def _check_backend(url: str) -> None:
    """ValueError unless ``url`` is a replica's base URL: ``http://HOST[:PORT]``, no path."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise ValueError(f"backend {url!r}: {err}") from None
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"backend {url!r} is not an http://HOST:PORT URL")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise ValueError(
            f"backend {url!r}: give the replica's base URL, http://HOST:PORT, without a path"
        )
    if port == 0:
        raise ValueError(f"backend {url!r}: port 0 cannot be connected to")
