"""Grant and revoke named cells of a roles-by-permissions grid, then save and confirm."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, State, WebTask

_ROLES = (
    "Owner",
    "Admin",
    "Editor",
    "Author",
    "Reviewer",
    "Viewer",
    "Guest",
    "Billing",
    "Support",
    "Auditor",
)
_PERMS = (
    "View dashboard", "Edit posts", "Delete posts", "Publish", "Manage users", "Manage billing",
    "Export data", "Invite members", "View audit log", "Configure integrations",
    "Moderate comments", "API access",
)  # fmt: skip

_SCRIPT = """
const grid = D.init.map((r) => r.slice());
let saved = D.init.map((r) => r.slice()), modal = false;
const $ = (id) => document.getElementById(id);
function changes() {
  const out = [];
  grid.forEach((r, i) => r.forEach((v, j) => { if (v !== saved[i][j])
    out.push(`${v ? 'Grant' : 'Revoke'} ${D.perms[j]} ${v ? 'to' : 'from'} ${D.roles[i]}`); }));
  return out; }
function cell(i, j) {
  return `<td class="c"><input type="checkbox" id="cb-${i}-${j}" data-r="${i}" data-p="${j}"` +
    `${grid[i][j] ? ' checked' : ''}></td>`; }
function render() {
  const [rows, cols] = D.rolesAcross ? [D.perms, D.roles] : [D.roles, D.perms];
  $('grid').innerHTML = '<tr><th></th>' + cols.map((c) => `<th>${c}</th>`).join('') + '</tr>' +
    rows.map((name, a) => `<tr><th>${name}</th>` + cols.map((_, b) =>
      D.rolesAcross ? cell(b, a) : cell(a, b)).join('') + '</tr>').join('');
  const n = changes().length;
  $('pending').textContent = n ? `${n} unsaved change${n > 1 ? 's' : ''}` : 'No unsaved changes';
  $('save-modal').classList.toggle('hidden', !modal);
  $('change-list').innerHTML = changes().map((c) => `<li>${c}</li>`).join('');
}
document.addEventListener('change', (e) => {
  const t = e.target; if (t.dataset.r === undefined) return;
  grid[+t.dataset.r][+t.dataset.p] = t.checked; $('status').textContent = ''; render(); });
document.addEventListener('click', (e) => {
  const t = e.target;
  if (t.id === 'save') { if (changes().length) modal = true;
    else $('status').textContent = 'Nothing to save.'; }
  else if (t.id === 'reset') grid.forEach((r, i) => r.forEach((_, j) => { r[j] = saved[i][j]; }));
  else if (t.id === 'cancel') modal = false;
  else if (t.id === 'confirm' && modal) {
    saved = grid.map((r) => r.slice()); modal = false; $('status').textContent = 'Saved.'; }
  else return;
  render();
});
render();
window.kvhState = () => ({ grid: grid.map((r) => r.slice()), saved: saved.map((r) => r.slice()),
  modal });
"""

_STYLE = """
.modal.hidden { display: none; } td.c { text-align: center; } th { cursor: default; }
td.c input { width: 18px; height: 18px; margin: 0; } #grid th, #grid td { padding: 6px 12px; }
"""


def _cell(grid: Any, i: int, j: int) -> Any:
    try:
        return grid[i][j]
    except (TypeError, IndexError, KeyError):
        return None


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    roles = rng.sample(_ROLES, rng.randint(4, 6))
    perms = rng.sample(_PERMS, rng.randint(7, 10))
    init = [[rng.random() < 0.5 for _ in perms] for _ in roles]
    cells = [(i, j) for i in range(len(roles)) for j in range(len(perms))]
    rng.shuffle(cells)
    grants = [c for c in cells if not init[c[0]][c[1]]][: rng.randint(2, 3)]
    revokes = [c for c in cells if init[c[0]][c[1]]][: rng.randint(2, 3)]
    todo = grants + revokes
    rng.shuffle(todo)
    expected = [row[:] for row in init]
    for i, j in todo:
        expected[i][j] = not init[i][j]

    def upto(k: int) -> Callable[[State], bool]:
        return lambda s: all(_cell(s.get("grid"), i, j) is expected[i][j] for i, j in todo[:k])

    def say(cs: list[tuple[int, int]]) -> str:
        return "; ".join(f"{roles[i]}: \u201c{perms[j]}\u201d" for i, j in cs)

    milestones = (
        *[Milestone(f"{k} of {len(todo)} cells set", upto(k)) for k in range(1, len(todo) + 1)],
        Milestone(
            "save confirmation shown",
            lambda s: s.get("modal") is True and s.get("grid") == expected,
        ),
        Milestone(
            "permissions saved", lambda s: s.get("modal") is False and s.get("saved") == expected
        ),
    )
    oracle = (
        *[Click(f"#cb-{i}-{j}") for i, j in todo],
        Click("#save"),
        Click("#confirm"),
    )
    body = (
        "<div class='card'><h3>Role permissions</h3><table id='grid'></table>"
        "<p><span id='pending'></span> <span class='ok' id='status'></span></p>"
        "<button class='primary' id='save'>Save changes</button><button id='reset'>Reset</button>"
        "</div><div class='modal hidden' id='save-modal'><div class='card'><h3>Apply these "
        "changes?</h3><ul id='change-list'></ul><button class='primary' id='confirm'>Apply"
        "</button><button id='cancel'>Cancel</button></div></div>"
    )
    instruction = (
        f"In the permissions grid, grant these permissions: {say(sorted(grants))}. "
        f"Revoke these: {say(sorted(revokes))}. Leave every other cell as it is, then save "
        "the changes and confirm them."
    )
    data = {"roles": roles, "perms": perms, "init": init, "rolesAcross": rng.random() < 0.5}
    return WebTask(
        family="permissions-matrix",
        seed=seed,
        instruction=instruction,
        files={
            "index.html": page(
                "Access control", body, f"const D = {js(data)};{_SCRIPT}", style=_STYLE
            )
        },
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("permissions-matrix", "grant and revoke named cells of a permission grid", build)
