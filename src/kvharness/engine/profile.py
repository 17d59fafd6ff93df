"""A measured engine: the step-time model and limits of one deployment, fitted to real runs.

The roofline of :mod:`kvharness.engine.cost` describes GPUs from their specifications. A
deployment that was *measured* (a vLLM replica a bench run drove, whatever its hardware) is
described instead by an :class:`EngineProfile`, which ``kvharness sim calibrate`` fits to the
run's per-turn records (:mod:`kvharness.sim.fit`):

- one engine step over a batch takes, in seconds::

      step_overhead_s
      + prefill_token_s * prompt tokens computed in the step
      + decode_seq_s * sequences decoded in the step
      + pair_s * query-key pairs of the step's attention (prefill and decode)

  (scheduling, sampling and the forward pass's fixed part; the per-token matmuls of a chunk; a
  decoded token's own cost, logits and sampling and the server's streaming of it included; the
  attention, which grows with the context);
- ``request_latency_s`` passes between a client sending a request and the engine admitting it
  (HTTP, the server's parsing and tokenisation): the simulator delays each request by it;
- the scheduler's limits (``max_num_batched_tokens``, ``max_num_seqs``, chunked prefill as vLLM
  v1 does it) and the KV cache (``num_blocks`` of ``block_size`` tokens) are the deployment's
  own, as the engine reported them.

A profile is saved as JSON (:meth:`EngineProfile.save`) and named in a cluster spec as
``NxPROFILE:PATH`` (``2xprofile:runs/cal/engine.json``). Its :class:`ProfileCostModel` answers
what the engine model asks of a cost model, in closed form where the roofline does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kvharness.engine.cost import (
    CostModel,
    Deployment,
    Hardware,
    ModelSpec,
    StepBatch,
    StepCost,
    steps_until,
)
from kvharness.errors import FormatError

__all__ = ["COEFFICIENTS", "PROFILE_FORMAT", "EngineProfile", "ProfileCostModel", "cost_model"]

PROFILE_FORMAT = "kvharness-engine-profile"
_VERSION = 1

MEASURED = Hardware("measured", 1.0, 1.0, 1.0, 1.0, 1.0)
"""The placeholder hardware of a profile's deployment."""

COEFFICIENTS = (
    "step_overhead_s",
    "prefill_token_s",
    "decode_seq_s",
    "pair_s",
    "request_latency_s",
)
"""The fitted terms, in the order the fit keeps them."""


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """One measured replica (see the module docstring). Times in seconds, sizes in tokens and
    blocks. ``fit`` says what the profile was fitted from and how well (free-form JSON)."""

    name: str
    block_size: int
    num_blocks: int
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    step_overhead_s: float = 0.005
    prefill_token_s: float = 1e-5
    decode_seq_s: float = 1e-3
    pair_s: float = 0.0
    request_latency_s: float = 0.0
    fit: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.num_blocks < 1:
            raise ValueError("block_size and num_blocks must be >= 1")
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError("max_num_batched_tokens and max_num_seqs must be >= 1")
        for name in COEFFICIENTS:
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    @property
    def coefficients(self) -> tuple[float, ...]:
        return tuple(getattr(self, n) for n in COEFFICIENTS)

    def with_coefficients(self, values: Sequence[float], **more: Any) -> EngineProfile:
        """The same profile with the fitted terms ``values`` (in :data:`COEFFICIENTS` order)."""
        changes: dict[str, Any] = dict(zip(COEFFICIENTS, values, strict=True))
        return replace(self, **changes, **more)

    def deployment(self) -> Deployment:
        """A :class:`~kvharness.engine.cost.Deployment` whose costs and KV capacity are this
        profile's. Its hardware and model are placeholders (``measured``, and a model named
        after the profile): nothing reads them for a cost once a profile is set."""
        model = ModelSpec(self.name, 1.0, 1.0, 1, 1, 1, 1, 1)
        return Deployment(MEASURED, model, block_size=self.block_size, profile=self)

    def to_json(self) -> dict[str, Any]:
        return {"format": PROFILE_FORMAT, "version": _VERSION, **asdict(self)}

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @staticmethod
    def load(path: Path) -> EngineProfile:
        """The profile in ``path``; :class:`FormatError` naming the file when it is not one."""
        where = str(path)
        try:
            doc = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise FormatError(where, 1, "no such engine profile") from None
        except json.JSONDecodeError as err:
            raise FormatError(where, err.lineno, f"bad JSON: {err.msg}") from None
        if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
            raise FormatError(where, 1, f"not a {PROFILE_FORMAT} file")
        if doc.get("version") != _VERSION:
            raise FormatError(where, 1, f"unsupported version {doc.get('version')!r}")
        known = {f.name for f in fields(EngineProfile)}
        unknown = sorted(set(doc) - known - {"format", "version"})
        if unknown:
            raise FormatError(where, 1, f"unknown fields {', '.join(unknown)}")
        try:
            return EngineProfile(**{k: v for k, v in doc.items() if k in known})
        except (TypeError, ValueError) as err:
            raise FormatError(where, 1, f"bad engine profile: {err}") from None


class ProfileCostModel:
    """Step times of an :class:`EngineProfile`: the interface of
    :class:`~kvharness.engine.cost.CostModel` that the engine model uses. Pure and cheap."""

    __slots__ = ("_c", "_d", "_p", "_profile", "_t")

    def __init__(self, profile: EngineProfile) -> None:
        self._profile = profile
        self._c = profile.step_overhead_s
        self._t = profile.prefill_token_s
        self._d = profile.decode_seq_s
        self._p = profile.pair_s

    @property
    def profile(self) -> EngineProfile:
        return self._profile

    def step_time(self, b: StepBatch) -> float:
        """Seconds for one engine step over batch ``b`` (0 for an empty batch)."""
        if b.prefill_tokens + b.decode_seqs == 0:
            return 0.0
        if b.encoder_images:
            raise ValueError(f"{self._profile.name}: a measured profile has no vision encoder")
        pairs = b.prefill_pairs + b.decode_ctx
        return self._c + self._t * b.prefill_tokens + self._d * b.decode_seqs + self._p * pairs

    def decode_step_time(self, seqs: int, ctx: int, kv_read: int | None = None) -> float:
        return self.step_time(StepBatch(decode_seqs=seqs, decode_ctx=ctx, decode_kv_read=kv_read))

    def decode_run_time(self, seqs: int, ctx0: int, k: int, kv0: int | None = None) -> float:
        """Seconds for ``k`` consecutive decode steps of ``seqs`` sequences attending to
        ``ctx0`` tokens at the first (``seqs`` more each step); closed form, O(1)."""
        if k <= 0 or seqs == 0:
            return 0.0
        per = self._c + self._d * seqs + self._p * ctx0
        return k * per + self._p * seqs * k * (k - 1) / 2.0

    def decode_steps_until(
        self, seqs: int, ctx0: int, budget: float, k_max: int, kv0: int | None = None
    ) -> int:
        """Smallest ``m`` in ``[1, k_max]`` with ``decode_run_time(m) >= budget`` (k_max if none)."""
        return steps_until(lambda m: self.decode_run_time(seqs, ctx0, m, kv0), budget, k_max)

    def kv_read_seconds(self, tokens: float) -> float:
        """The attention's cost of reading ``tokens`` tokens of KV once (one pair each)."""
        return self._p * tokens

    def encoder_time(self, images: Sequence[int]) -> float:
        if images:
            raise ValueError(f"{self._profile.name}: a measured profile has no vision encoder")
        return 0.0

    def encoder_flops(self, tokens: int) -> float:
        raise ValueError(f"{self._profile.name}: a measured profile has no vision encoder")


def cost_model(dep: Deployment) -> StepCost:
    """The cost model of ``dep``: its profile's when it has one, else the roofline."""
    return ProfileCostModel(dep.profile) if dep.profile is not None else CostModel(dep)
