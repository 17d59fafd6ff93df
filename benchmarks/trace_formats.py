"""The field's trace formats, figure by figure: each public sample loaded, hostile files refused,
each written format read back, and a converted recording read by AIPerf.

    .venv/bin/python benchmarks/trace_formats.py [--recording DIR]

Prints, for each sample in tests/workload/samples: the format detected, requests, sessions, how
sharing is known, the ideal hit ratio and the load time (best of 3); then, per format, the
one-line error for a malformed record, a deep nesting, a 65 MiB line (a 257 MiB document for
the one-document formats), a byte-order mark and a wrong type; then each written format's round trip over a synthetic workload and the recording;
then AIPerf's count of the recording converted to Mooncake rows (needs `make aiperf`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from kvharness.errors import FormatError
from kvharness.workload import formats
from kvharness.workload.load import load_workload
from kvharness.workload.model import Workload
from kvharness.workload.stats import workload_stats
from kvharness.workload.synthetic import SyntheticConfig, generate

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "tests" / "workload" / "samples"

# a valid record of each format, as one line or one document, and the file name it goes in
RECORDS = {
    "azure": ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,48,1\n"),
    "mooncake": ("t.jsonl", '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}\n'),
    "openai-log": ("t.jsonl", '{"messages": [{"role": "user", "content": "hi"}], "timestamp": 1}\n'),
    "otel": ("t.json", '{"spans": [{"start_time": "2026-01-01T00:00:00", "name": "chat a", '
             '"attributes": {"gen_ai.input.messages": "[]", "gen_ai.usage.input_tokens": 3}}]}\n'),
    "atif": ("t.json", '{"schema_version": "ATIF-v1.5", "session_id": "s", "steps": [{"source": '
             '"agent", "message": "ok", "metrics": {"prompt_tokens": 3}}]}\n'),
    "openhands": ("t.json", '[{"id": 0, "source": "user", "action": "message", "args": {"content": '
                  '"hi"}}, {"id": 1, "source": "agent", "action": "message", "message": "ok"}]\n'),
    "mini-swe-agent": ("t.traj.json", '{"trajectory_format": "mini-swe-agent-1.1", "messages": '
                       '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}\n'),
}  # fmt: skip


def _hostile(text: str, document: bool) -> dict[str, bytes]:
    data = text.encode()
    deep = b"[" * 100_000 + b"]" * 100_000
    if text.startswith("TIMESTAMP"):
        wrong = text.replace(",48,", ",forty-eight,")
        nested = text.replace(",48,", "," + "[" * 5000 + ",")
    else:
        wrong = text.replace('"role": "user"', '"role": 5', 1).replace("3}", '"3"}', 1)
        wrong = wrong.replace(": 4,", ': "4",', 1).replace('"id": 1', '"id": "one"', 1)
        nested = text.replace('"hi"', deep.decode(), 1).replace(": 3", ": " + deep.decode(), 1)
        nested = nested.replace('"hash_ids": [1]', '"hash_ids": ' + deep.decode(), 1)
    return {
        "malformed": data + data[: len(data) // 2] + b"\n",
        "deep nesting": nested.encode(),
        # JSON Lines and CSV bound a line at 64 MiB, one-document formats a file at 256 MiB
        "huge": data.rstrip(b"\n") + b" " * ((257 if document else 65) << 20) + b"\n",
        "BOM": b"\xef\xbb\xbf" + data,
        "wrong types": wrong.encode(),
    }


def _best(fn: object, n: int = 3) -> float:
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t)
    return best


def samples() -> None:
    print("sample | format | requests | sessions | sharing | ideal hit (tokens) | load s")
    for path in sorted(SAMPLES.glob("*/*")):
        if path.suffix not in (".csv", ".json", ".jsonl"):
            continue
        size = (
            1024 if "agentic_mooncake_doc" in path.name else 4 if "test_rows" in path.name else None
        )
        try:
            w = load_workload(str(path), block_size=size)
        except FormatError as err:
            print(f"{path.relative_to(SAMPLES)} | refused | {err.reason}")
            continue
        s = workload_stats(w)
        seconds = _best(lambda p=path, b=size: load_workload(str(p), block_size=b))
        ideal = "n/a" if s.sharing == "none" else f"{s.ideal_hit_ratio_tokens:.1%}"
        print(
            f"{path.relative_to(SAMPLES)} | {s.format} | {s.requests} | {s.sessions} | {s.sharing} | {ideal} | {seconds:.4f}"
        )


def hostile(folder: Path) -> None:
    print("\nformat | input | error")
    for name, (filename, text) in RECORDS.items():
        path = folder / filename
        document = filename.endswith(".json")
        for what, data in _hostile(text, document).items():
            what = ("257 MiB document" if document else "65 MiB line") if what == "huge" else what
            path.write_bytes(data)
            for fmt in (name, None):
                try:
                    load_workload(str(path), fmt=fmt, block_size=4)
                    outcome = "LOADED"
                except FormatError as err:
                    outcome = str(err).replace(str(folder) + "/", "")
                by = "--format" if fmt else "detected"
                print(f"{name} | {what} ({by}) | {outcome[:160]}")


def round_trips(folder: Path, recording: Path | None) -> None:
    print("\nsource | written as | sessions | turns | same sessions, turns, lengths, gaps, sharing")
    sources: list[Workload] = [generate(SyntheticConfig(sessions=24, seed=5))]
    if recording is not None:
        sources.append(load_workload(str(recording)))
    for w in sources:
        for fmt in formats.writable():
            out = folder / f"{w.name}.{fmt.name}"
            formats.save_as(w, out, fmt.name)
            back = load_workload(str(out), block_size=w.block_size)
            print(
                f"{w.name} | {fmt.name} | {len(back.sessions)} | {back.num_turns} | {_same(w, back)}"
            )


def _key(w: Workload) -> list[tuple[object, ...]]:
    ids: dict[int, int] = {}
    starts = w.arrival.start_times(w.sessions)
    out = []
    for t0, s in sorted(
        zip(starts, w.sessions, strict=True), key=lambda x: (round(x[0], 3), x[1].id)
    ):
        for t in s.turns:
            blocks = tuple(ids.setdefault(h, len(ids)) for h in t.input.hashes)
            out.append((s.id, t0, t.input.num_tokens, t.output_tokens, t.gap, blocks))
    return out


def _same(a: Workload, b: Workload) -> str:
    """Equal but for time rounding: starts and gaps agree within 10 microseconds."""
    ka, kb = _key(a), _key(b)
    exact = [k[:1] + k[2:4] + k[5:] for k in ka] == [k[:1] + k[2:4] + k[5:] for k in kb]
    close = all(
        abs(x[1] - y[1]) < 1e-5 and abs(x[4] - y[4]) < 1e-5  # type: ignore[operator]
        for x, y in zip(ka, kb, strict=True)
    )
    return "yes" if exact and close and len(ka) == len(kb) else "NO"


def aiperf(folder: Path, recording: Path) -> None:
    python = ROOT / ".venv-aiperf" / "bin" / "python"
    w = load_workload(str(recording))
    out = folder / "recording.mooncake.jsonl"
    formats.save_as(w, out, "mooncake")
    probe = ROOT / "tests" / "workload" / "aiperf_probe.py"
    done = subprocess.run(
        [str(python), str(probe), str(out), "--block-size", str(w.block_size)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    seen = json.loads(done.stdout.splitlines()[-1])
    print(f"\nrecording {recording}: {w.num_turns} requests in {len(w.sessions)} sessions; "
          f"AIPerf 0.13.0 reads {seen['requests']} requests in {seen['sessions']} sessions "
          f"({seen['phase']}, {seen['phase_requests']} to send)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recording", type=Path, help="a gateway recording to convert and replay")
    args = ap.parse_args()
    samples()
    with tempfile.TemporaryDirectory() as tmp:
        hostile(Path(tmp))
        round_trips(Path(tmp), args.recording)
        if args.recording is not None:
            aiperf(Path(tmp), args.recording)


if __name__ == "__main__":
    main()
