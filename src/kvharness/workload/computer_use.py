"""A seeded computer-use session generator: a screenshot after every action.

A computer-use agent's call is the whole conversation so far plus the newest screenshot; its
answer is a short grounding action (``click(412, 233)`` with a brief thought). Structure:

- one system prompt shared by every session (the harness's action space and rules);
- per session a task instruction, then steps: each call's prompt ends with the latest
  observation (a screenshot and a line of text such as the action's result); the model's answer
  is appended before the next observation; the gap before a call is the action's execution plus
  the screenshot's capture;
- ``keep_last`` K > 0: only the last K screenshots stay in the prompt, older ones are replaced by
  a short placeholder text, as harnesses that bound their context do. The prompt is rebuilt from
  its content every turn, so its middle changes each turn and prefix reuse stops at the first
  replaced screenshot; ``keep_last=0`` keeps every screenshot and each prompt extends the last.

Where the defaults come from (what each source says, and what was taken from it):

- H Company's H CUA Perf corpus as NVIDIA AIPerf's tutorial "Replay H CUA Perf Computer-Use Agent
  Traces" describes it: 477 trajectories, 18,224 requests, one request per agent step, 38.2 steps a
  trajectory on average and up to 201; each request carries the text history, 10 tool definitions
  and the latest screenshot, earlier screenshots being the placeholder text ``[Image omitted by
  context cleaning]`` (AIPerf's ``n_screenshots`` filter restores a wider window); the recorded
  delay before a request includes tool execution and can be tens of seconds; AIPerf serves it with
  Qwen2.5-VL-7B at a context of about 128k tokens. Taken: ``steps_mean``, ``steps_max``,
  ``max_context`` and the placeholder scheme (``keep_last=1`` is the published build,
  ``keep_last=3`` its three-screenshot variant; the default 0 keeps every screenshot);
- OSWorld: its agents observe a screenshot after each action; its run scripts default to a
  1920x1080 screen (``--screen_width`` / ``--screen_height``), sleep ``--sleep_after_execution``
  seconds after each action (0 to 2 in the scripts found) and stop at ``--max_steps`` (15 by
  default; OSWorld-Verified compares agents at budgets of 15, 50 and 100 steps). Taken: ``width``
  x ``height`` and the shape of a step;
- ScreenSpot and ScreenSpot-Pro, for other resolutions: ScreenSpot's screenshots come from
  phones (iOS, Android), desktops (macOS, Windows) and web pages; ScreenSpot-Pro's are above
  1080p, many 2560x1440 or 3840x2160. Qwen2-VL's pixel cap makes every screenshot of a
  megapixel or more about 1,200-1,280 tokens (1,222 at 1920x1080, 2560x1440 and 3840x2160;
  1,272 for a 1080x2400 phone), so ``width`` x ``height`` matters mostly below that (999 tokens
  at 1024x768, 322 at 640x400);
- Qwen2-VL / Qwen2.5-VL's processor (14-pixel patches merged 2 x 2, at most 1280 tokens' worth of
  pixels): ``patch``, ``merge`` and the placeholder count (:func:`~kvharness.workload.images.
  grid_tokens`; 1,222 tokens at 1920x1080), unless ``image_tokens`` fixes it (a served model with
  another processor).

The other defaults are estimates, stated as such: the spread of steps (sigma 0.8: H CUA Perf
gives a mean and a maximum, and is balanced across five step-count buckets), output 40 tokens (a
thought and one action), observation text 30 tokens, the placeholder 8 tokens (about what that
placeholder text tokenises to), the gap 1.5 s median (an action run and a screenshot taken), the
system prompt 1,500 tokens (the action space and tool definitions), the task 80, the repeated
screen 5% of steps.

Everything is drawn from one ``random.Random(seed)``: the same config gives the same workload.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

from kvharness.workload.chain import BlockChain, ChainBuilder
from kvharness.workload.images import Image, grid_tokens
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.synthetic import bounded, check_bounds

__all__ = ["ComputerUseConfig", "generate_computer_use"]

_TOKENS = 10_000_000
_PIXELS = 1 << 16


@dataclass(frozen=True)
class ComputerUseConfig:
    """Options of the generator; each has a help string (shown by ``kvharness workload --help``)."""

    sessions: int = bounded(16, "number of computer-use sessions", 1, 100_000)
    steps_mean: float = bounded(
        38.2, "mean model calls per session (lognormal; H CUA Perf: 38.2)", 1, 10_000
    )
    steps_sigma: float = bounded(0.8, "lognormal sigma of calls per session (an estimate)", 0.01, 4)
    steps_max: int = bounded(201, "cap on calls per session (H CUA Perf: 201)", 1, 10_000)
    keep_last: int = bounded(
        0,
        "screenshots kept in the prompt, older ones replaced by text (0: keep all; H CUA Perf's "
        "published build keeps 1)",
        0,
        10_000,
    )
    width: int = bounded(1920, "screenshot width in pixels (OSWorld's default: 1920)", 1, _PIXELS)
    height: int = bounded(1080, "screenshot height in pixels (OSWorld's default: 1080)", 1, _PIXELS)
    patch: int = bounded(14, "vision encoder patch size in pixels (Qwen2-VL: 14)", 1, 1024)
    merge: int = bounded(2, "patches merged per side into one token (Qwen2-VL: 2)", 1, 64)
    image_tokens: int = bounded(
        0, "placeholder tokens per screenshot (0: from the size, patch and merge)", 0, _TOKENS
    )
    repeat_prob: float = bounded(
        0.05,
        "chance that an action left the screen unchanged: the same screenshot (an estimate)",
        0,
        1,
    )
    system_tokens: int = bounded(
        1500,
        "system prompt and tool definitions, tokens, shared by all sessions (an estimate)",
        1,
        _TOKENS,
    )
    task_tokens: int = bounded(
        80, "task instruction tokens, one per session (an estimate)", 1, _TOKENS
    )
    observation_tokens: int = bounded(
        30, "text tokens beside each screenshot, e.g. the action's result (an estimate)", 0, _TOKENS
    )
    omitted_tokens: int = bounded(
        8, "tokens of the text replacing a dropped screenshot (an estimate)", 0, 1000
    )
    output_median: float = bounded(
        40.0, "median output tokens per call: a thought and one action (an estimate)", 1, _TOKENS
    )
    output_sigma: float = bounded(0.5, "lognormal sigma of output tokens (an estimate)", 0.01, 4)
    gap_median: float = bounded(
        1.5, "median seconds to act and take the screenshot (an estimate)", 0, 3600
    )
    gap_sigma: float = bounded(0.6, "lognormal sigma of the gap (an estimate)", 0.01, 4)
    max_context: int = bounded(
        128_000,
        "a session ends when its prompt would exceed this many tokens (H CUA Perf's server: ~128k)",
        1,
        _TOKENS,
    )
    rate: float = bounded(
        0.2, "session arrivals per second (Poisson; the synthetic generator's default)", 1e-6, 1e6
    )
    block_size: int = bounded(
        128, "block size of the generated chains in tokens (the synthetic generator's)", 1, 1 << 20
    )
    seed: int = bounded(0, "random seed", 0, 2**63 - 1)

    def __post_init__(self) -> None:
        check_bounds(self, "computer-use")

    @property
    def tokens_per_image(self) -> int:
        """Placeholder tokens of one screenshot."""
        if self.image_tokens:
            return self.image_tokens
        return grid_tokens(self.width, self.height, patch=self.patch, merge=self.merge)


_SYSTEM, _OMITTED = 0, 1
"""Segment seeds every session shares: the system prompt and the placeholder text."""


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(median), sigma)


def _prompt(
    cfg: ComputerUseConfig, parts: list[tuple[str, int, int]]
) -> tuple[BlockChain, tuple[Image, ...]]:
    """The chain and images of a prompt made of ``parts`` (kind ``"text"`` / ``"image"``, segment
    seed or content hash, tokens), all but the last ``keep_last`` images replaced by the
    placeholder text (one shared segment, so equal placeholders give equal blocks)."""
    n_images = sum(1 for kind, _, _ in parts if kind == "image")
    dropped = n_images - cfg.keep_last if cfg.keep_last else 0
    b = ChainBuilder(cfg.block_size)
    images = []
    for kind, name, n in parts:
        if kind == "text":
            b.extend_segment(name, n)
        elif dropped > 0:
            dropped -= 1
            b.extend_segment(_OMITTED, cfg.omitted_tokens)
        else:
            images.append(Image(b.num_tokens, n, cfg.width, cfg.height, name))
            b.extend_image(name, n)
    return b.chain(), tuple(images)


def generate_computer_use(config: ComputerUseConfig | None = None) -> Workload:
    """Generate a workload (deterministic in ``config``). Cost: O(prompt tokens / block) per turn
    (each prompt is rebuilt from its parts, as keep-last-K rewrites its middle)."""
    cfg = config or ComputerUseConfig()
    rng = random.Random(cfg.seed)
    n_img = cfg.tokens_per_image
    # A lognormal of the given mean: median = mean / exp(sigma^2 / 2).
    steps_median = cfg.steps_mean / math.exp(cfg.steps_sigma**2 / 2)
    seeds = iter(range(1 << 20, 1 << 62))
    sessions = []
    t_start = 0.0
    for s in range(cfg.sessions):
        parts: list[tuple[str, int, int]] = [
            ("text", _SYSTEM, cfg.system_tokens),
            ("text", next(seeds), cfg.task_tokens),
        ]
        steps = min(cfg.steps_max, max(1, round(_lognormal(rng, steps_median, cfg.steps_sigma))))
        turns: list[Turn] = []
        shot = rng.getrandbits(64)
        gap = 0.0
        for step in range(steps):
            if step and rng.random() >= cfg.repeat_prob:
                shot = rng.getrandbits(64)
            parts.append(("image", shot, n_img))
            if cfg.observation_tokens:
                parts.append(("text", next(seeds), cfg.observation_tokens))
            chain, images = _prompt(cfg, parts)
            out = max(1, round(_lognormal(rng, cfg.output_median, cfg.output_sigma)))
            if chain.num_tokens + out > cfg.max_context and turns:
                break
            tool = "screenshot" if step else None
            turns.append(Turn(chain, out, gap, tool, images=images))
            parts.append(("text", next(seeds), out))
            gap = min(3600.0, _lognormal(rng, max(cfg.gap_median, 1e-6), cfg.gap_sigma))
        sessions.append(Session(f"cu-{s}", tuple(turns), round(t_start, 6), "computer-use"))
        t_start += rng.expovariate(cfg.rate)
    meta = {"source": "computer-use", "config": asdict(cfg)}
    return Workload(tuple(sessions), cfg.block_size, "computer-use", Arrival("trace"), meta)
