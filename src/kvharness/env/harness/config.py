"""What ``kvharness env run`` is told: one configuration, its fields its options.

Saved as ``DIR/config.json`` beside the rollouts (through :func:`kvharness.configs.to_json_dict`:
the API key only as whether one was given) and read back by ``--resume`` (under the names its
fields had before, too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvharness.configs import BLOCK_SIZE_MAX, opt
from kvharness.env.harness.context import ContextConfig

__all__ = ["RunConfig"]


@dataclass(frozen=True, slots=True)
class RunConfig:
    """An env run: which episodes, against which server, with which budgets."""

    backend: str | None = opt(
        None,
        help="OpenAI-compatible server's base URL (http://host:port); required unless --resume",
        flags=("--backend", "--endpoint"),
        metavar="URL",
        formerly=("endpoint",),
    )
    tasks: Path | None = opt(
        None,
        help="task suite folder (or one task folder); required unless --resume",
        parse=Path,
        metavar="DIR",
    )
    agent: str = opt(
        "model",
        help="who acts: the model's tool calls (model; the server must parse tool calls, e.g. "
        "vLLM with --enable-auto-tool-choice --tool-call-parser NAME), or a script that still "
        "calls the model every turn with the whole history: oracle (known fix after a wrong "
        "attempt; on a chain task each milestone in turn), halfway (a chain task's first half of "
        "its milestones, then stops), noop (submits at once), cheat (attacks the test files); "
        "or mini-swe-agent, that "
        "third-party harness (its own venv, `make mini-swe-agent`; --max-steps bounds its model "
        "calls; its final submission is graded)",
    )
    only: str | None = opt(
        None, help="comma-separated task ids to run", default_means="all", metavar="IDS"
    )
    limit: int | None = opt(None, help="run only the first N tasks", lo=0, metavar="N")
    repeats: int = opt(1, help="episodes per task", lo=1, metavar="N")
    concurrency: int = opt(4, help="episodes in flight", lo=1, metavar="N")
    model: str | None = opt(
        None, help="model name", default_means="the backend's first", metavar="NAME"
    )
    api_key: str | None = opt(
        None,
        help="bearer token for the backend (config.json says only that one was given: a resumed "
        "run needs it again)",
        secret=True,
        metavar="KEY",
    )
    max_tokens: int = opt(256, help="completion tokens per call", lo=1, metavar="N")
    temperature: float = opt(0.0, help="sampling temperature, 0 to 2", lo=0.0, hi=2.0, metavar="T")
    max_steps: int = opt(30, help="actions per episode", lo=1, hi=10_000, metavar="N")
    max_submissions: int = opt(3, help="graded submits per episode", lo=1, hi=10_000, metavar="N")
    reward: str = opt(
        "best",
        help="episode reward over submissions: best, last, discounted[:F[/step|/second]], "
        "with optional ',cost=X' per extra submission",
        metavar="RULE",
    )
    command_timeout_s: float = opt(
        60.0,
        help="wall seconds per command",
        flags=("--command-timeout",),
        lo=0.0,
        above=True,
        metavar="S",
        formerly=("command_timeout",),
    )
    tokenizer: str = opt(
        "auto",
        help="how the workload's prompts are tokenised: 'server' (the backend's own /tokenize, "
        "as vLLM serves it: the exact prompt the engine saw), a tokenizer.json or its folder, "
        "'approx' (built-in approximation), or 'auto' (server when the backend has /tokenize, "
        "else approx)",
        metavar="MODE",
    )
    block_size: int = opt(
        128, help="block size of the workload's chains, tokens", lo=1, hi=BLOCK_SIZE_MAX,
        metavar="B",
    )  # fmt: skip
    unsafe_no_sandbox: bool = opt(
        False, help="run commands directly on the host when bubblewrap is missing (no isolation!)"
    )
    ray: str | None = opt(
        None,
        help="run the episodes on the Ray cluster at ADDRESS (host:port, ray://host:10001, auto) "
        "or on a new one-machine cluster (local): one episode actor per cluster CPU (at most "
        "--concurrency), the --concurrency episodes in flight shared over them, results streamed "
        "back as they finish; tasks and --out on the same paths on every node; needs the ray "
        "extra (pip install 'kvharness[ray]')",
        default_means="no Ray: every episode in this process",
        metavar="ADDRESS",
    )
    checkpoint_steps: int = opt(
        5,
        help="write each episode's checkpoint (conversation, workspace, submissions, counters) "
        "under DIR/checkpoints every N steps, so --resume loses at most the steps since",
        lo=1,
        metavar="N",
    )
    checkpoint_s: float = opt(
        60.0,
        help="also write it when this many seconds have passed since the last one",
        lo=0.0,
        above=True,
        metavar="S",
    )
    context_window: int | None = opt(
        None,
        help="the model's context window (tokens): compact the conversation (--compaction) "
        "before a prompt passes --compact-at of it",
        default_means="never compact",
        lo=1,
        metavar="TOKENS",
    )
    compaction: str = opt(
        "summarize",
        help="how: summarize (one model call writes a summary; the task, the summary and the "
        "last --keep-turns turns stay), drop-outputs (older tool outputs become a placeholder; "
        "then summarize if that is not enough) or keep-last (only the last --keep-turns turns "
        "stay)",
        metavar="HOW",
    )
    compact_at: float = opt(
        0.8, help="share of the window a prompt may reach", lo=0.0, hi=1.0, above=True,
        metavar="F",
    )  # fmt: skip
    keep_turns: int = opt(
        4, help="turns kept verbatim by a compaction", lo=1, hi=10_000, metavar="N"
    )
    summary_tokens: int = opt(
        512, help="completion tokens of a compaction's summary", lo=1, metavar="N"
    )
    tasks_run: tuple[str, ...] = opt((), help="the ids of the tasks the run holds", cli=False)

    def context(self) -> ContextConfig | None:
        """The context management these options ask for (None: never compact)."""
        if self.context_window is None:
            return None
        return ContextConfig(
            self.context_window,
            compaction=self.compaction,
            compact_at=self.compact_at,
            keep_turns=self.keep_turns,
            summary_tokens=self.summary_tokens,
        )
