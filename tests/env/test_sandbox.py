"""The bubblewrap sandbox, for real: what a command can do, and escape attempts, each contained."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import kvharness.env.sandbox as sandbox_mod
from kvharness.env.sandbox import (
    REPO_MOUNT,
    Limits,
    Sandbox,
    SandboxUnavailable,
    python_env_paths,
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "episode" / "repo"
    path.mkdir(parents=True)
    (path / "hello.txt").write_text("hello\n")
    return path


@pytest.fixture
def box(repo: Path, env_venv: Path) -> Sandbox:
    return Sandbox(repo, ro_paths=python_env_paths(env_venv), limits=Limits(timeout_s=30))


def _processes_matching(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and entry.name != str(os.getpid()):
            found.append(int(entry.name))
    return found


def _processes_of_uid(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            line = next(ln for ln in status.splitlines() if ln.startswith("Uid:"))
            if int(line.split()[1]) == uid:
                found.append(int(entry.name))
    return found


def test_runs_in_the_repo_with_its_python_and_writes_back(box: Sandbox, repo: Path) -> None:
    result = box.run("pwd; cat hello.txt; python -c 'print(6*7)'; echo made > new.txt; exit 3")
    assert result.stdout.split() == [REPO_MOUNT, "hello", "42"]
    assert result.returncode == 3 and not result.timed_out and not result.ok
    assert (repo / "new.txt").read_text() == "made\n"


def test_argv_command_and_stdin(box: Sandbox) -> None:
    result = box.run(["python", "-c", "import sys; print(sys.stdin.read().upper())"], stdin="abc")
    assert result.stdout.strip() == "ABC" and result.ok


@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on the host's 127.0.0.1 that answers b"pong"."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"pong")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_escape_network_is_unreachable(box: Sandbox, host_server: int) -> None:
    probe = (
        "import socket,sys\n"
        "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3)\n"
        "print(s.recv(4).decode())\n"
    )
    # The same probe from the host reaches the server, so the sandbox's failure is its own.
    host = subprocess.run(
        ["python3", "-c", probe, str(host_server)], capture_output=True, text=True, timeout=30
    )
    assert host.stdout.strip() == "pong"
    inside = box.run(["python", "-c", probe, str(host_server)])
    assert inside.returncode != 0 and "pong" not in inside.stdout
    assert "ConnectionRefusedError" in inside.stderr or "unreachable" in inside.stderr
    dns = box.run(["python", "-c", "import socket; socket.getaddrinfo('pypi.org', 443)"])
    assert dns.returncode != 0
    interfaces = box.run("cat /proc/net/dev")
    assert "lo:" in interfaces.stdout and "eth" not in interfaces.stdout


def test_escape_writes_outside_the_repo_do_not_reach_the_host(
    box: Sandbox, repo: Path, tmp_path: Path
) -> None:
    marker = f"kvh-escape-{os.getpid()}"
    targets = ["/etc", "/usr", "/usr/local/bin", "/", "/root", "/work", str(tmp_path), "/var/tmp"]
    script = "; ".join(f"echo x > {t}/{marker} 2>/dev/null && echo WROTE {t}" for t in targets)
    result = box.run(script + f"; echo x > /tmp/{marker} && echo TMP-OK")
    assert "TMP-OK" in result.stdout  # the private /tmp is writable ...
    assert not Path("/tmp", marker).exists()  # ... and is not the host's
    for target in targets:
        assert not Path(target, marker).exists(), target
    # Everything that did succeed stayed inside the sandbox's own throwaway mounts.
    wrote = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("WROTE")}
    assert wrote <= {"/", "/root", "/work", str(tmp_path)}
    # The venv is mounted read-only.
    python = box.ro_paths[0]
    attempt = box.run(f"touch {python}/{marker}")
    assert attempt.returncode != 0 and not (python / marker).exists()


def test_escape_hidden_tests_and_host_files_are_not_visible(
    box: Sandbox, repo: Path, tmp_path: Path
) -> None:
    hidden = repo.parent / "hidden" / "tests" / "test_secret.py"
    hidden.parent.mkdir(parents=True)
    secret = f"SECRET-{os.getpid()}-{time.time_ns()}"
    hidden.write_text(f"# {secret}\n")
    assert hidden.read_text().strip().endswith(secret)
    result = box.run(
        f"cat {hidden}; ls {repo.parent} {tmp_path} /work/main /root/.ssh 2>&1; "
        f"grep -rs {secret} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "
        "--exclude-dir=usr --exclude-dir=etc; echo grep=$?"
    )
    assert secret not in result.stdout.replace(f"grep -rs {secret}", "")
    assert "grep=1" in result.stdout  # searched, found nothing
    assert "No such file or directory" in result.stdout


def test_escape_fork_bomb_is_contained(repo: Path, env_venv: Path) -> None:
    limits = Limits(timeout_s=8, processes=32)
    box = Sandbox(repo, ro_paths=python_env_paths(env_venv), limits=limits)
    # Count how many processes can be forked: capped at the limit.
    counter = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 1000:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('forks', n, e.errno)\n"
    )
    counted = box.run(["python", "-c", counter], timeout_s=20)
    words = counted.stdout.split()
    assert words[0] == "forks" and int(words[1]) < 32, counted
    # A real shell fork bomb: killed at its timeout, nothing of it left, the host still forks.
    start = time.perf_counter()
    bomb = box.run("bomb() { bomb | bomb & }; bomb; sleep 100")
    assert bomb.timed_out and time.perf_counter() - start < 30
    if os.geteuid() == 0:
        # Killing the namespace's init makes the kernel kill the rest asynchronously: allow the
        # teardown to finish, then nothing of the bomb may be left.
        deadline = time.monotonic() + 10
        while _processes_of_uid(box._uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_of_uid(box._uid) == []
    assert subprocess.run(["true"]).returncode == 0


def test_escape_never_ending_command_is_killed_with_its_whole_tree(box: Sandbox) -> None:
    marker = "987654"
    start = time.perf_counter()
    result = box.run(
        f"(setsid sleep {marker} &); nohup sleep {marker}1 >/dev/null 2>&1 & "
        "trap '' TERM; while true; do :; done",
        timeout_s=2,
    )
    elapsed = time.perf_counter() - start
    assert result.timed_out and result.returncode == -9
    assert 2 <= elapsed < 15
    time.sleep(0.2)
    assert _processes_matching(f"sleep {marker}") == []


def test_cpu_and_memory_limits(repo: Path, env_venv: Path) -> None:
    limits = Limits(timeout_s=60, cpu_s=1, memory_bytes=512 << 20)
    box = Sandbox(repo, ro_paths=python_env_paths(env_venv), limits=limits)
    spin = box.run("while true; do :; done")
    assert not spin.timed_out and spin.returncode != 0 and spin.duration_s < 30
    hog = box.run(["python", "-c", "x = bytearray(2 << 30)"])
    assert hog.returncode != 0 and "MemoryError" in hog.stderr


def test_output_is_capped(repo: Path, env_venv: Path) -> None:
    box = Sandbox(repo, ro_paths=python_env_paths(env_venv), limits=Limits(output_bytes=1000))
    result = box.run("head -c 3000000 /dev/zero | tr '\\0' a")
    assert result.ok
    assert result.stdout.startswith("a" * 1000)
    assert "2999000 more bytes" in result.stdout


def test_async_commands_run_concurrently(repo: Path, env_venv: Path) -> None:
    """Three episodes, each with its own repository (a command replaces its repository folder
    when it ends, so one folder serves one sandbox at a time), run their commands at once."""
    repos = [repo.parent / f"repo-{i}" for i in range(3)]
    for copy in repos:
        shutil.copytree(repo, copy)
    boxes = [Sandbox(r, ro_paths=python_env_paths(env_venv)) for r in repos]
    cmd = "date +%s.%N; sleep 1.5; date +%s.%N"

    async def main() -> list[list[float]]:
        results = await asyncio.gather(*(b.arun(cmd) for b in boxes))
        return [[float(x) for x in r.stdout.split()] for r in results]

    spans = asyncio.run(main())
    assert max(s[0] for s in spans) < min(s[1] for s in spans)  # all three overlapped

    async def timeout() -> bool:
        r = await boxes[0].arun("sleep 100", timeout_s=1)
        return r.timed_out

    assert asyncio.run(timeout())


def test_missing_bwrap_refuses_unless_unsafe(
    repo: Path, monkeypatch: pytest.MonkeyPatch, env_venv: Path
) -> None:
    real_which = sandbox_mod.shutil.which
    monkeypatch.setattr(
        sandbox_mod.shutil, "which", lambda name: None if name == "bwrap" else real_which(name)
    )
    with pytest.raises(SandboxUnavailable, match="--unsafe-no-sandbox"):
        Sandbox(repo)
    unsafe = Sandbox(repo, unsafe=True, ro_paths=python_env_paths(env_venv))
    result = unsafe.run("pwd; cat hello.txt")
    assert result.stdout.split() == [str(repo), "hello"]
    assert unsafe.run("sleep 100", timeout_s=1).timed_out


def _disk_bytes(root: Path) -> int:
    """Bytes the folder really occupies on the host disk (allocated blocks, links not followed)."""
    return sum(p.lstat().st_blocks * 512 for p in root.rglob("*"))


QUOTA = 16 << 20


@pytest.fixture
def small(repo: Path, env_venv: Path) -> Sandbox:
    limits = Limits(timeout_s=30, workspace_bytes=QUOTA)
    return Sandbox(repo, ro_paths=python_env_paths(env_venv), limits=limits)


def test_writing_past_the_workspace_quota_is_an_observation_not_a_host_problem(
    small: Sandbox, repo: Path
) -> None:
    result = small.run("head -c 40M /dev/zero > big; echo wrote $?")
    assert "No space left on device" in result.stderr
    assert "kvharness: the workspace is full: it holds at most 16 MiB" in result.stderr
    assert _disk_bytes(repo) <= QUOTA
    assert (repo / "big").stat().st_size <= QUOTA
    again = small.run("rm big && echo ok > small.txt && cat hello.txt")
    assert again.ok and again.stdout == "hello\n" and "full" not in again.stderr
    assert sorted(p.name for p in repo.iterdir()) == ["hello.txt", "small.txt"]


def test_many_files_past_the_quota_are_bounded_too(small: Sandbox, repo: Path) -> None:
    result = small.run("for i in $(seq 40); do head -c 1M /dev/zero > f$i || break; done")
    assert "workspace is full" in result.stderr
    assert _disk_bytes(repo) <= QUOTA


def test_a_sparse_file_larger_than_the_quota_never_reaches_the_host(
    small: Sandbox, repo: Path
) -> None:
    result = small.run("truncate -s 400M sparse && echo made > other.txt")
    assert result.returncode == 0
    assert "changes to the repository were lost" in result.stderr
    assert sorted(p.name for p in repo.iterdir()) == ["hello.txt"]


def test_a_timed_out_command_keeps_its_writes_and_leaves_nothing_running(
    box: Sandbox, repo: Path
) -> None:
    result = box.run(
        "echo kept > kept.txt; (sleep 2; echo late > late.txt) & sleep 100", timeout_s=1
    )
    assert result.timed_out and result.returncode == -9
    assert (repo / "kept.txt").read_text() == "kept\n"
    time.sleep(2.5)
    assert not (repo / "late.txt").exists()


def test_async_commands_save_their_files_too(box: Sandbox, repo: Path) -> None:
    async def main() -> None:
        await box.arun("echo async > a.txt")

    asyncio.run(main())
    assert (repo / "a.txt").read_text() == "async\n"


def test_an_interactive_command_talks_over_its_pipes(repo: Path, env_venv: Path) -> None:
    quiet = Sandbox(repo, ro_paths=python_env_paths(env_venv), persist=False)
    proc = quiet.start(["python", "-c", "import sys; print(sys.stdin.readline().upper(), end='')"])
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"ping\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == b"PING\n"
    assert proc.wait(timeout=30) == 0
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        pipe.close()
    with pytest.raises(ValueError, match="persist=False"):
        Sandbox(repo).start(["true"])


def test_a_device_is_usable_inside_only_when_passed(repo: Path) -> None:
    """/dev/full (a device the sandbox's own /dev also has) stands in for a GPU's nodes: passed,
    it is bound from the host; the argv says so."""
    plain = Sandbox(repo, persist=False).argv(["true"])
    with_dev = Sandbox(repo, persist=False, devices=[Path("/dev/full")]).argv(["true"])
    assert "--dev-bind" not in plain
    i = with_dev.index("--dev-bind")
    assert with_dev[i : i + 3] == ["--dev-bind", "/dev/full", "/dev/full"]
    proc = Sandbox(repo, persist=False, devices=[Path("/dev/full")]).run(
        "echo x > /dev/full; echo $?"
    )
    assert proc.stdout.strip() == "1"  # writing /dev/full fails with ENOSPC, as on the host
