"""``kvharness gateway status``: a live view of a running gateway, read from its ``/status``."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kvharness.errors import UserError
from kvharness.wire import blocking
from kvharness.wire.http import WireError

__all__ = ["fetch_status", "render_status", "watch_status"]


def fetch_status(url: str, timeout: float = 5.0) -> dict[str, Any]:
    """The gateway's ``/status`` JSON; raises :class:`UserError` when it cannot be had."""
    target = url.rstrip("/") + "/status"
    try:
        status, body = blocking.get(target, timeout_s=timeout)
    except WireError as err:
        raise UserError(f"cannot reach {target}: {err}") from None
    except ValueError as err:
        raise UserError(f"--url {url}: {err}") from None
    if status != 200:
        raise UserError(f"{target} answered {status}")
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise UserError(f"{target} did not answer JSON (is it a kvharness gateway?)") from None
    if not isinstance(data, dict):
        raise UserError(f"{target} did not answer a JSON object (is it a kvharness gateway?)")
    return data


def render_status(status: dict[str, Any]) -> Group:
    """Replicas (health, load, index, KV events) and hashing, as rich renderables."""
    head = Text(
        f"policy {status.get('policy')}  block size {status.get('block_size')}  "
        f"uptime {status.get('uptime_s')} s  tokenizer {status.get('tokenizer') or '-'}"
    )
    rows = []
    for r in status.get("replicas", []):
        ev = r.get("kv_events") or {}
        rows.append([
            str(r.get("url")),
            "[green]up[/]" if r.get("healthy") else "[red]down[/]",
            str(r.get("inflight")),
            str(r.get("pending_prefill_tokens")),
            str(r.get("prefill_tokens_per_s")),
            str(r.get("index_blocks")),
            str(ev.get("events", "-")),
            str(ev.get("gaps", "-")),
            str(ev.get("stale_marks", "-")),
            str(ev.get("missed_at_join", "-")),
            f"{1000 * ev['lag_s']:.1f}" if ev.get("lag_s") is not None else "-",
        ])  # fmt: skip
    # Two-line headers and one-space gaps fit a 100-column terminal; where one is narrower, a
    # cell folds onto a second line rather than being cut.
    table = Table(title="replicas", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False)
    heads = ("replica", "up", "in\nflight", "pending\nprefill", "prefill\ntok/s", "index\nblocks",
             "events", "gaps", "stale", "missed\nat join", "lag\nms")  # fmt: skip
    for k, col in enumerate(heads):
        table.add_column(col, justify="left" if k < 2 else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    h = status.get("hashing", {})
    total = h.get("tokens_total") or 0
    reused = h.get("tokens_reused") or 0
    hashing = Text(
        f"prompts {h.get('prompts')}  incremental {h.get('incremental')} "
        f"(from another session {h.get('shared', 0)})  sessions "
        f"{h.get('sessions')}  tokens reused {reused}/{total}"
        + (f" ({100 * reused / total:.1f}%)" if total else "")
        + f"  mismatches {h.get('mismatches')}"
    )
    return Group(head, table, hashing)


def watch_status(url: str, interval: float, once: bool, console: Console | None = None) -> None:
    console = console or Console()
    if once:
        console.print(render_status(fetch_status(url)))
        return
    with Live(render_status(fetch_status(url)), console=console, refresh_per_second=4) as live:
        while True:
            time.sleep(interval)
            live.update(render_status(fetch_status(url)))
