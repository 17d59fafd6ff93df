"""Build a task suite from pinned sdists: download, find mutants the package's tests catch, write.

For each package of a :class:`SuiteSpec`: ``pip download`` the sdist (checked against its
sha256), unpack it, and for each target module run its test file once on the original to learn
which tests pass (baseline). Then, in a seeded order, try mutation candidates
(:mod:`.mutations`), at most one per function: run the baseline-passing tests that mention the
mutated function (or, if none does, the whole file) with ``-x``; a mutant none of them catches, or
one that hangs, is dropped, as is one that stops the test module from importing. A caught mutant's FAIL_TO_PASS are
the selected tests it fails (a seeded sample of at most ``max_fail_to_pass``), PASS_TO_PASS a
seeded sample of the other baseline tests (those the mutant also fails are left out); both lists
are then re-run twice on the mutant (every FAIL_TO_PASS must fail both times: failures that depend
on chance are not bugs an agent can be judged on) and once on the original (all must pass).

Every test run happens in the sandbox, with the venv the suite's tasks will be graded with.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvharness.env.grading import TestRun, run_tests
from kvharness.env.sandbox import Limits, python_env_paths
from kvharness.env.scan import scan_findings
from kvharness.env.task import Mutation, Task, save_task, write_suite_index
from kvharness.env.tasks import mutations
from kvharness.env.tasks.issue import issue_text
from kvharness.env.tasks.suite import PackageSpec, SuiteSpec, Target
from kvharness.env.workspace import Change
from kvharness.errors import UserError

__all__ = ["SEED_PLUGIN", "TEST_COMMAND", "BuildStats", "build_suite", "ensure_venv", "fetch_sdist"]

_DEPS_STAMP = ".kvh-test-deps.json"
_COLLECT_LIMITS = Limits(timeout_s=600, cpu_s=120)
_RUN_CPU_S = 45
"""CPU seconds a test run of a candidate mutant may use; one that needs more is a hang."""


def _killed(run: TestRun) -> bool:
    """The run hit a limit (CPU time: SIGKILL/SIGXCPU; or the wall-clock backstop)."""
    code = run.command.returncode  # pytest's own codes are 0-5; a signal gives 128+N or -N
    return run.command.timed_out or code < 0 or code >= 128


@dataclass(slots=True)
class BuildStats:
    """Counters of one build (for the progress line and the suite's meta)."""

    tried: int = 0
    survived: int = 0
    hung: int = 0
    broken: int = 0
    unverified: int = 0
    kept: int = 0
    test_runs: int = 0


SEED_PLUGIN = "kvh_random_seed"
"""A pytest plugin :func:`ensure_venv` puts in the task venv: it seeds ``random`` before every test,
so packages' randomised tests have one outcome, in the build and in grading alike."""

_SEED_PLUGIN_SOURCE = '''"""Installed by kvharness: seed `random` when loaded (before test modules are
imported, for their module-level draws) and before each test (reproducible task outcomes)."""

import random

random.seed(0)


def pytest_runtest_setup(item):
    random.seed(0)
'''

TEST_COMMAND: tuple[str, ...] = (
    *("setarch", "-R", "python", "-m", "pytest"),
    *("-p", "no:cacheprovider", "-p", SEED_PLUGIN),
)
"""How built tasks run pytest: address-space randomisation off (``setarch -R``), so reprs and
orders that depend on object addresses repeat, and ``random`` seeded per test."""


def ensure_venv(venv: Path, deps: Sequence[str]) -> Path:
    """Create (once) the venv tasks run in, with ``deps`` (requirement lines, hashes allowed) and
    the :data:`SEED_PLUGIN` installed; returns ``venv``. Rebuilt when the requested deps differ from those in its stamp file."""
    stamp = venv / _DEPS_STAMP
    if _current(venv, deps):
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be creating it right now
        if not (stamp.exists() and json.loads(stamp.read_text()) == list(deps)):
            _create_venv(venv, deps)
        for site in venv.glob("lib/python3*/site-packages"):
            (site / f"{SEED_PLUGIN}.py").write_text(_SEED_PLUGIN_SOURCE)
    return venv


def _current(venv: Path, deps: Sequence[str]) -> bool:
    stamp = venv / _DEPS_STAMP
    if not (stamp.exists() and json.loads(stamp.read_text()) == list(deps)):
        return False
    plugins = list(venv.glob(f"lib/python3*/site-packages/{SEED_PLUGIN}.py"))
    return bool(plugins) and plugins[0].read_text() == _SEED_PLUGIN_SOURCE


def _create_venv(venv: Path, deps: Sequence[str]) -> None:
    stamp = venv / _DEPS_STAMP
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    requirements = venv / "kvh-test-requirements.txt"
    requirements.write_text("".join(f"{dep}\n" for dep in deps))
    done = subprocess.run([*pip, "-r", str(requirements)], capture_output=True, text=True)
    if done.returncode != 0:
        names = " ".join(dep.split()[0] for dep in deps)
        raise UserError(f"cannot install {names} into {venv}: {done.stderr.strip()[-300:]}")
    stamp.write_text(json.dumps(list(deps)))


def _norm(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def fetch_sdist(pkg: PackageSpec, cache: Path) -> Path:
    """The package's sdist in ``cache`` (downloaded with pip if absent), its sha256 checked."""
    cache.mkdir(parents=True, exist_ok=True)

    def find() -> Path | None:
        for path in sorted(cache.glob("*.tar.gz")):
            stem = path.name.removesuffix(".tar.gz")
            name, _, version = stem.rpartition("-")
            if _norm(name) == _norm(pkg.name) and version == pkg.version:
                return path
        return None

    path = find()
    if path is None:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check"]
        cmd += ["--no-deps", "--no-binary", ":all:", f"{pkg.name}=={pkg.version}", "-d", str(cache)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        path = find()
        if done.returncode != 0 or path is None:
            raise UserError(
                f"cannot download the sdist of {pkg.name}=={pkg.version}: {done.stderr.strip()[-300:]}"
            )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != pkg.sha256:
        raise UserError(f"{path}: sha256 {digest} does not match the pinned {pkg.sha256}")
    return path


def _unpack(sdist: Path, dest: Path) -> Path:
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    return top


class _Runner:
    """Runs test selections on a work tree, sandboxed, counting runs."""

    def __init__(
        self, tree: Path, pkg: PackageSpec, env: tuple[Path, ...], stats: BuildStats
    ) -> None:
        self.tree, self.pkg, self.env, self.stats = tree, pkg, env, stats

    def run(
        self, nodeids: Sequence[str], *, cpu_s: int = _RUN_CPU_S, extra: Sequence[str] = ()
    ) -> TestRun:
        self.stats.test_runs += 1
        # A hang is judged by CPU seconds, not wall time, so the machine's load cannot change
        # which mutants are kept (the wall limit is only a backstop).
        limits = Limits(timeout_s=10.0 * cpu_s, cpu_s=cpu_s)
        return run_tests(
            self.tree,
            nodeids,
            python_path=self.pkg.python_path,
            test_command=TEST_COMMAND,
            ro_paths=self.env,
            limits=limits,
            extra_args=extra,
        )

    def collect(self, test_file: str) -> list[str]:
        self.stats.test_runs += 1
        from kvharness.env.sandbox import Sandbox

        sandbox = Sandbox(self.tree, ro_paths=self.env, limits=_COLLECT_LIMITS)
        pythonpath = ":".join(
            os.path.normpath(f"{sandbox.workdir}/{p}") for p in self.pkg.python_path
        )
        argv = ["python", "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts="]
        result = sandbox.run(
            [*argv, "--collect-only", "-q", test_file], env={"PYTHONPATH": pythonpath}
        )
        ids = [ln for ln in result.stdout.splitlines() if "::" in ln and not ln.startswith(" ")]
        if not ids:
            raise UserError(
                f"{self.pkg.name}: no tests collected from {test_file}: {result.stdout[-300:]}"
            )
        return ids


def _select(func: str, baseline: Sequence[str]) -> list[str]:
    """Baseline tests whose node id mentions the function (or, for a dunder, its class)."""
    parts = func.split(".")
    name = parts[-1]
    if name.startswith("__") and len(parts) > 1:
        name = parts[-2]
    needle = name.strip("_").lower()
    if len(needle) < 3:
        return []
    return [t for t in baseline if needle in t.lower()]


@dataclass(frozen=True, slots=True)
class _Found:
    mutation: Mutation
    source: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    messages: dict[str, str]


def _try_candidate(
    runner: _Runner,
    target: Target,
    original: str,
    cand: mutations.Candidate,
    baseline: list[str],
    spec: SuiteSpec,
    rng: random.Random,
) -> _Found | None:
    stats = runner.stats
    try:
        mutated, first, last = mutations.apply(original, cand)
    except mutations.MutationError:
        return None
    stats.tried += 1
    path = runner.tree / target.module
    selection = _select(cand.function, baseline) or baseline
    try:
        path.write_text(mutated)
        screen = runner.run(selection, extra=("-x",))
        if _killed(screen):
            stats.hung += 1
            return None
        caught = [t for t in selection if screen.outcomes[t] in ("failed", "error")]
        if not caught:
            stats.survived += 1
            return None
        full = runner.run(selection) if len(selection) > 1 else screen
        if _killed(full):
            stats.hung += 1
            return None
        if any(full.outcomes[t] == "missing" for t in selection):
            stats.broken += 1  # the test module did not even import: a poor task
            return None
        failing = sorted(t for t in selection if full.outcomes[t] in ("failed", "error"))
        f2p = sorted(rng.sample(failing, min(len(failing), spec.max_fail_to_pass)))
        rest = sorted(set(baseline) - set(failing))
        p2p = sorted(rng.sample(rest, min(len(rest), spec.max_pass_to_pass)))
        # Twice: a mutant whose failures depend on chance (random seeds, timing) is dropped.
        checks = [runner.run([*f2p, *p2p]) for _ in range(2)]
        p2p = [t for t in p2p if all(c.passed(t) for c in checks)]
        if any(
            _killed(c) or any(c.outcomes[t] not in ("failed", "error") for t in f2p) for c in checks
        ):
            stats.unverified += 1
            return None
        messages = {t: checks[0].messages.get(t, "") for t in f2p}
    finally:
        path.write_text(original)
    again = runner.run([*f2p, *p2p])
    if not all(again.passed(t) for t in [*f2p, *p2p]):
        stats.unverified += 1
        return None
    lines, new_lines = original.splitlines(), mutated.splitlines()
    new_last = last - (len(lines) - len(new_lines))  # drop_if turns several lines into one
    mutation = Mutation(
        file=target.module,
        line=first,
        end_line=last,
        operator=cand.operator,
        original="\n".join(lines[first - 1 : last]),
        mutated="\n".join(new_lines[first - 1 : new_last]),
    )
    return _Found(mutation, mutated, tuple(f2p), tuple(p2p), messages)


def lay_out(tree: Path, root: Path, pkg: PackageSpec) -> list[str]:
    """Lay ``tree`` out as a task folder's ``root`` (replaced if it exists): ``repo/`` a copy of
    it without caches and without ``pkg``'s hidden test files, which go to ``hidden/``; the
    hidden files' repo-relative paths."""
    if root.exists():
        shutil.rmtree(root)
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache")
    shutil.copytree(tree, root / "repo", ignore=ignore)
    hidden: list[str] = []
    for rel in pkg.hidden:
        src, agent_copy = tree / rel, root / "repo" / rel
        if src.is_dir():
            shutil.copytree(src, root / "hidden" / rel, ignore=ignore)
            shutil.rmtree(agent_copy)
            hidden += sorted(
                p.relative_to(tree).as_posix()
                for p in src.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts
            )
        else:
            (root / "hidden" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, root / "hidden" / rel)
            agent_copy.unlink()
            hidden.append(rel)
    return hidden


def _write_task(
    out: Path,
    task_id: str,
    pkg: PackageSpec,
    tree: Path,
    target: Target,
    found: _Found,
    import_name: str,
) -> Task:
    root = out / task_id
    hidden = lay_out(tree, root, pkg)
    (root / "repo" / target.module).write_text(found.source)
    fix = root / "fix" / target.module
    fix.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tree / target.module, fix)
    failures = [(t, found.messages.get(t, "")) for t in found.fail_to_pass]
    task = Task(
        id=task_id,
        package=pkg.name,
        package_version=pkg.version,
        issue=issue_text(pkg.name, pkg.version, import_name, failures, len(found.fail_to_pass)),
        fail_to_pass=found.fail_to_pass,
        pass_to_pass=found.pass_to_pass,
        hidden_files=tuple(hidden),
        mutation=found.mutation,
        python_path=pkg.python_path,
        test_command=TEST_COMMAND,
        scan_allow=_oracle_needs(target.module, found.source, tree / target.module),
        root=root,
    )
    save_task(task)
    return task


def _oracle_needs(module: str, mutated: str, original: Path) -> tuple[str, ...]:
    """Keys of the grader's scan that the task's own fix trips (the line it restores uses, say,
    ``inspect``): allowed for the task, so the oracle is never taken for tampering."""
    fix = Change(module, mutated.encode(), original.read_bytes())
    return tuple(sorted({key for key, _ in scan_findings([fix])}))


def _build_package(
    spec: SuiteSpec,
    pkg: PackageSpec,
    out: Path,
    cache: Path,
    work: Path,
    env: tuple[Path, ...],
    stats: BuildStats,
    advance: Callable[[str], None],
) -> list[str]:
    tree = _unpack(fetch_sdist(pkg, cache), work / f"{_norm(pkg.name)}-{pkg.version}")
    runner = _Runner(tree, pkg, env, stats)
    import_name = pkg.targets[0].module.split("/")[0]
    ids: list[str] = []
    for target in pkg.targets:
        rng = random.Random(f"{spec.seed}:{pkg.name}:{target.module}")
        collected = [t for t in runner.collect(target.tests) if not t.startswith(pkg.exclude)]
        base = runner.run(collected, cpu_s=300)
        baseline = [t for t in collected if base.passed(t)]
        original = (tree / target.module).read_text()
        cands = mutations.candidates(original)
        rng.shuffle(cands)
        used_functions: set[str] = set()
        made = attempts = 0
        for cand in cands:
            if made == target.tasks or attempts >= spec.max_attempts:
                break
            if cand.function in used_functions:
                continue
            attempts += 1
            found = _try_candidate(runner, target, original, cand, baseline, spec, rng)
            if found is None:
                continue
            used_functions.add(cand.function)
            task_id = f"{_norm(pkg.name)}-{len(ids) + 1:02d}"
            _write_task(out, task_id, pkg, tree, target, found, import_name)
            ids.append(task_id)
            made += 1
            stats.kept += 1
            advance(task_id)
        if made < target.tasks:
            raise UserError(
                f"{pkg.name}: only {made} of {target.tasks} tasks found in {target.module} "
                f"after {attempts} candidates (raise max_attempts)"
            )
    return ids


def build_suite(
    spec: SuiteSpec,
    out: Path,
    *,
    venv: Path,
    cache: Path,
    progress: bool = True,
) -> list[Task]:
    """Build ``spec`` into the folder ``out`` (created; existing task folders are replaced).

    ``venv``: the test venv (created with ``spec.test_deps`` if needed) recorded in
    ``suite.json``; ``cache``: where sdists are downloaded. Deterministic for a given spec and
    test venv. Shows a progress bar on stderr when ``progress``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    out.mkdir(parents=True, exist_ok=True)
    env_dir = ensure_venv(venv.resolve(), spec.test_deps)
    env = python_env_paths(env_dir)
    stats = BuildStats()
    ids: list[str] = []
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with (
        Progress(*columns, disable=not progress, transient=False) as bar,
        tempfile.TemporaryDirectory(prefix="kvh-build-") as work,
    ):
        job = bar.add_task(f"building {spec.name}", total=spec.size)

        def advance(task_id: str) -> None:
            bar.update(
                job,
                advance=1,
                description=f"{task_id} (mutants tried {stats.tried}, caught {stats.kept})",
            )

        for pkg in spec.packages:
            bar.update(job, description=f"{pkg.name} {pkg.version}")
            ids += _build_package(spec, pkg, out, cache, Path(work), env, stats, advance)
    meta = {
        "suite": spec.name,
        "seed": spec.seed,
        "packages": {p.name: p.version for p in spec.packages},
        "test_deps": list(spec.test_deps),
        "venv": str(env_dir),
        "python": sys.version.split()[0],
        "stats": {k: getattr(stats, k) for k in BuildStats.__slots__},
    }
    write_suite_index(out, ids, meta)
    from kvharness.env.task import load_suite

    return [t for t in load_suite(out) if isinstance(t, Task)]
