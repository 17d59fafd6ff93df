"""The oracle's edits: small snippets around the mutation, unique in the file, exact fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvharness.env.actions import Bash, EditFile, ReadFile, Search, Submit, apply_edit
from kvharness.env.harness.agents import AGENTS, OracleAgent, fix_snippets, make_agent
from kvharness.env.harness.demo import make_demo_task

FIXED = "def f(x):\n    y = x + 1\n    return y\n\n\ndef g(x):\n    y = x + 1\n    return y * 2\n"
# The bug is in g; before it, the same line is in f as well (the fix snippet must not hit f).
MUTATED = FIXED.replace("    y = x + 1\n    return y * 2", "    y = x - 1\n    return y * 2")


def test_snippet_is_the_mutated_line_when_unique() -> None:
    ctx, fixed_ctx = fix_snippets(MUTATED, FIXED, 7, "    y = x - 1", "    y = x + 1")
    assert (ctx, fixed_ctx) == ("    y = x - 1\n", "    y = x + 1\n")
    assert apply_edit(MUTATED, ctx, fixed_ctx, "m.py") == FIXED


def test_snippet_widens_until_unique() -> None:
    # The mutated line (line 3, "b = 2") also occurs at line 1: the snippet takes line 2 too.
    mutated = "b = 2\nx = 0\nb = 2\n"
    fixed = "b = 2\nx = 0\nb = 20\n"
    ctx, fixed_ctx = fix_snippets(mutated, fixed, 3, "b = 2", "b = 20")
    assert (ctx, fixed_ctx) == ("x = 0\nb = 2\n", "x = 0\nb = 20\n")
    assert apply_edit(mutated, ctx, fixed_ctx, "m.py") == fixed


def test_wrong_line_number_falls_back_to_the_whole_file() -> None:
    assert fix_snippets(MUTATED, FIXED, 99, "x", "y") == (MUTATED, FIXED)
    assert fix_snippets(MUTATED, FIXED, 1, "def f(x):", "def f(x):") == (MUTATED, FIXED)


def test_oracle_script_shape(tmp_path: Path) -> None:
    task = make_demo_task(tmp_path, "clamp")
    agent = make_agent("oracle", task)
    assert isinstance(agent, OracleAgent) and agent.scripted and agent.tool_choice == "none"
    script = agent.script()
    assert [type(a) for a in script] == [Bash, Search, ReadFile, EditFile, Submit, EditFile, Submit]
    wrong, fix = script[3], script[5]
    assert isinstance(wrong, EditFile) and isinstance(fix, EditFile)
    assert wrong.search == "    if x < high:\n" and wrong.replace.startswith(OracleAgent.MARKER)
    assert fix.search == wrong.replace and fix.replace == "    if x > high:\n"


def test_agents_are_chosen_by_name_from_one_registry() -> None:
    assert sorted(AGENTS) == ["cheat", "halfway", "model", "noop", "oracle"]
    assert AGENTS["oracle"] is OracleAgent
    with pytest.raises(
        ValueError, match=r"^unknown agent 'x'; choose from cheat, halfway, model, noop"
    ):
        make_agent("x", None)  # type: ignore[arg-type]
