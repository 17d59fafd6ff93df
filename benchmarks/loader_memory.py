"""Peak memory of `kvharness workload stats` on big generated hash_ids traces.

Two traces are written to a temporary folder: one line of --line-mib MiB (refused by the line
bound) and --lines lines of about 3 KB each (loaded). The CLI runs on each in a child process;
printed are its exit status, the first line it wrote to stderr and its peak resident memory
(the child's own ru_maxrss, from wait4).

    .venv/bin/python benchmarks/loader_memory.py [--line-mib 1024] [--lines 100000]

The child runs `sys.executable -m kvharness`, so PYTHONPATH=OTHER/src measures another checkout.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def write_one_line(path: Path, mib: int) -> None:
    with path.open("wb") as f:
        f.write(
            b'{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1], "pad": "'
        )
        chunk = b"a" * (1 << 20)
        for _ in range(mib):
            f.write(chunk)
        f.write(b'"}\n')


def write_many_lines(path: Path, lines: int) -> None:
    pad = "b" * 3000
    with path.open("w") as f:
        for i in range(lines):
            f.write(
                f'{{"timestamp": {i}, "input_length": 512, "output_length": 8, '
                f'"hash_ids": [{i}], "pad": "{pad}"}}\n'
            )


def peak_of_stats(trace: Path, err: Path) -> tuple[int, str, float]:
    """(exit status, first stderr line, peak RSS in MiB) of `kvharness workload stats TRACE`."""
    with err.open("wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "kvharness", "workload", "stats", str(trace), "--json"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    lines = err.read_text(errors="replace").splitlines()
    return child.returncode, lines[0] if lines else "", usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--line-mib", type=int, default=1024, help="size of the one-line trace")
    parser.add_argument("--lines", type=int, default=100_000, help="lines of the many-line trace")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        one, many = folder / "one-line.jsonl", folder / "many-lines.jsonl"
        write_one_line(one, args.line_mib)
        write_many_lines(many, args.lines)
        for trace in (one, many):
            code, first, peak = peak_of_stats(trace, folder / "stderr.txt")
            size = trace.stat().st_size / 1e6
            print(f"{trace.name} ({size:,.0f} MB): exit {code}, peak RSS {peak:,.0f} MiB")
            if first:
                print(f"  stderr: {first.replace(str(folder) + os.sep, '')}")


if __name__ == "__main__":
    main()
