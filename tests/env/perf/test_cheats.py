"""Each way of earning the speed reward without being faster, tried against the real grader."""

import textwrap

import pytest

from kvharness.env.perf.grading import PerfGrader
from kvharness.env.perf.verify import grade_solution

from .conftest import QUICK, REFERENCE


@pytest.fixture
def grader(perf_task, tmp_path):
    (tmp_path / "grading").mkdir()
    return PerfGrader(perf_task, policy=QUICK, workdir=tmp_path / "grading")


def _src(text: str) -> str:
    return textwrap.dedent(text)


def test_caching_results_across_calls_never_hits(grader):
    """Every timed call has inputs of its own, so a memo of the reference is the reference."""
    cached = REFERENCE + _src(
        """

        _memo = {}
        _slow = row_sq


        def row_sq(x):
            key = (x.shape, x.tobytes())
            if key not in _memo:
                _memo[key] = _slow(x)
            return _memo[key]
        """
    )
    g = grade_solution(grader, cached)
    assert g.correct and g.timed
    assert g.score == 0.0, g.summary()


def test_a_cache_keyed_on_the_shape_gives_wrong_answers(grader):
    cached = REFERENCE + _src(
        """

        _last = {}
        _slow = row_sq


        def row_sq(x):
            if x.shape not in _last:
                _last[x.shape] = _slow(x)
            return _last[x.shape]
        """
    )
    g = grade_solution(grader, cached)
    assert g.score == 0.0 and not g.correct
    assert "timed call" in g.summary()


def test_special_casing_large_inputs_is_caught_on_the_timed_calls(grader):
    """The correctness cases are small; the cheat is right on them and wrong on timing inputs,
    whose outputs are checked too."""
    special = REFERENCE + _src(
        """

        _slow = row_sq


        def row_sq(x):
            if x.size > 50_000:
                return np.zeros(x.shape[0])
            return _slow(x)
        """
    )
    g = grade_solution(grader, special)
    assert g.score == 0.0 and not g.correct
    assert "timed call" in g.summary()


def test_calling_the_graders_reference_is_impossible(grader, perf_task):
    """Its copy of the reference is not in the candidate's sandbox, even by its host path."""
    hidden = perf_task.hidden_dir.resolve()
    caller = _src(
        f"""
        import sys

        sys.path.insert(0, {str(hidden)!r})
        from reference import row_sq as _ref


        def row_sq(x):
            return _ref(x)
        """
    )
    g = grade_solution(grader, caller)
    assert g.score == 0.0 and not g.correct
    assert "ModuleNotFoundError" in g.summary()


def test_the_expected_outputs_cannot_be_read(grader, perf_task, tmp_path):
    """Whatever it searches (the task's folder, the grader's folder, /tmp, every process), it
    finds no reference, no expected output and no hidden file: only its own runner's two files
    (the harness and the public input generators) are mounted, read-only."""
    places = [str(perf_task.root.resolve()), str((tmp_path / "grading").resolve()), "/tmp"]
    snoop = _src(
        f"""
        import glob
        import os


        def row_sq(x):
            seen = []
            for root in {places!r}:
                for path in glob.glob(root + "/**/*", recursive=True):
                    if os.path.isfile(path) and os.path.basename(path) not in (
                        "_runner.py",
                        "inputs.py",
                    ):
                        seen.append(path)
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    with open(f"/proc/{{pid}}/cmdline", "rb") as f:
                        if b"reference" in f.read():
                            seen.append(pid)
            raise RuntimeError("saw " + repr(sorted(seen)))
        """
    )
    g = grade_solution(grader, snoop)
    assert g.score == 0.0
    assert "RuntimeError: saw []" in g.summary()


def test_patching_the_timer_changes_nothing(grader):
    """The clock is the grader's, outside the sandbox."""
    patched = (
        _src(
            """
        import time

        _zero = lambda *a: 0.0
        time.perf_counter = time.monotonic = time.time = time.process_time = _zero
        time.perf_counter_ns = time.monotonic_ns = time.time_ns = lambda *a: 0
        """
        )
        + REFERENCE
    )
    g = grade_solution(grader, patched)
    assert g.correct and g.timed
    assert g.score == 0.0, g.summary()


def test_forging_the_runners_replies_is_caught(grader):
    """A reply written to the grader's channel by the candidate lacks the call's nonce."""
    forger = _src(
        """
        import os

        import numpy as np


        def row_sq(x):
            if x.size > 50_000:
                for fd in range(3, 64):
                    try:
                        os.write(fd, b"D 0\\n")
                    except OSError:
                        pass
            return np.einsum("ij,ij->i", x, x)
        """
    )
    g = grade_solution(grader, forger)
    assert g.score == 0.0
    assert g.tampered and "runner" in g.tampered[0]


def test_threads_and_process_machinery_are_rejected_by_the_scan(grader):
    threaded = "import threading\n" + REFERENCE
    g = grade_solution(grader, threaded)
    assert g.score == 0.0
    assert g.tampered and "threading" in g.tampered[0]


def test_a_forged_compressed_archive_is_never_expanded(grader):
    """Outputs the code under test writes to the channel itself, as a deflated archive that
    would expand to 800 MB on the grader's side, are refused unread."""
    bomb = _src(
        """
        import io
        import os
        import zipfile

        import numpy as np


        def row_sq(x):
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
                with z.open("0.a.npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.zeros(100_000_000))
            data = buf.getvalue()
            for fd in range(3, 64):
                try:
                    os.write(fd, b"O %d\\n" % len(data) + data)
                except OSError:
                    pass
            return np.einsum("ij,ij->i", x, x)
        """
    )
    g = grade_solution(grader, bomb)
    assert g.score == 0.0
    assert g.tampered and "not as the runner writes them" in g.tampered[0]
