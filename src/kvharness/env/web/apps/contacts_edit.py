"""Edit one contact's phone and tags in a searchable contact book, and delete another one."""

from __future__ import annotations

import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.apps._seeded import pairs_with_namesakes
from kvharness.env.web.task import Click, Family, Milestone, Press, State, TypeText, WebTask

_FIRST = (
    "Maria", "James", "Aisha", "Daniel", "Sofia", "Kenji", "Olivia", "Mateo", "Hannah", "Omar",
    "Lucy", "Viktor", "Nadia", "Ethan", "Ines", "Samuel",
)  # fmt: skip
_LAST = (
    "Lopez", "Baker", "Khan", "Novak", "Rossi", "Sato", "Bennett", "Silva", "Meyer", "Haddad",
    "Clarke", "Ivanov", "Dubois", "Park", "Moreau", "Adeyemi",
)  # fmt: skip
_DOMAINS = ("mail.test", "example.org", "corp.test")
_TAGS = ("family", "work", "vip", "gym", "school", "neighbor", "client", "book club", "travel")

_SCRIPT = """
const C = D.contacts.map((c) => Object.assign({}, c, {tags: c.tags.slice()}));
let open = null, draft = null, modal = null;
const $ = (id) => document.getElementById(id), byId = (id) => C.find((c) => c.id === id);
const h = (t) => String(t).replace(/[&<>"']/g, (c) => '&#' + c.charCodeAt(0) + ';');
const shown = (c) => D.lastFirst ? `${c.last}, ${c.first}` : `${c.first} ${c.last}`;
function hits(c) {
  const name = (c.first + ' ' + c.last).toLowerCase();
  return $('search').value.toLowerCase().split(/\\s+/).every((w) => name.includes(w)); }
function render() {
  const list = C.filter(hits).sort((a, b) => shown(a).localeCompare(shown(b)));
  $('list').innerHTML = list.map((c) => `<div class="contact${c.id === open ? ' cur' : ''}"
    data-id="${c.id}">${h(shown(c))}</div>`).join('') || '<p class="muted">No contacts</p>';
  const c = open && byId(open), tags = (t, x) => t.map((g, i) =>
    `<span class="tag">${h(g)}${x ? `<button class="untag" data-i="${i}">\u00d7</button>` : ''}` +
    '</span>').join(' ');
  $('detail').innerHTML = !c ? '<p class="muted">Select a contact.</p>' : draft ?
    `<h3>Edit ${h(c.first + ' ' + c.last)}</h3><p><label for="phone">Phone</label>
    <input id="phone" size="22" value="${h(draft.phone)}"></p><p><label>Tags</label>
    ${tags(draft.tags, true)}</p><p><label for="tag-input">New tag</label><input id="tag-input"
    size="14"><button id="add-tag">Add tag</button></p><p><button class="primary" id="save">Save
    </button><button id="cancel">Cancel</button></p>` :
    `<h3>${h(c.first + ' ' + c.last)}</h3><p><label>Phone</label>${h(c.phone)}</p>
    <p><label>Email</label>${h(c.email)}</p><p><label>Tags</label>${tags(c.tags, false)}</p>
    <p><button class="primary" id="edit">Edit</button><button id="delete">Delete</button></p>`;
  $('del-modal').classList.toggle('hidden', !modal);
  if (modal) $('del-name').textContent = byId(modal).first + ' ' + byId(modal).last;
}
function addTag() {
  const v = $('tag-input').value.trim();
  if (v && !draft.tags.includes(v)) draft.tags.push(v);
  render(); $('tag-input').focus(); }
document.addEventListener('input', (e) => {
  if (e.target.id === 'search') render();
  else if (e.target.id === 'phone') draft.phone = e.target.value;
});
document.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && e.target.id === 'tag-input') addTag(); });
document.addEventListener('click', (e) => {
  const t = e.target, row = t.closest('.contact'), c = open && byId(open);
  if (row) { open = row.dataset.id; draft = null; }
  else if (t.id === 'edit' && c) draft = {phone: c.phone, tags: c.tags.slice()};
  else if (t.id === 'add-tag') return addTag();
  else if (t.classList.contains('untag')) draft.tags.splice(+t.dataset.i, 1);
  else if (t.id === 'save') { c.phone = draft.phone.trim(); c.tags = draft.tags; draft = null; }
  else if (t.id === 'cancel') draft = null;
  else if (t.id === 'delete' && c) modal = c.id;
  else if (t.id === 'cancel-delete') modal = null;
  else if (t.id === 'confirm-delete' && modal) {
    C.splice(C.indexOf(byId(modal)), 1); modal = null; open = null; draft = null; }
  else return;
  render();
});
render();
window.kvhState = () => ({ query: $('search').value, open, modal,
  draft: draft && {phone: draft.phone, tags: draft.tags.slice().sort()},
  contacts: C.map((c) => ({id: c.id, phone: c.phone, tags: c.tags.slice().sort()})) });
"""

_STYLE = """
.modal.hidden { display: none; } .book { display: flex; gap: 16px; align-items: flex-start; }
#side { width: 320px; } #detail { flex: 1; } .muted { color: #778; }
.contact { padding: 3px 8px; border-bottom: 1px solid #e3e8f0; cursor: pointer; }
.contact.cur { background: #d8e4fb; } #search { width: 100%; }
.tag { background: #e3e8f0; border-radius: 10px; padding: 2px 8px; }
.untag { border: none; background: none; padding: 0 2px; margin: 0; }
"""


def _contacts(s: State) -> list[Any]:
    got = s.get("contacts")
    return got if isinstance(got, list) else []


def _draft(s: State) -> dict[str, Any]:
    d = s.get("draft")
    return d if isinstance(d, dict) else {}


def _phone(rng: random.Random) -> str:
    return f"+1 555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    # Namesakes: the edited contact's first name and last name each appear elsewhere too.
    names = pairs_with_namesakes(rng, _FIRST, _LAST, rng.randint(22, 28))
    (f1, l1), (f2, l2) = names[0], names[1]
    contacts = [
        {
            "id": f"c{i}",
            "first": f,
            "last": la,
            "phone": _phone(rng),
            "tags": rng.sample(_TAGS, rng.randint(0, 2)),
            "email": f"{f.lower()}.{la.lower()}@{rng.choice(_DOMAINS)}",
        }
        for i, (f, la) in enumerate(names)
    ]
    target, gone = contacts[0], contacts[1]
    rng.shuffle(contacts)
    phone = _phone(rng)
    tag = rng.choice([t for t in _TAGS if t not in target["tags"]])
    tags = sorted([*target["tags"], tag])
    tid, did = target["id"], gone["id"]
    expected = [
        {
            "id": c["id"],
            "phone": phone if c is target else c["phone"],
            "tags": tags if c is target else sorted(c["tags"]),
        }
        for c in contacts
        if c is not gone
    ]

    def has_phone(s: State) -> bool:
        return s.get("open") == tid and str(_draft(s).get("phone", "")).strip() == phone

    def saved(s: State) -> bool:
        c = next((c for c in _contacts(s) if isinstance(c, dict) and c.get("id") == tid), {})
        return c.get("phone") == phone and c.get("tags") == tags

    milestones = (
        Milestone("contact opened", lambda s: s.get("open") == tid),
        Milestone("phone changed", has_phone),
        Milestone("tag added", lambda s: has_phone(s) and _draft(s).get("tags") == tags),
        Milestone("contact saved", saved),
        Milestone("deletion asked", lambda s: s.get("modal") == did),
        Milestone(
            "contacts as asked", lambda s: s.get("modal") is None and _contacts(s) == expected
        ),
    )
    oracle = (
        Click("#search"),
        TypeText(f"{f1} {l1}"),
        Click(f".contact[data-id='{tid}']"),
        Click("#edit"),
        Click("#phone"),
        Press("Control+a"),
        TypeText(phone),
        Click("#tag-input"),
        TypeText(tag),
        Press("Enter"),
        Click("#save"),
        Click("#search"),
        Press("Control+a"),
        TypeText(f"{f2} {l2}"),
        Click(f".contact[data-id='{did}']"),
        Click("#delete"),
        Click("#confirm-delete"),
    )
    body = (
        "<div class='book'><div class='card' id='side'><input id='search' placeholder='Search'>"
        "<div id='list'></div></div><div class='card' id='detail'></div></div>"
        "<div class='modal hidden' id='del-modal'><div class='card'><h3>Delete contact</h3>"
        "<p>Delete <b id='del-name'></b>? This cannot be undone.</p><button class='primary' "
        "id='confirm-delete'>Delete</button><button id='cancel-delete'>Cancel</button></div></div>"
    )
    instruction = (
        f"In the contact book, change {f1} {l1}'s phone number to {phone} and add the tag "
        f"\u201c{tag}\u201d, then save. Then delete the contact {f2} {l2} (confirm the deletion)."
    )
    data = {"contacts": contacts, "lastFirst": rng.random() < 0.5}
    return WebTask(
        family="contacts-edit",
        seed=seed,
        instruction=instruction,
        files={
            "index.html": page("Contacts", body, f"const D = {js(data)};{_SCRIPT}", style=_STYLE)
        },
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("contacts-edit", "edit a contact's phone and tags; delete another contact", build)
