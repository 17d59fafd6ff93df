"""A chain task: one repository in which K functions are stubs, to be restored in order.

A chain task is a :class:`~kvharness.env.task.Task` (same folder layout, same staging and scan of
the agent's change, same hidden tests and PASS_TO_PASS), whose FAIL_TO_PASS is split into ordered
*milestones*: milestone ``i`` is one function of the package, replaced in ``repo/`` by a stub
that keeps its decorators, signature and docstring and whose body is ``raise
NotImplementedError``; its ``tests`` are the package's own tests that pass once functions
``1..i`` are restored (the later ones still stubs) and fail while only ``1..i-1`` are. So a
milestone is reached only on top of the ones before it, and later functions may call earlier ones.

On disk (``task.json`` format :data:`CHAIN_TASK_FORMAT`) the fields are those of a coding task
but for ``fail_to_pass`` and ``mutation``, which are derived from ``milestones`` (FAIL_TO_PASS
is every milestone's tests in order; ``mutation`` is the first milestone's stub, which names the
package directory for staging). ``fix/`` holds the original version of every stubbed file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvharness.env.task import Mutation, Task, safe_destination
from kvharness.env.workspace import package_dirs
from kvharness.errors import FormatError

__all__ = ["CHAIN_TASK_FORMAT", "ChainTask", "Milestone", "load_chain_task"]

CHAIN_TASK_FORMAT = "kvharness-chain-task"
_VERSION = 1

SYSTEM_PROMPT = (
    "You are a software engineer implementing a feature in stages in a Python repository. The "
    "repository is your working directory; some functions are stubs that raise "
    "NotImplementedError, and the issue lists them in the order to implement them. Use the tools "
    "to explore, edit files and run commands (there is no network). Hidden tests judge each "
    "stage; `submit` grades the current state and tells you how many stages in a row, from the "
    "first, are done. A stage counts only while every earlier stage still passes. You may submit "
    "more than once, within a budget."
)


@dataclass(frozen=True, slots=True)
class Milestone:
    """One stage: restore ``function`` (its name in ``file``, repo-relative) so ``tests`` pass.

    ``line`` / ``end_line`` (1-based, of the original file) span the function with its
    decorators; ``original`` is that source text and ``stub`` the text that replaced it, so the
    oracle's fix for this milestone alone is replacing ``stub`` by ``original`` in ``file`` (the
    builder checks ``stub`` occurs once there)."""

    function: str
    file: str
    line: int
    end_line: int
    original: str
    stub: str
    tests: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.tests:
            raise ValueError(f"milestone {self.function}: no tests")
        if not 1 <= self.line <= self.end_line:
            raise ValueError(f"milestone {self.function}: bad line span")

    @property
    def mutation(self) -> Mutation:
        return Mutation(self.file, self.line, self.end_line, "stub", self.original, self.stub)

    def apply(self, repo: Path) -> None:
        """Restore this milestone's function in ``repo`` (its stub must be there)."""
        path = repo / self.file
        text = path.read_text()
        if text.count(self.stub) != 1:
            raise ValueError(f"{self.file}: the stub of {self.function} is not there once")
        safe_destination(repo, self.file).write_text(text.replace(self.stub, self.original))


@dataclass(frozen=True, slots=True)
class ChainTask(Task):
    """A coding task whose FAIL_TO_PASS is ordered into :attr:`milestones` (see the module
    docstring). Build one with :meth:`of`, which derives ``fail_to_pass`` and ``mutation``."""

    milestones: tuple[Milestone, ...] = ()

    def __post_init__(self) -> None:
        Task.__post_init__(self)
        if not self.milestones:
            raise ValueError(f"task {self.id}: no milestones")
        tests = [t for m in self.milestones for t in m.tests]
        if tuple(tests) != self.fail_to_pass:
            raise ValueError(f"task {self.id}: FAIL_TO_PASS is not the milestones' tests")
        if len(set(tests)) != len(tests):
            raise ValueError(f"task {self.id}: a test belongs to two milestones")
        (package,) = package_dirs(self)
        for m in self.milestones:
            if not os.path.normpath(m.file).startswith(package + "/"):
                raise ValueError(f"task {self.id}: {m.file} is not in the package {package}")

    @classmethod
    def of(cls, *, milestones: tuple[Milestone, ...], **fields: Any) -> ChainTask:
        """The task with ``fail_to_pass`` and ``mutation`` derived from ``milestones``."""
        if not milestones:
            raise ValueError("a chain task needs milestones")
        f2p = tuple(t for m in milestones for t in m.tests)
        return cls(
            fail_to_pass=f2p, mutation=milestones[0].mutation, milestones=milestones, **fields
        )

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    @property
    def stub_files(self) -> tuple[str, ...]:
        """The stubbed files, repo-relative, in milestone order, each once."""
        return tuple(dict.fromkeys(m.file for m in self.milestones))

    def apply_fix(self, repo: Path) -> None:
        """Write the original version of every stubbed file into ``repo`` (all milestones)."""
        for rel in self.stub_files:
            safe_destination(repo, rel).write_bytes((self.fix_dir / rel).read_bytes())

    def to_json(self) -> dict[str, Any]:
        """The ``task.json`` document (``fail_to_pass`` and ``mutation`` are not stored)."""
        doc = Task.to_json(self)
        for key in ("fail_to_pass", "mutation", "milestones"):
            doc.pop(key)
        doc["format"] = CHAIN_TASK_FORMAT
        doc["milestones"] = [{**asdict(m), "tests": list(m.tests)} for m in self.milestones]
        return doc

    def save(self) -> None:
        """Write ``root/task.json`` (the file trees are written by the builder)."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "task.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")


def _line_of(text: str, needle: str, start: int = 0) -> int:
    """1-based line of the first ``needle`` in ``text`` from offset ``start`` (1 if absent)."""
    at = text.find(needle, start)
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("must be a list of strings")
    return tuple(value)


_MILESTONE_FIELDS: dict[str, type] = {
    "function": str,
    "file": str,
    "line": int,
    "end_line": int,
    "original": str,
    "stub": str,
}


def _milestone(doc: object, text: str, path: str, at: int) -> tuple[Milestone, int]:
    """The milestone ``doc`` and the text offset just past its ``"function"`` key (milestones are
    located in order, so an error names the line of the milestone it is in)."""
    where = text.find('"function"', at)
    line = _line_of(text, '"function"', at)
    if not isinstance(doc, dict):
        raise FormatError(path, line, "a milestone must be an object")
    for key, kind in _MILESTONE_FIELDS.items():
        if not isinstance(doc.get(key), kind) or isinstance(doc.get(key), bool):
            raise FormatError(
                path, line, f"milestone field {key!r} is missing or not a {kind.__name__}"
            )
    try:
        tests = _strings(doc.get("tests"))
        ms = Milestone(
            function=doc["function"],
            file=doc["file"],
            line=doc["line"],
            end_line=doc["end_line"],
            original=doc["original"],
            stub=doc["stub"],
            tests=tests,
        )
    except (TypeError, ValueError) as err:
        raise FormatError(path, line, f"milestone {doc['function']!r}: {err}") from None
    return ms, (where + 1 if where >= 0 else at)


_TASK_STRINGS = ("id", "package", "package_version", "issue")
_TASK_LISTS = ("pass_to_pass", "hidden_files", "python_path", "test_command")


def load_chain_task(folder: Path, doc: dict[str, Any], text: str) -> ChainTask:
    """The chain task in ``folder`` from its parsed ``task.json`` ``doc`` (``text`` is the file's
    text, used to name the line of a fault); :class:`FormatError` naming file and line."""
    path = str(folder / "task.json")
    if doc.get("version") != _VERSION:
        line = _line_of(text, '"version"')
        raise FormatError(
            path, line, f"unsupported {CHAIN_TASK_FORMAT} version {doc.get('version')!r}"
        )
    fields: dict[str, Any] = {}
    for key in _TASK_STRINGS:
        if not isinstance(doc.get(key), str):
            raise FormatError(path, _line_of(text, f'"{key}"'), f"field {key!r} must be a string")
        fields[key] = doc[key]
    for key in (*_TASK_LISTS, "scan_allow"):
        if key == "scan_allow" and key not in doc:
            continue
        try:
            fields[key] = _strings(doc.get(key))
        except TypeError:
            line = _line_of(text, f'"{key}"')
            raise FormatError(path, line, f"field {key!r} must be a list of strings") from None
    raw = doc.get("milestones")
    if not isinstance(raw, list) or not raw:
        line = _line_of(text, '"milestones"')
        raise FormatError(path, line, "field 'milestones' must be a non-empty list")
    milestones: list[Milestone] = []
    at = max(text.find('"milestones"'), 0)
    for item in raw:
        ms, at = _milestone(item, text, path, at)
        milestones.append(ms)
    try:
        return ChainTask.of(milestones=tuple(milestones), root=folder, **fields)
    except ValueError as err:
        raise FormatError(path, _line_of(text, '"milestones"'), f"bad task: {err}") from None


def stage_names(task: ChainTask) -> list[str]:
    """``module.function`` of each milestone, in order (import names, as the issue gives them)."""
    out = []
    for m in task.milestones:
        module = re.sub(r"(/__init__)?\.py$", "", _relative_to_root(m.file, task.python_path))
        out.append(f"{module.replace('/', '.')}.{m.function}")
    return out


def _relative_to_root(rel: str, python_path: tuple[str, ...]) -> str:
    rel = os.path.normpath(rel)
    for root in sorted((os.path.normpath(p) for p in python_path), key=len, reverse=True):
        prefix = "" if root == "." else root + "/"
        if rel.startswith(prefix):
            return rel[len(prefix) :]
    return rel
