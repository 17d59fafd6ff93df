"""The simulator end to end: a generated workload and the head of the real Mooncake trace."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvharness.report.records import TurnRecord
from kvharness.routing.base import Decision, ReplicaState, RouteRequest
from kvharness.routing.policies.round_robin import RoundRobin
from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig, SimResult, Simulator
from kvharness.workload.load import load_workload
from kvharness.workload.model import Workload
from kvharness.workload.synthetic import SyntheticConfig, generate

TRACE = (
    Path(__file__).parents[2] / ".." / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
)


@pytest.fixture(scope="module")
def small() -> Workload:
    return generate(SyntheticConfig(sessions=6, steps_median=10, repo_tokens_median=6000, seed=4))


@pytest.fixture(scope="module")
def mooncake_head(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    lines = TRACE.read_text().splitlines()[:500]
    path = tmp_path_factory.mktemp("trace") / "head.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return load_workload(str(path))


def run(wl: Workload, cluster: str, policy: str = "round_robin", **kw: object) -> SimResult:
    cfg = SimConfig(
        parse_cluster(cluster, block_size=kw.pop("block_size", wl.block_size)), policy, **kw
    )  # type: ignore[arg-type]
    return Simulator(wl, cfg).run()


def check_records(wl: Workload, res: SimResult) -> None:
    recs = res.records
    assert len(recs) == wl.num_turns
    by_session: dict[str, list[TurnRecord]] = {}
    for r in recs:
        assert r.ok, r
        assert r.first_token is not None and r.done is not None and r.scheduled is not None
        assert r.intended == r.sent <= r.scheduled <= r.first_token <= r.done
        assert r.cached_tokens is not None and 0 <= r.cached_tokens <= r.ideal_cached_tokens
        assert r.cached_tokens < r.prompt_tokens
        by_session.setdefault(r.session, []).append(r)
    sessions = {s.id: s for s in wl.sessions}
    for sid, rs in by_session.items():
        rs.sort(key=lambda r: r.turn)
        assert [r.turn for r in rs] == list(range(len(sessions[sid].turns)))
        for prev, nxt in itertools.pairwise(rs):  # closed loop: gap after done
            assert prev.done is not None
            assert nxt.sent == pytest.approx(prev.done + nxt.gap)
        makespan = (rs[-1].done or 0) - rs[0].intended
        assert makespan >= res.lower_bounds[sid] * (1 - 1e-9)
    assert [r.sent for r in recs] == sorted(r.sent for r in recs)


def test_synthetic_end_to_end(small: Workload) -> None:
    res = run(small, "3xH200:llama-3.1-8b", "agent_aware")
    check_records(small, res)
    hit = sum(r.cached_tokens or 0 for r in res.records)
    ideal = sum(r.ideal_cached_tokens for r in res.records)
    assert hit > 0.5 * ideal
    assert res.events < res.engine_steps  # decode runs cost one event, not one per step


@pytest.mark.parametrize(("eviction", "cpu"), [("lru", 0), ("ttl", 0), ("lru", 1000)])
def test_jump_gives_the_same_records_as_stepping(small: Workload, eviction: str, cpu: int) -> None:
    kw = {"num_blocks": 400, "eviction": eviction, "cpu_tier_blocks": cpu, "load": 4.0}
    a = run(small, "2xH200:llama-3.1-8b", "session", jump=True, **kw)
    b = run(small, "2xH200:llama-3.1-8b", "session", jump=False, **kw)
    assert a.engine_steps == b.engine_steps and a.events < b.events / 3
    assert len(a.records) == len(b.records)
    for x, y in zip(a.records, b.records, strict=True):
        assert (x.session, x.turn, x.replica, x.cached_tokens) == (
            y.session,
            y.turn,
            y.replica,
            y.cached_tokens,
        )
        for f in ("sent", "scheduled", "first_token", "done"):
            assert getattr(x, f) == pytest.approx(getattr(y, f), rel=1e-9)


def test_replicas_sharing_a_hosts_cores_split_them(small: Workload) -> None:
    """Three replicas on two cores: replicas 0 and 2 share core 0, so they serve slower than on
    hardware of their own while replica 1, with a core to itself, serves its sessions (each kept
    on one replica) as before; a host with a core for each is hardware of their own."""
    kw = {"num_blocks": 400, "load": 4.0}
    own = run(small, "3xH200:llama-3.1-8b", "session", **kw)
    roomy = run(small, "3xH200:llama-3.1-8b", "session", host_cores=3, **kw)
    shared = run(small, "3xH200:llama-3.1-8b", "session", host_cores=2, **kw)
    check_records(small, shared)
    assert [r.done for r in roomy.records] == [r.done for r in own.records]

    def serve(res: SimResult, replica: str) -> float:
        return sum((r.done or 0) - r.sent for r in res.records if r.replica == replica)

    assert serve(shared, "r1") == pytest.approx(serve(own, "r1"))  # a core of its own
    for replica in ("r0", "r2"):
        assert serve(shared, replica) > 1.2 * serve(own, replica)
    jumped = run(small, "3xH200:llama-3.1-8b", "session", host_cores=2, jump=False, **kw)
    for x, y in zip(shared.records, jumped.records, strict=True):
        assert x.done == pytest.approx(y.done, rel=1e-9)
    with pytest.raises(ValueError, match="host_cores must be >= 0"):
        run(small, "3xH200:llama-3.1-8b", host_cores=-1)


@pytest.mark.parametrize("cpu", [0, 500])
def test_prefix_sources_fed_by_events_equal_asking_the_pools(small: Workload, cpu: int) -> None:
    kw = {"num_blocks": 300, "cpu_tier_blocks": cpu}
    a = run(small, "4xH200:llama-3.1-8b", "dynamo_kv", prefix_source="index", **kw)
    b = run(small, "4xH200:llama-3.1-8b", "dynamo_kv", prefix_source="mask", **kw)
    c = run(small, "4xH200:llama-3.1-8b", "dynamo_kv", prefix_source="direct", **kw)
    assert a.records == b.records
    if not cpu:  # asking the pools directly sees the device tier only
        assert a.records == c.records


def test_engine_block_size_differs_from_the_workloads(small: Workload) -> None:
    res = run(small, "2xH200:llama-3.1-8b", block_size=16)
    check_records(small, res)
    assert all(r.cached_tokens is None or r.cached_tokens % 16 == 0 for r in res.records)


def test_eviction_policies_and_cpu_tier_run(small: Workload) -> None:
    tight = {"num_blocks": 230, "load": 4.0}  # the longest turn needs 221 blocks
    lru = run(small, "1xH200:llama-3.1-8b", **tight)
    ttl = run(small, "1xH200:llama-3.1-8b", eviction="ttl", **tight)
    cpu = run(small, "1xH200:llama-3.1-8b", cpu_tier_blocks=2000, **tight)
    for res in (lru, ttl, cpu):
        check_records(small, res)
    hits = [sum(r.cached_tokens or 0 for r in x.records) for x in (lru, ttl, cpu)]
    assert hits[2] > hits[0]  # what the GPU evicted came back from host memory


def test_load_compresses_arrivals(small: Workload) -> None:
    slow = run(small, "2xH200:llama-3.1-8b", load=0.5)
    fast = run(small, "2xH200:llama-3.1-8b", load=2.0)
    first = lambda res: sorted(r.sent for r in res.records if r.turn == 0)  # noqa: E731
    assert first(fast)[-1] == pytest.approx(first(slow)[-1] / 4)


def test_mooncake_head(mooncake_head: Workload) -> None:
    res = run(mooncake_head, "4xH200:llama-3.1-8b", "dynamo_kv", load=20.0)
    check_records(mooncake_head, res)
    assert sum(r.cached_tokens or 0 for r in res.records) > 0


class _Mirror(RoundRobin):
    """Round robin that checks, at every choice, that each replica's state is what the replica
    itself counts, and that every replica is offered."""

    def __init__(self) -> None:
        super().__init__()
        self.sim: Simulator | None = None
        self.busiest = 0

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        assert self.sim is not None and eligible == range(len(self.sim.replicas))
        for st, rep in zip(replicas, self.sim.replicas, strict=True):
            assert (st.name, st.capacity_blocks, st.block_size) == (
                rep.name, rep.pool.num_blocks, rep.pool.block_size,
            )  # fmt: skip
            assert (st.running, st.waiting, st.pending_prefill_tokens) == (
                rep.running, rep.waiting, rep.pending_prefill_tokens,
            )  # fmt: skip
            assert (st.used_blocks, st.cached_blocks) == (rep.used_blocks, rep.cached_blocks)
            assert st.prefill_tokens_per_s == rep.prefill_tokens_per_s > 0
            self.busiest = max(self.busiest, st.outstanding)
        return super().choose(request, replicas, eligible, matched_blocks, now)


def test_policy_sees_each_replica_as_it_counts_itself() -> None:
    # Sessions arriving close together, so that sends fall between a replica's wake-ups.
    wl = generate(SyntheticConfig(sessions=20, steps_median=10, repo_tokens_median=6000, seed=4))
    policy = _Mirror()
    cfg = SimConfig(parse_cluster("2xH200:llama-3.1-8b", block_size=wl.block_size), load=30.0)
    sim = Simulator(wl, cfg, policy=policy)
    policy.sim = sim
    check_records(wl, sim.run())
    assert policy.busiest > 8


def test_prompt_too_long_is_an_error_record(small: Workload) -> None:
    res = run(small, "1xH200:llama-3.1-8b", num_blocks=20)
    assert any(r.error and r.error.startswith("too long") for r in res.records)
    assert len(res.records) == small.num_turns


def test_goodput_counts_sessions_within_their_deadline() -> None:
    from kvharness.sim.sweep import SimJob, run_job

    spec = "synthetic:sessions=4,steps_median=4,repo_tokens_median=3000"
    cfg = SimConfig(parse_cluster("2xH200:llama-3.1-8b"), "round_robin")
    loose = run_job(SimJob(spec, cfg, deadline="100x"))
    tight = run_job(SimJob(spec, cfg, deadline="0.5x"))
    assert loose.sessions_within_deadline == loose.sessions == 4
    assert loose.goodput is not None and loose.goodput > 0
    assert tight.sessions_within_deadline == 0 and tight.goodput == 0
    assert loose.bound_ratio_mean is not None and loose.bound_ratio_mean >= 1.0


@pytest.fixture(scope="module")
def crowded() -> Workload:
    """Sessions on a few repositories arriving close together: decode batches share prefixes."""
    return generate(SyntheticConfig(sessions=20, steps_median=10, repo_tokens_median=6000, seed=4))


def test_cascade_attention_reads_shared_prefixes_once(crowded: Workload) -> None:
    kw = {"load": 30.0}
    plain = run(crowded, "2xH200:llama-3.1-8b", **kw)
    measured = run(crowded, "2xH200:llama-3.1-8b", shared_stats=True, **kw)
    cascade = run(crowded, "2xH200:llama-3.1-8b", attention="cascade", **kw)
    check_records(crowded, cascade)
    assert measured.records == plain.records  # measuring changes nothing
    assert plain.shared_prefix_share is None  # not measured without shared_stats
    share = measured.shared_prefix_share
    assert share is not None and cascade.shared_prefix_share is not None
    assert 0 < cascade.shared_prefix_share < share < 1
    p50, p50_cascade = plain.decode_step_p50, cascade.decode_step_p50
    assert p50 is not None and p50_cascade is not None and p50_cascade < p50
    assert sum(r.decode_seconds for r in cascade.replicas) < sum(
        r.decode_seconds for r in plain.replicas
    )
    assert cascade.lower_bounds == plain.lower_bounds  # a session alone shares nothing


def test_rows_carry_the_decode_figures() -> None:
    from kvharness.sim.sweep import SimJob, run_job

    spec = "synthetic:sessions=6,steps_median=4,repo_tokens_median=3000,rate=2"
    cluster = parse_cluster("1xH200:llama-3.1-8b")
    plain = run_job(SimJob(spec, SimConfig(cluster, "round_robin")))
    cascade = run_job(SimJob(spec, SimConfig(cluster, "round_robin", attention="cascade")))
    assert plain.attention == "default" and cascade.attention == "cascade"
    assert plain.shared_prefix_share is None and cascade.shared_prefix_share is not None
    assert plain.decode_step_p50 is not None and cascade.decode_step_p50 is not None
    with pytest.raises(ValueError, match="attention must be default or cascade, got 'flash'"):
        SimConfig(cluster, attention="flash")
