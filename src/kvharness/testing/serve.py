"""``make serve``: one vLLM-CPU replica of the tiny model behind ``kvharness gateway`` on loopback,
so any OpenAI client can be pointed at it in one command; Ctrl-C stops both.

    python -m kvharness.testing.serve [--port 8080]      (make serve SERVE_PORT=8080)

The replica's KV events go to the gateway (it routes by what the engine caches); its log is under
``.cache/vllm-logs/``.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvharness.testing.tiny_model import ensure_tiny_model
from kvharness.testing.vllm import ReplicaConfig, start_replica

_REPO = Path(__file__).resolve().parents[3]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make serve", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8080, help="the gateway's port (default 8080)")
    args = p.parse_args(argv)
    # Ctrl-C or a SIGTERM stops both, even where the shell started this with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    t0 = time.monotonic()
    model = ensure_tiny_model(_REPO / ".cache" / "tiny-llama")
    print("starting one vLLM-CPU replica of the tiny model (about 30 s)...", flush=True)
    cfg = ReplicaConfig(model_dir=model)
    replica = start_replica(cfg)
    assert replica.kv_events is not None
    events = "tcp://*:" + replica.kv_events.rsplit(":", 1)[1]
    gateway = subprocess.Popen(
        [sys.executable, "-m", "kvharness", "gateway", "--backend", replica.url,
         "--kv-events", f"{replica.url}={events}", "--tokenizer", str(model),
         "--port", str(args.port)]
    )  # fmt: skip
    try:
        print(
            f"replica {replica.url} up after {time.monotonic() - t0:.0f} s; gateway on "
            f"http://127.0.0.1:{args.port}/v1 (model {cfg.served_name!r}), e.g.\n"
            f"  curl -s http://127.0.0.1:{args.port}/v1/completions -H 'content-type: "
            f'application/json\' -d \'{{"model":"{cfg.served_name}","prompt":"hello",'
            '"max_tokens":8}\'\n'
            "Ctrl-C stops both.",
            flush=True,
        )
        return gateway.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        gateway.terminate()
        gateway.wait(10)
        replica.stop()


if __name__ == "__main__":
    sys.exit(main())
