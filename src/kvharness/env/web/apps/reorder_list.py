"""Reorder a priority list by dragging its handles or with up/down buttons, then save it."""

from __future__ import annotations

import random

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, DragTo, Family, Milestone, OracleStep, State, WebTask

_ITEMS = (
    "Fix login timeout", "Update privacy policy", "Migrate billing database", "Hire QA engineer",
    "Renew SSL certificates", "Plan offsite", "Refresh onboarding docs", "Audit access logs",
    "Ship dark mode", "Reduce build time", "Call top customers", "Archive old projects",
    "Replace office printer", "Draft Q3 roadmap", "Clean up feature flags",
)  # fmt: skip
_LISTS = ("Team priorities", "Sprint backlog", "Quarter goals", "Launch checklist")

_SCRIPT = """
let order = D.items.map((it) => it.id), saved = order.slice(), drag = null;
const $ = (id) => document.getElementById(id);
const name = (id) => D.items.find((it) => it.id === id).name;
function render() {
  $('list').innerHTML = order.map((id, i) => `<li id="row-${id}" class="${drag === id ?
    'dragging' : ''}"><span class="grip" data-id="${id}">&#9776;</span><span class="pos">${i + 1}.
    </span><span class="txt">${name(id)}</span><span class="btns">
    <button class="up" data-id="${id}"${i ? '' : ' disabled'}>&#9650; Up</button>
    <button class="down" data-id="${id}"${i < order.length - 1 ? '' : ' disabled'}>&#9660; Down
    </button></span></li>`).join('');
  $('dirty').textContent = order.join() === saved.join() ? '' : 'Unsaved changes'; }
function move(id, to) {
  const from = order.indexOf(id);
  to = Math.max(0, Math.min(order.length - 1, to));
  if (from < 0 || from === to) return;
  order.splice(from, 1); order.splice(to, 0, id); }
document.addEventListener('mousedown', (e) => {
  const g = e.target.closest('.grip'); if (!g) return;
  drag = g.dataset.id; e.preventDefault(); render(); });
document.addEventListener('mousemove', (e) => {
  if (!drag) return;
  const top = $('list').getBoundingClientRect().top, h = $('list').firstElementChild.offsetHeight;
  const to = Math.floor((e.clientY - top) / h);
  if (to !== order.indexOf(drag)) { move(drag, to); render(); } });
document.addEventListener('mouseup', () => { if (drag) { drag = null; render(); } });
document.addEventListener('click', (e) => {
  const b = e.target.closest('button'); if (!b) return;
  if (b.classList.contains('up')) move(b.dataset.id, order.indexOf(b.dataset.id) - 1);
  else if (b.classList.contains('down')) move(b.dataset.id, order.indexOf(b.dataset.id) + 1);
  else if (b.id === 'save') { saved = order.slice(); $('msg').textContent = 'Saved.'; }
  else if (b.id === 'revert') { order = saved.slice(); $('msg').textContent = ''; }
  render(); });
window.kvhState = () => ({order: order.map(name), saved: saved.map(name), dragging: drag});
render();
"""

_STYLE = """
#list { list-style: none; padding: 0; margin: 0 0 12px; width: 640px; }
#list li { display: flex; align-items: center; height: 52px; padding: 0 10px; background: #fff;
  border: 1px solid #cfd6e0; margin: 0; user-select: none; }
#list li.dragging { background: #dbe7fb; border-color: #2f6fdb; }
.grip { cursor: grab; font-size: 20px; padding: 4px 10px; color: #55607a; }
.pos { width: 34px; color: #66708a; } .txt { flex: 1; }
.btns button { padding: 3px 8px; font-size: 13px; }
"""


def _moves(start: list[str], target: list[str]) -> list[tuple[int, int, str]]:
    """Moves ``(to, from, item)`` that sort ``start`` into ``target``, top position first."""
    order, moves = start[:], []
    for pos, want in enumerate(target):
        at = order.index(want)
        if at != pos:
            moves.append((pos, at, want))
            order.insert(pos, order.pop(at))
    return moves


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    names = rng.sample(_ITEMS, rng.randint(5, 7))
    items = [{"id": f"i{i}", "name": n} for i, n in enumerate(names)]
    target = names[:]
    while target[0] == names[0] or len(_moves(names, target)) < 3:
        rng.shuffle(target)
    oracle: list[OracleStep] = []
    for pos, at, want in _moves(names, target):
        row = f"#row-i{names.index(want)}"
        if pos and at - pos <= 2 and rng.random() < 0.6:
            oracle += [Click(f"{row} button.up")] * (at - pos)
        else:
            oracle.append(DragTo(f"{row} .grip", f"#list li:nth-child({pos + 1})"))
    oracle.append(Click("#save"))
    k = 3 if len(names) > 5 else 2

    def prefix(n: int) -> Milestone:
        def check(s: State) -> bool:
            got = s.get("order")
            return isinstance(got, list) and got[:n] == target[:n]

        return Milestone(f"top {n} in place", check)

    milestones = (
        prefix(1),
        prefix(k),
        Milestone("list in order", lambda s: s.get("order") == target),
        Milestone(
            "order saved",
            lambda s: (
                s.get("saved") == target and s.get("order") == target and not s.get("dragging")
            ),
        ),
    )
    title = rng.choice(_LISTS)
    body = (
        f"<div class='card'><h3>{title}</h3><p>Drag the &#9776; handle or use the buttons to "
        "reorder.</p><ol id='list'></ol><button class='primary' id='save'>Save order</button>"
        "<button id='revert'>Revert</button> <span class='ok' id='msg'></span>"
        " <span class='error' id='dirty'></span></div>"
    )
    wanted = "; ".join(f"{i + 1}. {n}" for i, n in enumerate(target))
    instruction = (
        f"Reorder the {title} list so that it reads, from top to bottom: {wanted}. "
        "Then save the order."
    )
    script = f"const D = {js({'items': items})};{_SCRIPT}"
    return WebTask(
        family="reorder-list",
        seed=seed,
        instruction=instruction,
        files={"index.html": page(title, body, script, style=_STYLE)},
        milestones=milestones,
        oracle=tuple(oracle),
    )


FAMILY = Family("reorder-list", "put a list in a given order by drag handles or buttons", build)
