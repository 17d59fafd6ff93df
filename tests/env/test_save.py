"""The stream a sandboxed command's files come back through: bounded, and filtered on extraction
(no device, no path or hard link outside, links kept as links and never followed)."""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
from pathlib import Path

from kvharness.env._save import SaveStream


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


def _send(tmp_path: Path, data: bytes, cap: int = 1 << 20) -> tuple[SaveStream, Path]:
    stream = SaveStream(tmp_path, cap)
    thread = stream.drain()
    with contextlib.suppress(BrokenPipeError):  # the host stops reading past the cap
        view = memoryview(data)
        while view:
            view = view[os.write(stream.write_fd, view) :]
    os.close(stream.write_fd)
    thread.join()
    return stream, tmp_path / "out"


def test_files_folders_and_links_come_back_links_as_links(tmp_path: Path) -> None:
    data = _tar(
        (_member("work/repo/a.py"), b"x = 1\n"),
        (_member("work/repo/etc", tarfile.SYMTYPE, "/etc"), b""),
        (_member("work/repo/dev0", tarfile.CHRTYPE), b""),
    )
    stream, out = _send(tmp_path, data)
    assert stream.extract(out) is None
    repo = out / "work" / "repo"
    assert (repo / "a.py").read_text() == "x = 1\n"
    assert (repo / "etc").is_symlink() and os.readlink(repo / "etc") == "/etc"
    assert not (repo / "dev0").exists()  # a device is never made


def test_paths_and_hard_links_outside_are_refused(tmp_path: Path) -> None:
    for bad in (
        _member("../escape.txt"),
        _member("work/repo/shadow", tarfile.LNKTYPE, "/etc/passwd"),
    ):
        stream, out = _send(tmp_path, _tar((bad, b"data")))
        problem = stream.extract(out)
        assert problem is not None and "could not be saved" in problem
    assert not (tmp_path / "escape.txt").exists()


def test_a_stream_over_its_cap_is_not_kept(tmp_path: Path) -> None:
    data = _tar((_member("work/repo/big"), b"\0" * (64 << 10)))
    stream, out = _send(tmp_path, data, cap=16 << 10)
    assert stream.overflow and stream.size <= 16 << 10
    problem = stream.extract(out)
    assert problem is not None and "workspace quota" in problem
    assert not out.exists()
