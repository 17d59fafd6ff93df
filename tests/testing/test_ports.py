"""free_port: ports that cannot collide with the ones vLLM, ZMQ and the kernel pick."""

from __future__ import annotations

import socket
from pathlib import Path

from kvharness.testing.vllm import free_port


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < low for p in ports)
    with socket.socket() as s:
        s.bind(("", ports[-1]))  # free on every interface, as vLLM's tcp://* binds need
