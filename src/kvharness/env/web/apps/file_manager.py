"""Rename two files in a file manager (F2 or the Rename button) and move a third into a folder."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, Press, State, TypeText, WebTask

_FOLDERS = ("Finance", "Photos", "Archive", "Projects", "Music", "Shared", "Travel", "Invoices")
_FILES = (
    "report_draft.txt", "IMG_2041.jpg", "budget.xlsx", "notes.md", "scan_0007.pdf",
    "meeting.docx", "todo.txt", "slides_v3.pptx", "contract.pdf", "IMG_3310.png",
    "backup.zip", "data_export.csv", "letter.odt", "recipe.txt", "song_demo.mp3",
    "invoice_114.pdf", "map.png", "taxes_2023.xlsx",
)  # fmt: skip
_WORDS = ("summary", "minutes", "roadmap", "agenda", "review", "plan", "holiday", "final",
          "archive", "client", "weekly", "old")  # fmt: skip
_KINDS = {"txt": "Text", "md": "Text", "jpg": "Image", "png": "Image", "pdf": "PDF",
          "xlsx": "Spreadsheet", "csv": "Spreadsheet", "docx": "Document", "odt": "Document",
          "pptx": "Slides", "zip": "Archive", "mp3": "Audio"}  # fmt: skip

_SCRIPT = """
let cwd = 'Documents', selected = null, renaming = null, moving = null, dest = null, error = '';
const $ = (id) => document.getElementById(id);
const file = (id) => D.files.find((f) => f.id === id);
function render() {
  $('tree').innerHTML = D.folders.map((f) => `<button class="folder${f === cwd ? ' cur' : ''}"
    data-folder="${f}">${f} (${D.files.filter((x) => x.folder === f).length})</button>`)
    .join('');
  $('path').textContent = '/home/' + cwd;
  $('rows').innerHTML = D.files.filter((f) => f.folder === cwd).map((f) => `<tr data-id="${f.id}"
    class="${f.id === selected ? 'sel' : ''}"><td>${f.id === renaming ? '<input id="rename-input">'
    : f.name}</td><td>${D.kinds[f.name.split('.').pop()] || 'File'}</td><td>${f.size} KB</td></tr>`)
    .join('');
  $('err').textContent = error;
  const inp = $('rename-input');
  if (inp) { inp.value = file(renaming).name; inp.focus(); inp.select(); }
  $('move-dlg').classList.toggle('hidden', !moving);
  $('dests').innerHTML = D.folders.filter((f) => f !== cwd).map((f) => `<button class="dest${
    f === dest ? ' cur' : ''}" data-folder="${f}">${f}</button>`).join(''); }
function startRename() { if (selected && !renaming) { renaming = selected; error = ''; render(); } }
function commit() {
  const f = file(renaming), name = $('rename-input').value.trim();
  if (!name || name.includes('/')) { error = 'A name cannot be empty or contain /.'; }
  else if (D.files.some((x) => x !== f && x.folder === f.folder && x.name === name)) {
    error = 'A file called ' + name + ' already exists here.'; }
  else { f.name = name; renaming = null; error = ''; }
  render(); }
document.addEventListener('click', (e) => {
  const t = e.target;
  if (t.id === 'rename-input') return;
  if (renaming) { renaming = null; error = ''; }
  const b = t.closest('button'), tr = t.closest('#rows tr');
  if (b && b.classList.contains('folder') && !moving) { cwd = b.dataset.folder; selected = null; }
  else if (b && b.id === 'rename') startRename();
  else if (b && b.id === 'move' && selected) { moving = selected; dest = null; }
  else if (b && b.classList.contains('dest')) dest = b.dataset.folder;
  else if (b && b.id === 'move-ok' && dest) { file(moving).folder = dest; moving = null;
    selected = null; }
  else if (b && b.id === 'move-cancel') moving = null;
  else if (tr && !moving) selected = tr.dataset.id;
  render(); });
document.addEventListener('keydown', (e) => {
  if (renaming && e.key === 'Enter') { e.preventDefault(); commit(); }
  else if (e.key === 'Escape') { renaming = moving = null; error = ''; render(); }
  else if (!renaming && !moving && e.key === 'F2') { e.preventDefault(); startRename(); } });
render();
window.kvhState = () => ({cwd, selected, renaming, moving, dest,
  files: D.files.map((f) => ({id: f.id, name: f.name, folder: f.folder}))});
"""

_STYLE = """
.modal.hidden { display: none; }
.fm { display: flex; gap: 16px; } #tree { width: 230px; } #tree button, #dests button {
  display: block; width: 100%; text-align: left; } button.cur { background: #cfe0ff; }
.pane { flex: 1; } #rows tr { cursor: default; } tr.sel td { background: #cfe0ff; }
table { width: 100%; } #path { font-family: monospace; margin-left: 12px; }
"""


def _files(s: State) -> dict[str, tuple[Any, Any]]:
    files = s.get("files")
    if not isinstance(files, list):
        return {}
    return {
        str(f.get("id")): (f.get("name"), f.get("folder")) for f in files if isinstance(f, dict)
    }


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    folders = ["Documents", *rng.sample(_FOLDERS, rng.randint(3, 5))]
    names = rng.sample(_FILES, len(_FILES))
    n_docs = rng.randint(7, 10)
    files: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        folder = "Documents" if i < n_docs else rng.choice(folders[1:])
        files.append({"id": f"f{i}", "name": name, "folder": folder, "size": rng.randint(2, 9000)})
    files.sort(key=lambda f: (f["folder"], f["name"].lower()))
    a, b, c = rng.sample([f for f in files if f["folder"] == "Documents"], 3)
    taken = {f["name"] for f in files}
    renames: dict[str, str] = {}
    for f in (a, b):
        ext = f["name"].rsplit(".", 1)[1]
        new = f"{rng.choice(_WORDS)}_{rng.randint(2, 99)}.{ext}"
        while new in taken:
            new = f"{rng.choice(_WORDS)}_{rng.randint(2, 99)}.{ext}"
        taken.add(new)
        renames[f["id"]] = new
    target = rng.choice(folders[1:])
    expected = {f["id"]: (renames.get(f["id"], f["name"]), f["folder"]) for f in files}
    expected[c["id"]] = (c["name"], target)

    def renamed(fid: str) -> Callable[[State], bool]:
        return lambda s: _files(s).get(fid, (None, None))[0] == renames[fid]

    milestones = (
        Milestone(f"{a['name']} renamed", renamed(a["id"])),
        Milestone(f"{b['name']} renamed", renamed(b["id"])),
        Milestone("move dialog open", lambda s: s.get("moving") == c["id"]),
        Milestone(
            f"{c['name']} moved", lambda s: _files(s).get(c["id"], (None, None))[1] == target
        ),
        Milestone(
            "all files right",
            lambda s: _files(s) == expected and not s.get("renaming") and not s.get("moving"),
        ),
    )
    oracle = (
        Click(f"tr[data-id='{a['id']}']"),
        Press("F2"),
        Press("Control+a"),
        TypeText(renames[a["id"]]),
        Press("Enter"),
        Click(f"tr[data-id='{b['id']}']"),
        Click("#rename"),
        Press("Control+a"),
        TypeText(renames[b["id"]]),
        Press("Enter"),
        Click(f"tr[data-id='{c['id']}']"),
        Click("#move"),
        Click(f"#dests button[data-folder='{target}']"),
        Click("#move-ok"),
    )
    body = (
        "<div class='fm'><div class='card' id='tree'></div><div class='card pane'>"
        "<div><button id='rename'>Rename (F2)</button><button id='move'>Move to\u2026</button>"
        "<span id='path'></span> <span class='error' id='err'></span></div>"
        "<table><thead><tr><th>Name</th><th>Type</th><th>Size</th></tr></thead>"
        "<tbody id='rows'></tbody></table></div></div>"
        "<div class='modal hidden' id='move-dlg'><div class='card'><h3>Move to folder</h3>"
        "<div id='dests'></div><p><button class='primary' id='move-ok'>Move</button>"
        "<button id='move-cancel'>Cancel</button></p></div></div>"
    )
    instruction = (
        f"In the Documents folder, rename \u201c{a['name']}\u201d to \u201c{renames[a['id']]}\u201d"
        f" and \u201c{b['name']}\u201d to \u201c{renames[b['id']]}\u201d (select a file, press F2"
        " or click Rename, type the new name and press Enter), then move "
        f"\u201c{c['name']}\u201d into the {target} folder with Move to\u2026."
    )
    data = {"folders": folders, "files": files, "kinds": _KINDS}
    return WebTask(
        family="file-manager",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Files", body, f"const D = {js(data)};{_SCRIPT}", style=_STYLE)},
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("file-manager", "rename two files and move one into a folder", build)
