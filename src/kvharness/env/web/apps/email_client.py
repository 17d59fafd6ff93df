"""Open a named email, star it and move it to a folder; mark another one read and archive it."""

from __future__ import annotations

import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.apps._seeded import pairs_with_namesakes
from kvharness.env.web.task import Click, Family, Milestone, State, WebTask

_SENDERS = (
    "Priya Raman", "Jonas Berg", "Amara Okafor", "Luis Ortega", "Mei Tanaka", "Sven Larsen",
    "Fatima Haddad", "Noah Fischer", "Chloe Martin", "Ravi Menon", "Elena Petrova", "Tom Walsh",
)  # fmt: skip
_SUBJECTS = (
    "Quarterly report draft", "Lunch on Friday?", "Invoice #4471", "Server maintenance window",
    "Re: project timeline", "Conference tickets", "Team offsite agenda", "Updated contract",
    "Welcome aboard", "Password reset", "Design review notes", "Weekly metrics",
    "Flight confirmation", "Budget approval", "Holiday schedule", "Feedback on the proposal",
)  # fmt: skip
_BODIES = (
    "Please take a look when you have a moment and let me know what you think.",
    "Attached are the details we discussed earlier this week.",
    "Just a quick reminder about this; nothing urgent.",
    "Could you confirm by the end of the day? Thanks!",
    "Here is the latest version. I fixed the points you raised.",
)
_FOLDERS = ("Projects", "Receipts", "Travel", "Family", "Clients", "Later", "Newsletters")

_SCRIPT = """
let folder = 'Inbox', open = null, menu = false;
const checked = new Set(), M = D.msgs.map((m) => Object.assign({}, m));
const byId = (id) => M.find((m) => m.id === id);
const h = (t) => String(t).replace(/[&<>"']/g, (c) => '&#' + c.charCodeAt(0) + ';');
function render() {
  document.getElementById('folders').innerHTML = D.folders.map((f) => {
    const n = M.filter((m) => m.folder === f && !m.read).length;
    return `<button class="folder${f === folder ? ' cur' : ''}" data-f="${h(f)}">${h(f)}` +
      (n ? ` <b>(${n})</b>` : '') + '</button>'; }).join('');
  const rows = M.filter((m) => m.folder === folder);
  document.getElementById('list').innerHTML = rows.map((m) =>
    `<div class="row${m.read ? '' : ' unread'}${m.id === open ? ' cur' : ''}" data-id="${m.id}">
    <input type="checkbox" class="sel"${checked.has(m.id) ? ' checked' : ''}>
    <button class="star">${m.starred ? '\u2605' : '\u2606'}</button><span class="from">${h(m.from)}
    </span><span class="subj">${h(m.subject)}</span><span class="when">${h(m.when)}</span></div>`
  ).join('') || '<p class="empty">No messages</p>';
  const m = open && byId(open), r = document.getElementById('reader');
  if (!m) { r.innerHTML = '<p class="empty">Select a message to read it.</p>'; return; }
  const dest = D.folders.filter((f) => f !== m.folder);
  r.innerHTML = `<div><button id="r-star">${m.starred ? 'Unstar' : 'Star'}</button>
    <button id="r-read">Mark as ${m.read ? 'unread' : 'read'}</button>
    <button id="r-archive">Archive</button><button id="r-move">Move to\u2026</button>
    <button id="r-close">Close</button></div>` + (menu ? '<div id="move-menu">' + dest.map((f) =>
    `<button class="moveto" data-f="${h(f)}">${h(f)}</button>`).join('') + '</div>' : '') +
    `<h3>${h(m.subject)}</h3><p class="meta">From <b>${h(m.from)}</b> \u00b7 ${h(m.when)}</p>
    <p>${h(m.body)}</p>`;
}
document.addEventListener('click', (e) => {
  const t = e.target, m = open && byId(open), row = t.closest('.row'), f = t.closest('.folder');
  if (f) { folder = f.dataset.f; open = null; menu = false; checked.clear(); }
  else if (row && t.classList.contains('sel')) {
    if (t.checked) checked.add(row.dataset.id); else checked.delete(row.dataset.id); }
  else if (row && t.classList.contains('star')) byId(row.dataset.id).starred ^= true;
  else if (row) { open = row.dataset.id; menu = false; }
  else if (['b-read', 'b-unread', 'b-archive'].includes(t.id)) {
    checked.forEach((id) => {
      if (t.id === 'b-archive') byId(id).folder = 'Archive'; else byId(id).read = t.id === 'b-read';
    });
    if (t.id === 'b-archive') { if (checked.has(open)) open = null; checked.clear(); } }
  else if (!m) return;
  else if (t.id === 'r-star') m.starred = !m.starred;
  else if (t.id === 'r-read') m.read = !m.read;
  else if (t.id === 'r-archive') { m.folder = 'Archive'; open = null; }
  else if (t.id === 'r-move') menu = !menu;
  else if (t.classList.contains('moveto')) { m.folder = t.dataset.f; open = null; menu = false; }
  else if (t.id === 'r-close') open = null;
  else return;
  render();
});
render();
window.kvhState = () => ({ folder, open, menu, checked: [...checked],
  msgs: M.map((m) => ({id: m.id, folder: m.folder, starred: !!m.starred, read: m.read})) });
"""

_STYLE = """
.mail { display: flex; gap: 12px; align-items: flex-start; }
#folders { width: 160px; } .folder { display: block; width: 150px; text-align: left; }
.folder.cur { background: #d8e4fb; border-color: #2f6fdb; }
#listcard { width: 560px; padding: 8px; } #reader { flex: 1; min-height: 300px; }
.row { display: flex; align-items: center; gap: 6px; padding: 2px 4px; cursor: pointer;
       border-bottom: 1px solid #e3e8f0; height: 31px; }
.row.unread { font-weight: bold; } .row.cur { background: #e8efff; }
.star { border: none; background: none; padding: 0 4px; font-size: 17px; color: #c58a00; }
.from { width: 130px; overflow: hidden; white-space: nowrap; }
.subj { flex: 1; overflow: hidden; white-space: nowrap; } .when { color: #667; font-size: 13px; }
#move-menu { border: 1px solid #8a97ab; padding: 4px; margin: 6px 0; background: #f7f9fc; }
.meta { color: #556; } .empty { color: #778; }
"""


def _msgs(s: State) -> dict[str, dict[str, Any]]:
    msgs = s.get("msgs")
    if not isinstance(msgs, list):
        return {}
    return {m["id"]: m for m in msgs if isinstance(m, dict) and isinstance(m.get("id"), str)}


def _field(s: State, mid: str, key: str) -> Any:
    return _msgs(s).get(mid, {}).get(key)


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    custom = rng.sample(_FOLDERS, 4)
    folders = ["Inbox", *custom, "Archive"]
    # Distractors: the first target's sender with another subject, its subject from another sender.
    pairs = pairs_with_namesakes(rng, _SENDERS, _SUBJECTS, rng.randint(14, 19))
    (s1, j1), (s2, j2) = pairs[0], pairs[1]
    rng.shuffle(pairs)
    msgs: list[dict[str, Any]] = []
    minutes = sorted(rng.sample(range(7 * 60, 18 * 60), len(pairs)), reverse=True)
    for i, ((sender, subject), t) in enumerate(zip(pairs, minutes, strict=True)):
        target = (sender, subject) in ((s1, j1), (s2, j2))
        msgs.append(
            {
                "id": f"m{i}",
                "from": sender,
                "subject": subject,
                "when": f"{t // 60:02d}:{t % 60:02d}",
                "body": rng.choice(_BODIES),
                "starred": not target and rng.random() < 0.2,
                "read": (sender, subject) != (s2, j2) and rng.random() < 0.5,
                "folder": "Inbox" if target or rng.random() < 0.8 else rng.choice(custom),
            }
        )
    t1 = next(m["id"] for m in msgs if (m["from"], m["subject"]) == (s1, j1))
    t2 = next(m["id"] for m in msgs if (m["from"], m["subject"]) == (s2, j2))
    dest = rng.choice(custom)
    expected = {m["id"]: (m["folder"], m["starred"], m["read"]) for m in msgs}
    expected[t1] = (dest, True, expected[t1][2])
    expected[t2] = ("Archive", False, True)

    def final(s: State) -> bool:
        got = _msgs(s)
        return set(got) == set(expected) and all(
            (got[k].get("folder"), got[k].get("starred"), got[k].get("read")) == v
            for k, v in expected.items()
        )

    milestones = (
        Milestone("message opened", lambda s: s.get("open") == t1),
        Milestone("message starred", lambda s: _field(s, t1, "starred") is True),
        Milestone("message moved", lambda s: _field(s, t1, "folder") == dest),
        Milestone("second marked read", lambda s: _field(s, t2, "read") is True),
        Milestone("second archived", lambda s: _field(s, t2, "folder") == "Archive"),
        Milestone("mailbox as asked", final),
    )
    oracle = (
        Click(f".row[data-id='{t1}'] .subj"),
        Click("#r-star"),
        Click("#r-move"),
        Click(f".moveto[data-f='{dest}']"),
        Click(f".row[data-id='{t2}'] .sel"),
        Click("#b-read"),
        Click("#b-archive"),
    )
    body = (
        "<div class='mail'><div id='folders'></div><div class='card' id='listcard'><div>"
        "<button id='b-read'>Mark read</button><button id='b-unread'>Mark unread</button>"
        "<button id='b-archive'>Archive</button></div><div id='list'></div></div>"
        "<div class='card' id='reader'></div></div>"
    )
    instruction = (
        f"Open the email from {s1} with the subject \u201c{j1}\u201d, star it and move it to the "
        f"{dest} folder. Then mark the email from {s2} with the subject \u201c{j2}\u201d as read "
        "and archive it. Leave every other email as it is."
    )
    script = f"const D = {js({'msgs': msgs, 'folders': folders})};{_SCRIPT}"
    return WebTask(
        family="email-client",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Mail", body, script, style=_STYLE)},
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family(
    "email-client", "open, star and file one email; mark read and archive another", build
)
