"""Action parsing (typed and OpenAI tool-call JSON), schemas, path confinement, exact edits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvharness.env.actions import (
    TOOL_NAMES,
    TOOL_SCHEMAS,
    ActionError,
    Bash,
    EditFile,
    ReadFile,
    Search,
    Submit,
    action_to_tool_call,
    apply_edit,
    parse_action,
    resolve_in_repo,
)


def test_parse_openai_tool_call_forms() -> None:
    full = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": "ls -la"})},
    }
    assert parse_action(full) == Bash("ls -la")
    assert parse_action(json.dumps(full)) == Bash("ls -la")
    assert parse_action({"name": "read_file", "arguments": {"path": "a.py"}}) == ReadFile("a.py")
    assert parse_action({"name": "search", "arguments": '{"pattern": "def f"}'}) == Search("def f")
    assert parse_action({"name": "submit", "arguments": ""}) == Submit()
    assert parse_action(EditFile("a", "b", "c")) == EditFile("a", "b", "c")


@pytest.mark.parametrize(
    "action",
    [Bash("echo hi"), ReadFile("x.py"), EditFile("x.py", "a", "b"), Search("p", "src"), Submit()],
)
def test_tool_call_round_trip(action: object) -> None:
    call = action_to_tool_call(action, "call_7")  # type: ignore[arg-type]
    assert call["id"] == "call_7"
    assert parse_action(call) == action


@pytest.mark.parametrize(
    ("obj", "msg"),
    [
        ("{not json", "not valid JSON"),
        ({"name": "rm"}, "unknown tool"),
        ({"name": "bash", "arguments": {}}, "missing argument 'command'"),
        ({"name": "bash", "arguments": {"command": 3}}, "must be a string"),
        ({"name": "bash", "arguments": {"command": "ls", "x": 1}}, "unexpected argument"),
        ({"name": "bash", "arguments": "[1]"}, "must be a JSON object"),
        ({"name": "bash", "arguments": "{bad"}, "not valid JSON"),
        ([1, 2], "must be a tool call object"),
    ],
)
def test_parse_errors_are_clear(obj: object, msg: str) -> None:
    with pytest.raises(ActionError, match=msg):
        parse_action(obj)  # type: ignore[arg-type]


def test_schemas_cover_every_tool_and_are_json() -> None:
    names = [s["function"]["name"] for s in TOOL_SCHEMAS]
    assert names == list(TOOL_NAMES) == ["bash", "read_file", "edit_file", "search", "submit"]
    edit = next(s for s in TOOL_SCHEMAS if s["function"]["name"] == "edit_file")
    assert edit["function"]["parameters"]["required"] == ["path", "search", "replace"]
    search = next(s for s in TOOL_SCHEMAS if s["function"]["name"] == "search")
    assert search["function"]["parameters"]["required"] == ["pattern"]
    json.dumps(TOOL_SCHEMAS)


def test_resolve_in_repo_confines_paths(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "secret.txt").write_text("s")
    (repo / "link").symlink_to(tmp_path / "secret.txt")
    (repo / "dirlink").symlink_to(tmp_path)
    assert resolve_in_repo(repo, "pkg/m.py") == (repo / "pkg" / "m.py").resolve()
    assert resolve_in_repo(repo, "/pkg/m.py") == (repo / "pkg" / "m.py").resolve()
    assert resolve_in_repo(repo, ".") == repo.resolve()
    for bad in ["../secret.txt", "pkg/../../secret.txt", "link", "dirlink/secret.txt", "/../x"]:
        with pytest.raises(ActionError, match="outside the repository"):
            resolve_in_repo(repo, bad)
    with pytest.raises(ActionError, match="NUL"):
        resolve_in_repo(repo, "a\0b")


def test_apply_edit_exact_once() -> None:
    assert apply_edit("a + b\n", "+", "-", "m.py") == "a - b\n"
    with pytest.raises(ActionError, match=r"not found in m\.py"):
        apply_edit("a + b\n", "*", "-", "m.py")
    with pytest.raises(ActionError, match="occurs 2 times"):
        apply_edit("a + b + c\n", "+", "-", "m.py")
