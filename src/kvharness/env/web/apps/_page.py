"""The markup every task app shares: one stylesheet, one page shell, and the state hook.

Apps are plain HTML and JavaScript with nothing external (no fonts, images or scripts from
elsewhere: the browser has no network). :func:`page` wraps an app's body and script in the
shell; the script must define ``window.kvhState`` (see ``web/task.py``). Widgets are standard
controls or elements with click handlers; dragging is done with mouse events (``mousedown`` /
``mousemove`` / ``mouseup``), which the DevTools input events produce, not with HTML5
drag-and-drop.
"""

from __future__ import annotations

import html
import json
from typing import Any

__all__ = ["esc", "js", "page"]

_STYLE = """
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.4 "DejaVu Sans", sans-serif; color: #1d2230; background: #eef1f5; }
header { background: #2c3e66; color: #fff; padding: 12px 24px; font-size: 18px; }
main { padding: 20px 24px; }
.card { background: #fff; border: 1px solid #cfd6e0; border-radius: 6px; padding: 16px;
        margin-bottom: 14px; }
button { font: inherit; padding: 6px 14px; border: 1px solid #8a97ab; border-radius: 4px;
         background: #f7f9fc; cursor: pointer; margin: 2px; }
button.primary { background: #2f6fdb; color: #fff; border-color: #2659b0; }
input, select, textarea { font: inherit; padding: 5px 8px; border: 1px solid #8a97ab;
                          border-radius: 4px; margin: 2px 0; }
label { display: inline-block; min-width: 140px; }
table { border-collapse: collapse; background: #fff; }
th, td { border: 1px solid #cfd6e0; padding: 5px 10px; text-align: left; }
th { background: #e3e8f0; cursor: pointer; }
.error { color: #b3261e; }
.ok { color: #1e7b34; }
.hidden { display: none !important; }
.modal { position: fixed; inset: 0; background: rgba(20, 28, 45, .45); display: flex;
         align-items: center; justify-content: center; }
.modal > .card { min-width: 420px; }
"""


def esc(text: object) -> str:
    """``text`` escaped for HTML text or an attribute value."""
    return html.escape(str(text), quote=True)


def js(value: Any) -> str:
    """``value`` as a JavaScript literal (JSON), safe inside a ``<script>`` element."""
    return json.dumps(value).replace("</", "<\\/")


def page(title: str, body: str, script: str, *, style: str = "") -> str:
    """A complete ``index.html``: the shared stylesheet (plus ``style``), a header with
    ``title``, ``body`` inside ``<main>``, then ``script``."""
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><style>{_STYLE}{style}</style></head>"
        f"<body><header>{esc(title)}</header><main>{body}</main>"
        f"<script>{script}</script></body></html>"
    )
