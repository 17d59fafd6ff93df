"""Run an episode's commands under bubblewrap: no network, read-only system, writable repo only.

Every command runs in a fresh ``bwrap`` with new network, PID, IPC and UTS namespaces. The sandbox
sees, read-only, ``/usr``, ``/etc`` (and the ``/bin``, ``/lib``... links) plus the extra paths the
caller names (the task venv and its Python installation, at their host paths); the episode's copy
of the repository, writable, at :data:`REPO_MOUNT`; a private ``/tmp``; nothing else of the host
(no ``/root``, ``/home``, ``/work``, suite folders, hidden tests).

The writable repository is a tmpfs of ``Limits.workspace_bytes`` the host copy is copied into at
the start of each command: writes past it fail inside the sandbox ("No space left on device") and
the command's output says the workspace is full. The host disk is never written by the sandbox:
after the command, every process it left is killed and the sandbox streams a tar of the workspace
through a pipe; the host keeps at most the quota (plus header slack) of it and puts it in place of
its copy (``_save.py``), so an episode's folder never holds more than the quota. A tmpfs is memory:
the quota is what a command may hold in RAM while it runs.

Limits, per command: CPU seconds, address space, file size (``prlimit``) and a process count
(RLIMIT_NPROC), plus a wall-clock timeout enforced inside the sandbox (``timeout -s KILL``; the
command keeps what it wrote), after which every other process of the command is killed before its
files are saved. The host's own timer, 30 s later, SIGKILLs ``bwrap``; ``--die-with-parent`` and
the PID namespace then take every process with it. Nothing a command starts in the background
outlives it.

RLIMIT_NPROC does not bind root, and ``bwrap --unshare-user`` run by root maps the sandbox user to
host uid 0, so as root the command instead drops, inside the sandbox, to a host uid of its own
(``setpriv``; bwrap keeps CAP_SETUID/CAP_SETGID/CAP_SETPCAP just for that step, then none are
left). Each :class:`Sandbox` gets a distinct uid from a high range that no real account uses, so
its process count is its own, and the repository copy is chowned to it before each command. Run
by a non-root user, bwrap makes a user namespace instead and RLIMIT_NPROC, set inside it, counts
that namespace's processes (Linux >= 5.14).

Without ``bwrap`` the constructor raises :class:`SandboxUnavailable`, unless ``unsafe=True``: then
commands run directly on the host in the repository folder, with the rlimits and timeout only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kvharness.env._save import SaveStream
from kvharness.errors import UserError

__all__ = [
    "REPO_MOUNT",
    "CommandResult",
    "Limits",
    "Sandbox",
    "SandboxUnavailable",
    "bwrap_available",
    "python_env_paths",
    "stop",
]

REPO_MOUNT = "/work/repo"
"""Where the episode's repository copy appears inside the sandbox (also the working directory)."""

_UID_BASE = 1_700_000
_uid_counter = itertools.count()
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_TRUNCATED = "\n[... output truncated: {n} more bytes ...]\n"
_COPY_FROM = "/kvh/in"
_TAR_SLACK = 64 << 20
"""Bytes of tar headers allowed over the quota in a save stream (many small files)."""
_SAVE_GRACE_S = 30.0
"""Wall seconds a command's files have, past its timeout, to come back to the host."""
_FULL_KIB = 256
"""A workspace with less than this free after a command is reported full."""

_WRAPPER = f"""
fd=$1 timeout=$2 quota_mib=$3 n=$4
shift 4
saved=""
while [ "$n" -gt 0 ]; do saved="$saved $1"; shift; n=$((n - 1)); done
if [ "$fd" != - ]; then eval "exec 3>&$fd $fd>&-"; fi
copied=0
for f in {_COPY_FROM}/* {_COPY_FROM}/.[!.]* {_COPY_FROM}/..?*; do
    if [ -e "$f" ] || [ -L "$f" ]; then cp -a "$f" {REPO_MOUNT}/ 2>/dev/null || copied=1; fi
done
if [ "$copied" != 0 ]; then
    echo "kvharness: the repository does not fit in the workspace ($quota_mib MiB)" >&2
fi
timeout -s KILL "$timeout" "$@" 3>&-
rc=$?
kill -KILL -1 2>/dev/null
kill -KILL -1 2>/dev/null
free=$(df -Pk {REPO_MOUNT} 2>/dev/null | awk 'NR == 2 {{print $4}}')
if [ "${{free:-{_FULL_KIB}}}" -lt {_FULL_KIB} ]; then
    echo "kvharness: the workspace is full: it holds at most $quota_mib MiB, and writes past that \
failed (No space left on device); delete files to make room" >&2
fi
if [ "$fd" != - ] && [ -n "$saved" ]; then tar -C / -cf - $saved >&3 2>/dev/null; fi
exit $rc
"""
"""Runs inside the sandbox as the command's user, after the limits: copies the repository into
the workspace tmpfs, runs the command under its wall-clock limit, kills whatever it left running,
says when the workspace is full, and streams the saved folders to the host."""


class SandboxUnavailable(UserError):
    """bubblewrap is missing or does not work here, and unsafe mode was not asked for."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-command limits. Sizes in bytes, times in seconds."""

    timeout_s: float = 60.0
    cpu_s: int = 60
    memory_bytes: int = 4 << 30
    processes: int = 128
    file_size_bytes: int = 512 << 20
    output_bytes: int = 1 << 20
    """Captured stdout (and stderr), each; the rest is counted and dropped."""
    tmp_bytes: int = 512 << 20
    """Size of the private /tmp (a tmpfs), and of each exported folder."""
    workspace_bytes: int = 256 << 20
    """Size of the writable repository: a tmpfs of this size the repository is copied into for
    each command; writes past it fail with "No space left on device"."""


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one command did. A command killed by a signal has ``returncode`` 128 + signal (as
    bwrap reports it; -signal in unsafe mode); one killed at its wall-clock timeout has
    ``timed_out`` set and ``returncode`` -9."""

    returncode: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def bwrap_available() -> bool:
    """Whether ``bwrap`` is on PATH."""
    return shutil.which("bwrap") is not None


def python_env_paths(venv: Path) -> tuple[Path, ...]:
    """The host paths a virtual environment needs inside the sandbox: itself and its base Python.

    The venv's ``python`` is a symlink into the base installation (e.g. ``/root/.pyenv/...``), so
    that installation's prefix must be mounted too unless it lives under ``/usr``.
    """
    venv = venv.resolve()
    python = (venv / "bin" / "python").resolve()
    prefix = python.parent.parent
    paths = [venv]
    if prefix != venv and not prefix.is_relative_to("/usr"):
        paths.append(prefix)
    return tuple(paths)


class Sandbox:
    """Runs commands against one repository copy. Not thread-safe per instance, and one
    repository folder serves one sandbox at a time (a command replaces the folder when it ends);
    cheap to create.

    ``repo`` is the host folder of the episode's copy. Commands work on a copy of it in a tmpfs of
    ``limits.workspace_bytes``; when ``persist`` is true, the folder is replaced after each command
    by what the command left (at most the quota, see ``_save.py``), else their changes are dropped
    (a grading run). As root, ``repo``'s ownership is set to the sandbox's uid before every
    command. ``ro_paths`` are host paths made visible read-only at the same path (a venv, see
    :func:`python_env_paths`). ``exports`` are ``(host folder, sandbox path)`` pairs: the sandbox
    path is a fresh tmpfs (``limits.tmp_bytes``) whose files are copied into the host folder after
    each command (the grader's report; in unsafe mode commands write the host folder directly:
    :meth:`path_of`). ``env`` replaces
    the host environment (``PATH``, ``HOME=/tmp``, ``LANG`` and ``PYTHONDONTWRITEBYTECODE`` are
    set unless given). ``devices`` are host device nodes made usable inside (a GPU's
    ``/dev/nvidia*`` for a task timed on it); the sandbox has no other device but the basic ones.
    """

    def __init__(
        self,
        repo: Path,
        *,
        ro_paths: Sequence[Path] = (),
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        unsafe: bool = False,
        persist: bool = True,
        exports: Sequence[tuple[Path, str]] = (),
        devices: Sequence[Path] = (),
    ) -> None:
        self.repo = repo.resolve()
        self.devices = tuple(Path(d) for d in devices)
        self.ro_paths = tuple(Path(p).resolve() for p in ro_paths)
        self.persist = persist
        self.exports = tuple((Path(h).resolve(), d) for h, d in exports)
        self.limits = limits or Limits()
        self.unsafe = unsafe
        self._as_root = os.geteuid() == 0
        self._uid = _UID_BASE + (os.getpid() * 1024 + next(_uid_counter)) % 1_000_000
        if not self.repo.is_dir():
            raise UserError(f"{repo}: repository folder does not exist")
        if not unsafe:
            missing = [t for t in ("bwrap", "prlimit", "setpriv") if shutil.which(t) is None]
            if self._as_root is False and "setpriv" in missing:
                missing.remove("setpriv")
            if missing:
                raise SandboxUnavailable(
                    f"cannot sandbox commands: {', '.join(missing)} not found; install Debian's "
                    "bubblewrap and util-linux (`make system-deps` or `apt-get install bubblewrap`), "
                    "or pass --unsafe-no-sandbox to run commands on the host, unconfined"
                )
        path = [str(p / "bin") for p in self.ro_paths if (p / "bin" / "python").exists()]
        base_env = {
            "PATH": ":".join([*path, "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            # No .pyc files in the repository: a same-size edit within the second of the last
            # compile would otherwise run stale bytecode (pyc checks mtime in seconds and size).
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        base_env.update(env or {})
        self.env = base_env

    @property
    def workdir(self) -> str:
        """The repository's path as commands see it."""
        return str(self.repo) if self.unsafe else REPO_MOUNT

    def path_of(self, host: Path) -> str:
        """Where commands see the host folder ``host`` of :attr:`exports`."""
        host = host.resolve()
        for bound, dest in self.exports:
            if host == bound or host.is_relative_to(bound):
                return str(host) if self.unsafe else dest + str(host)[len(str(bound)) :]
        raise ValueError(f"{host} is not mounted in the sandbox")

    # -- command line -------------------------------------------------------------------------

    def _limit_argv(self) -> list[str]:
        lim = self.limits
        return [
            "prlimit",
            f"--cpu={lim.cpu_s}",
            f"--as={lim.memory_bytes}",
            f"--nproc={lim.processes}",
            f"--fsize={lim.file_size_bytes}",
            "--core=0",
            "--",
        ]

    def argv(
        self,
        command: str | Sequence[str],
        *,
        timeout_s: float | None = None,
        save_fd: int | None = None,
    ) -> list[str]:
        """The full host argv that runs ``command`` (a shell string or an argv) in the sandbox,
        with a wall-clock limit of ``timeout_s`` (default ``limits.timeout_s``), writing the saved
        folders as a tar stream to the inherited descriptor ``save_fd`` when given."""
        cmd = ["/bin/bash", "-c", command] if isinstance(command, str) else list(command)
        if self.unsafe:
            return cmd
        lim = self.limits
        args = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        args += ["--hostname", "sandbox", "--die-with-parent", "--new-session"]
        if not self._as_root:
            args += ["--unshare-user"]
        bound: list[Path] = [Path("/usr"), Path("/etc")]
        args += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for link in _SYSTEM_LINKS:
            host = Path(link)
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), link]
            elif host.is_dir():
                args += ["--ro-bind", link, link]
                bound.append(host)
        args += ["--dev", "/dev", "--proc", "/proc"]
        for device in self.devices:
            args += ["--dev-bind", str(device), str(device)]
        args += ["--perms", "1777", "--size", str(lim.tmp_bytes), "--tmpfs", "/tmp"]
        made: set[Path] = {Path("/"), Path("/tmp")}
        mounts: list[tuple[str, str, Path]] = [("--ro-bind", str(p), p) for p in self.ro_paths]
        mounts.append(("--ro-bind", str(self.repo), Path(_COPY_FROM)))
        mounts.append((str(lim.workspace_bytes), "", Path(REPO_MOUNT)))
        mounts += [(str(lim.tmp_bytes), "", Path(dest)) for _, dest in self.exports]
        for kind, host_path, dest in mounts:
            if any(dest.is_relative_to(b) for b in bound):
                continue
            for parent in reversed(dest.parents):
                if parent not in made and not any(parent.is_relative_to(b) for b in bound):
                    args += ["--perms", "0755", "--dir", str(parent)]
                    made.add(parent)
            if kind == "--ro-bind":
                args += [kind, host_path, str(dest)]
            else:
                args += ["--perms", "0777", "--size", kind, "--tmpfs", str(dest)]
            bound.append(dest)
        args += ["--chdir", REPO_MOUNT]
        if self._as_root:
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            args += ["--cap-add", "CAP_SETPCAP", "--"]
            uid = str(self._uid)
            args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            args += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        else:
            args += ["--"]
        saved = ([REPO_MOUNT] if self.persist else []) + [d for _, d in self.exports]
        timeout = lim.timeout_s if timeout_s is None else timeout_s
        fd = "-" if save_fd is None else str(save_fd)
        wrapper = ["/bin/bash", "-c", _WRAPPER, "kvh-sandbox", fd, f"{timeout:g}"]
        wrapper += [str(lim.workspace_bytes >> 20), str(len(saved))]
        wrapper += [p.lstrip("/") for p in saved]
        return args + self._limit_argv() + wrapper + cmd

    def _prepare(self) -> None:
        if self._as_root and not self.unsafe:
            _chown_tree(self.repo, self._uid)
            for host, _ in self.exports:
                _chown_tree(host, self._uid)

    def _preexec(self) -> None:  # unsafe mode only: the rlimits without a sandbox
        lim = self.limits
        resource.setrlimit(resource.RLIMIT_CPU, (lim.cpu_s, lim.cpu_s))
        resource.setrlimit(resource.RLIMIT_AS, (lim.memory_bytes, lim.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim.file_size_bytes, lim.file_size_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def _popen_kwargs(self, env: Mapping[str, str] | None) -> dict[str, object]:
        full_env = {**self.env, **(env or {})}
        kwargs: dict[str, object] = {"env": full_env, "start_new_session": True}
        if self.unsafe:
            kwargs["cwd"] = str(self.repo)
            kwargs["preexec_fn"] = self._preexec
        return kwargs

    # -- running ------------------------------------------------------------------------------

    def _save_stream(self) -> SaveStream | None:
        """The stream a command's saved folders come back through (None: nothing to save)."""
        if self.unsafe or not (self.persist or self.exports):
            return None
        cap = (self.limits.workspace_bytes if self.persist else 0) + _TAR_SLACK
        return SaveStream(self.repo.parent, cap + len(self.exports) * self.limits.tmp_bytes)

    def _finish(
        self, save: SaveStream | None, returncode: int, start: float, timeout: float, killed: bool
    ) -> tuple[int, bool, str]:
        """After a command: put its saved folders in place; returns the return code, whether the
        command timed out, and a note for its stderr."""
        duration = time.perf_counter() - start
        timed_out = killed or (returncode == 128 + signal.SIGKILL and duration >= timeout)
        note = ""
        if save is not None:
            problem = self._restore(save)
            if problem:
                note = (
                    f"\nkvharness: the command's changes to the repository were lost: {problem}\n"
                )
        return (-signal.SIGKILL if timed_out else returncode), timed_out, note

    def _restore(self, save: SaveStream) -> str | None:
        landing = Path(tempfile.mkdtemp(prefix=".kvh-land-", dir=self.repo.parent))
        try:
            problem = save.extract(landing)
            if problem is not None:
                return problem
            for host, dest in self.exports:
                got = landing / dest.lstrip("/")
                for entry in got.iterdir() if got.is_dir() else ():
                    os.rename(entry, host / entry.name)
            if self.persist:
                new = landing / REPO_MOUNT.lstrip("/")
                if new.is_symlink() or not new.is_dir():
                    return "the saved files hold no repository"
                old = landing / "old"
                os.rename(self.repo, old)
                os.rename(new, self.repo)
            return None
        finally:
            shutil.rmtree(landing, ignore_errors=True)

    def run(
        self,
        command: str | Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run ``command`` to completion or timeout (default ``limits.timeout_s``); never raises
        for the command's own failure. Output is decoded as UTF-8 (with replacement) and capped."""
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        self._prepare()
        save = self._save_stream()
        start = time.perf_counter()
        proc = subprocess.Popen(
            self.argv(command, timeout_s=timeout, save_fd=save.write_fd if save else None),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(save.write_fd,) if save else (),
            **self._popen_kwargs(env),  # type: ignore[call-overload]
        )
        saving = None
        if save is not None:
            save.sent()
            saving = save.drain()
        out = _CappedReader(proc.stdout, self.limits.output_bytes)
        err = _CappedReader(proc.stderr, self.limits.output_bytes)
        if stdin is not None and proc.stdin is not None:
            try:
                proc.stdin.write(stdin.encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass
        # A timer thread kills at the deadline; Popen.wait(timeout=...) would poll with sleeps of up
        # to 50 ms, which is most of a short command's cost.
        expired = threading.Event()

        def kill() -> None:
            expired.set()
            _kill_group(proc.pid)

        timer = threading.Timer(self._backstop(timeout), kill)
        timer.start()
        proc.wait()
        timer.cancel()
        if saving is not None:
            saving.join()
        code, timed_out, note = self._finish(
            save, proc.returncode, start, timeout, expired.is_set()
        )
        duration = time.perf_counter() - start
        return CommandResult(code, out.text(), err.text() + note, duration, timed_out)

    def start(
        self,
        command: Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` in the sandbox and hand back the process, its stdin, stdout and
        stderr pipes open, for a caller that talks to it while it runs (a timing harness). Only
        for a sandbox that saves nothing (``persist=False``, no exports). The sandbox kills the
        command at ``timeout_s`` (default ``limits.timeout_s``), and its processes with it; the
        caller waits for it, drains stderr and kills it on error (:func:`stop`)."""
        if self.persist or self.exports:
            raise ValueError("an interactive command cannot save files: use persist=False")
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        self._prepare()
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            self.argv(command, timeout_s=timeout),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **self._popen_kwargs(env),  # type: ignore[call-overload]
        )
        return proc

    def _backstop(self, timeout: float) -> float:
        """The host's own wall-clock limit: the sandbox enforces ``timeout`` itself and then has
        time to save the command's files (unsafe mode has no sandbox: ``timeout`` exactly)."""
        return timeout if self.unsafe else timeout + _SAVE_GRACE_S

    async def arun(
        self,
        command: str | Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """:meth:`run` for asyncio: many sandboxes can run concurrently on one event loop."""
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        await asyncio.to_thread(self._prepare)
        save = self._save_stream()
        start = time.perf_counter()
        argv = self.argv(command, timeout_s=timeout, save_fd=save.write_fd if save else None)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(save.write_fd,) if save else (),
            **self._popen_kwargs(env),  # type: ignore[arg-type]
        )
        saving = None
        if save is not None:
            save.sent()
            saving = asyncio.ensure_future(save.adrain())
        assert proc.stdout is not None and proc.stderr is not None
        readers = asyncio.gather(
            _read_capped(proc.stdout, self.limits.output_bytes),
            _read_capped(proc.stderr, self.limits.output_bytes),
        )
        killed = False
        try:
            await asyncio.wait_for(proc.wait(), self._backstop(timeout))
        except TimeoutError:
            killed = True
            _kill_group(proc.pid)
            await proc.wait()
        out, err = await readers
        if saving is not None:
            await saving
        assert proc.returncode is not None
        code, timed_out, note = await asyncio.to_thread(
            self._finish, save, proc.returncode, start, timeout, killed
        )
        duration = time.perf_counter() - start
        return CommandResult(code, out, err + note, duration, timed_out)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill a process from :meth:`Sandbox.start` and everything it started, and reap it."""
    _kill_group(proc.pid)
    proc.wait()


def _chown_tree(root: Path, uid: int) -> None:
    os.lchown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


def _decode(data: bytes, dropped: int) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + _TRUNCATED.format(n=dropped) if dropped else text


class _CappedReader:
    """Drains a pipe on a thread, keeping the first ``cap`` bytes."""

    def __init__(self, pipe: IO[bytes] | None, cap: int) -> None:
        self._chunks: list[bytes] = []
        self._kept = 0
        self._dropped = 0
        self._cap = cap
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe: IO[bytes] | None) -> None:
        if pipe is None:
            return
        with pipe:
            while chunk := os.read(pipe.fileno(), 65536):
                room = max(self._cap - self._kept, 0)
                if room:
                    self._chunks.append(chunk[:room])
                    self._kept += min(room, len(chunk))
                self._dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        self._thread.join()
        return _decode(b"".join(self._chunks), self._dropped)


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> str:
    kept = bytearray()
    dropped = 0
    while chunk := await stream.read(65536):
        room = cap - len(kept)
        kept += chunk[: max(room, 0)]
        dropped += max(0, len(chunk) - max(room, 0))
    return _decode(bytes(kept), dropped)
