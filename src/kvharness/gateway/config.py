"""The gateway's configuration: one frozen record, resolved once and shown at ``/status``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kvharness.configs import mib, opt, zero_is_none
from kvharness.gateway.requests import SESSION_HEADERS

__all__ = ["GatewayConfig"]


def _base_url(text: str) -> str:
    """A backend URL as given on the command line, without trailing slashes."""
    return text.rstrip("/")


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Everything ``kvharness gateway`` can be told. Times in seconds, sizes in tokens/blocks.

    Each field's help is its documentation and its ``--help`` line (:mod:`kvharness.configs`).
    """

    backends: tuple[str, ...] = opt(
        help="an engine replica's base URL, http://HOST:PORT (repeat for each replica)",
        flags=("--backend",), metavar="URL", parse=_base_url,
    )  # fmt: skip
    policy: str = opt(
        "agent_aware", help="routing policy, by its name in kvharness.routing's registry"
    )
    policy_options: Mapping[str, Any] = opt(
        factory=dict,
        help="a policy constructor argument (VALUE parsed as JSON, else a string); repeatable",
        flags=("--policy-option",), metavar="KEY=VALUE",
    )  # fmt: skip
    host: str = opt("127.0.0.1", help="address to listen on")
    port: int = opt(8080, help="port to listen on (0: any free port)")
    tokenizer: str | None = opt(
        None,
        help="the served model's directory (tokenizer.json and chat template), to hash prompts "
        "exactly as the engines tokenise them; without it prompts are hashed approximately and "
        "KV events cannot be matched to text prompts",
        metavar="DIR",
    )
    chat_template: str | None = opt(
        None, help="Jinja chat template overriding the model's", metavar="FILE"
    )
    block_size: int | None = opt(
        None, help="engine KV block size, tokens", default_means="from /metrics, else 16"
    )
    capacity_blocks: int | None = opt(
        None, help="KV blocks per replica", default_means="from the replicas' /metrics, else 10000"
    )
    kv_events: Mapping[str, str] = opt(
        factory=dict,
        help="subscribe to a backend's vLLM KV events; ENDPOINT as given to vLLM's "
        "--kv-events-config (tcp://*:PORT: vLLM binds, the gateway connects to the backend's "
        "host; tcp://HOST:PORT: vLLM connects, the gateway binds); repeatable",
        metavar="URL=ENDPOINT",
    )
    kv_replay: Mapping[str, str] = opt(
        factory=dict,
        help='a backend\'s vLLM KV-event replay endpoint, the "replay_endpoint" of its '
        "--kv-events-config (tcp://*:PORT: vLLM binds it, the gateway connects to the backend's "
        "host): the events the engine published before the gateway started are read from it "
        'at start (as many as its "buffer_steps" keep), and batches lost in transit are '
        "fetched from it; repeatable",
        metavar="URL=ENDPOINT",
    )
    kv_topic: str = opt("", help="KV-event topic to subscribe to", default_means="all")
    lru_blocks: int | None = opt(
        None,
        help="for backends without KV events: blocks the router assumes each replica caches "
        "(its LRU)",
        default_means="unbounded",
    )
    max_queue: int = opt(
        256, help="requests in flight per replica before it counts as full; all full -> 429"
    )
    retry_after_s: float = opt(
        1.0, help="Retry-After seconds sent with a 429", flags=("--retry-after",)
    )
    max_attempts: int = opt(
        3, help="replicas tried per request when one fails before its answer started"
    )
    health_interval_s: float = opt(
        2.0, help="seconds between health checks", flags=("--health-interval",)
    )
    health_timeout_s: float = opt(2.0, help="seconds a health check may take", cli=False)
    unhealthy_after: int = opt(2, help="failed health checks in a row that take a replica out")
    connect_timeout_s: float = opt(5.0, help="seconds to connect to a replica", cli=False)
    read_timeout_s: float | None = opt(
        600.0,
        help="longest silence from a replica while it answers (before its answer's head, or "
        "between two pieces of it), seconds; past it the client gets 504 (mid-stream, an SSE "
        "error event). Long enough for a non-streamed answer of thousands of tokens from a "
        "loaded engine; None (0 on the command line): wait forever",
        flags=("--read-timeout",), parse=zero_is_none(float),
    )  # fmt: skip
    client_timeout_s: float = opt(
        15.0,
        help="seconds a client has to send a request's head (from connecting or its previous "
        "answer; idle keep-alive connections close after it too) and longest silence within "
        "its body (else 408)",
        flags=("--client-timeout",),
    )
    max_body_bytes: int = opt(
        64 * 1024 * 1024, help="largest request body taken, bytes; larger -> 413", show=mib
    )
    max_buffered_bytes: int = opt(
        256 * 1024 * 1024,
        help="request-body bytes held at once over all requests (each from its first byte until "
        "it is answered); a body that does not fit -> 503 with Retry-After",
        show=mib,
    )
    api_key: str | None = opt(
        None,
        help="when set, every endpoint but /health wants it as 'Authorization: Bearer KEY' or "
        "'x-api-key: KEY' (else 401); never shown at /status",
        secret=True, cli=False,
    )  # fmt: skip
    forward_client_auth: bool = opt(
        False,
        help="with an API key: still send the client's Authorization and x-api-key headers on "
        "to the replicas (by default the gateway's key stops at the gateway; without a key "
        "they are always forwarded)",
    )
    session_headers: tuple[str, ...] = opt(
        SESSION_HEADERS,
        help="request header naming the agent session (repeat for several, first found wins); "
        "by default the ones the peers send, in this order: x-session-id (kvharness, "
        "vllm-router), x-session-affinity (AIPerf), x-dynamo-session-id (Dynamo), "
        "x-smg-routing-key (SGLang model gateway), x-correlation-id (AIPerf)",
        flags=("--session-header",), metavar="NAME", parse=str.lower,
        default_means="those five",
    )  # fmt: skip
    session_user: bool = opt(
        True,
        help="when no session header is sent, take the OpenAI request's 'user' field as the "
        "session (off: --no-session-user, for clients whose 'user' names a person running many "
        "sessions at once)",
        flags=("--no-session-user",),
    )
    scrape_interval_s: float = opt(
        0.0,
        help="seconds between reads of each replica's vLLM /metrics (waiting requests, KV "
        "usage); 0: off, load is then the gateway's own count of requests in flight",
        flags=("--scrape-interval",),
    )
    verify_hashing_every: int = opt(
        0, help="check every n-th incremental tokenisation against a full one (0: never)"
    )
    forward_token_ids: bool = opt(
        True,
        help="send text completion prompts to the replicas as the token ids the gateway "
        "computed, so the engines skip tokenising them again; needs --tokenizer (without it "
        "the gateway has no ids), and a replica gets ids only once its /tokenize agrees with "
        "the gateway's tokenizer (the others get text)",
        negatable=True,
    )
    name_images: bool = opt(
        True,
        help="forward each chat image the gateway read (a data: URL) with the gateway's name of "
        "it as the content part's uuid, so the engines' KV events name its blocks as the "
        "gateway does and its cached blocks are credited; an image the client named keeps its "
        "uuid",
        negatable=True,
    )
    held_images: int = opt(
        64,
        help="images per replica taken as held in its engine's multimodal processor cache "
        "(the last N it was sent): a request's images among them go by name alone (their uuid, "
        "no data), so the engine neither receives, decodes nor processes them again; an engine "
        "that refuses one gets the request whole, and is taken to hold half as many from then "
        "on; 0: always send images whole",
        metavar="N",
    )
    record: str | None = opt(
        None,
        help="append every routed request to a recording in folder DIR as it is answered "
        "(session, arrival, gap, block hashes, lengths, cached tokens, replica, routing "
        "reason); every workload command reads the folder (docs/recording-format.md)",
        metavar="DIR",
    )
    record_content: bool = opt(
        False,
        help="with --record: keep each request's token ids and messages too (by default only "
        "hashes: no prompt text leaves the request)",
    )
    record_part_bytes: int = opt(
        256 * 1024 * 1024,
        help="with --record: bytes of a part file past which the next part starts",
        show=mib,
    )

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
        if self.held_images < 0:
            raise ValueError(f"held_images must be >= 0, got {self.held_images}")
        if self.record_part_bytes < 1:
            raise ValueError(f"record_part_bytes must be >= 1, got {self.record_part_bytes}")
        if self.record_content and self.record is None:
            raise ValueError("record_content needs a recording folder (record)")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        unknown = set(self.kv_events) - set(self.backends)
        unknown |= set(self.kv_replay) - set(self.backends)
        if unknown:
            raise ValueError(f"KV-event endpoints given for unknown backends: {sorted(unknown)}")


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
