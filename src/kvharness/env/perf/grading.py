"""Grade a performance task: is the agent's ``solution.py`` correct, and how much faster is it?

:meth:`PerfGrader.grade` takes only ``solution.py`` from the agent's repository (a regular file,
never followed through a link; every other file stays behind, so nothing can shadow a module),
scans the agent's change to it with the coding tasks' scan (``scan.py``: no threads or processes,
no import, frame or exit machinery, no code built at run time; a finding scores 0), then

1. **correctness:** the candidate and the pristine reference each run ``inputs.cases`` (edge
   shapes and seeded random inputs; the seed is drawn afresh for each grading, so inputs cannot be
   special-cased) in a fresh sandboxed process; every output must match the reference's
   (``numpy.allclose`` with the task's tolerances for floats, exactly for integers, same shapes).
   The reference's outputs never enter the candidate's sandbox, and the reference's code is not
   there either: the candidate cannot read the expected outputs nor call the grader's reference;
2. **speed, in rounds:** each round starts a fresh process of each side with a fresh seed, both
   pinned to the same CPU (rounds take this host's CPUs in turn; the scan forbids a candidate to
   change its scheduling); each makes ``calls`` inputs of its own (a cache across calls never
   hits) and one untimed warm-up call, then the two sides' timed calls are taken in turn, the
   side that went first going second the next time. Whatever a moment of a shared machine costs
   (another process's burst, a CPU clocking up, a busier CPU) so falls on a call of each side,
   not on one side's whole run. The clock is the grader's, outside the sandbox: it sends ``G
   nonce`` and stops its clock when ``D nonce`` comes back (``_runner.py``), so a candidate that
   patches its process's timer, or writes to the channel, changes nothing or breaks the exchange
   (scored 0 as tampered). The outputs of the timed calls are checked against the reference's
   too, so a candidate cannot tell timing inputs from test inputs and cut corners on them. A
   round's ratio is the reference's median call time over the candidate's; rounds go on until
   the 95% interval of the speedup is tight, decided, or the budget is spent
   (:class:`~kvharness.env.perf.stats.TimingPolicy`);
3. **score:** 0 unless correct; else the interval's lower end on a log scale from 1.05x (0) to
   the task's target (1): a correct solution faster than the reference but short of the target
   gets partial credit, one no faster gets 0 (``stats.py`` says why 1.05x and why rounds come in
   pairs).

Timing needs the machine to itself: gradings in one process take turns (a lock), and processes
run with one BLAS/OpenMP thread. A ``triton`` task is timed on a GPU when the host has one (its
``/dev/nvidia*`` devices are passed into the sandbox); without one, correctness is checked under
Triton's interpreter on the CPU and speed is not measured (score 0, said in the summary).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import secrets
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from kvharness.env.perf.stats import Speedup, TimingPolicy
from kvharness.env.perf.task import SOLUTION, PerfTask
from kvharness.env.sandbox import Limits, Sandbox, python_env_paths, stop
from kvharness.env.scan import scan_changes
from kvharness.env.workspace import Change, read_regular

__all__ = ["MAX_SOLUTION_BYTES", "PerfGradeResult", "PerfGrader", "gpu_devices"]

MAX_SOLUTION_BYTES = 1 << 20
"""A larger solution.py is not graded."""
_MAX_OUTPUT_BYTES = 256 << 20
"""Outputs of one process larger than this break the exchange."""
_RUNNER = Path(__file__).with_name("_runner.py")
_TIMING = threading.Lock()
_ENV = {
    "PYTHONHASHSEED": "0",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # Memory a call frees is reused by the next rather than handed back to the kernel and
    # faulted in afresh (glibc's largest mmap threshold; no trimming): the same for both sides.
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
}
_CALL_SLACK = 10.0
"""A candidate's timed call may take this many times the reference's median call (and at least
``_MIN_CALL_S``) before the grading gives up on it."""
_MIN_CALL_S = 5.0
_CPUS = sorted(os.sched_getaffinity(0))
"""The CPUs timed processes are pinned to, a round's two on the same one."""
_STARTUP_S = 20.0
"""Seconds a timing process has to start, import and make its inputs, besides its warm-up call."""


class _Broken(Exception):
    """The exchange with a process broke: it died or timed out, or (``forged``) it sent what the
    runner never sends, which only the code under test can have written."""

    def __init__(self, message: str, *, forged: bool = False) -> None:
        super().__init__(message)
        self.forged = forged


_FORGED = "it sent what the runner never sends"


def gpu_devices() -> tuple[Path, ...]:
    """The host's NVIDIA device nodes (empty when there is no GPU)."""
    dev = Path("/dev")
    if not (dev / "nvidiactl").exists():
        return ()
    return tuple(sorted(p for p in dev.glob("nvidia*") if not p.is_dir()))


@dataclass(frozen=True, slots=True)
class PerfGradeResult:
    """One grading. ``score`` in [0, 1]. ``correct``: every correctness case (and every timed
    call) matched the reference. ``speedup``: the rounds' ratios (None when speed was not
    measured); ``reference_s`` / ``candidate_s``: median seconds per call over the rounds;
    ``reference_spread``: the reference's round-to-round coefficient of variation (this
    machine's noise). ``problem``: why a correct-looking submission scored 0 or was not timed
    (None when timed). ``tampered``: reasons the submission was rejected (scores 0)."""

    score: float
    correct: bool
    target: float
    speedup: Speedup | None = None
    reference_s: float | None = None
    candidate_s: float | None = None
    reference_spread: float | None = None
    problem: str | None = None
    tampered: tuple[str, ...] = ()
    duration_s: float = 0.0
    log_tail: str = ""

    @property
    def timed(self) -> bool:
        return self.speedup is not None

    def summary(self) -> str:
        """One line for an observation."""
        if self.tampered:
            more = f" (and {len(self.tampered) - 1} more)" if len(self.tampered) > 1 else ""
            return f"score 0: the submission was rejected as tampered: {self.tampered[0]}{more}"
        if not self.correct:
            return f"score 0: incorrect: {self.problem}"
        if self.speedup is None:
            return f"correct; {self.problem}"
        s = self.speedup
        return (
            f"correct; {s.estimate:.2f}x the reference's speed (95% interval {s.low:.2f}x-"
            f"{s.high:.2f}x over {s.rounds} rounds, noise floor {s.noise:.0%}); "
            f"target {self.target:g}x"
        )


@dataclass
class _Side:
    """One side's staged files: a repository folder holding only its solution.py."""

    repo: Path
    name: str


@dataclass
class _Channel:
    """The grader's end of one runner process."""

    proc: subprocess.Popen[bytes]
    buf: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self._drain = threading.Thread(target=self._read_err, daemon=True)
        self._drain.start()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        while chunk := os.read(fd, 65536):
            if len(self.err) < 1 << 16:
                self.err += chunk

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(text.encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise _Broken("the process ended early") from None

    def _fill(self, deadline: float) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        left = deadline - time.perf_counter()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise _Broken("it took too long")
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            raise _Broken("the process ended early")
        self.buf += chunk

    def line(self, deadline: float) -> list[str]:
        while b"\n" not in self.buf:
            if len(self.buf) > 4096:
                raise _Broken(_FORGED, forged=True)
            self._fill(deadline)
        raw, _, rest = self.buf.partition(b"\n")
        self.buf = bytearray(rest)
        try:
            return raw.decode().split() or [""]
        except UnicodeDecodeError:
            raise _Broken(_FORGED, forged=True) from None

    def read(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            self._fill(deadline)
        data, self.buf = bytes(self.buf[:n]), self.buf[n:]
        return data

    def stderr_tail(self) -> str:
        self._drain.join(timeout=1.0)
        return bytes(self.err[-2000:]).decode(errors="replace")

    def close(self) -> None:
        """Kill the process (and all it started), reap it, and close the pipes."""
        stop(self.proc)
        self._drain.join(timeout=5.0)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


class _Process:
    """One side's process for a ``with`` block. A broken exchange inside :meth:`speaking` is
    said as that side's: the reference's is the task's fault (``RuntimeError``), the
    candidate's a :class:`_Broken` that carries its stderr's tail."""

    def __init__(
        self, grader: PerfGrader, side: _Side, runner: Path, cpu: int | None = None
    ) -> None:
        self.side = side
        self.task_id = grader.task.id
        self.ch = grader._open(side, runner, cpu)

    def __enter__(self) -> _Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self.ch.close()

    @contextlib.contextmanager
    def speaking(self) -> Iterator[_Channel]:
        try:
            yield self.ch
        except _Broken as err:
            tail = self.ch.stderr_tail()
            if self.side.name == "reference":
                raise RuntimeError(
                    f"task {self.task_id}: the reference's process failed: {err}; its stderr "
                    f"ends: {tail[-1000:]}"
                ) from err
            tail = tail[-300:].strip()
            text = f"{err}" + (f" (its stderr ends: {tail})" if tail and not err.forged else "")
            raise _Broken(text, forged=err.forged) from err

    def quit(self) -> str:
        """Ask the process to exit, give it 10 s; its stderr's tail."""
        with self.speaking() as ch:
            ch.send("quit\n")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.ch.proc.wait(timeout=10.0)
        return self.ch.stderr_tail()


_Outputs = list[str | tuple[np.ndarray[Any, Any], ...]]
"""Per case: an error message, or the output's arrays."""


def _unpack(data: bytes) -> _Outputs:
    """The outputs in an .npz from the runner. Only what the runner writes is read: entries
    stored, not compressed, so that what the archive expands to is bounded by its own size (an
    archive forged by the code under test could otherwise be a decompression bomb)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
        if any(e.compress_type != zipfile.ZIP_STORED for e in entries) or (
            sum(e.file_size for e in entries) > len(data)
        ):
            raise _Broken("its outputs are not as the runner writes them", forged=True)
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except _Broken:
        raise
    except Exception as err:
        raise _Broken(
            f"its outputs could not be read ({type(err).__name__})", forged=True
        ) from None
    cases: dict[int, dict[str, np.ndarray[Any, Any]]] = {}
    for key, arr in arrays.items():
        i, _, part = key.partition(".")
        if not i.isdigit():
            raise _Broken("its outputs could not be read", forged=True)
        cases.setdefault(int(i), {})[part] = arr
    out: _Outputs = []
    for i in range(len(cases)):
        parts = cases.get(i)
        if parts is None:
            raise _Broken("its outputs could not be read", forged=True)
        if "error" in parts:
            out.append(str(parts["error"]))
        elif "a" in parts:
            out.append((parts["a"],))
        else:
            out.append(tuple(parts[str(j)] for j in range(len(parts))))
    return out


def _mismatch(
    ref: np.ndarray[Any, Any], got: np.ndarray[Any, Any], rtol: float, atol: float
) -> str | None:
    if got.shape != ref.shape:
        return f"shape {got.shape}, expected {ref.shape}"
    if ref.dtype.kind in "iub":
        if got.dtype.kind not in "iub":
            return f"dtype {got.dtype}, expected an integer array ({ref.dtype})"
        if not np.array_equal(got, ref):
            return f"{int(np.count_nonzero(got != ref))} of {ref.size} values differ"
        return None
    if ref.dtype.kind in "fc":
        if got.dtype.kind not in "iufc":
            return f"dtype {got.dtype}, expected {ref.dtype}"
        close = np.isclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)
        if not close.all():
            bad = int(close.size - np.count_nonzero(close))
            return f"{bad} of {ref.size} values differ beyond rtol={rtol:g}, atol={atol:g}"
        return None
    return None if np.array_equal(got, ref) else "values differ"


def _compare(ref: _Outputs, got: _Outputs, rtol: float, atol: float, what: str) -> str | None:
    """Why ``got`` does not match ``ref`` (None: it does)."""
    if len(got) != len(ref):
        return f"{what}: {len(got)} outputs, expected {len(ref)}"
    for i, (r, g) in enumerate(zip(ref, got, strict=True)):
        if isinstance(r, str):
            raise RuntimeError(f"the task's reference failed on {what} {i}: {r}")
        if isinstance(g, str):
            return f"{what} {i} raised {g}"
        if len(g) != len(r):
            return f"{what} {i}: {len(g)} output arrays, expected {len(r)}"
        for j, (ra, ga) in enumerate(zip(r, g, strict=True)):
            why = _mismatch(ra, ga, rtol, atol)
            if why is not None:
                part = f" output {j}" if len(r) > 1 else ""
                return f"{what} {i}{part}: {why}"
    return None


class PerfGrader:
    """Grades ``solution.py`` for one performance task (see the module docstring).

    ``python_env``: host paths of the environment the processes run with (default: the task's
    ``venv``, else this interpreter's). ``limits``: sandbox limits of each process (its timeout is
    raised to the task's). ``policy``: how long speed is measured. ``workdir``: where staged
    files go (default: the system temp dir).
    """

    def __init__(
        self,
        task: PerfTask,
        *,
        python_env: Sequence[Path] | None = None,
        limits: Limits | None = None,
        unsafe: bool = False,
        workdir: Path | None = None,
        policy: TimingPolicy | None = None,
    ) -> None:
        self.task = task
        if python_env is None:
            venv = Path(task.venv) if task.venv else Path(sys.prefix)
            python_env = python_env_paths(venv)
        self.python_env = tuple(python_env)
        base = limits or Limits()
        memory = max(base.memory_bytes, 16 << 30) if task.backend == "triton" else base.memory_bytes
        self.limits = replace(
            base,
            timeout_s=max(base.timeout_s, task.timeout_s),
            cpu_s=max(base.cpu_s, int(task.timeout_s)),
            memory_bytes=memory,
        )
        self.unsafe = unsafe
        self.workdir = workdir
        self.policy = policy or TimingPolicy()
        self.devices = gpu_devices() if task.backend == "triton" else ()

    # -- staging ------------------------------------------------------------------------------

    def _stage(self, folder: Path, repo: Path) -> tuple[_Side, _Side, Path, bytes | None]:
        """The candidate's and the reference's folders, the runner's folder, and the candidate's
        solution.py (None when it is missing, not a regular file or too large)."""
        task = self.task
        runner = folder / "runner"
        runner.mkdir()
        shutil.copyfile(_RUNNER, runner / "_runner.py")
        shutil.copyfile(task.hidden_dir / "inputs.py", runner / "inputs.py")
        ref = folder / "reference"
        ref.mkdir()
        shutil.copyfile(task.hidden_dir / "reference.py", ref / SOLUTION)
        cand = folder / "candidate"
        cand.mkdir()
        data = read_regular(repo / SOLUTION, MAX_SOLUTION_BYTES)
        if data is not None:
            (cand / SOLUTION).write_bytes(data)
        return _Side(cand, "candidate"), _Side(ref, "reference"), runner, data

    def _open(self, side: _Side, runner: Path, cpu: int | None = None) -> _Channel:
        sandbox = Sandbox(
            side.repo,
            ro_paths=(runner, *self.python_env),
            limits=self.limits,
            unsafe=self.unsafe,
            persist=False,
            devices=self.devices,
        )
        argv = [
            "python",
            "-I",
            str(runner / "_runner.py"),
            f"{sandbox.workdir}/{SOLUTION}",
            str(runner / "inputs.py"),
            self.task.function,
            self.task.backend,
            *([] if cpu is None else [str(cpu)]),
        ]
        env = dict(_ENV)
        if self.task.backend == "triton" and not self.devices:
            env["TRITON_INTERPRET"] = "1"
        return _Channel(sandbox.start(argv, env=env))

    # -- the two phases -----------------------------------------------------------------------

    def _outputs(self, ch: _Channel, deadline: float) -> _Outputs:
        msg = ch.line(deadline)
        if msg[0] != "O" or len(msg) != 2 or not msg[1].isdigit():
            raise _Broken(_FORGED, forged=True)
        n = int(msg[1])
        if n > _MAX_OUTPUT_BYTES:
            raise _Broken("its outputs are too large", forged=True)
        return _unpack(ch.read(n, deadline))

    def _cases(self, side: _Side, runner: Path, seed: int) -> tuple[_Outputs, str]:
        with _Process(self, side, runner) as proc:
            with proc.speaking() as ch:
                ch.send(f"cases {seed}\n")
                out = self._outputs(ch, time.perf_counter() + self.task.timeout_s)
            return out, proc.quit()

    def _round(
        self, cand: _Side, ref: _Side, runner: Path, seed: int, index: int, ref_known: list[float]
    ) -> tuple[list[float], _Outputs, list[float], _Outputs]:
        """One round: a fresh process of each side, both pinned to the same CPU (rounds take
        this process's CPUs in turn), then their timed calls taken in turn, call by call, the
        side that went first going second the next time (round ``index`` starts with the
        reference when even). Returns the reference's call times and outputs, then the
        candidate's. ``ref_known``: the reference's call times so far, which bound how long a
        candidate's call may take."""
        task = self.task
        cpu = _CPUS[index % len(_CPUS)]
        with _Process(self, ref, runner, cpu) as rp, _Process(self, cand, runner, cpu) as cp:
            began = time.perf_counter()
            for proc in (rp, cp):
                with proc.speaking() as ch:
                    ch.send(f"time {seed} {task.calls}\n")
            with rp.speaking() as ch:
                self._ready(ch, began + task.timeout_s)
            # Before any reference call is timed, its start-up and warm-up call bound one.
            known = ref_known or [time.perf_counter() - began]
            with cp.speaking() as ch:
                self._ready(ch, began + min(task.timeout_s, _STARTUP_S + self._limit(known)))
            times: dict[str, list[float]] = {ref.name: [], cand.name: []}
            outs: dict[str, _Outputs] = {ref.name: [], cand.name: []}
            for i in range(task.calls):
                for proc in (rp, cp) if (index + i) % 2 == 0 else (cp, rp):
                    if proc is rp:
                        limit = task.timeout_s
                    else:
                        limit = self._limit(ref_known + times[ref.name])
                    with proc.speaking() as ch:
                        took, out = self._call(ch, limit)
                    times[proc.side.name].append(took)
                    outs[proc.side.name] += out
            rp.quit()
            cp.quit()
        return times[ref.name], outs[ref.name], times[cand.name], outs[cand.name]

    @staticmethod
    def _limit(ref_times: list[float]) -> float:
        """How long a candidate's call may take, given the reference's call times."""
        return max(_MIN_CALL_S, _CALL_SLACK * statistics.median(ref_times))

    @staticmethod
    def _ready(ch: _Channel, deadline: float) -> None:
        if ch.line(deadline) != ["R"]:
            raise _Broken(_FORGED, forged=True)

    def _call(self, ch: _Channel, limit_s: float) -> tuple[float, _Outputs]:
        """One timed call: the grader's clock around ``G nonce`` / ``D nonce``, then the
        call's output."""
        nonce = secrets.token_hex(8)
        t0 = time.perf_counter()
        ch.send(f"G {nonce}\n")
        reply = ch.line(t0 + limit_s)
        took = time.perf_counter() - t0
        if reply != ["D", nonce]:
            raise _Broken("a reply in the timing exchange was not the runner's", forged=True)
        out = self._outputs(ch, time.perf_counter() + self.task.timeout_s)
        if len(out) != 1:
            raise _Broken(_FORGED, forged=True)
        return took, out

    # -- grading ------------------------------------------------------------------------------

    def grade(self, repo: Path) -> PerfGradeResult:
        """Grade ``repo/solution.py`` (nothing in ``repo`` is modified); blocking."""
        start = time.perf_counter()
        task = self.task
        folder = Path(tempfile.mkdtemp(prefix=f"kvh-perf-{task.id}-", dir=self.workdir))
        try:
            cand, ref, runner, data = self._stage(folder, repo)
            if data is None:
                return self._result(
                    start,
                    False,
                    problem=f"{SOLUTION} is missing, not a regular "
                    f"file, or over {MAX_SOLUTION_BYTES} bytes",
                )
            pristine = (task.repo_dir / SOLUTION).read_bytes()
            findings = scan_changes([Change(SOLUTION, pristine, data)])
            if findings:
                return self._result(start, False, tampered=tuple(findings))
            with _TIMING:
                return self._measure(start, cand, ref, runner)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    async def agrade(self, repo: Path) -> PerfGradeResult:
        """:meth:`grade` in a worker thread (gradings take turns: timing needs the machine)."""
        return await asyncio.to_thread(self.grade, repo)

    def _measure(self, start: float, cand: _Side, ref: _Side, runner: Path) -> PerfGradeResult:
        task, policy = self.task, self.policy
        seed = secrets.randbits(63)
        expected, _ = self._cases(ref, runner, seed)
        try:
            got, log = self._cases(cand, runner, seed)
        except _Broken as err:
            return self._broken(start, err)
        why = _compare(expected, got, task.rtol, task.atol, "case")
        if why is not None:
            return self._result(start, False, problem=why, log=log)
        if task.backend == "triton" and not self.devices:
            return self._result(
                start,
                True,
                problem="checked under Triton's interpreter; speed not measured: Triton "
                "candidates are timed on a GPU, and none is visible here",
                log=log,
            )
        ratios: list[float] = []
        ref_med: list[float] = []
        cand_med: list[float] = []
        ref_all: list[float] = []
        began = time.perf_counter()
        while True:
            try:
                ref_times, ref_out, cand_times, cand_out = self._round(
                    cand, ref, runner, secrets.randbits(63), len(ratios), ref_all
                )
            except _Broken as err:
                return self._broken(start, err)
            why = _compare(ref_out, cand_out, task.rtol, task.atol, "timed call")
            if why is not None:
                return self._result(start, False, problem=why, log=log)
            ref_all += ref_times
            ref_med.append(statistics.median(ref_times))
            cand_med.append(statistics.median(cand_times))
            ratios.append(ref_med[-1] / max(cand_med[-1], 1e-9))
            speedup = Speedup(tuple(ratios))
            spent = time.perf_counter() - began >= policy.budget_s
            if policy.settled(speedup, target=task.target_speedup) or (spent and len(ratios) >= 2):
                break
        spread = statistics.pstdev(ref_med) / statistics.mean(ref_med)
        return PerfGradeResult(
            score=policy.score(speedup, target=task.target_speedup),
            correct=True,
            target=task.target_speedup,
            speedup=speedup,
            reference_s=statistics.median(ref_med),
            candidate_s=statistics.median(cand_med),
            reference_spread=spread,
            duration_s=time.perf_counter() - start,
            log_tail=log,
        )

    def _broken(self, start: float, err: _Broken) -> PerfGradeResult:
        if err.forged:
            return self._result(start, False, tampered=(f"the candidate's process: {err}",))
        return self._result(start, False, problem=f"the candidate's process failed: {err}")

    def _result(
        self,
        start: float,
        correct: bool,
        *,
        problem: str | None = None,
        tampered: tuple[str, ...] = (),
        log: str = "",
    ) -> PerfGradeResult:
        return PerfGradeResult(
            score=0.0,
            correct=correct and not tampered,
            target=self.task.target_speedup,
            problem=problem,
            tampered=tampered,
            duration_s=time.perf_counter() - start,
            log_tail=log,
        )
