"""The resolved configuration of a bench run, saved as ``config.json`` beside its records."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["BenchConfig", "RetryPolicy"]

Mode = Literal["session", "isolated"]


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """What a session does when a request fails (the documented fault rule).

    A connection error, a 5xx or 429, a timeout, or a stream cut *before the first token* is retried
    after ``backoff * 2**k`` seconds (k = 0, 1, ...), up to ``max_attempts`` attempts in all; then the
    session is abandoned. Any other 4xx, and any fault after the first token (resending would
    duplicate output), abandons the session at once. Every failed attempt is written as a record with
    its cause; the rest of the run goes on.
    """

    max_attempts: int = 3
    backoff: float = 0.5
    """Seconds before the first retry; doubled for each further retry."""
    timeout: float = 300.0
    """Seconds one attempt may take from send to its last byte."""
    connect_timeout: float = 10.0


class BenchConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything that decides what a run sends and when. Times are seconds, sizes tokens."""

    targets: tuple[str, ...]
    """Base URLs of OpenAI-compatible servers; sessions are spread round robin."""
    workload: str
    """Workload spec as given to ``load_workload`` (file, folder or ``synthetic:...``)."""
    mode: Mode = "session"
    model: str | None = None
    """Model name sent in requests; None = the first model listed by the first target."""
    arrival: Literal["workload", "trace", "poisson", "concurrent"] = "workload"
    """How sessions start: the workload's own arrival, trace times, Poisson or fixed concurrency."""
    rate: float = 1.0
    """Sessions per second for ``poisson``."""
    concurrency: int = 0
    """Sessions in flight for ``concurrent``; for isolated mode, requests in flight (0 = as many
    as there are sessions)."""
    time_scale: float = 1.0
    """Multiplies trace start times and turn gaps (0.5 runs the trace twice as fast)."""
    vocab_size: int = 1024
    """Token ids of materialised prompts are drawn from ``[0, vocab_size)`` (``tokens`` format)."""
    engine_block_size: int = 128
    """The server's KV block size, for the ideal cached tokens of each record."""
    workload_block_size: int = 512
    """Block size of hash-only traces (512 for Mooncake)."""
    tokenizer: str | None = None
    """Tokenizer path for SWE-agent trajectories, and the words of ``text`` prompts."""
    prompt_format: Literal["tokens", "text"] = "tokens"
    """How hash-only turns are sent to ``/v1/completions``: ``tokens``, a token-id list; ``text``, a
    string of one word per token, each after a space (words from ``tokenizer`` when given, then
    exact: the server sees the chain's tokens plus its tokenizer's special tokens)."""
    session_header: str | None = "x-session-id"
    """Header carrying the session id on every request of session mode (None: none). Isolated mode
    never sends it."""
    ignore_eos: bool = True
    max_sessions: int | None = None
    """Run only the first N sessions of the workload."""
    seed: int = 0
    """Seeds the isolated-mode shuffle and Poisson arrivals."""
    retry: RetryPolicy = RetryPolicy()
    scrape_metrics: bool = True
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    """``auto``: uvloop when installed (about twice the requests per core), else asyncio's."""
    label: str | None = None
    started_at: float = 0.0
    """Unix time the run started (records' times are seconds from it, resumes included)."""
