"""Task format, mutation operators, issue text, suite definition, and the invariants of a suite
built by the real builder from a real sdist (SMOKE_SUITE, built once per session)."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import textwrap
from pathlib import Path

import pytest

from kvharness.env.task import Mutation, Task, load_suite, load_task, save_task
from kvharness.env.tasks import DEFAULT_SUITE, SMOKE_SUITE, build_suite
from kvharness.env.tasks import mutations as mut
from kvharness.env.tasks.builder import _oracle_needs, _select, ensure_venv
from kvharness.env.tasks.issue import issue_text, scenario
from kvharness.env.tasks.verify import verify_task
from kvharness.errors import FormatError, UserError


def _task(root: Path) -> Task:
    return Task(
        id="t-01",
        package="pkg",
        package_version="1.0",
        issue="broken",
        fail_to_pass=("tests/test_a.py::test_x",),
        pass_to_pass=("tests/test_a.py::test_y", "tests/test_a.py::TestK::test_z[1]"),
        hidden_files=("tests/test_a.py",),
        mutation=Mutation("pkg/m.py", 3, 3, "compare", "  if a < b:", "  if a <= b:"),
        python_path=("src",),
        root=root,
    )


def test_task_json_round_trip(tmp_path: Path) -> None:
    task = _task(tmp_path / "t-01")
    save_task(task)
    doc = json.loads((tmp_path / "t-01" / "task.json").read_text())
    assert doc["format"] == "kvharness-task" and doc["package_version"] == "1.0"
    assert load_task(tmp_path / "t-01") == task
    assert load_suite(tmp_path) == [task]


def test_scan_allow_is_optional_in_task_json_and_round_trips(tmp_path: Path) -> None:
    task = dataclasses.replace(_task(tmp_path / "t-01"), scan_allow=("threading",))
    save_task(task)
    path = tmp_path / "t-01" / "task.json"
    doc = json.loads(path.read_text())
    assert doc["scan_allow"] == ["threading"] and load_task(tmp_path / "t-01") == task
    del doc["scan_allow"]  # a task.json written before the key existed
    path.write_text(json.dumps(doc))
    assert load_task(tmp_path / "t-01").scan_allow == ()
    doc["scan_allow"] = "threading"
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="'scan_allow' must be a list of strings"):
        load_task(tmp_path / "t-01")


def test_the_builder_allows_what_the_tasks_own_fix_needs(tmp_path: Path) -> None:
    original = tmp_path / "m.py"
    original.write_text(
        "import inspect\n\n\ndef arity(f):\n    return len(inspect.signature(f).parameters)\n"
    )
    mutated = original.read_text().replace("len(inspect", "1 + len(inspect")
    assert _oracle_needs("pkg/m.py", mutated, original) == ("inspect",)
    assert _oracle_needs("pkg/m.py", "x = 2\n", _write_text(tmp_path / "n.py", "x = 1\n")) == ()


def _write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_task_validation_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="FAIL_TO_PASS is empty"):
        dataclasses.replace(_task(tmp_path), fail_to_pass=())
    with pytest.raises(ValueError, match="both"):
        dataclasses.replace(_task(tmp_path), pass_to_pass=("tests/test_a.py::test_x",))
    with pytest.raises(UserError, match=r"no task\.json"):
        load_task(tmp_path)
    (tmp_path / "task.json").write_text("{not json")
    with pytest.raises(FormatError, match="invalid JSON"):
        load_task(tmp_path)
    save_task(_task(tmp_path))
    doc = json.loads((tmp_path / "task.json").read_text())
    doc["fail_to_pass"] = "tests/test_a.py::test_x"
    (tmp_path / "task.json").write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="list of strings"):
        load_task(tmp_path)
    with pytest.raises(UserError, match="no such suite"):
        load_suite(tmp_path / "nowhere")


SOURCE = textwrap.dedent(
    """\
    LIMIT = 3  # module level: never mutated


    def f(a, b, items):
        \"\"\"doc\"\"\"
        if a < b and b > 0:
            a = a + 1
        while a in items:
            a = max(a, b)
        return items[1:a], True
    """
)


def _apply_all(operator: str) -> list[str]:
    out = []
    for cand in mut.candidates(SOURCE):
        if cand.operator == operator:
            mutated, first, last = mut.apply(SOURCE, cand)
            diff = [
                (a, b)
                for a, b in zip(SOURCE.splitlines(), mutated.splitlines(), strict=False)
                if a != b
            ]
            assert first == last and len(diff) == 1, (cand, mutated)
            out.append(diff[0][1].strip())
    return out


def test_mutation_operators_rewrite_one_spot_keeping_the_rest() -> None:
    assert all(c.function == "f" for c in mut.candidates(SOURCE))
    assert "if a <= b and b > 0:" in _apply_all("compare")
    assert "if a < b and b >= 0:" in _apply_all("compare")
    assert "while a not in items:" in _apply_all("compare")
    assert _apply_all("arith") == ["a = a - 1"]
    assert _apply_all("boolop") == ["if a < b or b > 0:"]
    assert "return items[1 + 1:a], True" in _apply_all("slice")
    assert "return items[1:a - 1], True" in _apply_all("slice")
    assert _apply_all("constant") == ["return items[1:a], False"]
    assert _apply_all("swap_args") == ["a = max(b, a)"]
    assert "if not (a < b and b > 0):" in _apply_all("negate")
    ones = _apply_all("off_by_one")
    assert "a = a + 2" in ones and "if a < b and b > 1:" in ones and "a = a + 0" in ones
    # LIMIT = 3 at module level is never a candidate.
    assert all(c.line > 1 for c in mut.candidates(SOURCE))


def test_negating_a_not_removes_it() -> None:
    source = "def g(x):\n    if not x:\n        return 1\n"
    (cand,) = [c for c in mut.candidates(source) if c.operator == "negate"]
    assert mut.apply(source, cand)[0] == "def g(x):\n    if x:\n        return 1\n"


def test_drop_if_removes_the_branch() -> None:
    (cand,) = [c for c in mut.candidates(SOURCE) if c.operator == "drop_if"]
    mutated, first, last = mut.apply(SOURCE, cand)
    assert (first, last) == (6, 7)
    assert "    pass\n    while" in mutated
    ast.parse(mutated)


def test_mutations_of_a_real_module_all_parse(smoke_suite: list[Task]) -> None:
    source = (smoke_suite[0].fix_dir / smoke_suite[0].mutation.file).read_text()
    cands = mut.candidates(source)
    assert len(cands) > 50
    for cand in cands[::7]:
        mutated, _, _ = mut.apply(source, cand)
        assert mutated != source
        ast.parse(mutated)


def test_test_selection_and_scenarios() -> None:
    ids = ["t.py::test_camelize[a]", "t.py::test_dasherize", "t.py::TestOrdinal::test_x"]
    assert _select("camelize", ids) == ["t.py::test_camelize[a]"]
    assert _select("Ordinal.__init__", ids) == ["t.py::TestOrdinal::test_x"]
    assert _select("f", ids) == []
    assert scenario("tests/test_x.py::ChunkedTests::test_even_split[2-3]") == (
        "Chunked: even split (case 2-3)"
    )


def test_issue_text_never_names_the_files_nor_addresses() -> None:
    text = issue_text(
        "pkg", "1.0", "pkg", [("tests/test_m.py::test_sum", "AssertionError: assert 4 == 5")], 1
    )
    assert "sum" in text and "assert 4 == 5" in text
    assert "tests/test_m.py" not in text and "test_m" not in text
    message = "assert <a.b....x7ffff61cd490> == <C object at 0x7f0265eb3e90>, x=0x10"
    text = issue_text("pkg", "1.0", "pkg", [("t.py::test_eq", message)], 1)
    assert "<a.b....x...> == <C object at 0x...>, x=0x10" in text


def test_default_suite_definition_is_pinned_and_big_enough() -> None:
    assert DEFAULT_SUITE.size >= 20
    assert len(DEFAULT_SUITE.packages) >= 3
    for pkg in DEFAULT_SUITE.packages:
        assert re.fullmatch(r"\d+(\.\d+)+", pkg.version)
        assert re.fullmatch(r"[0-9a-f]{64}", pkg.sha256)
    hashed = r"[\w-]+==[\w.]+( --hash=sha256:[0-9a-f]{64})+"
    assert all(re.fullmatch(hashed, d) for d in DEFAULT_SUITE.test_deps)
    assert any(d.startswith("pytest==") for d in DEFAULT_SUITE.test_deps)


def test_smoke_suite_invariants(smoke_suite: list[Task]) -> None:
    """Every task: the mutant fails every FAIL_TO_PASS and passes PASS_TO_PASS; with the known fix
    all listed tests pass; the agent's view has no hidden file and the issue gives no fix away."""
    assert [t.id for t in smoke_suite] == ["inflection-01", "inflection-02", "inflection-03"]
    for task in smoke_suite:
        check = verify_task(task)
        assert check.ok, check.problems
        assert check.mutant.score == 0.0 and check.fixed.score == 1.0
        for rel in task.hidden_files:
            assert (task.hidden_dir / rel).is_file()
            assert not (task.repo_dir / rel).exists()
        assert not list(task.repo_dir.rglob("test_*.py"))
        fix = (task.fix_dir / task.mutation.file).read_text()
        assert (task.repo_dir / task.mutation.file).read_text() != fix
        assert task.mutation.original in fix
        assert task.mutation.mutated.strip() not in task.issue
        assert task.mutation.file not in task.issue and "test_inflection" not in task.issue
        assert 1 <= len(task.fail_to_pass) <= SMOKE_SUITE.max_fail_to_pass
        assert len(task.pass_to_pass) <= SMOKE_SUITE.max_pass_to_pass
    assert len({t.mutation.line for t in smoke_suite}) == len(smoke_suite)


def test_build_is_reproducible(smoke_suite: list[Task], env_venv: Path, tmp_path: Path) -> None:
    """A second build of the same pinned spec writes the same tasks, byte for byte."""
    cache = smoke_suite[0].root.parents[2] / "sdists"
    again = build_suite(SMOKE_SUITE, tmp_path / "again", venv=env_venv, cache=cache, progress=False)
    assert [t.id for t in again] == [t.id for t in smoke_suite]
    for old, new in zip(smoke_suite, again, strict=True):
        assert (old.root / "task.json").read_text() == (new.root / "task.json").read_text()
        assert (old.repo_dir / old.mutation.file).read_text() == (
            new.repo_dir / new.mutation.file
        ).read_text()


def test_task_venv_refuses_a_release_whose_hash_differs(tmp_path: Path) -> None:
    """The task venv installs in hash-checking mode: a release that is not the locked one fails."""
    wrong = "pytest==9.2.0 --hash=sha256:" + "0" * 64
    with pytest.raises(UserError, match="Expected sha256"):
        ensure_venv(tmp_path / "venv", (wrong,))
    assert not (tmp_path / "venv" / ".kvh-test-deps.json").exists()
