"""The resolved configuration of a bench run, saved as ``config.json`` beside its records.

Each field's help is its documentation and its ``kvharness bench --help`` line
(:mod:`kvharness.configs`); ``config.json`` is written and read with
:func:`kvharness.configs.to_json_dict` / :func:`kvharness.configs.from_json`, which still reads a
file written before fields were renamed (``targets``, ``backoff``, ``timeout``...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kvharness.configs import BLOCK_SIZE_MAX, opt

__all__ = ["BenchConfig", "RetryPolicy"]

Mode = Literal["session", "isolated"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """What a session does when a request fails (the documented fault rule).

    A connection error, a 5xx or 429, a timeout, or a stream cut *before the first token* is retried
    after ``backoff_s * 2**k`` seconds (k = 0, 1, ...), up to ``max_attempts`` attempts in all; then
    the session is abandoned. Any other 4xx, and any fault after the first token (resending would
    duplicate output), abandons the session at once. Every failed attempt is written as a record with
    its cause; the rest of the run goes on.
    """

    max_attempts: int = opt(
        3, help="attempts per turn for retryable faults", metavar="N", lo=1, hi=1000
    )
    backoff_s: float = opt(
        0.5,
        help="seconds before the first retry, doubled for each further retry",
        flags=("--backoff",), metavar="S", lo=0.0, formerly=("backoff",),
    )  # fmt: skip
    timeout_s: float = opt(
        300.0,
        help="seconds one attempt may take, from send to its last byte",
        flags=("--timeout",), metavar="S", lo=0.0, above=True, formerly=("timeout",),
    )  # fmt: skip
    connect_timeout_s: float = opt(
        10.0,
        help="seconds to open a connection",
        flags=("--connect-timeout",), metavar="S", lo=0.0, above=True,
        formerly=("connect_timeout",),
    )  # fmt: skip


def _base_url(text: str) -> str:
    """A backend URL as given on the command line, without trailing slashes."""
    return text.rstrip("/")


def _metrics_base(text: str) -> str:
    """A metrics URL as given (``http://host:8000`` or ``http://host:8000/metrics``), as the base
    that ``/metrics`` is read under."""
    base = _base_url(text)
    return base.removesuffix("/metrics") if base.endswith("/metrics") else base


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    """Everything that decides what a run sends and when. Times are seconds, sizes tokens."""

    backends: tuple[str, ...] = opt(
        help="base URL of an OpenAI-compatible server (repeat for several; sessions go round "
        "robin)",
        flags=("--backend", "--target"), metavar="URL", parse=_base_url, formerly=("targets",),
    )  # fmt: skip
    workload: str = opt(
        "synthetic",
        help="workload: a kvharness workload file, SWE-agent .traj file/folder, Mooncake "
        "hash_ids JSONL, synthetic[:k=v,...] (coding-agent sessions), computer-use[:k=v,...] "
        "(a screenshot after every action, sent as images) or fixed:requests=N,input=T,"
        "output=T[,spread=F,shared_prefix=F] (independent requests of one shape; `kvharness "
        "workload stats --help` lists the options)",
        flags=("--workload", "-w"), metavar="SPEC",
    )  # fmt: skip
    mode: Mode = opt(
        "session",
        help="session: turns in order with their gaps; isolated: the same turns as independent "
        "shuffled requests (a chat benchmark's view)",
        cli=False,
    )
    model: str | None = opt(
        None, help="model name to send", default_means="the first one the first backend lists"
    )
    arrival: Literal["workload", "trace", "poisson", "concurrent"] = opt(
        "workload",
        help="how sessions start: the workload's own arrival, trace times, Poisson or fixed "
        "concurrency",
        cli=False,
    )
    rate: float = opt(
        1.0,
        help="start sessions as a Poisson process of R sessions/s",
        metavar="R", lo=0.0, above=True, cli=False,
    )  # fmt: skip
    concurrency: int = opt(
        0,
        help="keep N sessions in flight (isolated mode: N requests in flight; not given (0): as "
        "many as there are sessions)",
        metavar="N", lo=1, cli=False,
    )  # fmt: skip
    time_scale: float = opt(
        1.0,
        help="multiply start times and gaps by X (0.5 = twice as fast)",
        metavar="X", lo=0.0, above=True,
    )  # fmt: skip
    max_sessions: int | None = opt(
        None, help="run only the workload's first N sessions", metavar="N", lo=1,
        default_means="all",
    )  # fmt: skip
    vocab_size: int = opt(
        1024,
        help="token ids of materialised prompts lie in [0, V); any model with at least V tokens "
        "serves them",
        metavar="V", lo=1, hi=1 << 31,
    )  # fmt: skip
    engine_block_size: int = opt(
        128,
        help="the server's KV block size in tokens, for ideal cached tokens",
        metavar="B", lo=1, hi=BLOCK_SIZE_MAX,
    )  # fmt: skip
    workload_block_size: int = opt(
        512,
        help="block size of hash_ids traces (512 is Mooncake's)",
        metavar="B", lo=1, hi=BLOCK_SIZE_MAX,
    )  # fmt: skip
    tokenizer: str | None = opt(
        None,
        help="the served model's tokenizer (tokenizer.json or its folder): tokenises SWE-agent "
        "trajectories, and picks the words of --prompt-format text",
        metavar="PATH",
    )
    prompt_format: Literal["tokens", "text"] = opt(
        "tokens",
        help="how hash-only turns (Mooncake, synthetic) go to /v1/completions: tokens, a list "
        "of token ids; text, a string of one word per token, each after a space, for servers "
        "and routers that take text only (e.g. sglang-router). With --tokenizer the words are "
        "vocabulary entries verified to be one token each, so the server sees exactly the "
        "workload's tokens plus its tokenizer's BOS and ideal cached tokens stay exact; without "
        "it a built-in word list is used and the ideal is approximate",
    )
    session_header: str | None = opt(
        "x-session-id",
        help="HTTP header carrying the session id on every request of session mode, for "
        "session-aware routers (isolated mode never sends it)",
        metavar="NAME", off_flag="--no-session-header", off_help="send no session header",
    )  # fmt: skip
    session_user: bool = opt(
        False,
        help="also send the session id as the OpenAI request's 'user' field in session mode, "
        "for routers that key sessions by it (the header any other peer reads is set with "
        "--session-header: x-session-affinity for AIPerf's, x-dynamo-session-id for Dynamo, "
        "x-smg-routing-key for the SGLang model gateway)",
        negatable=True,
    )
    ignore_eos: bool = opt(
        True,
        help="send ignore_eos, so each turn generates its recorded output length; turn it off "
        "for servers that reject it",
        flags=("--no-ignore-eos",),
    )
    temperature: float = opt(
        0.0,
        help="sampling temperature of every request; 0, greedy, makes a replay of recorded "
        "token ids generate what a greedy original generated, so the next turn finds the same "
        "answer blocks in the cache",
        metavar="T", lo=0.0, hi=2.0,
    )  # fmt: skip
    seed: int = opt(0, help="seed of the isolated-mode shuffle and of Poisson arrivals")
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    api: Literal["completions", "chat"] = opt(
        "completions",
        help="how turns without their own messages (hash-only traces, synthetic, fixed) are "
        "sent: completions, to /v1/completions with the prompt as --prompt-format says; chat, "
        "to /v1/chat/completions as one user message of the prompt's text (the server's chat "
        "template then adds its tokens, so prompt token counts and ideal cached tokens are "
        "approximate). Turns with messages or images always go to chat, turns with token ids "
        "to completions",
    )
    image_wrap_tokens: int = opt(
        2,
        help="tokens the server's chat template adds around each image (Qwen2-VL's "
        "<|vision_start|> and <|vision_end|>), for the ideal cached tokens of image turns",
        metavar="N", lo=0, hi=1 << 16,
    )  # fmt: skip
    screens: str | None = opt(
        None,
        help="folder that caches the screenshots image turns send (real pages rendered once "
        "with headless Chromium, then stamped with each image's hash)",
        metavar="DIR", default_means="~/.cache/kvharness/screens",
    )  # fmt: skip
    scrape_metrics: bool = opt(
        True,
        help="scrape the backends' Prometheus /metrics before and after each pass",
        flags=("--no-metrics",),
    )
    metrics_urls: tuple[str, ...] = opt(
        (),
        help="read the engine metrics from this URL instead of the backends' (repeat for "
        "several): the engines behind a router, whose own /metrics is not theirs",
        flags=("--metrics-url",), metavar="URL", parse=_metrics_base,
        default_means="each --backend",
    )  # fmt: skip
    event_loop: Literal["auto", "asyncio", "uvloop"] = opt(
        "auto",
        help="event loop: auto, uvloop when installed (about twice the requests per core), "
        "else asyncio's; or either one",
    )
    label: str | None = opt(None, help="name of the run in reports", default_means="the mode")
    started_at: float = 0.0
    """Unix time the run started (records' times are seconds from it, resumes included)."""

    def __post_init__(self) -> None:
        for url in self.backends:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"backend {url!r} is not an http(s):// URL")
        for url in self.metrics_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"metrics URL {url!r} is not an http(s):// URL")

    @property
    def text_prompts(self) -> bool:
        """Whether hash-only turns are sent as text (``--prompt-format text`` or ``--api chat``)."""
        return self.prompt_format == "text" or self.api == "chat"

    @property
    def scraped(self) -> tuple[str, ...]:
        """The URLs whose ``/metrics`` the run reads: ``metrics_urls``, else the backends."""
        return self.metrics_urls or self.backends
