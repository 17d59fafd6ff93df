"""Edit a to-do list: add two items, tick one off, and delete another (confirming in a modal)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, Press, State, TypeText, WebTask

_TODOS = (
    "Buy milk", "Call the plumber", "Renew passport", "Book dentist appointment", "Pay rent",
    "Water the plants", "Return library books", "Email Sarah about the trip", "Fix bike tyre",
    "Order printer ink", "Clean the garage", "Send birthday card", "Update CV",
    "Back up laptop", "Pick up dry cleaning", "Cancel gym trial", "Plan weekend hike",
    "Defrost the freezer", "Change smoke alarm battery", "File expense report",
    "Buy bus pass", "Schedule car service", "Sort recycling", "Reply to landlord",
)  # fmt: skip

_SCRIPT = """
let items = D.items.map((i) => Object.assign({}, i)), next = items.length, view = 'all';
let pending = null;
const $ = (id) => document.getElementById(id);
function render() {
  const shown = items.filter((i) => view === 'all' || (view === 'done') === i.done);
  $('list').innerHTML = shown.map((i) => `<li data-id="${i.id}" class="${i.done ? 'done' : ''}">
    <label><input type="checkbox" class="tick"${i.done ? ' checked' : ''}> <span>${i.text}</span>
    </label><button class="del" title="Delete">\\u00d7</button></li>`).join('') ||
    '<li class="empty">Nothing here.</li>';
  $('left').textContent = items.filter((i) => !i.done).length + ' items left';
  document.querySelectorAll('.views button').forEach((b) =>
    b.classList.toggle('cur', b.dataset.view === view));
  $('confirm').classList.toggle('hidden', !pending);
  if (pending) $('confirm-text').textContent = 'Delete \\u201c' +
    items.find((i) => i.id === pending).text + '\\u201d?'; }
function add() {
  const text = $('new').value.trim();
  if (text) { items.push({id: 't' + next++, text, done: false}); $('new').value = ''; render(); } }
$('new').addEventListener('keydown', (e) => { if (e.key === 'Enter') add(); });
document.addEventListener('keydown', (e) => {
  if (pending && e.key === 'Escape') { pending = null; render(); } });
document.addEventListener('click', (e) => {
  const b = e.target.closest('button'), li = e.target.closest('li[data-id]');
  if (b && b.id === 'add') add();
  else if (b && b.dataset.view) { view = b.dataset.view; render(); }
  else if (b && b.classList.contains('del') && li) { pending = li.dataset.id; render(); }
  else if (b && b.id === 'del-yes') { items = items.filter((i) => i.id !== pending); pending = null;
    render(); }
  else if (b && b.id === 'del-no') { pending = null; render(); } });
document.addEventListener('change', (e) => {
  const li = e.target.closest('li[data-id]');
  if (li && e.target.classList.contains('tick')) {
    items.find((i) => i.id === li.dataset.id).done = e.target.checked; render(); } });
render();
window.kvhState = () => ({items: items.map((i) => Object.assign({}, i)), view, pending});
"""

_STYLE = """
.modal.hidden { display: none; } #list { list-style: none; padding: 0; margin: 10px 0;
  max-width: 640px; } #list li { display: flex; align-items: center; justify-content:
  space-between; padding: 6px 10px; border-bottom: 1px solid #dde3ec; background: #fff; }
#list li.done span { text-decoration: line-through; color: #7a8596; } label { min-width: 0; }
button.del { color: #b3261e; font-weight: bold; } .views button.cur { background: #cfe0ff; }
"""


def _items(s: State) -> list[dict[str, Any]]:
    items = s.get("items")
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    texts = rng.sample(_TODOS, rng.randint(7, 10))
    new1, new2 = texts[-2:]
    old = [{"id": f"t{k}", "text": t, "done": rng.random() < 0.3} for k, t in enumerate(texts[:-2])]
    tick, drop = rng.sample(old, 2)
    tick["done"] = False
    expected = sorted(
        [(i["text"], i["id"] == tick["id"] or i["done"]) for i in old if i is not drop]
        + [(new1, False), (new2, False)]
    )

    def has(text: str) -> Callable[[State], bool]:
        return lambda s: any(str(i.get("text", "")).strip() == text for i in _items(s))

    def final(s: State) -> bool:
        got = sorted((str(i.get("text", "")).strip(), i.get("done") is True) for i in _items(s))
        return got == expected and not s.get("pending")

    milestones = (
        Milestone(f"added {new1}", has(new1)),
        Milestone(f"added {new2}", has(new2)),
        Milestone(
            f"{tick['text']} done",
            lambda s: any(i.get("id") == tick["id"] and i.get("done") is True for i in _items(s)),
        ),
        Milestone(
            f"{drop['text']} deleted",
            lambda s: bool(_items(s)) and all(i.get("id") != drop["id"] for i in _items(s)),
        ),
        Milestone("list right", final),
    )
    oracle = (
        Click("#new"),
        TypeText(new1),
        Press("Enter"),
        TypeText(new2),
        Click("#add"),
        Click(f"li[data-id='{tick['id']}'] input.tick"),
        Click(f"li[data-id='{drop['id']}'] button.del"),
        Click("#del-yes"),
    )
    body = (
        "<div class='card'><p><input id='new' size='40' placeholder='What needs doing?'>"
        "<button class='primary' id='add'>Add</button></p><p class='views'>"
        "<button data-view='all'>All</button><button data-view='active'>Active</button>"
        "<button data-view='done'>Done</button> <span id='left'></span></p>"
        "<ul id='list'></ul></div><div class='modal hidden' id='confirm'><div class='card'>"
        "<h3 id='confirm-text'></h3><p><button class='primary' id='del-yes'>Delete</button>"
        "<button id='del-no'>Cancel</button></p></div></div>"
    )
    instruction = (
        f"Add two items to the to-do list, \u201c{new1}\u201d and \u201c{new2}\u201d; mark "
        f"\u201c{tick['text']}\u201d as done; and delete \u201c{drop['text']}\u201d (confirm the "
        "deletion)."
    )
    script = f"const D = {js({'items': old})};{_SCRIPT}"
    return WebTask(
        family="todo-list",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("To-do", body, script, style=_STYLE)},
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("todo-list", "add, tick off and delete items in a to-do list", build)
