"""The digital twin: a bench run replayed in the simulator, and held to what was measured.

:func:`load_run` reads a bench run directory (its configuration, the records of every turn and
what the bench read of the engines) and :func:`twin_simulation` simulates exactly that run: the
same sessions with the same gaps (scaled by the run's ``time_scale``; a session's first turn goes
at its start, as the bench sends it), the same arrival process (trace or Poisson start times, or
``concurrency`` sessions in flight, started in the workload's order as each ends), the same
replicas, each session on the replica the bench gave it (round robin over ``--backend`` in start
order, as :class:`SessionRoundRobin` does) or, when the run went through a router, the router's
policy by name, and engines that are a measured :class:`~kvharness.engine.profile.EngineProfile`
(``kvharness sim calibrate`` fits one from runs: :mod:`kvharness.sim.fit`). The engines start
with empty caches, as a run does after ``kvharness bench --reset-cache``. Replicas that shared a
host's cores (``host_cores``: vLLM-CPU replicas on one machine, bound to its cores in turn) split
a core's time where two are bound to it (:attr:`~kvharness.sim.simulator.SimConfig.host_cores`).

:func:`compare` puts each predicted turn beside its measured one (TTFT, end-to-end, cached
tokens; the predicted queue wait) and sums up the errors (:class:`TwinSummary`): per-turn MAPE
and bias, TTFT percentiles, the run's makespan and throughput, each session's makespan, the
cached-token ratio; and for the worst turns, which part was off (:func:`blame`). The per-turn
rows, the summary and an HTML page with predicted-against-measured plots are written by
:func:`write_twin`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvharness.bench.config import BenchConfig
from kvharness.bench.run import CONFIG, METRICS, RECORDS, load_bench_workload, load_config
from kvharness.bench.runner import resolve_arrival
from kvharness.engine.profile import EngineProfile
from kvharness.errors import UserError
from kvharness.files import replacing
from kvharness.report.records import TurnRecord, read_records
from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest
from kvharness.routing.registry import policy_from_spec
from kvharness.sim.cluster import ClusterSpec
from kvharness.sim.simulator import SimConfig, SimResult, Simulator
from kvharness.workload.model import Workload

__all__ = [
    "BenchRun",
    "SessionRoundRobin",
    "TurnPair",
    "TwinSummary",
    "blame",
    "compare",
    "load_run",
    "lumped",
    "simulate_bench",
    "twin_simulation",
    "write_twin",
]


@dataclass(frozen=True, slots=True)
class BenchRun:
    """A bench run as the twin reads it. ``records``: the measured outcome of each turn (its
    last attempt); ``engines``: each scraped engine's KV cache (``block_size``,
    ``num_gpu_blocks``) where its ``/metrics`` said; ``router``: the routing policy of the router
    the run went through (None: straight to its backends); ``host_cores``: the cores of the one
    host the replicas shared, bound to them in turn (0: hardware of their own)."""

    path: Path
    config: BenchConfig
    workload: Workload
    records: tuple[TurnRecord, ...]
    engines: tuple[dict[str, int], ...]
    router: str | None = None
    replicas: int | None = None
    host_cores: int = 0

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def num_replicas(self) -> int:
        """The replicas that served the run: the router's, or the run's backends."""
        return self.replicas if self.replicas is not None else len(self.config.backends)


def load_run(
    path: Path, *, router: str | None = None, replicas: int | None = None, host_cores: int = 0
) -> BenchRun:
    """The bench run in ``path``; ``router`` / ``replicas``: the policy and the replicas behind
    a router the run went through (its single backend), and ``host_cores`` the cores of the host
    they shared, as ``config.json`` cannot say."""
    if router is not None:
        if replicas is None:
            raise UserError("give the replicas behind the router with the router's policy")
        _policy(router)  # a bad spec is refused before the run is read
    path = Path(path)
    if not (path / CONFIG).is_file() or not (path / RECORDS).is_file():
        raise UserError(f"{path}: not a bench run directory (no {CONFIG} and {RECORDS})")
    cfg = load_config(path)
    if cfg.mode != "session":
        raise UserError(f"{path}: a {cfg.mode}-mode run; the twin replays session runs")
    workload = load_bench_workload(cfg)
    last: dict[tuple[str, int], TurnRecord] = {}
    for r in read_records(path / RECORDS):
        last[r.session, r.turn] = r
    engines: list[dict[str, int]] = []
    if (path / METRICS).is_file():
        passes = json.loads((path / METRICS).read_text())
        for p in passes if isinstance(passes, list) else ():
            for info in (p.get("engines") or {}).values():
                if isinstance(info, dict):
                    engines.append({k: int(v) for k, v in info.items()})
    return BenchRun(
        path, cfg, workload, tuple(sorted(last.values(), key=lambda r: r.sent)), tuple(engines),
        router, replicas, host_cores,
    )  # fmt: skip


def _policy(router: str) -> Policy:
    try:
        return policy_from_spec(router)
    except ValueError as err:
        raise UserError(f"the router's policy: {err}") from None


class SessionRoundRobin(Policy):
    """A bench's own routing: each new session to the next replica in turn, its later turns
    where its first went (``kvharness bench`` with several ``--backend``)."""

    name = "session_round_robin"

    def __init__(self) -> None:
        self._home: dict[str | None, int] = {}
        self._next = 0

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        home = self._home.get(request.session_id)
        if home is None:
            home = self._home[request.session_id] = self._next % len(replicas)
            self._next += 1
        return Decision(home, "session")


def _as_run(workload: Workload, cfg: BenchConfig) -> Workload:
    """The workload as the bench sends it: gaps times ``time_scale``, none before a session's
    first turn, and the arrival process the run resolved."""
    scale = cfg.time_scale
    sessions = tuple(
        dataclasses.replace(
            s,
            turns=tuple(
                dataclasses.replace(t, gap=t.gap * scale if i else 0.0)
                for i, t in enumerate(s.turns)
            ),
        )
        for s in workload.sessions
    )
    return dataclasses.replace(workload, sessions=sessions, arrival=resolve_arrival(cfg, workload))


def twin_simulation(run: BenchRun, profile: EngineProfile) -> SimResult:
    """Simulate ``run`` on engines of ``profile`` (see the module docstring), each with the KV
    capacity the run's own engines reported (the profile's where they reported none)."""
    if run.engines:
        blocks = min(e["num_gpu_blocks"] for e in run.engines)
        profile = dataclasses.replace(profile, num_blocks=blocks)
    cluster = ClusterSpec(run.num_replicas, profile.deployment())
    return simulate_bench(
        run.config, cluster, run.router, workload=run.workload, host_cores=run.host_cores
    )


def simulate_bench(
    cfg: BenchConfig,
    cluster: ClusterSpec,
    router: str | None = None,
    *,
    workload: Workload | None = None,
    host_cores: int = 0,
) -> SimResult:
    """What the bench run ``cfg`` would do on ``cluster``: its workload (loaded as the bench
    loads it unless given), gaps and arrivals as the bench sends them, sessions spread over the
    replicas as the bench spreads them over its backends, or routed by the policy ``router``;
    the replicas on one host of ``host_cores`` cores where that is not 0."""
    if workload is None:
        workload = load_bench_workload(cfg)
    policy = SessionRoundRobin() if router is None else _policy(router)
    config = SimConfig(cluster, policy=policy.name, prefix_source="direct", host_cores=host_cores)
    return Simulator(_as_run(workload, cfg), config, policy=policy).run()


@dataclass(frozen=True, slots=True)
class TurnPair:
    """One turn measured and predicted. Times in seconds from the run's start."""

    session: str
    turn: int
    measured: TurnRecord
    predicted: TurnRecord

    @property
    def error(self) -> float:
        """log(predicted / measured) end-to-end time (0: exact)."""
        return math.log(_e2e(self.predicted) / _e2e(self.measured))


def lumped(r: TurnRecord) -> bool:
    """True when a turn's tokens after its first reached the client within a millisecond of it
    although there were several: the stream arrived in one piece (a client or server too busy
    to read or write it as it came), so its first token's time was not observed, only its end's.
    Its TTFT is left out of every TTFT figure and fit."""
    return (
        r.first_token is not None
        and r.done is not None
        and r.output_tokens >= 3
        and r.done - r.first_token < 1e-3
    )


def _e2e(r: TurnRecord) -> float:
    return max(1e-6, r.e2e or 0.0)


def _ttft(r: TurnRecord) -> float:
    return max(1e-6, r.ttft or 0.0)


def blame(pair: TurnPair, block_size: int) -> str:
    """Which part of a turn's prediction was most off: ``cache miss`` / ``cache hit`` (the
    engine cached a block more or less than predicted), ``queueing`` or ``prefill`` (the time to
    first token: the predicted wait for a batch slot dominates it, or not), ``decode`` (the rest)."""
    m, p = pair.measured, pair.predicted
    if m.cached_tokens is not None and p.cached_tokens is not None:
        if p.cached_tokens > m.cached_tokens + block_size // 2:
            return "cache miss"  # predicted a hit the engine did not have
        if m.cached_tokens > p.cached_tokens + block_size // 2:
            return "cache hit"  # the engine hit where the twin did not
    d_ttft = _ttft(p) - _ttft(m)
    d_decode = (_e2e(p) - _ttft(p)) - (_e2e(m) - _ttft(m))
    if abs(d_ttft) >= abs(d_decode):
        queue = (p.scheduled - p.sent) if p.scheduled is not None else 0.0
        return "queueing" if queue > 0.5 * _ttft(p) else "prefill"
    return "decode"


@dataclass(frozen=True, slots=True)
class TwinSummary:
    """The errors of a twin against its run. ``*_mape``: mean |predicted - measured| /
    measured over turns (TTFT's over the ``ttft_turns`` whose first token was observed, see
    :func:`lumped`); ``*_bias``: mean (predicted - measured) / measured; ``ttft_p50`` /
    ``ttft_p90``: relative error of the percentile; ``makespan``: of the whole run (first send
    to last done); ``session_makespan``: mean relative error of each session's (its first send
    to its last done); ``throughput``: of turns per second over the run; ``cached_points``:
    predicted minus measured cached-token ratio, percentage points."""

    turns: int
    ttft_turns: int
    e2e_mape: float
    e2e_bias: float
    ttft_mape: float
    ttft_bias: float
    ttft_p50: float
    ttft_p90: float
    makespan: float
    session_makespan: float
    throughput: float
    cached_points: float
    measured_makespan_s: float
    predicted_makespan_s: float
    measured_cached: float
    predicted_cached: float
    blame: dict[str, int]

    def line(self) -> str:
        return (
            f"{self.turns} turns: e2e MAPE {self.e2e_mape:.1%} (bias {self.e2e_bias:+.1%}), "
            f"TTFT p50 {self.ttft_p50:+.1%} p90 {self.ttft_p90:+.1%}, makespan "
            f"{self.makespan:+.1%} (sessions {self.session_makespan:+.1%}), throughput "
            f"{self.throughput:+.1%}, cached {self.cached_points:+.2f} points"
        )


def _rel(p: float, m: float) -> float:
    return (p - m) / m if m else 0.0


def _span(records: Sequence[TurnRecord]) -> float:
    return max((r.done or r.sent) for r in records) - min(r.sent for r in records)


def compare(
    run: BenchRun, predictions: Sequence[TurnRecord], *, worst: int = 10
) -> tuple[list[TurnPair], TwinSummary]:
    """Pair every turn of ``run`` measured ok with its prediction (the twin's records; a turn
    the twin did not finish is left out) and sum up the errors; the worst ``worst`` turns'
    parts are counted in ``blame``."""
    predicted = {(r.session, r.turn): r for r in predictions if r.ok}
    pairs = [
        TurnPair(m.session, m.turn, m, predicted[m.session, m.turn])
        for m in run.records
        if m.ok and (m.session, m.turn) in predicted
    ]
    if not pairs:
        raise UserError(f"{run.path}: no turn both measured and predicted")
    e2e = np.array([[_e2e(p.predicted), _e2e(p.measured)] for p in pairs])
    seen = [p for p in pairs if not lumped(p.measured)] or pairs
    ttft = np.array([[_ttft(p.predicted), _ttft(p.measured)] for p in seen])
    mine = [p.measured for p in pairs]
    theirs = [p.predicted for p in pairs]
    by_session: dict[str, tuple[list[TurnRecord], list[TurnRecord]]] = {}
    for p in pairs:
        a, b = by_session.setdefault(p.session, ([], []))
        a.append(p.measured)
        b.append(p.predicted)
    sessions = [_rel(_span(b), _span(a)) for a, b in by_session.values()]
    prompt = sum(r.prompt_tokens for r in mine)
    cached_m = sum(r.cached_tokens or 0 for r in mine) / prompt if prompt else 0.0
    cached_p = sum(r.cached_tokens or 0 for r in theirs) / prompt if prompt else 0.0
    ms_m, ms_p = _span(mine), _span(theirs)
    bs = run.engines[0]["block_size"] if run.engines else run.config.engine_block_size
    counts: dict[str, int] = {}
    for p in sorted(pairs, key=lambda p: -abs(p.error))[:worst]:
        part = blame(p, bs)
        counts[part] = counts.get(part, 0) + 1
    rel_e2e = (e2e[:, 0] - e2e[:, 1]) / e2e[:, 1]
    rel_ttft = (ttft[:, 0] - ttft[:, 1]) / ttft[:, 1]
    summary = TwinSummary(
        turns=len(pairs),
        ttft_turns=len(seen),
        e2e_mape=float(np.mean(np.abs(rel_e2e))),
        e2e_bias=float(np.mean(rel_e2e)),
        ttft_mape=float(np.mean(np.abs(rel_ttft))),
        ttft_bias=float(np.mean(rel_ttft)),
        ttft_p50=_rel(float(np.percentile(ttft[:, 0], 50)), float(np.percentile(ttft[:, 1], 50))),
        ttft_p90=_rel(float(np.percentile(ttft[:, 0], 90)), float(np.percentile(ttft[:, 1], 90))),
        makespan=_rel(ms_p, ms_m),
        session_makespan=float(np.mean(sessions)),
        throughput=_rel(len(pairs) / ms_p, len(pairs) / ms_m),
        cached_points=100 * (cached_p - cached_m),
        measured_makespan_s=ms_m,
        predicted_makespan_s=ms_p,
        measured_cached=cached_m,
        predicted_cached=cached_p,
        blame=counts,
    )
    return pairs, summary


def _pair_row(p: TurnPair, block_size: int) -> dict[str, Any]:
    m, q = p.measured, p.predicted
    return {
        "session": p.session,
        "turn": p.turn,
        "prompt_tokens": m.prompt_tokens,
        "ttft": [_ttft(q), _ttft(m)],
        "e2e": [_e2e(q), _e2e(m)],
        "cached_tokens": [q.cached_tokens, m.cached_tokens],
        "queue_predicted": (q.scheduled - q.sent) if q.scheduled is not None else None,
        "blame": blame(p, block_size),
    }


def write_twin(
    out: Path, run: BenchRun, profile: EngineProfile, pairs: list[TurnPair], summary: TwinSummary
) -> None:
    """``out/twin.json`` (summary, profile, run), ``out/turns.jsonl`` (predicted and measured,
    per turn) and ``out/twin.html`` (the plots)."""
    from kvharness.sim.twin_html import render_twin

    out.mkdir(parents=True, exist_ok=True)
    bs = profile.block_size
    doc = {
        "run": str(run.path),
        "replicas": run.num_replicas,
        "router": run.router,
        "profile": profile.to_json(),
        "summary": dataclasses.asdict(summary),
    }
    with replacing(out / "twin.json") as tmp:
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
    with replacing(out / "turns.jsonl") as tmp, tmp.open("w") as f:
        for p in pairs:
            f.write(json.dumps(_pair_row(p, bs)) + "\n")
    with replacing(out / "twin.html") as tmp:
        tmp.write_text(render_twin(run.name, pairs, summary), encoding="utf-8")
