"""One episode's browser: Debian's ``chromium``, headless, in bubblewrap, driven over DevTools.

The browser runs in a fresh ``bwrap`` with new network, PID, IPC and user namespaces: it has no
network at all (not even loopback to the host), sees ``/usr`` and a handful of ``/etc`` entries
read-only (fonts, the dynamic linker's cache), keeps its profile in a private ``/tmp`` tmpfs and
dies with the episode (``--die-with-parent``; :meth:`Browser.close` kills the process group). As
root it drops to an unprivileged uid inside. The DevTools protocol travels over two inherited
pipes (``--remote-debugging-pipe``: JSON messages ending in a NUL byte), so no debugging port is
open anywhere.

Three layers keep the page on the task's app:

* the browser's own URL policy (a managed ``URLBlocklist`` of everything, with
  :data:`~kvharness.env.web.task.ORIGIN` alone allowed) refuses navigation anywhere else,
  ``file://`` and ``chrome://`` included;
* every request is paused by the protocol's ``Fetch`` domain and answered from the task's files
  (unknown paths get a 404); requests for any other URL are failed;
* without a network namespace of its own the browser could reach nothing even if both failed.

A window the page opens (``window.open``, ``target=_blank``) is closed as soon as it appears; its
URL joins :attr:`Browser.blocked` with the refused requests.

:meth:`Browser.evaluate` runs JavaScript in the page for the environment and the oracle only
(reading the app's state, locating an element); agents act through the input methods, which send
the same mouse, wheel and key events a user's devices would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import mimetypes
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvharness.env.web.keys import KeyStroke, parse_combo
from kvharness.env.web.task import ORIGIN
from kvharness.errors import UserError

__all__ = ["Browser", "BrowserError", "BrowserUnavailable", "chromium_available"]

_MAX_MESSAGE = 64 << 20
_ETC = ("fonts", "ld.so.cache", "alternatives", "chromium.d", "localtime")
_POLICY = {
    "URLBlocklist": ["*"],
    "URLAllowlist": [ORIGIN, "about:blank"],
    "DownloadRestrictions": 3,
    "PrintingEnabled": False,
}
_UID = 1_699_000
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--mute-audio",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-pipe",
)
_AX_SKIP = ("StaticText", "InlineTextBox", "RootWebArea")
_SETTLE_JS = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(0))))"


class BrowserUnavailable(UserError):
    """No ``chromium`` (or no ``bwrap``, without unsafe mode) on this machine."""


class BrowserError(RuntimeError):
    """The browser failed or answered a protocol command with an error."""


def chromium_available() -> bool:
    """Whether Debian's ``chromium`` is on PATH."""
    return shutil.which("chromium") is not None


def _argv(policy_dir: Path, width: int, height: int, unsafe: bool) -> list[str]:
    browser = [shutil.which("chromium") or "chromium", *_FLAGS, f"--window-size={width},{height}"]
    if unsafe:
        return [*browser, f"--user-data-dir={policy_dir / 'profile'}", "about:blank"]
    args = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-user", "--die-with-parent", "--new-session"]
    args += ["--ro-bind", "/usr", "/usr"]
    for link in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    args += ["--tmpfs", "/etc"]
    for name in _ETC:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    args += ["--ro-bind", str(policy_dir), "/etc/chromium/policies/managed"]
    args += ["--setenv", "HOME", "/tmp", "--chdir", "/tmp"]
    if os.geteuid() == 0:
        args += ["--uid", str(_UID), "--gid", str(_UID)]
    return [*args, "--", *browser, "--user-data-dir=/tmp/profile", "about:blank"]


class Browser:
    """A live browser with one page showing a task's app; use :meth:`launch`, then
    :meth:`close` (or ``async with``). Not safe to share between tasks: one episode, one browser.

    Coordinates are CSS pixels of the viewport (``width`` x ``height``, device scale 1, so a
    screenshot's pixels are the same coordinates).
    """

    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height
        self._proc: asyncio.subprocess.Process | None = None
        self._writer: asyncio.WriteTransport | None = None
        self._read_pipe: asyncio.ReadTransport | None = None
        self._reader: asyncio.StreamReader | None = None
        self._pump: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._session = ""
        self._page_id = ""
        self._files: Mapping[str, bytes] = {}
        self._loaded: asyncio.Event | None = None
        self._tmp: Path | None = None
        self._dead: str | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.blocked: list[str] = []
        """URLs the page asked for that are not the app's (refused), in order."""

    @classmethod
    async def launch(
        cls,
        files: Mapping[str, str | bytes],
        *,
        width: int = 1280,
        height: int = 800,
        unsafe: bool = False,
        timeout_s: float = 30.0,
    ) -> Browser:
        """Start a browser and open ``ORIGIN/index.html`` from ``files``. ``unsafe`` runs the
        browser without bubblewrap or its URL policy (request interception still applies):
        for machines without bubblewrap, never for untrusted agents."""
        if not chromium_available():
            raise BrowserUnavailable(
                "no chromium on PATH: install Debian's chromium (`apt-get install chromium`)"
            )
        if not unsafe and shutil.which("bwrap") is None:
            raise BrowserUnavailable(
                "no bwrap on PATH: install bubblewrap, or pass unsafe=True to run the browser "
                "unconfined"
            )
        self = cls(width, height)
        self._files = {p: v.encode() if isinstance(v, str) else v for p, v in files.items()}
        try:
            await asyncio.wait_for(self._start(unsafe), timeout_s)
            await asyncio.wait_for(self.goto(f"{ORIGIN}/index.html"), timeout_s)
        except BaseException:
            await self.close()
            raise
        return self

    async def _start(self, unsafe: bool) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="kvh-browser-"))
        (self._tmp / "policy.json").write_text(json.dumps(_POLICY))
        os.chmod(self._tmp, 0o755)
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()

        def child_fds() -> None:
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        try:
            self._proc = await asyncio.create_subprocess_exec(
                *_argv(self._tmp, self.width, self.height, unsafe),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                preexec_fn=child_fds,
                pass_fds=(3, 4),
                start_new_session=True,
            )
        finally:
            os.close(to_browser_r)
            os.close(from_browser_w)
        loop = asyncio.get_running_loop()
        self._reader = asyncio.StreamReader(limit=_MAX_MESSAGE)
        protocol = asyncio.StreamReaderProtocol(self._reader)
        self._read_pipe, _ = await loop.connect_read_pipe(
            lambda: protocol, os.fdopen(from_browser_r, "rb", 0)
        )
        self._writer, _ = await loop.connect_write_pipe(
            asyncio.Protocol, os.fdopen(to_browser_w, "wb", 0)
        )
        self._pump = asyncio.create_task(self._read_loop())
        targets = await self.send("Target.getTargets")
        page = next(t for t in targets["targetInfos"] if t["type"] == "page")
        attached = await self.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)
        self._session = attached["sessionId"]
        self._page_id = page["targetId"]
        await self.send("Target.setDiscoverTargets", discover=True)
        await self.page("Page.enable")
        await self.page("Runtime.enable")
        await self.page("Fetch.enable", patterns=[{"urlPattern": "*"}])
        await self.page(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )

    # -- protocol ----------------------------------------------------------------------------

    async def send(self, method: str, *, session: str | None = None, **params: Any) -> Any:
        """Send one protocol command (to the browser, or to ``session``) and return its result;
        :class:`BrowserError` when it answers with an error or the browser is gone."""
        if self._dead is not None or self._writer is None:
            raise BrowserError(f"the browser is gone ({self._dead or 'not started'})")
        mid = next(self._ids)
        message: dict[str, Any] = {"id": mid, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[mid] = future
        self._writer.write(json.dumps(message).encode() + b"\0")
        reply = await future
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result", {})

    async def page(self, method: str, **params: Any) -> Any:
        """:meth:`send` to the page's session."""
        return await self.send(method, session=self._session, **params)

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                data = await self._reader.readuntil(b"\0")
                message = json.loads(data[:-1])
                if "id" in message:
                    future = self._pending.pop(message["id"], None)
                    if future is not None and not future.done():
                        future.set_result(message)
                else:
                    self._on_event(message)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError) as e:
            self._fail(f"the protocol pipe closed: {type(e).__name__}")
        except asyncio.CancelledError:
            self._fail("closed")
            raise

    def _fail(self, why: str) -> None:
        self._dead = why
        for future in self._pending.values():
            if not future.done():
                future.set_exception(BrowserError(f"the browser is gone ({why})"))
        self._pending.clear()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_event(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params", {})
        if method == "Fetch.requestPaused":
            self._spawn(self._answer(params))
        elif method == "Page.loadEventFired" and self._loaded is not None:
            self._loaded.set()
        elif method == "Target.targetCreated":
            info = params.get("targetInfo", {})
            if info.get("type") == "page" and info.get("targetId") != self._page_id:
                self.blocked.append(info.get("url") or "about:blank (a new window)")
                self._spawn(self._quiet(self.send("Target.closeTarget", targetId=info["targetId"])))
        elif method == "Page.javascriptDialogOpening":
            self._spawn(self._quiet(self.page("Page.handleJavaScriptDialog", accept=False)))

    async def _quiet(self, coro: Any) -> None:
        with contextlib.suppress(BrowserError):
            await coro

    async def _answer(self, params: dict[str, Any]) -> None:
        url: str = params["request"]["url"]
        rid = params["requestId"]
        if not url.startswith(ORIGIN + "/"):
            self.blocked.append(url)
            await self._quiet(
                self.page("Fetch.failRequest", requestId=rid, errorReason="BlockedByClient")
            )
            return
        path = url[len(ORIGIN) + 1 :].split("?", 1)[0].split("#", 1)[0] or "index.html"
        body = self._files.get(path)
        if body is None:
            status, body, kind = 404, b"not found", "text/plain"
        else:
            status, kind = 200, mimetypes.guess_type(path)[0] or "application/octet-stream"
        await self._quiet(
            self.page(
                "Fetch.fulfillRequest",
                requestId=rid,
                responseCode=status,
                responseHeaders=[
                    {"name": "Content-Type", "value": kind},
                    {"name": "Cache-Control", "value": "no-store"},
                ],
                body=base64.b64encode(body).decode(),
            )
        )

    # -- page --------------------------------------------------------------------------------

    async def goto(self, url: str) -> str | None:
        """Navigate the page to ``url`` and wait for it to load; the browser's error text
        (``net::ERR_BLOCKED_BY_ADMINISTRATOR``) when it refused, else None."""
        self._loaded = asyncio.Event()
        result = await self.page("Page.navigate", url=url)
        if result.get("errorText"):
            return str(result["errorText"])
        await self._loaded.wait()
        await self.settle()
        return None

    async def settle(self) -> None:
        """Wait until the page has handled the events sent so far and painted (two frames)."""
        await self.page("Runtime.evaluate", expression=_SETTLE_JS, awaitPromise=True)

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page (awaited if a promise).
        For the environment and the oracle: never exposed to agents."""
        result = await self.page(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"page script failed: {text}")
        return result.get("result", {}).get("value")

    async def screenshot(self) -> bytes:
        """The viewport as PNG (``width`` x ``height`` pixels)."""
        shot = await self.page("Page.captureScreenshot", format="png", optimizeForSpeed=True)
        return base64.b64decode(shot["data"])

    async def accessibility_text(self, limit: int = 200) -> str:
        """The page's accessibility tree as text, one ``role "name" = "value"`` line per node with
        a name or a value (at most ``limit`` lines), in document order: what a screen reader
        would announce."""
        tree = await self.page("Accessibility.getFullAXTree")
        lines = []
        for node in tree.get("nodes", ()):
            if node.get("ignored"):
                continue
            role = (node.get("role") or {}).get("value", "")
            name = str((node.get("name") or {}).get("value", "")).strip()
            value = (node.get("value") or {}).get("value")
            if (not name and value in (None, "")) or role in _AX_SKIP:
                continue
            extra = f" = {json.dumps(str(value))}" if value not in (None, "") else ""
            lines.append(f"{role} {json.dumps(name)}{extra}")
            if len(lines) == limit:
                lines.append("...")
                break
        return "\n".join(lines)

    async def url(self) -> str:
        """The page's current URL."""
        return str(await self.evaluate("location.href"))

    # -- input -------------------------------------------------------------------------------

    async def _mouse(self, kind: str, x: float, y: float, **extra: Any) -> None:
        await self.page("Input.dispatchMouseEvent", type=kind, x=x, y=y, **extra)

    async def click(self, x: float, y: float, count: int = 1) -> None:
        """A left click at ``(x, y)``; ``count`` 2 is a double click (two clicks, the second
        with click count 2, as a real mouse sends them)."""
        await self._mouse("mouseMoved", x, y)
        for n in range(1, count + 1):
            await self._mouse("mousePressed", x, y, button="left", buttons=1, clickCount=n)
            await self._mouse("mouseReleased", x, y, button="left", buttons=0, clickCount=n)

    async def drag(self, x0: float, y0: float, x1: float, y1: float, steps: int = 10) -> None:
        """Press at ``(x0, y0)``, move to ``(x1, y1)`` in ``steps`` moves, release there."""
        await self._mouse("mouseMoved", x0, y0)
        await self._mouse("mousePressed", x0, y0, button="left", buttons=1, clickCount=1)
        for i in range(1, steps + 1):
            t = i / steps
            x, y = x0 + (x1 - x0) * t, y0 + (y1 - y0) * t
            await self._mouse("mouseMoved", x, y, button="left", buttons=1)
        await self._mouse("mouseReleased", x1, y1, button="left", buttons=0, clickCount=1)

    async def wheel(self, x: float, y: float, dx: float, dy: float) -> None:
        """A mouse-wheel scroll of ``(dx, dy)`` pixels with the pointer at ``(x, y)``."""
        await self._mouse("mouseMoved", x, y)
        await self._mouse("mouseWheel", x, y, deltaX=dx, deltaY=dy)

    async def insert_text(self, text: str) -> None:
        """Type ``text`` into the focused element (one input event, as an IME commits)."""
        await self.page("Input.insertText", text=text)

    async def press(self, combo: str) -> None:
        """Press and release a key combination (``"Control+a"``, ``"Shift+Tab"``, ``"Enter"``);
        ValueError for a key it does not know."""
        await self.keys(parse_combo(combo))

    async def keys(self, stroke: KeyStroke) -> None:
        base: dict[str, Any] = {
            "modifiers": stroke.modifiers,
            "key": stroke.key,
            "code": stroke.code,
            "windowsVirtualKeyCode": stroke.key_code,
        }
        if stroke.commands:
            base["commands"] = list(stroke.commands)
        down = (
            dict(base, type="keyDown", text=stroke.text)
            if stroke.text
            else dict(base, type="rawKeyDown")
        )
        await self.page("Input.dispatchKeyEvent", **down)
        await self.page("Input.dispatchKeyEvent", **dict(base, type="keyUp"))

    # -- lifetime ----------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._dead is None and self._proc is not None and self._proc.returncode is None

    async def close(self) -> None:
        """Kill the browser and everything it started; idempotent."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            await self._proc.wait()
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pump
        for task in list(self._tasks):
            task.cancel()
        for pipe in (self._writer, self._read_pipe):
            if pipe is not None:
                pipe.close()
        self._writer = self._read_pipe = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._fail("closed")

    async def __aenter__(self) -> Browser:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
