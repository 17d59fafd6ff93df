"""A coding task: a real package's repository with one injected bug, and the tests that judge a fix.

On disk a *suite* is a directory with one folder per task::

    SUITE/
      suite.json              {"format": "kvharness-suite", "version": 1, "tasks": ["id", ...], ...}
      <task id>/
        task.json             everything below except the file trees (the agent never sees it)
        repo/                 the unpacked sdist with the mutation applied and the hidden test
                              files removed: exactly what an episode copies for the agent
        hidden/               the hidden test files, at their repo-relative paths
        fix/                  the original (unmutated) version of the mutated file, for the oracle

The agent's view is a copy of ``repo/`` only. ``hidden/`` and ``fix/`` and ``task.json`` (which
holds FAIL_TO_PASS / PASS_TO_PASS and the mutation) stay outside every sandbox the agent runs in;
grading lays ``hidden/`` over a fresh copy of ``repo/`` that carries only the agent's change to the
package's source files (see ``grading.py``).

Test ids are pytest node ids relative to the repository root (``tests/test_x.py::TestA::test_b``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from kvharness.env._folder import TaskFolder
from kvharness.errors import FormatError, UserError

if TYPE_CHECKING:
    from kvharness.env.perf.task import PerfTask

__all__ = [
    "SUITE_FORMAT",
    "TASK_FORMAT",
    "AnyTask",
    "Mutation",
    "Task",
    "TaskFolder",
    "list_suite",
    "load_suite",
    "load_task",
    "safe_destination",
    "save_task",
    "write_suite_index",
]

TASK_FORMAT = "kvharness-task"
SUITE_FORMAT = "kvharness-suite"
_VERSION = 1

SYSTEM_PROMPT = (
    "You are a software engineer fixing a bug in a Python repository. The repository is your "
    "working directory. Use the tools to explore, edit files and run commands (there is no "
    "network). Hidden tests judge your fix; `submit` grades the current state and tells you the "
    "score. You may submit more than once, within a budget."
)


@dataclass(frozen=True, slots=True)
class Mutation:
    """The injected bug, i.e. the oracle's known fix read backwards.

    ``file`` is repo-relative; ``line``/``end_line`` are 1-based and name the lines of the
    *original* file that the mutation rewrote; ``original`` / ``mutated`` are those source lines
    before and after. ``operator`` names the mutation kind (``compare``, ``arith``, ``off_by_one``,
    ``drop_if``, ``negate``, ``constant``, ``swap_args``, ...).
    """

    file: str
    line: int
    end_line: int
    operator: str
    original: str
    mutated: str


@dataclass(frozen=True, slots=True)
class Task(TaskFolder):
    """One task of a suite, as stored in ``task.json`` (``root`` is the task folder, not stored).

    ``python_path`` lists repo-relative directories that must be on ``PYTHONPATH`` for the package
    to import (``"."`` for a flat layout, ``"src"`` for a src layout). ``test_command`` is the argv
    prefix that runs pytest inside the sandbox; node ids are appended to it. ``scan_allow`` lists
    keys of :data:`kvharness.env.scan.FORBIDDEN` the package legitimately needs in its own code
    (e.g. ``["threading"]``): the grader's scan of the agent's change does not report those
    (``task.json`` key ``scan_allow``, optional, default none).
    """

    id: str
    package: str
    package_version: str
    issue: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    hidden_files: tuple[str, ...]
    mutation: Mutation
    python_path: tuple[str, ...] = (".",)
    test_command: tuple[str, ...] = ("python", "-m", "pytest", "-p", "no:cacheprovider")
    scan_allow: tuple[str, ...] = ()
    root: Path = field(default=Path("."), compare=False)

    def __post_init__(self) -> None:
        if not self.fail_to_pass:
            raise ValueError(f"task {self.id}: FAIL_TO_PASS is empty")
        if set(self.fail_to_pass) & set(self.pass_to_pass):
            raise ValueError(f"task {self.id}: a test is both FAIL_TO_PASS and PASS_TO_PASS")

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    @property
    def tests(self) -> tuple[str, ...]:
        """FAIL_TO_PASS followed by PASS_TO_PASS."""
        return self.fail_to_pass + self.pass_to_pass

    def apply_fix(self, repo: Path) -> None:
        """Write the known fix (the original mutated file) into ``repo``; the oracle's action."""
        src = self.fix_dir / self.mutation.file
        shutil.copyfile(src, safe_destination(repo, self.mutation.file))

    def to_json(self) -> dict[str, Any]:
        """The ``task.json`` document."""
        doc = asdict(self)
        doc.pop("root")
        doc = {"format": TASK_FORMAT, "version": _VERSION, **doc}
        keys = ("fail_to_pass", "pass_to_pass", "hidden_files", "python_path", "test_command")
        for key in (*keys, "scan_allow"):
            doc[key] = list(doc[key])
        return doc


AnyTask: TypeAlias = "Task | PerfTask"
"""A task of either family: both have ``id``, ``issue``, ``system_prompt``, ``checkout`` and
``apply_fix``, which is all an episode needs of a task."""


def safe_destination(root: Path, rel: str) -> Path:
    """``root / rel`` made safe to write as root on the host: every symlink on the way (which an
    agent may have planted, pointing outside its repository) is replaced by a real folder, and
    whatever is at the final path is removed. Creates the parent folders."""
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts:
        raise ValueError(f"{rel!r} is not a relative path inside the repository")
    here = root
    for part in parts[:-1]:
        here = here / part
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            here.unlink()
        here.mkdir(exist_ok=True)
    dest = root / rel
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.is_dir():
        shutil.rmtree(dest)
    return dest


def _tuple_of_str(doc: dict[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = doc.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FormatError(path, 1, f"{key!r} must be a list of strings")
    return tuple(value)


def load_task(folder: Path) -> AnyTask:
    """Read ``folder/task.json``: a coding :class:`Task`, a
    :class:`~kvharness.env.chain.task.ChainTask` (a Task) for a multi-milestone task, or a
    :class:`~kvharness.env.perf.task.PerfTask` for a performance task; raise FormatError on a
    malformed file."""
    path = folder / "task.json"
    try:
        text = path.read_text()
        doc = json.loads(text)
    except FileNotFoundError:
        raise UserError(f"{folder}: not a task folder (no task.json)") from None
    except json.JSONDecodeError as exc:
        raise FormatError(str(path), exc.lineno, f"invalid JSON: {exc.msg}") from None
    from kvharness.env.chain.task import CHAIN_TASK_FORMAT, load_chain_task
    from kvharness.env.perf.task import PERF_TASK_FORMAT, load_perf_task

    if isinstance(doc, dict) and doc.get("format") == PERF_TASK_FORMAT:
        return load_perf_task(folder, doc)
    if isinstance(doc, dict) and doc.get("format") == CHAIN_TASK_FORMAT:
        return load_chain_task(folder, doc, text)
    if not isinstance(doc, dict) or doc.get("format") != TASK_FORMAT:
        kinds = f"{TASK_FORMAT}, {CHAIN_TASK_FORMAT} or {PERF_TASK_FORMAT}"
        raise FormatError(str(path), 1, f"not a {kinds} file")
    if doc.get("version") != _VERSION:
        raise FormatError(str(path), 1, f"unsupported version {doc.get('version')!r}")
    try:
        mut = doc["mutation"]
        mutation = Mutation(
            file=str(mut["file"]),
            line=int(mut["line"]),
            end_line=int(mut["end_line"]),
            operator=str(mut["operator"]),
            original=str(mut["original"]),
            mutated=str(mut["mutated"]),
        )
        return Task(
            id=str(doc["id"]),
            package=str(doc["package"]),
            package_version=str(doc["package_version"]),
            issue=str(doc["issue"]),
            fail_to_pass=_tuple_of_str(doc, "fail_to_pass", str(path)),
            pass_to_pass=_tuple_of_str(doc, "pass_to_pass", str(path)),
            hidden_files=_tuple_of_str(doc, "hidden_files", str(path)),
            mutation=mutation,
            python_path=_tuple_of_str(doc, "python_path", str(path)),
            test_command=_tuple_of_str(doc, "test_command", str(path)),
            scan_allow=_tuple_of_str({"scan_allow": [], **doc}, "scan_allow", str(path)),
            root=folder,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise FormatError(str(path), 1, f"bad task: {exc}") from None


def save_task(task: Task) -> None:
    """Write ``task.root/task.json`` (the file trees are written by the builder)."""
    doc = task.to_json()
    task.root.mkdir(parents=True, exist_ok=True)
    (task.root / "task.json").write_text(json.dumps(doc, indent=2) + "\n")


def write_suite_index(suite: Path, task_ids: list[str], meta: dict[str, Any]) -> None:
    """Write ``suite/suite.json`` listing the tasks in order, with free-form ``meta``."""
    doc = {"format": SUITE_FORMAT, "version": _VERSION, "tasks": task_ids, "meta": meta}
    (suite / "suite.json").write_text(json.dumps(doc, indent=2) + "\n")


def list_suite(suite: Path) -> list[str]:
    """Task ids of a suite, from ``suite.json`` (or the task folders, sorted, if it is absent)."""
    index = suite / "suite.json"
    if index.exists():
        try:
            doc = json.loads(index.read_text())
        except json.JSONDecodeError as exc:
            raise FormatError(str(index), exc.lineno, f"invalid JSON: {exc.msg}") from None
        if not isinstance(doc, dict) or doc.get("format") != SUITE_FORMAT:
            raise FormatError(str(index), 1, f"not a {SUITE_FORMAT} file")
        return [str(t) for t in doc["tasks"]]
    if not suite.is_dir():
        raise UserError(
            f"{suite}: no such suite directory (build one with `kvharness env build-suite`)"
        )
    return sorted(p.name for p in suite.iterdir() if (p / "task.json").exists())


def load_suite(suite: Path) -> list[AnyTask]:
    """All tasks of a suite, in suite order."""
    return [load_task(suite / task_id) for task_id in list_suite(suite)]
