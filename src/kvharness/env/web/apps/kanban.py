"""Drag two named cards to named columns on a kanban board (mouse-event dragging), then save."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, DragTo, Family, Milestone, State, WebTask

_COLUMNS = ("Backlog", "To do", "In progress", "Review", "Blocked", "Done")
_CARDS = (
    "Fix login timeout", "Update privacy page", "Add CSV export", "Refactor billing", "Dark mode",
    "Onboarding email", "Search filters", "Audit log", "Rate limiting", "Invoice PDFs",
    "Password reset", "Mobile layout", "Cache headers", "Team invites", "Slack alerts",
    "Usage dashboard", "Archive old projects", "Keyboard shortcuts", "Import wizard",
    "Two-factor login",
)  # fmt: skip
_TAGS = ("bug", "feature", "chore", "design", "ops")

_SCRIPT = """
const where = Object.assign({}, D.where), order = D.cards.map((c) => c.id);
let drag = null, saved = null, hover = null;
const $ = (id) => document.getElementById(id);
const ghost = $('ghost');
function render() {
  $('board').innerHTML = D.cols.map((col) => `<div class="col${hover === col.id ? ' over' : ''}"
    id="col-${col.id}" data-col="${col.id}"><h3>${col.name}
    (${order.filter((id) => where[id] === col.id).length})</h3>${order.filter((id) =>
    where[id] === col.id).map((id) => { const c = D.cards.find((x) => x.id === id);
    return `<div class="kcard${drag && drag.id === id ? ' lifted' : ''}" id="card-${id}"
    data-id="${id}"><b>${c.title}</b><br><small>#${c.num} \\u00b7 ${c.tag}</small></div>`; })
    .join('')}</div>`).join(''); }
function colAt(x, y) {
  for (const el of document.querySelectorAll('.col')) { const r = el.getBoundingClientRect();
    if (x >= r.left && x <= r.right && y >= r.top && y <= r.bottom) return el; }
  return null; }
$('board').addEventListener('mousedown', (e) => {
  const card = e.target.closest('.kcard'); if (!card || e.button !== 0) return;
  e.preventDefault(); const r = card.getBoundingClientRect();
  drag = {id: card.dataset.id, x: e.clientX, y: e.clientY, dx: e.clientX - r.left,
          dy: e.clientY - r.top};
  ghost.innerHTML = card.innerHTML; ghost.style.width = r.width + 'px'; });
document.addEventListener('mousemove', (e) => {
  if (!drag) return;
  ghost.classList.remove('hidden');
  ghost.style.left = (e.clientX - drag.dx) + 'px'; ghost.style.top = (e.clientY - drag.dy) + 'px';
  const col = colAt(e.clientX, e.clientY), id = col ? col.dataset.col : null;
  if (id !== hover || !$('card-' + drag.id).classList.contains('lifted')) { hover = id; render(); }
});
document.addEventListener('mouseup', (e) => {
  if (!drag) return;
  const d = drag, col = colAt(e.clientX, e.clientY);
  drag = null; hover = null; ghost.classList.add('hidden');
  if (col && Math.abs(e.clientX - d.x) + Math.abs(e.clientY - d.y) > 4) {
    const target = col.dataset.col;
    const after = [...col.querySelectorAll('.kcard')].filter((el) => el.dataset.id !== d.id &&
      el.getBoundingClientRect().top + el.offsetHeight / 2 > e.clientY).map((el) => el.dataset.id);
    order.splice(order.indexOf(d.id), 1);
    order.splice(after.length ? order.indexOf(after[0]) : order.length, 0, d.id);
    where[d.id] = target; $('msg').textContent = ''; }
  render(); });
$('save').addEventListener('click', () => {
  saved = Object.assign({}, where); $('msg').textContent = 'Board saved.'; });
render();
window.kvhState = () => ({where: Object.assign({}, where), order: order.slice(), saved,
  dragging: drag && drag.id});
"""

_STYLE = """
#board { display: flex; gap: 14px; align-items: stretch; } .col { flex: 1; background: #e1e6ee;
  border-radius: 6px; padding: 8px; min-height: 560px; } .col.over { background: #cfe0ff; }
.col h3 { margin: 4px 4px 10px; font-size: 15px; } .kcard { background: #fff; border: 1px solid
  #b9c3d3; border-radius: 5px; padding: 8px 10px; margin-bottom: 8px; cursor: grab;
  user-select: none; } .kcard.lifted { opacity: .35; } #ghost { position: fixed;
  pointer-events: none; background: #fff; border: 1px solid #2f6fdb; border-radius: 5px;
  padding: 8px 10px; box-shadow: 0 4px 12px rgba(0,0,0,.25); }
"""


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    n_cols = rng.randint(3, 4)
    picked = set(rng.sample(_COLUMNS, n_cols))
    names = [c for c in _COLUMNS if c in picked]
    cols = [{"id": f"c{i}", "name": n} for i, n in enumerate(names)]
    titles = rng.sample(_CARDS, rng.randint(7, 11))
    cards: list[dict[str, Any]] = [
        {"id": f"k{i}", "title": t, "num": rng.randint(100, 999), "tag": rng.choice(_TAGS)}
        for i, t in enumerate(titles)
    ]
    where: dict[str, Any] = {c["id"]: cols[i % n_cols]["id"] for i, c in enumerate(cards)}
    for c in cards[n_cols:]:
        where[c["id"]] = rng.choice(cols)["id"]
    rng.shuffle(cards)
    first, second = rng.sample(cards, 2)
    moves: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for card in (first, second):
        dest = rng.choice([c for c in cols if c["id"] != where[card["id"]]])
        moves.append((card, dest))
    expected = dict(where, **{card["id"]: dest["id"] for card, dest in moves})

    def at(key: str, card: dict[str, Any], dest: dict[str, Any]) -> Callable[[State], bool]:
        return lambda s: isinstance(s.get(key), dict) and s[key].get(card["id"]) == dest["id"]

    milestones = (
        Milestone(f"{first['title']} moved", at("where", *moves[0])),
        Milestone(f"{second['title']} moved", at("where", *moves[1])),
        Milestone("board saved", lambda s: at("saved", *moves[0])(s) and at("saved", *moves[1])(s)),
        Milestone(
            "board right",
            lambda s: s.get("saved") == expected and s.get("where") == expected,
        ),
    )
    oracle = (
        DragTo(f"#card-{first['id']}", f"#col-{moves[0][1]['id']}"),
        DragTo(f"#card-{second['id']}", f"#col-{moves[1][1]['id']}"),
        Click("#save"),
    )
    body = (
        "<div class='card'><button class='primary' id='save'>Save board</button>"
        " <span class='ok' id='msg'></span></div><div id='board'></div>"
        "<div id='ghost' class='hidden'></div>"
    )
    instruction = (
        f"On the board, drag the card \u201c{first['title']}\u201d to the "
        f"\u201c{moves[0][1]['name']}\u201d column and the card \u201c{second['title']}\u201d "
        f"to the \u201c{moves[1][1]['name']}\u201d column, then click Save board."
    )
    script = f"const D = {js({'cols': cols, 'cards': cards, 'where': where})};{_SCRIPT}"
    return WebTask(
        family="kanban",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Sprint board", body, script, style=_STYLE)},
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("kanban", "drag two cards to their columns and save the board", build)
