"""Build a chain suite from the pinned sdists: stub K functions, find each milestone's own tests.

For each chain of a :class:`~kvharness.env.chain.suite.ChainSuiteSpec`: unpack the package's
sdist (``fetch_sdist``, sha256-checked), stub the chain's functions (``stubs.py``, which also
fixes their order) and run the chain's test files, always in the sandbox with the venv the suite
is graded with:

1. on the original tree: the *baseline* (tests that pass; the rest are never used);
2. on every state ``S_j`` (``j = 0..K-1``: the first ``j`` functions restored, the others
   stubs; ``S_K`` is the original): the baseline tests that fail on ``S_0``, plus a seeded
   sample of those that pass there (PASS_TO_PASS candidates). A test that fails on ``S_{i-1}``
   and passes on every ``S_j`` from ``S_i`` on judges milestone ``i``; each milestone keeps a
   seeded sample of at most ``max_tests`` of its tests, preferring those named after the
   function. PASS_TO_PASS: candidates that pass on every state;
3. once more on every state, the chosen tests only: every milestone's tests must fail before it
   and pass from it on, every PASS_TO_PASS test must pass throughout (a test that does not is
   dropped: outcomes that depend on chance are not milestones).

A chain with a milestone left without tests, a stub that stops the tests from importing, or a
run that hits its CPU limit is an error naming the function: the chain's definition needs
changing. Deterministic for a given spec and test venv.
"""

from __future__ import annotations

import random
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kvharness.env.chain.stubs import Stub, StubError, apply_stubs, chain_order, make_stub
from kvharness.env.chain.suite import ChainSpec, ChainSuiteSpec
from kvharness.env.chain.task import ChainTask, Milestone
from kvharness.env.grading import TestRun
from kvharness.env.sandbox import python_env_paths
from kvharness.env.task import load_suite, write_suite_index
from kvharness.env.tasks.builder import (
    TEST_COMMAND,
    BuildStats,
    _killed,
    _norm,
    _oracle_needs,
    _Runner,
    _select,
    _unpack,
    ensure_venv,
    fetch_sdist,
    lay_out,
)
from kvharness.env.tasks.suite import PackageSpec
from kvharness.errors import UserError

__all__ = ["build_chain_suite", "chain_issue", "ensure_chain_suite"]

_BASELINE_CPU_S = 300


def chain_issue(package: str, version: str, stages: Sequence[tuple[str, str, str]]) -> str:
    """The issue of a chain task: ``stages`` are (import name, file, docstring summary) in
    milestone order. Names no test."""
    lines = [
        f"# Implement the stubbed functions of {package} {version}, in stages",
        "",
        f"In this checkout of {package} {version}, {len(stages)} functions are stubs: they keep "
        "their signature and docstring but raise NotImplementedError. Implement them in this "
        "order; each stage has its own hidden tests, later stages build on earlier ones, and a "
        "stage counts only while every stage before it passes too:",
        "",
    ]
    for i, (name, file, doc) in enumerate(stages, 1):
        lines.append(f"{i}. `{name}` in `{file}`" + (f": {doc}" if doc else ""))
    lines += [
        "",
        "Submit whenever you like: each submission reports how many stages in a row, from the "
        "first, are done, and the package's other behaviour must keep working. Change only the "
        "library code; the test suite is not part of this checkout and must not be changed.",
    ]
    return "\n".join(lines) + "\n"


def _import_name(file: str, python_path: Sequence[str]) -> str:
    rel = file
    for root in sorted(python_path, key=len, reverse=True):
        prefix = "" if root in (".", "") else root.rstrip("/") + "/"
        if rel.startswith(prefix):
            rel = rel[len(prefix) :]
            break
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


class _Chain:
    """One chain on a work tree: writes its states and runs tests on them."""

    def __init__(self, tree: Path, stubs: list[Stub], runner: _Runner) -> None:
        self.tree, self.stubs, self.runner = tree, stubs, runner
        self.files = list(dict.fromkeys(s.file for s in stubs))
        self.sources = {f: (tree / f).read_text() for f in self.files}

    def write(self, restored: int) -> None:
        """Put state ``S_restored`` in the tree (the first ``restored`` functions original)."""
        for f in self.files:
            stubbed = [s for s in self.stubs[restored:] if s.file == f]
            (self.tree / f).write_text(apply_stubs(self.sources[f], stubbed))

    def restore(self) -> None:
        for f in self.files:
            (self.tree / f).write_text(self.sources[f])

    def run(self, restored: int, tests: Sequence[str], cpu_s: int | None = None) -> TestRun:
        self.write(restored)
        run = self.runner.run(tests) if cpu_s is None else self.runner.run(tests, cpu_s=cpu_s)
        if _killed(run):
            name = self.stubs[restored].name if restored < len(self.stubs) else "none"
            raise UserError(f"{self.files}: the tests hit their limit with {name} stubbed")
        return run


def _milestone_tests(
    chain: _Chain, spec: ChainSuiteSpec, baseline: list[str], rng: random.Random
) -> tuple[list[list[str]], list[str]]:
    """Each milestone's tests and the PASS_TO_PASS tests, from the first pass over the states."""
    k = len(chain.stubs)
    s0 = chain.run(0, baseline)
    missing = [t for t in baseline if s0.outcomes[t] == "missing"]
    if missing:
        raise UserError(
            f"{chain.files}: with the stubs in place {len(missing)} tests do not even run "
            f"(a stubbed function is called at import time?): {missing[:3]}"
        )
    failing = [t for t in baseline if not s0.passed(t)]
    passing = [t for t in baseline if s0.passed(t)]
    cands = sorted(rng.sample(passing, min(len(passing), 2 * spec.max_pass_to_pass)))
    passes: dict[str, list[bool]] = {t: [False] for t in failing}
    passes.update({t: [True] for t in cands})
    for j in range(1, k):
        run = chain.run(j, [*failing, *cands])
        for t in passes:
            passes[t].append(run.passed(t))
    for t in passes:
        passes[t].append(True)  # S_K is the original: every baseline test passes there
    groups: list[list[str]] = [[] for _ in range(k)]
    for t in failing:
        first = passes[t].index(True)
        if all(passes[t][first:]):
            groups[first - 1].append(t)
    chosen: list[list[str]] = []
    for stub, tests in zip(chain.stubs, groups, strict=True):
        named = _select(stub.name, tests)
        pool = named or tests
        picked = set(rng.sample(pool, min(len(pool), spec.max_tests)))
        chosen.append([t for t in baseline if t in picked])
    p2p = [t for t in cands if all(passes[t])]
    p2p = sorted(rng.sample(p2p, min(len(p2p), spec.max_pass_to_pass)))
    return chosen, p2p


def _verified(
    chain: _Chain, groups: list[list[str]], p2p: list[str]
) -> tuple[list[list[str]], list[str]]:
    """``groups`` and ``p2p`` less the tests that do not come out as they must on every state."""
    k = len(chain.stubs)
    everything = [t for g in groups for t in g] + p2p
    bad: set[str] = set()
    for j in range(k + 1):
        run = chain.run(j, everything)
        for i, tests in enumerate(groups):
            must_pass = i < j  # milestone i + 1 is reached from state S_{i+1}
            bad |= {t for t in tests if run.passed(t) != must_pass}
        bad |= {t for t in p2p if not run.passed(t)}
    return [[t for t in g if t not in bad] for g in groups], [t for t in p2p if t not in bad]


def _write_task(
    out: Path,
    task_id: str,
    pkg: PackageSpec,
    chain: _Chain,
    groups: list[list[str]],
    p2p: list[str],
) -> ChainTask:
    tree = chain.tree
    root = out / task_id
    chain.write(0)
    hidden = lay_out(tree, root, pkg)
    allow: set[str] = set()
    for f in chain.files:
        fix = root / "fix" / f
        fix.parent.mkdir(parents=True, exist_ok=True)
        fix.write_text(chain.sources[f])
        allow |= set(_oracle_needs(f, (root / "repo" / f).read_text(), fix))
    chain.restore()
    milestones = tuple(
        Milestone(s.name, s.file, s.line, s.end_line, s.original, s.stub, tuple(tests))
        for s, tests in zip(chain.stubs, groups, strict=True)
    )
    stages = [
        (f"{_import_name(s.file, pkg.python_path)}.{s.name}", s.file, s.doc) for s in chain.stubs
    ]
    task = ChainTask.of(
        milestones=milestones,
        id=task_id,
        package=pkg.name,
        package_version=pkg.version,
        issue=chain_issue(pkg.name, pkg.version, stages),
        pass_to_pass=tuple(p2p),
        hidden_files=tuple(hidden),
        python_path=pkg.python_path,
        test_command=TEST_COMMAND,
        scan_allow=tuple(sorted(allow)),
        root=root,
    )
    for m in milestones:
        if (root / "repo" / m.file).read_text().count(m.stub) != 1:
            raise UserError(f"{m.file}: the stub of {m.function} is not unique")
    task.save()
    return task


def _build_chain(
    spec: ChainSuiteSpec,
    pkg: PackageSpec,
    chain_spec: ChainSpec,
    tree: Path,
    runner: _Runner,
    baselines: dict[tuple[str, ...], list[str]],
) -> tuple[_Chain, list[list[str]], list[str]]:
    stubs: list[Stub] = []
    for entry in chain_spec.functions:
        file, _, name = entry.partition(":")
        try:
            stubs.append(make_stub(file, (tree / file).read_text(), name))
        except (StubError, OSError) as err:
            raise UserError(f"{pkg.name}: cannot stub {entry}: {err}") from None
    chain = _Chain(tree, chain_order(stubs), runner)
    key = chain_spec.tests
    if key not in baselines:
        collected = [
            t for f in chain_spec.tests for t in runner.collect(f) if not t.startswith(pkg.exclude)
        ]
        base = runner.run(collected, cpu_s=_BASELINE_CPU_S)
        baselines[key] = [t for t in collected if base.passed(t)]
    baseline = baselines[key]
    rng = random.Random(f"{spec.seed}:{pkg.name}:{','.join(chain_spec.functions)}")
    try:
        groups, p2p = _milestone_tests(chain, spec, baseline, rng)
        groups, p2p = _verified(chain, groups, p2p)
    finally:
        chain.restore()
    for stub, tests in zip(chain.stubs, groups, strict=True):
        if not tests:
            raise UserError(
                f"{pkg.name}: no test judges {stub.file}:{stub.name} once the functions before "
                "it are restored (choose another function for this chain)"
            )
    return chain, groups, p2p


def build_chain_suite(
    spec: ChainSuiteSpec,
    out: Path,
    *,
    venv: Path,
    cache: Path,
    progress: bool = True,
) -> list[ChainTask]:
    """Build ``spec`` into the folder ``out`` (created; existing task folders are replaced).

    ``venv``: the test venv (created with ``spec.test_deps`` if needed) recorded in
    ``suite.json``; ``cache``: where sdists are downloaded. Shows a progress bar on stderr when
    ``progress``. Returns the tasks as loaded back from ``out``."""
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
        tempfile.TemporaryDirectory(prefix="kvh-chain-build-") as work,
    ):
        job = bar.add_task(f"building {spec.name}", total=spec.size)
        for cpkg in spec.packages:
            pkg = cpkg.package
            bar.update(job, description=f"{pkg.name} {pkg.version}")
            tree = _unpack(fetch_sdist(pkg, cache), Path(work) / f"{_norm(pkg.name)}-{pkg.version}")
            runner = _Runner(tree, pkg, env, stats)
            baselines: dict[tuple[str, ...], list[str]] = {}
            for n, chain_spec in enumerate(cpkg.chains, 1):
                task_id = f"chain-{_norm(pkg.name)}-{n:02d}"
                chain, groups, p2p = _build_chain(spec, pkg, chain_spec, tree, runner, baselines)
                _write_task(out, task_id, pkg, chain, groups, p2p)
                ids.append(task_id)
                stats.kept += 1
                bar.update(job, advance=1, description=f"{task_id} ({stats.test_runs} test runs)")
    meta = {
        "suite": spec.name,
        "seed": spec.seed,
        "packages": {p.package.name: p.package.version for p in spec.packages},
        "test_deps": list(spec.test_deps),
        "venv": str(env_dir),
        "python": sys.version.split()[0],
        "stats": {"tasks": stats.kept, "test_runs": stats.test_runs},
    }
    write_suite_index(out, ids, meta)
    return [t for t in load_suite(out) if isinstance(t, ChainTask)]


def ensure_chain_suite(
    spec: ChainSuiteSpec, out: Path, *, venv: Path, cache: Path
) -> list[ChainTask]:
    """The chain suite ``spec`` in ``out``: loaded when ``out/suite.json`` is there, else built
    (see :func:`build_chain_suite`; a progress bar on stderr)."""
    if not (out / "suite.json").exists():
        build_chain_suite(spec, out, venv=venv, cache=cache)
    return [t for t in load_suite(out) if isinstance(t, ChainTask)]
