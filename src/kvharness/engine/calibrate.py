"""Fit the cost model's efficiency factors to measured step or request times (least squares).

A sample is a measured duration and the engine steps it covered: one step (a batch), or one
request served alone (its prefill chunks and decode steps, see :meth:`Sample.request`). The model
of a step is ``overhead + max(F / compute, B / memory) + comm`` where ``F`` and ``B`` are the
step's FLOP and byte times at peak. With each step's binding term fixed, a sample's time is linear
in ``(overhead, 1 / compute, 1 / memory)``; the fit alternates a relative-error least-squares
solve (numpy) with re-deciding which term binds, until the assignment stops changing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kvharness.engine.cost import CostModel, Deployment, Efficiency, StepBatch
from kvharness.errors import FormatError, UserError

__all__ = ["Calibration", "Sample", "calibrate", "read_samples"]


@dataclass(frozen=True, slots=True)
class Sample:
    """A measured duration (s) of the engine steps in ``batches``."""

    batches: tuple[StepBatch, ...]
    seconds: float

    @staticmethod
    def step(batch: StepBatch, seconds: float) -> Sample:
        return Sample((batch,), seconds)

    @staticmethod
    def request(
        prompt_tokens: int,
        cached_tokens: int,
        output_tokens: int,
        seconds: float,
        budget: int = 8192,
    ) -> Sample:
        """A request alone: prefill of the uncached prompt in ``budget`` chunks, then decode."""
        out: list[StepBatch] = []
        c = min(cached_tokens, prompt_tokens - 1)
        while c < prompt_tokens:
            n = min(prompt_tokens - c, budget)
            out.append(StepBatch(n, n * (c + (n + 1) / 2), c + n, 0, 0))
            c += n
        for j in range(max(1, output_tokens) - 1):
            out.append(StepBatch(0, 0.0, 0, 1, prompt_tokens + 1 + j))
        return Sample(tuple(out), seconds)


@dataclass(frozen=True, slots=True)
class Calibration:
    efficiency: Efficiency
    rmse_rel: float
    """Root-mean-square relative error of the fitted model over the samples."""
    samples: int
    iterations: int


def calibrate(dep: Deployment, samples: list[Sample], max_iter: int = 50) -> Calibration:
    """Fitted efficiencies for ``dep`` (its link efficiency and all-reduce latency are kept)."""
    if len(samples) < 3:
        raise UserError(f"calibration needs at least 3 samples, got {len(samples)}")
    cm = CostModel(dep)
    terms = [[cm.terms(b) for b in s.batches] for s in samples]
    y = np.array([s.seconds for s in samples])
    if np.any(y <= 0):
        raise UserError("every sample needs a positive duration")
    eff = dep.efficiency
    x = np.array([eff.step_overhead, 1 / eff.compute, 1 / eff.memory])
    assign: list[list[bool]] | None = None
    iterations = 0
    for _ in range(max_iter):
        iterations += 1
        new = [[f * x[1] >= b * x[2] for f, b, _ in ts] for ts in terms]
        if new == assign:
            break
        assign = new
        rows, rhs = [], []
        for ts, bound, sec in zip(terms, assign, y, strict=True):
            fsum = sum(f for (f, _, _), c in zip(ts, bound, strict=True) if c)
            bsum = sum(b for (_, b, _), c in zip(ts, bound, strict=True) if not c)
            comm = sum(c for _, _, c in ts)
            rows.append([len(ts) / sec, fsum / sec, bsum / sec])
            rhs.append((sec - comm) / sec)
        sol, *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
        x = np.array([max(sol[0], 0.0), max(sol[1], 1.0), max(sol[2], 1.0)])
    fitted = replace(
        eff, step_overhead=float(x[0]), compute=float(1 / x[1]), memory=float(1 / x[2])
    )
    model = CostModel(dep.with_efficiency(fitted))
    pred = np.array([sum(model.step_time(b) for b in s.batches) for s in samples])
    rmse = float(np.sqrt(np.mean(((pred - y) / y) ** 2)))
    return Calibration(fitted, rmse, len(samples), iterations)


def read_samples(path: str | Path, budget: int = 8192) -> list[Sample]:
    """Samples from JSON Lines: ``{"prefill_tokens", "decode_seqs", "decode_ctx", "seconds"}``
    (optionally ``"context_tokens"``: cached context before the prefill) for a step, or
    ``{"prompt_tokens", "cached_tokens", "output_tokens", "seconds"}`` for a request alone."""
    out: list[Sample] = []
    where = str(path)
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as err:
        raise UserError(f"cannot read samples {where}: {err.strerror}") from None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            sec = float(d["seconds"])
            if "prompt_tokens" in d:
                out.append(
                    Sample.request(
                        int(d["prompt_tokens"]),
                        int(d.get("cached_tokens", 0)),
                        int(d["output_tokens"]),
                        sec,
                        budget,
                    )
                )
            else:
                n = int(d.get("prefill_tokens", 0))
                ctx = int(d.get("context_tokens", 0))
                batch = StepBatch(
                    n,
                    n * (ctx + (n + 1) / 2),
                    ctx + n if n else 0,
                    int(d.get("decode_seqs", 0)),
                    int(d.get("decode_ctx", 0)),
                )
                out.append(Sample.step(batch, sec))
        except (KeyError, ValueError, TypeError, AttributeError) as err:
            raise FormatError(where, lineno, f"bad sample: {err}") from None
    return out
