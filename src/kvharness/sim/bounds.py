"""Lower bounds: a turn served alone on an idle replica with the ideal cache (no queueing)."""

from __future__ import annotations

from kvharness.engine.cost import StepBatch, StepCost

__all__ = ["solo_turn_time"]


def solo_turn_time(
    cost: StepCost, prompt_tokens: int, cached_tokens: int, output_tokens: int, budget: int
) -> float:
    """Seconds from send to done for one request alone: prefill of the uncached part in chunks of
    ``budget`` tokens, then ``output_tokens - 1`` decode steps at batch size 1."""
    c = min(cached_tokens, prompt_tokens - 1) if prompt_tokens > 0 else 0
    t = 0.0
    while c < prompt_tokens:
        n = min(prompt_tokens - c, budget)
        t += cost.step_time(StepBatch(n, n * (c + (n + 1) / 2), c + n, 0, 0))
        c += n
    return t + cost.decode_run_time(1, prompt_tokens + 1, max(1, output_tokens) - 1)
