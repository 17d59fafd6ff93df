"""Runs one side of a performance grading inside its sandbox: the reference or the candidate.

Copied by the grader into a folder mounted read-only, and run as ``python -I _runner.py MODULE
INPUTS FUNCTION BACKEND [CPU]``: ``MODULE`` is the file under test, ``INPUTS`` the task's input
generators, ``CPU`` the one CPU the process runs on (pinned before the module is loaded; the
grader puts both sides of a round on the same one). Standard library and numpy only (plus torch
for the ``triton`` backend), so that it runs in any task environment.

The grader speaks to it over stdin / stdout, one line per message; the candidate's own output is
sent to stderr, so that nothing it prints reaches the grader as a message:

* ``cases SEED`` -> every correctness case of ``inputs.cases(default_rng(SEED))`` is run, and
  the outputs come back as ``O NBYTES`` and an ``.npz`` of that many bytes (``npz_outputs``).
* ``time SEED CALLS`` -> one untimed warm-up call, then ``CALLS`` inputs from
  ``inputs.timing`` are made and ``R`` is sent. For each call the grader sends ``G NONCE``, takes
  its clock, and takes it again when ``D NONCE`` comes back: the time is measured by the grader,
  outside this process. The nonce makes a ``D`` written by anything but this runner (the code
  under test writing to the channel) show as a broken exchange. After each ``D`` comes that
  call's output as an ``O`` message (outside the timed span: the call's output and inputs are
  freed before the next call, so no call pays page faults for memory its predecessors hold), which
  the grader checks too.
* ``quit`` -> exit.

A call that raises gives that case an ``error`` entry; a message this runner cannot carry out
gives ``E TEXT`` and ends the process.
"""

import importlib.util
import io
import os
import sys
import zipfile
from typing import Any

import numpy as np


def _load(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Npz:
    """Outputs as an .npz: case ``i`` is ``i.a`` (an array), ``i.0``, ``i.1``... (a tuple) or
    ``i.error`` (a message)."""

    def __init__(self) -> None:
        self._buf = io.BytesIO()
        self._zip = zipfile.ZipFile(self._buf, "w", zipfile.ZIP_STORED)

    def _write(self, key: str, arr: Any) -> None:
        with self._zip.open(f"{key}.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)

    def add(self, i: int, out: Any) -> None:
        if isinstance(out, BaseException):
            self._write(f"{i}.error", np.array(f"{type(out).__name__}: {out}"[:500]))
            return
        is_tuple = isinstance(out, (tuple, list))
        parts = [np.asarray(p) for p in (out if is_tuple else (out,))]
        if any(p.dtype == object for p in parts):
            self._write(f"{i}.error", np.array("the output is not a numeric array"))
            return
        for j, arr in enumerate(parts):
            self._write(f"{i}.{j}" if is_tuple else f"{i}.a", arr)

    def getvalue(self) -> bytes:
        self._zip.close()
        return self._buf.getvalue()


def main() -> None:
    module_path, inputs_path, function, backend = sys.argv[1:5]
    if len(sys.argv) > 5:
        os.sched_setaffinity(0, {int(sys.argv[5])})
    channel_in = os.fdopen(os.dup(0), "rb", buffering=0)
    channel_out = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)

    def send(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(channel_out, view) :]

    def send_npz(npz: _Npz) -> None:
        data = npz.getvalue()
        send(f"O {len(data)}\n".encode() + data)

    def line() -> list[str]:
        data = bytearray()
        while not data.endswith(b"\n"):
            byte = channel_in.read(1)
            if not byte:
                sys.exit(0)
            data += byte
        return data.decode().split()

    def to_arg(a: Any) -> Any:
        return a

    def from_out(o: Any) -> Any:
        return o

    def sync() -> None:
        pass

    if backend == "triton":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu":
            os.environ.setdefault("TRITON_INTERPRET", "1")

        def to_arg(a: Any) -> Any:
            if isinstance(a, np.ndarray):
                return torch.from_numpy(np.ascontiguousarray(a)).to(device)
            return a

        def from_out(o: Any) -> Any:
            if isinstance(o, (tuple, list)):
                return tuple(from_out(p) for p in o)
            return o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else o

        if device == "cuda":

            def sync() -> None:
                torch.cuda.synchronize()

    inputs = _load(inputs_path, "kvh_perf_inputs")
    fn = getattr(_load(module_path, "solution"), function)

    def call(args: Any) -> Any:
        try:
            out = fn(*[to_arg(a) for a in args])
            sync()
            return from_out(out)
        except Exception as err:
            return err

    while True:
        msg = line()
        if msg[0] == "quit":
            return
        if msg[0] == "cases":
            outs = _Npz()
            for i, args in enumerate(inputs.cases(np.random.default_rng(int(msg[1])))):
                outs.add(i, call(args))
            send_npz(outs)
        elif msg[0] == "time":
            seed, calls = int(msg[1]), int(msg[2])
            call(inputs.timing(np.random.default_rng([seed, 1])))
            rng = np.random.default_rng([seed, 0])
            args = [[to_arg(a) for a in inputs.timing(rng)] for _ in range(calls)]
            send(b"R\n")
            for i in range(calls):
                nonce = line()[1]
                try:
                    out = fn(*args[i])
                    sync()
                except Exception as err:
                    out = err
                send(f"D {nonce}\n".encode())
                one = _Npz()
                one.add(0, out if isinstance(out, BaseException) else from_out(out))
                del out
                args[i] = []
                send_npz(one)
        else:
            send(f"E unknown message {msg[0]!r}\n".encode())
            return


if __name__ == "__main__":
    main()
