"""How a sandboxed command's files come back to the host: one tar stream, bounded, filtered.

Inside the sandbox the writable repository (and any exported folder) is a size-limited tmpfs; after
the command, once every other process of it is killed, the sandbox writes a tar of those folders to
a pipe. The host saves at most ``cap`` bytes of it (so the host disk never holds more than the
quota allows) and extracts it with a filter that takes only regular files, folders, FIFOs, symbolic
links (as links, never followed) and hard links inside the archive: no device, no path outside.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tarfile
import threading
from pathlib import Path

__all__ = ["SaveStream"]

_CHUNK = 1 << 16


def _member_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    if member.issym() or member.isfifo():
        return tarfile.tar_filter(member, dest)
    if not (member.isreg() or member.isdir() or member.islnk()):
        return None
    return tarfile.data_filter(member, dest)


class SaveStream:
    """The pipe one command's files come back through. ``write_fd`` goes to the sandbox (and is
    closed here once the sandbox has it); the host drains ``read_fd`` into a file beside
    ``folder``'s contents with :meth:`drain` (a thread) or :meth:`adrain` (the event loop)."""

    def __init__(self, folder: Path, cap: int) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.file = folder / f".kvh-save-{secrets.token_hex(4)}.tar"
        self.cap = cap
        self.size = 0
        self.overflow = False

    def sent(self) -> None:
        """The sandbox process holds the write end now: drop ours, so the stream ends with it."""
        os.close(self.write_fd)

    def _take(self, out: object, chunk: bytes) -> bool:
        if self.size + len(chunk) > self.cap:
            self.overflow = True
            return False
        out.write(chunk)  # type: ignore[attr-defined]
        self.size += len(chunk)
        return True

    def drain(self) -> threading.Thread:
        """Start a thread saving the stream (join it after the command)."""

        def run() -> None:
            with os.fdopen(self.read_fd, "rb", buffering=0) as pipe, open(self.file, "wb") as out:
                while (chunk := pipe.read(_CHUNK)) and self._take(out, chunk):
                    pass

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    async def adrain(self) -> None:
        """Save the stream without blocking the event loop on the pipe."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        pipe = os.fdopen(self.read_fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            with open(self.file, "wb") as out:
                while (chunk := await reader.read(_CHUNK)) and self._take(out, chunk):
                    pass
        finally:
            transport.close()

    def extract(self, dest: Path) -> str | None:
        """Extract the saved stream into ``dest`` (created); None, or why nothing usable came back."""
        try:
            if self.overflow:
                return (
                    f"they take more than {self.cap >> 20} MiB to save (a sparse file counts at "
                    "its full size): stay within the workspace quota"
                )
            with tarfile.open(self.file) as tar:
                tar.extractall(dest, filter=_member_filter)
            return None
        except (tarfile.TarError, OSError) as err:
            return f"the files could not be saved ({type(err).__name__}: {str(err)[:200]})"
        finally:
            self.file.unlink(missing_ok=True)
