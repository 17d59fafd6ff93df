"""A replica's log as a failed start reports it: the root cause above the closing traceback."""

from __future__ import annotations

from pathlib import Path

from kvharness.testing import VllmReplica


def test_the_tail_is_preceded_by_the_error_lines_above_it(tmp_path: Path) -> None:
    log = tmp_path / "replica.log"
    lines = [f"INFO line {i}" for i in range(100)]
    lines[10] = "zmq.error.ZMQError: Address already in use (addr='tcp://*:5557')"
    log.write_text("\n".join(lines))
    rep = VllmReplica(url="http://127.0.0.1:1", model="m", log_path=log)
    shown = rep.log_tail(30).splitlines()
    assert shown[0] == lines[10] and shown[1] == "[...]"
    assert shown[2:] == lines[-30:]
    log.write_text("\n".join(lines[20:]))
    assert rep.log_tail(30).splitlines() == lines[-30:]
