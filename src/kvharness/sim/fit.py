"""Fit a measured engine's profile to bench runs: ``kvharness sim calibrate RUN_DIR...``.

The engine model of :mod:`kvharness.engine.profile` has five terms (step overhead, cost per
prefill token, per decoded sequence, per attention pair, and the request latency before the
engine admits a request). A run's records say when each turn was sent, when its first token and
its last came back, how many of its prompt tokens the engine had cached and how many it
generated, under the run's own concurrency, batching and queueing. So the fit asks the
simulator: for terms ``theta``, the twin of every calibration run (:func:`~.twin.twin_simulation`)
predicts each turn's time to first token and end-to-end time, and the loss is the mean squared
log ratio of predicted to measured over both and every turn. Nelder-Mead (SciPy) minimises it
over ``log(theta)``, from a start read off the records (:func:`initial_guess`): the shortest
times say what an idle engine takes, the spread of TTFT over uncached tokens what a prefill
token costs. No hand-made sample file, no per-step log needed.

The KV capacity (``num_blocks`` of ``block_size``) comes from what the bench read of the engines
(vLLM's ``cache_config_info``), the scheduler's limits from the options (vLLM's CPU server
defaults: 2048 batched tokens, 128 sequences).

Cost: one evaluation simulates every calibration run once (milliseconds for a few hundred turns);
a fit takes a few hundred.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kvharness.engine.profile import COEFFICIENTS, EngineProfile
from kvharness.errors import UserError
from kvharness.sim.twin import BenchRun, lumped, twin_simulation

__all__ = ["Fit", "fit_profile", "initial_guess", "loss"]

FLOOR = 1e-9
"""The smallest value a term may take (seconds): the fit works in logarithms."""


def _usable(run: BenchRun) -> list[tuple[str, int, float | None, float]]:
    """(session, turn, TTFT, end-to-end) of each turn measured ok; TTFT None where its first
    token's time was not observed (:func:`~.twin.lumped`)."""
    return [
        (r.session, r.turn, None if lumped(r) else r.ttft, r.e2e)
        for r in run.records
        if r.ok and r.ttft is not None and r.e2e is not None and r.e2e > 0
    ]


def loss(runs: Sequence[BenchRun], profile: EngineProfile) -> float:
    """Mean over turns of (log predicted/measured TTFT)^2 + (log predicted/measured e2e)^2 (the
    TTFT term only where it was observed); a turn the twin did not finish counts as a large
    error."""
    total, n = 0.0, 0
    for run in runs:
        predicted = {(r.session, r.turn): r for r in twin_simulation(run, profile).records}
        for sid, ti, ttft, e2e in _usable(run):
            p = predicted.get((sid, ti))
            n += 1
            if p is None or not p.ok or p.ttft is None or p.e2e is None:
                total += 25.0
                continue
            if ttft is not None:
                total += math.log(max(p.ttft, 1e-6) / max(ttft, 1e-6)) ** 2
            total += math.log(max(p.e2e, 1e-6) / max(e2e, 1e-6)) ** 2
    if n == 0:
        raise UserError("no turn measured ok in the calibration runs")
    return total / n


def initial_guess(runs: Sequence[BenchRun], base: EngineProfile) -> EngineProfile:
    """A starting point read off the records: an idle engine's first token (the quickest TTFTs)
    is split between the request latency and one step; the quickest inter-token time between
    the step overhead and a decoded sequence; the median extra TTFT per uncached prompt token
    prices a prefill token; attention pairs start near nothing."""
    ttfts, itls, per_token = [], [], []
    for run in runs:
        for r in run.records:
            if not r.ok or r.ttft is None or lumped(r):
                continue
            ttfts.append(r.ttft)
            if r.itl is not None:
                itls.append(r.itl)
    if not ttfts:
        raise UserError("no turn measured ok in the calibration runs")
    t_min = float(np.percentile(ttfts, 5))
    itl = float(np.percentile(itls, 5)) if itls else t_min / 2
    for run in runs:
        for r in run.records:
            if r.ok and r.ttft is not None and not lumped(r):
                fresh = r.prompt_tokens - (r.cached_tokens or 0)
                if fresh > 64:
                    per_token.append(max(0.0, r.ttft - t_min) / fresh)
    token = float(np.median(per_token)) if per_token else 1e-5
    return base.with_coefficients(
        [
            max(FLOOR, itl / 2),
            max(FLOOR, token),
            max(FLOOR, itl / 2),
            1e-9,
            max(FLOOR, t_min / 2),
        ]
    )


@dataclass(frozen=True, slots=True)
class Fit:
    """A fitted profile, its loss at the start and the end, evaluations and seconds taken."""

    profile: EngineProfile
    loss_start: float
    loss: float
    evaluations: int
    seconds: float


def fit_profile(
    runs: Sequence[BenchRun],
    base: EngineProfile,
    *,
    max_evaluations: int = 400,
    on_step: Callable[[int, float], None] | None = None,
) -> Fit:
    """Fit ``base``'s terms to ``runs`` (see the module docstring); ``on_step(evaluations,
    best loss)`` after each evaluation, for a progress bar."""
    from scipy.optimize import minimize

    if not runs:
        raise UserError("give at least one bench run to calibrate from")
    start = initial_guess(runs, base)
    best = [math.inf]
    evals = [0]

    def objective(x: np.ndarray) -> float:
        value = loss(runs, start.with_coefficients([max(FLOOR, float(v)) for v in np.exp(x)]))
        evals[0] += 1
        best[0] = min(best[0], value)
        if on_step is not None:
            on_step(evals[0], best[0])
        return value

    t0 = time.perf_counter()
    x0 = np.log(np.array(start.coefficients))
    first = loss(runs, start)
    res = minimize(
        objective,
        x0,
        method="Nelder-Mead",
        options={"maxfev": max_evaluations, "xatol": 1e-3, "fatol": 1e-5, "adaptive": True},
    )
    values = [max(FLOOR, float(v)) for v in np.exp(res.x)]
    fitted = start.with_coefficients(
        values,
        fit={
            "runs": [str(r.path) for r in runs],
            "turns": sum(len(_usable(r)) for r in runs),
            "loss_start": first,
            "loss": float(res.fun),
            "rms_log_error": math.sqrt(float(res.fun) / 2),
            "evaluations": int(res.nfev),
            "terms": dict(zip(COEFFICIENTS, values, strict=True)),
        },
    )
    return Fit(fitted, first, float(res.fun), int(res.nfev), time.perf_counter() - t0)
