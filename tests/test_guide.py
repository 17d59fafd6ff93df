"""The user guide's examples (docs/guide/*.md) print what their pages show.

Each page is checked by ``benchmarks/guide.py --check`` (its non-live examples, run for real);
the marker rules themselves are checked on a page made here.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "guide.py"
PAGES = sorted((REPO / "docs" / "guide").glob("*.md"))


def _guide() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kvharness_guide", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


guide = _guide()


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_examples_print_what_the_page_shows(page: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", str(page)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, (
        f"{page.name} no longer matches its commands' output; regenerate with "
        f"`.venv/bin/python benchmarks/guide.py {page.relative_to(REPO)}` (or `make guide`)\n"
        f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    )


def _page(tmp_path: Path, marker: str, block: list[str]) -> Path:
    page = tmp_path / "page.md"
    page.write_text("\n".join(["# a page", "", marker, *block, "", "after"]) + "\n")
    return page


def _run(page: Path, *flags: str) -> int:
    code: int = guide.main([*flags, str(page)])
    return code


def test_a_new_marker_gets_its_block_and_then_checks(tmp_path: Path) -> None:
    page = _page(tmp_path, "<!-- example: echo hello; echo world -->", [])
    assert _run(page, "--check") == 1
    assert page.read_text().count("hello") == 1  # --check wrote nothing
    assert _run(page) == 0
    text = page.read_text()
    assert "```console\n$ echo hello; echo world\nhello\nworld\n```\n\nafter\n" in text
    assert _run(page, "--check") == 0


def test_a_changed_output_fails_the_check(tmp_path: Path) -> None:
    block = ["```console", "$ echo hello", "goodbye", "```"]
    page = _page(tmp_path, "<!-- example: echo hello -->", block)
    assert _run(page, "--check") == 1


def test_volatile_lines_are_compared_with_figures_masked_in_any_order(tmp_path: Path) -> None:
    command = r'printf "b took 2.5 s\nfixed 1\na took 10.25 s\n"'
    block = ["```console", f"$ {command}", "a took 1.0 s", "fixed 1", "b took 3 s", "```"]
    page = _page(tmp_path, f'<!-- example volatile="took": {command} -->', block)
    assert _run(page, "--check") == 0
    before = page.read_text()
    assert _run(page) == 0
    assert page.read_text() == before  # an agreeing block is left as it is
    page.write_text(before.replace("\nfixed 1\n", "\nfixed 2\n"))
    assert _run(page, "--check") == 1  # figures outside volatile lines still count


def test_the_exit_status_is_part_of_the_example(tmp_path: Path) -> None:
    page = _page(tmp_path, "<!-- example: exit 3 -->", [])
    assert _run(page) == 1
    page = _page(tmp_path, "<!-- example status=3: echo no; exit 3 -->", [])
    assert _run(page) == 0
    assert "$ echo no; exit 3\nno\n```" in page.read_text()


def test_live_examples_wait_for_live(tmp_path: Path) -> None:
    block = ["```console", "$ echo live", "(not run yet)", "```"]
    page = _page(tmp_path, "<!-- example live: echo live -->", block)
    assert _run(page, "--check") == 0


def test_paths_of_the_run_are_written_as_the_project_root(tmp_path: Path) -> None:
    page = _page(tmp_path, "<!-- example: pwd; readlink -f .cache -->", [])
    assert _run(page) == 0
    assert "$ pwd; readlink -f .cache\n.\n./.cache\n```" in page.read_text()


def test_the_screenshot_run_is_an_example_of_the_report_page() -> None:
    text = (REPO / "docs" / "guide" / "report.md").read_text()
    assert f'<!-- example volatile="simulated in": {guide.SCREENSHOT_COMMAND} -->' in text
    for png in ("report.png", "overview.png"):
        assert (REPO / "docs" / "guide" / "img" / png).stat().st_size > 10_000
