"""Actions of a coding episode: typed tool calls, their OpenAI JSON form, and their schemas.

Five tools: ``bash(command)``, ``read_file(path)``, ``edit_file(path, search, replace)``,
``search(pattern, path=None)`` and ``submit()``. An action arrives either as one of the dataclasses
below or as an OpenAI tool call (``{"id": ..., "type": "function", "function": {"name": ...,
"arguments": "<json>"}}``, or just ``{"name": ..., "arguments": ...}`` with arguments as a JSON
string or an object); :func:`parse_action` turns both into the typed form and raises
:class:`ActionError` with a message fit to show the agent. :data:`TOOL_SCHEMAS` is the ``tools``
list for a chat completion request.

Paths are relative to the repository root (absolute paths are taken relative to it too, so
``/src/x.py`` means ``<repo>/src/x.py``); :func:`resolve_in_repo` confines them after resolving
symbolic links. :func:`apply_edit` is the exact search-and-replace of ``edit_file``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "TOOL_NAMES",
    "TOOL_SCHEMAS",
    "Action",
    "ActionError",
    "Bash",
    "EditFile",
    "ReadFile",
    "Search",
    "Submit",
    "action_to_tool_call",
    "apply_edit",
    "parse_action",
    "resolve_in_repo",
    "tool_name",
]


class ActionError(ValueError):
    """An action the environment cannot carry out; the message is shown to the agent."""


@dataclass(frozen=True, slots=True)
class Bash:
    """Run ``command`` with ``bash -c`` in the sandbox, working directory the repository root."""

    command: str


@dataclass(frozen=True, slots=True)
class ReadFile:
    """Read a text file of the repository."""

    path: str


@dataclass(frozen=True, slots=True)
class EditFile:
    """Replace the one occurrence of ``search`` in ``path`` by ``replace``. With an empty
    ``search`` the file is created (it must not exist) with ``replace`` as its content."""

    path: str
    search: str
    replace: str


@dataclass(frozen=True, slots=True)
class Search:
    """Lines matching the regular expression ``pattern`` (grep -E) under ``path`` (default: the
    whole repository)."""

    pattern: str
    path: str | None = None


@dataclass(frozen=True, slots=True)
class Submit:
    """Grade the repository's current state against the hidden tests."""


Action = Bash | ReadFile | EditFile | Search | Submit

_PARAMS: dict[str, tuple[type, tuple[str, ...], tuple[str, ...]]] = {
    # name: (class, required string fields, optional string fields)
    "bash": (Bash, ("command",), ()),
    "read_file": (ReadFile, ("path",), ()),
    "edit_file": (EditFile, ("path", "search", "replace"), ()),
    "search": (Search, ("pattern",), ("path",)),
    "submit": (Submit, (), ()),
}
TOOL_NAMES = tuple(_PARAMS)
_NAME_OF = {cls: name for name, (cls, _, _) in _PARAMS.items()}

_DESCRIPTIONS = {
    "bash": "Run a shell command (bash -c) in the repository root, without network. Returns its "
    "exit status and output.",
    "read_file": "Read a text file of the repository; the path is relative to the repository root.",
    "edit_file": "Replace the exact text `search` (which must occur exactly once in the file) by "
    "`replace`. With an empty `search`, create a new file whose content is `replace`.",
    "search": "Search the repository for lines matching a regular expression (grep -E); "
    "optionally only under `path`. Shows the first 100 matching lines.",
    "submit": "Submit the repository's current state: it is graded against hidden tests and the "
    "score (fraction of the failing tests now passing, 0 if a passing test broke) is returned. "
    "You may submit more than once, within a budget.",
}
_ARG_DESCRIPTIONS = {
    "command": "The shell command.",
    "path": "Path relative to the repository root.",
    "search": "Exact text to find (must occur exactly once).",
    "replace": "Text to put in its place.",
    "pattern": "Extended regular expression.",
}


def _schema(name: str) -> dict[str, Any]:
    _, required, optional = _PARAMS[name]
    props = {
        arg: {"type": "string", "description": _ARG_DESCRIPTIONS[arg]}
        for arg in required + optional
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": _DESCRIPTIONS[name],
            "parameters": {
                "type": "object",
                "properties": props,
                "required": list(required),
                "additionalProperties": False,
            },
        },
    }


TOOL_SCHEMAS: tuple[dict[str, Any], ...] = tuple(_schema(n) for n in TOOL_NAMES)
"""The ``tools`` of a chat completion request (OpenAI function-tool JSON schemas)."""


def parse_action(obj: Action | Mapping[str, Any] | str) -> Action:
    """The typed action for a dataclass, an OpenAI tool call (dict or its JSON text).

    Raises :class:`ActionError` naming what is wrong (unknown tool, missing or non-string
    argument, unexpected argument, arguments that are not a JSON object).
    """
    if isinstance(obj, Bash | ReadFile | EditFile | Search | Submit):
        return obj
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError as err:
            raise ActionError(f"action is not valid JSON: {err.msg}") from None
    if not isinstance(obj, Mapping):
        raise ActionError(f"an action must be a tool call object, got {type(obj).__name__}")
    call: Mapping[str, Any] = obj.get("function", obj)
    if not isinstance(call, Mapping):
        raise ActionError("'function' of a tool call must be an object")
    name = call.get("name")
    if name not in _PARAMS:
        raise ActionError(f"unknown tool {name!r} (tools: {', '.join(TOOL_NAMES)})")
    args = call.get("arguments", {})
    if args is None or args == "":
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as err:
            raise ActionError(f"{name}: arguments are not valid JSON: {err.msg}") from None
    if not isinstance(args, Mapping):
        raise ActionError(f"{name}: arguments must be a JSON object")
    cls, required, optional = _PARAMS[name]
    unknown = sorted(set(args) - set(required) - set(optional))
    if unknown:
        raise ActionError(f"{name}: unexpected argument(s) {', '.join(unknown)}")
    values: dict[str, str | None] = {}
    for arg in required + optional:
        value = args.get(arg)
        if value is None and arg in optional:
            values[arg] = None
            continue
        if value is None:
            raise ActionError(f"{name}: missing argument {arg!r}")
        if not isinstance(value, str):
            raise ActionError(f"{name}: argument {arg!r} must be a string")
        values[arg] = value
    action: Action = cls(**values)
    return action


def action_to_tool_call(action: Action, call_id: str) -> dict[str, Any]:
    """The OpenAI tool-call JSON (as in an assistant message's ``tool_calls``) for ``action``."""
    name = _NAME_OF[type(action)]
    _, required, optional = _PARAMS[name]
    args = {a: getattr(action, a) for a in required + optional if getattr(action, a) is not None}
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def tool_name(action: Action) -> str:
    """The tool name of a typed action (``"bash"``, ``"read_file"``, ...)."""
    return _NAME_OF[type(action)]


def resolve_in_repo(root: Path, path: str) -> Path:
    """``path`` (relative to ``root``; a leading ``/`` is ignored) resolved with symbolic links
    followed, raising :class:`ActionError` when it lies outside ``root`` or contains a NUL."""
    if "\0" in path:
        raise ActionError("path contains a NUL byte")
    real_root = Path(os.path.realpath(root))
    candidate = Path(os.path.realpath(real_root / path.lstrip("/")))
    if candidate != real_root and real_root not in candidate.parents:
        raise ActionError(f"path {path!r} is outside the repository")
    return candidate


def apply_edit(text: str, search: str, replace: str, path: str) -> str:
    """``text`` with the single occurrence of ``search`` replaced; :class:`ActionError` when
    ``search`` is missing or occurs more than once (the count is given, to let the agent widen
    its search text)."""
    count = text.count(search)
    if count == 0:
        raise ActionError(f"edit_file: the search text was not found in {path}")
    if count > 1:
        raise ActionError(
            f"edit_file: the search text occurs {count} times in {path}; include more context "
            "so that it occurs exactly once"
        )
    return text.replace(search, replace, 1)
