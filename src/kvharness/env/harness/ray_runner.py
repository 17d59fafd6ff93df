"""Episodes on a Ray cluster: episode actors, results streamed back, a policy version that moves.

**Workers.** :class:`RayRunner` starts ``workers`` episode actors (:class:`EpisodeWorker`, an
async Ray actor, ``cpus_per_worker`` CPUs each, spread over the cluster's nodes); each runs up to
``per_worker`` episodes at once on its own event loop, calling :func:`.loop.run_episode` with its
own :class:`~.client.ChatClient` (built from a :class:`ClientSpec`). The driver hands episodes
out as slots free up and passes each result to ``on_done`` as it finishes (``ray.wait``), in the
order they finish; :meth:`RayRunner.run` returns them in task order, as
:func:`.loop.run_episodes` does. Tasks, the tasks' Python environment and the run directory
must be at the same paths on every node (one machine, or a shared filesystem).

**Clock.** The run's clock is wall time since the run began, carried to each worker as a
``time.time()`` origin, so calls recorded on different processes (or nodes with synchronised
clocks) share one timeline.

**A worker that dies** (``ray.kill``, its process killed, its node lost) fails every episode it
held; the driver hands each one to a live worker (a new one when none is left), which resumes it
from the episode's checkpoint (``checkpoints``, a :class:`~.checkpoint.CheckpointPlan`: the
episode writes its state there as it goes and picks it up when it finds one), losing at most the
steps since. :attr:`RayRunner.resubmitted` lists the episodes handed over, in order. The driver
removes an episode's checkpoint once ``on_done`` has recorded it.

**Policy version** (partial rollouts). A named actor (:class:`PolicyVersion`, named
``policy_name`` in the ``kvharness`` namespace, so a trainer on the cluster finds it with
``ray.get_actor(name, namespace="kvharness")``) holds the version of the policy being served;
the trainer calls ``set_version(v)`` once it has pushed version ``v`` to the server. Before every
model call an episode reads it (the ``policy_version`` hook of :func:`.loop.run_episode`); when
it differs from the one its worker last served, the episode waits there, at a step boundary,
until the server serves the new version, then goes on under it. Served means: with
``model_template`` (e.g. ``"smol-v{version}"``), that the backend's ``GET /v1/models`` lists
the version's name, which the worker's client then asks for; without one, every version is
served under the one model name, so the episode goes on at once. Each recorded call carries the
version it was made under, so a step's staleness is the version at the end of its episode (or
of the run) minus its own (:func:`staleness`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvharness.env.api import EnvConfig
from kvharness.env.harness.checkpoint import CheckpointPlan
from kvharness.env.harness.context import ContextConfig
from kvharness.env.harness.episode import MINI_SWE_AGENT, EpisodeResult
from kvharness.env.harness.loop import keeps_checkpoint
from kvharness.env.task import AnyTask

__all__ = [
    "POLICY_NAMESPACE",
    "ClientSpec",
    "EpisodeWorker",
    "PolicyVersion",
    "RayRunner",
    "cluster_cpus",
    "connect",
    "policy_version_actor",
    "staleness",
    "workers_for",
]

POLICY_NAMESPACE = "kvharness"
"""The Ray namespace of the named policy-version actors."""

SERVE_POLL_S = 0.5
"""How often a paused worker asks the backend whether the new version is served (s)."""


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """How each worker builds its chat client (plain data, sent to the workers)."""

    backend: str
    model: str | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    api_key: str | None = None


def _ray() -> Any:
    """The ray module, imported on first use (Ray is an optional extra; its typing is partial)."""
    import ray

    return ray


def connect(address: str | None) -> None:
    """Join the Ray cluster at ``address`` (``host:port``, ``ray://host:10001``, ``auto``; None
    or ``local``: a new one-machine cluster) unless this process is connected already."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)


def cluster_cpus() -> float:
    """The CPUs of the cluster this process is connected to."""
    cpus: float = _ray().cluster_resources().get("CPU", 1.0)
    return cpus


class PolicyVersion:
    """The version of the policy being served: an int, 0 at first (a named Ray actor)."""

    def __init__(self, version: int = 0) -> None:
        self._version = version

    def set_version(self, version: int) -> int:
        """Announce that ``version`` is now served; returns it."""
        self._version = int(version)
        return self._version

    def get(self) -> int:
        return self._version


def policy_version_actor(name: str, *, version: int = 0) -> Any:
    """The named :class:`PolicyVersion` actor ``name`` (created at ``version`` when there is
    none yet); it lives as long as the driver that created it."""
    cls = _ray().remote(num_cpus=0)(PolicyVersion)
    return cls.options(name=name, namespace=POLICY_NAMESPACE, get_if_exists=True).remote(version)


class EpisodeWorker:
    """Runs episodes, many at once, on its event loop (the body of a Ray actor; see the module
    docstring). ``origin``: the run's start on ``time.time()``."""

    def __init__(
        self,
        client: ClientSpec,
        config: EnvConfig,
        origin: float,
        *,
        policy: str | None = None,
        model_template: str | None = None,
        checkpoints: CheckpointPlan | None = None,
        context: ContextConfig | None = None,
    ) -> None:
        from kvharness.env.harness.client import ChatClient

        self._spec = client
        self._config = config
        self._origin = origin
        self._checkpoints = checkpoints
        self._context = context
        self._client = ChatClient(
            client.backend,
            client.model,
            max_tokens=client.max_tokens,
            temperature=client.temperature,
            api_key=client.api_key,
        )
        self._policy_name = policy
        self._policy: Any = None
        self._template = model_template
        self._served: int | None = None
        self._serving = asyncio.Lock()

    def pid(self) -> int:
        """The worker's process id."""
        import os

        return os.getpid()

    async def run(
        self, task: AnyTask, agent_name: str, episode: str, trajectories: str | None = None
    ) -> EpisodeResult:
        """One episode, resumed from its checkpoint when it has one."""
        from kvharness.env.harness.loop import run_episode
        from kvharness.env.harness.mini_swe_agent import run_mini_episode

        t0 = time.perf_counter() - (time.time() - self._origin)
        if agent_name == MINI_SWE_AGENT:
            return await run_mini_episode(
                task, self._client, self._config, episode=episode, t0=t0,
                trajectories=None if trajectories is None else Path(trajectories),
            )  # fmt: skip
        plan = self._checkpoints
        return await run_episode(
            task, agent_name, self._client, self._config, episode=episode, t0=t0,
            context=self._context,
            checkpoint=None if plan is None else plan.for_episode(episode),
            policy_version=None if self._policy_name is None else self._current_version,
        )  # fmt: skip

    async def _current_version(self) -> int:
        """The version to make the next call under, once the server serves it."""
        if self._policy is None:
            self._policy = _ray().get_actor(self._policy_name, namespace=POLICY_NAMESPACE)
        version: int = await self._policy.get.remote()
        if version != self._served:
            async with self._serving:
                if version != self._served:
                    await self._serve(version)
        return version

    async def _serve(self, version: int) -> None:
        if self._template is not None:
            from kvharness.wire import vllm
            from kvharness.wire.http import Client, WireError

            name = self._template.format(version=version)
            async with Client(timeout_s=10.0) as http:
                while True:
                    try:
                        listed = await vllm.models(http, self._client.root)
                    except WireError:
                        listed = []
                    if any(m["id"] == name for m in listed):
                        break
                    await asyncio.sleep(SERVE_POLL_S)
            self._client.model = name
        self._served = version


@dataclass(slots=True)
class _Slot:
    """One worker as the driver sees it."""

    actor: Any
    running: set[Any] = field(default_factory=set)
    alive: bool = True


class RayRunner:
    """Episodes on ``workers`` Ray actors, ``per_worker`` at once on each (see the module
    docstring). Connects to the cluster at ``address`` unless connected already; :meth:`close`
    (or ``with``) ends the workers and the policy actor."""

    def __init__(
        self,
        client: ClientSpec,
        config: EnvConfig,
        *,
        workers: int = 2,
        per_worker: int = 4,
        address: str | None = None,
        cpus_per_worker: float = 1.0,
        checkpoints: CheckpointPlan | None = None,
        context: ContextConfig | None = None,
        policy_name: str | None = None,
        model_template: str | None = None,
        origin: float = 0.0,
        trajectories: Path | None = None,
    ) -> None:
        if workers < 1 or per_worker < 1:
            raise ValueError("workers and per_worker must be >= 1")
        connect(address)
        self._config = config
        self.per_worker = per_worker
        self.checkpoints = checkpoints
        self.trajectories = trajectories
        self.origin = time.time() - origin
        self.policy = None if policy_name is None else policy_version_actor(policy_name)
        self._remote = _ray().remote(
            num_cpus=cpus_per_worker, max_concurrency=per_worker, scheduling_strategy="SPREAD"
        )(EpisodeWorker)
        self._worker_args = (client, config, self.origin)
        self._worker_kw = {
            "policy": policy_name,
            "model_template": model_template,
            "checkpoints": checkpoints,
            "context": context,
        }
        self.slots = [_Slot(self._new_worker()) for _ in range(workers)]
        self.resubmitted: list[str] = []
        """Episodes handed to another worker after theirs died, in order."""
        self._held: dict[Any, tuple[AnyTask, str, _Slot]] = {}

    def _new_worker(self) -> Any:
        return self._remote.remote(*self._worker_args, **self._worker_kw)

    def __enter__(self) -> RayRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def workers(self) -> list[Any]:
        """The live workers' actor handles."""
        return [s.actor for s in self.slots if s.alive]

    def set_version(self, version: int) -> None:
        """Announce policy ``version`` (see :class:`PolicyVersion`); needs ``policy_name``."""
        if self.policy is None:
            raise ValueError("this runner has no policy version (give policy_name)")
        _ray().get(self.policy.set_version.remote(version))

    def running(self) -> dict[str, tuple[int, Any]]:
        """The episodes handed out and not yet back, each as (its worker's index in
        :attr:`slots`, the object ref of its result); read it from the driver's thread, e.g. in
        ``on_done``. (A worker runs at most ``per_worker`` calls at once, its episodes' included:
        ask a busy worker nothing, ``pid`` included, that must come back before they do.)"""
        index = {id(slot): i for i, slot in enumerate(self.slots)}
        return {episode: (index[id(slot)], ref) for ref, (_, episode, slot) in self._held.items()}

    def run(
        self,
        tasks: Sequence[AnyTask],
        agent_name: str,
        *,
        repeats: int = 1,
        skip: Collection[str] = (),
        on_done: Callable[[EpisodeResult], None] | None = None,
    ) -> list[EpisodeResult]:
        """Run ``repeats`` episodes of every task (``<task id>/<k>``) but those in ``skip``;
        ``on_done`` gets each as it finishes; returns them in task order. Blocks (call it
        through ``asyncio.to_thread`` from a running loop). A task's setup fault
        (:class:`~kvharness.errors.UserError`) raises here as itself."""
        ray = _ray()
        errors = ray.exceptions

        todo = deque(
            (task, f"{task.id}/{k}")
            for task in tasks
            for k in range(repeats)
            if f"{task.id}/{k}" not in skip
        )
        order = {ep: i for i, (_, ep) in enumerate(todo)}
        held = self._held
        done: list[EpisodeResult] = []
        while todo or held:
            self._hand_out(todo, held, agent_name)
            ready, _ = ray.wait(list(held), num_returns=1)
            for ref in ready:
                task, episode, slot = held.pop(ref)
                slot.running.discard(ref)
                try:
                    result: EpisodeResult = ray.get(ref)
                except errors.RayActorError:
                    slot.alive = False
                    self.resubmitted.append(episode)
                    todo.appendleft((task, episode))
                    continue
                except errors.RayTaskError as err:
                    raise err.as_instanceof_cause() from None
                done.append(result)
                if on_done is not None:
                    on_done(result)
                if self.checkpoints is not None and not keeps_checkpoint(result):
                    self.checkpoints.for_episode(episode).clear()
        return sorted(done, key=lambda ep: order[ep.episode])

    def _hand_out(
        self, todo: deque[tuple[AnyTask, str]], held: dict[Any, Any], agent_name: str
    ) -> None:
        """Give queued episodes to the least busy live workers (a new worker when none lives)."""
        if todo and not any(s.alive for s in self.slots):
            self.slots.append(_Slot(self._new_worker()))
        while todo:
            live = [s for s in self.slots if s.alive and len(s.running) < self.per_worker]
            if not live:
                return
            slot = min(live, key=lambda s: len(s.running))
            task, episode = todo.popleft()
            traj = None if self.trajectories is None else str(self.trajectories)
            ref = slot.actor.run.remote(task, agent_name, episode, traj)
            slot.running.add(ref)
            held[ref] = (task, episode, slot)

    def close(self) -> None:
        """End the workers and the policy actor."""
        ray = _ray()

        for slot in self.slots:
            if slot.alive:
                ray.kill(slot.actor)
                slot.alive = False
        if self.policy is not None:
            ray.kill(self.policy)
            self.policy = None


def staleness(
    episodes: Sequence[EpisodeResult], latest: int | None = None, *, per_episode: bool = False
) -> list[int]:
    """How many versions behind each model call that carries a policy version was made, in
    episode and call order: behind ``latest`` (default: the newest version among the calls), or
    with ``per_episode``, behind the version of its episode's last call (what the episode ended
    under). What a trainer weighs or drops stale steps by."""
    out: list[int] = []
    known = [
        [c.policy_version for c in ep.calls if c.policy_version is not None] for ep in episodes
    ]
    flat = [v for vs in known for v in vs]
    if not flat:
        return out
    top = max(flat) if latest is None else latest
    for vs in known:
        end = (vs[-1] if vs else top) if per_episode else top
        out += [end - v for v in vs]
    return out


def workers_for(concurrency: int, cluster_cpus: float) -> tuple[int, int]:
    """``(workers, per_worker)`` for ``concurrency`` episodes in flight on a cluster of
    ``cluster_cpus`` CPUs: one worker per CPU (at most one per episode), the episodes shared
    evenly."""
    workers = max(1, min(concurrency, int(cluster_cpus)))
    return workers, math.ceil(concurrency / workers)
