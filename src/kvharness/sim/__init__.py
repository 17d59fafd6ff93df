"""sim: a discrete-event model of a serving cluster (engine models + a router) in virtual time.

``Simulator`` runs one workload on one cluster under one policy (a ``SimConfig``) and returns
per-turn records; ``run_sweep`` runs many ``SimJob`` (a workload spec and a ``SimConfig``) in
parallel; ``run_default`` is the embedded demo (``make run``).
"""

from kvharness.sim.cluster import ClusterSpec, parse_cluster
from kvharness.sim.default import run_default
from kvharness.sim.simulator import SimConfig, SimResult, Simulator, simulate
from kvharness.sim.sweep import SimJob, run_job, run_sweep

__all__ = [
    "ClusterSpec",
    "SimConfig",
    "SimJob",
    "SimResult",
    "Simulator",
    "parse_cluster",
    "run_default",
    "run_job",
    "run_sweep",
    "simulate",
]
