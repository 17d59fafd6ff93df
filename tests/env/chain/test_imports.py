"""The import closure a milestone's cached grade is keyed on, on small hand-made trees."""

from __future__ import annotations

from pathlib import Path

from kvharness.env.chain.imports import content_key, import_closure


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


FILES = {
    "pkg/__init__.py": "",
    "pkg/a.py": "from . import b\n",
    "pkg/b.py": "def f():\n    from pkg.sub import c\n    return c\n",
    "pkg/sub/__init__.py": "",
    "pkg/sub/c.py": "import os\nimport json\n",
    "pkg/unrelated.py": "",
    "pkg/data.txt": "x",
    "tests/conftest.py": "",
    "tests/test_a.py": "import pkg.a\n",
    "tests/test_other.py": "from pkg import unrelated\n",
}


def test_the_closure_follows_absolute_relative_and_nested_imports(tmp_path: Path) -> None:
    tree = _tree(tmp_path, FILES)
    closure = import_closure(tree, ["tests/test_a.py"], ["."])
    assert closure == {
        "tests/test_a.py",
        "tests/conftest.py",
        "pkg/__init__.py",
        "pkg/a.py",
        "pkg/b.py",
        "pkg/sub/__init__.py",
        "pkg/sub/c.py",
    }
    assert "pkg/unrelated.py" in import_closure(tree, ["tests/test_other.py"], ["."])


def test_import_roots_other_than_the_tree_root(tmp_path: Path) -> None:
    files = {f"src/{k}" if k.startswith("pkg/") else k: v for k, v in FILES.items()}
    tree = _tree(tmp_path, files)
    assert "src/pkg/sub/c.py" in import_closure(tree, ["tests/test_a.py"], ["src"])


def test_the_key_changes_with_what_the_tests_read_and_only_that(tmp_path: Path) -> None:
    tree = _tree(tmp_path, FILES)
    closure = import_closure(tree, ["tests/test_a.py"], ["."])

    def key() -> str:
        return content_key(tree, closure, ["pkg"], salt=["tests/test_a.py::t"])

    first = key()
    (tree / "pkg/unrelated.py").write_text("X = 1\n")
    assert key() == first
    (tree / "pkg/sub/c.py").write_text("import os\n")
    changed = key()
    assert changed != first
    (tree / "pkg/data.txt").write_text("y")  # data a module may read counts too
    assert key() != changed
    assert content_key(tree, closure, ["pkg"], salt=["other"]) != key()
