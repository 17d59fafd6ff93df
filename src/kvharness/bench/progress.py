"""A rich progress bar with live counts, refreshed from :class:`Counts` by a timer (so the hot
path never touches the display)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kvharness.bench.runner import Counts

__all__ = ["live_progress"]


@contextlib.asynccontextmanager
async def live_progress(counts: Counts, *, enabled: bool, label: str) -> AsyncIterator[None]:
    """Show a progress bar while the body runs (no-op when ``enabled`` is False)."""
    if not enabled:
        yield
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TextColumn("{task.fields[live]}"),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        auto_refresh=False,
    )
    task = progress.add_task(label, total=counts.turns_total, live="")

    def update() -> None:
        errs = sum(counts.errors.values())
        live = (
            f"sessions: {counts.sessions_active} on, {counts.sessions_done} done, "
            f"{counts.sessions_abandoned} abandoned · in flight {counts.in_flight} · errors {errs}"
        )
        progress.update(task, completed=counts.turns_ok, live=live)
        progress.refresh()

    async def ticker() -> None:
        while True:
            update()
            await asyncio.sleep(0.5)

    with progress:
        tick = asyncio.create_task(ticker())
        try:
            yield
        finally:
            tick.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tick
            update()
