"""Find two named orders in a paginated list, mark each on its page, and submit the marks."""

from __future__ import annotations

import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, OracleStep, State, WebTask

_CUSTOMERS = (
    "Northwind Traders", "Blue Harbor Ltd", "Kestrel Labs", "Orchard & Pine", "Summit Foods",
    "Atlas Freight", "Juniper Studio", "Redwood Clinic", "Polar Outfitters", "Cobalt Systems",
    "Meadow Bakery", "Ironside Tools", "Lumen Optics", "Silver Fern Co", "Vega Motors",
)  # fmt: skip
_STATUSES = ("Pending", "Shipped", "Delivered", "Returned", "On hold")
_PER_PAGE = 10

_SCRIPT = """
let pg = 1, submitted = null;
const marked = new Set(), pages = Math.ceil(D.items.length / D.per);
const $ = (id) => document.getElementById(id);
function render() {
  const rows = D.items.slice((pg - 1) * D.per, pg * D.per);
  $('rows').innerHTML = rows.map((it) => `<tr${marked.has(it.id) ? ' class="marked"' : ''}>
    <td>#${it.id}</td><td>${it.customer}</td><td class="num">${it.amount}</td><td>${it.status}</td>
    <td><button class="mark" data-id="${it.id}">${marked.has(it.id) ? 'Unmark' : 'Mark'}</button>
    </td></tr>`).join('');
  $('pager').innerHTML = `<button id="prev"${pg === 1 ? ' disabled' : ''}>\u2039 Prev</button>` +
    Array.from({length: pages}, (_, i) => `<button class="pg${i + 1 === pg ? ' cur' : ''}"
      data-p="${i + 1}">${i + 1}</button>`).join('') +
    `<button id="next"${pg === pages ? ' disabled' : ''}>Next \u203a</button>` +
    `<span class="where">Page ${pg} of ${pages}</span>`;
  $('summary').textContent = marked.size ? 'Marked: ' + [...marked].map((m) => '#' + m).join(', ')
    : 'Nothing marked yet.';
}
document.addEventListener('click', (e) => {
  const t = e.target;
  if (t.id === 'prev' && pg > 1) pg -= 1;
  else if (t.id === 'next' && pg < pages) pg += 1;
  else if (t.classList.contains('pg')) pg = +t.dataset.p;
  else if (t.classList.contains('mark')) {
    const id = t.dataset.id; if (marked.has(id)) marked.delete(id); else marked.add(id); }
  else if (t.id === 'submit') { submitted = [...marked].sort();
    $('done').textContent = `Submitted ${submitted.length} marked order(s).`; }
  else return;
  render();
});
render();
window.kvhState = () => ({ page: pg, marked: [...marked].sort(), submitted });
"""

_STYLE = """
#list { width: 860px; } #list table { width: 100%; } #list td { padding: 3px 12px; }
td.num { text-align: right; } .mark { padding: 2px 12px; width: 90px; }
tr.marked td { background: #fff4c7; } #pager { margin: 12px 0; }
.pg.cur { background: #2f6fdb; color: #fff; } .where { margin-left: 14px; color: #556; }
th { cursor: default; }
"""


def _goto(frm: int, to: int, rng: random.Random) -> list[OracleStep]:
    """Clicks that take the pager from page ``frm`` to page ``to``."""
    if abs(to - frm) <= 2 and rng.random() < 0.6:
        return [Click("#next" if to > frm else "#prev")] * abs(to - frm)
    return [Click(f".pg[data-p='{to}']")]


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    count = rng.randint(6, 10) * _PER_PAGE - rng.randint(0, 7)
    ids = rng.sample(range(10000, 99999), count)
    items: list[dict[str, Any]] = [
        {
            "id": str(i),
            "customer": rng.choice(_CUSTOMERS),
            "status": rng.choice(_STATUSES),
            "amount": f"${rng.randint(20, 9000):,}.{rng.randint(0, 99):02d}",
        }
        for i in ids
    ]
    if rng.random() < 0.5:
        items.sort(key=lambda it: it["id"])
    pages = -(-count // _PER_PAGE)
    p1, p2 = rng.sample(range(2, pages + 1), 2)
    if rng.random() < 0.3:
        p2 = 1
    a = rng.choice(items[(p1 - 1) * _PER_PAGE : p1 * _PER_PAGE])
    b = rng.choice(items[(p2 - 1) * _PER_PAGE : p2 * _PER_PAGE])
    both = sorted([a["id"], b["id"]])

    def marked(s: State) -> list[Any]:
        got = s.get("marked")
        return got if isinstance(got, list) else []

    milestones = (
        Milestone("first order's page shown", lambda s: s.get("page") == p1),
        Milestone("first order marked", lambda s: a["id"] in marked(s)),
        Milestone("second order's page shown", lambda s: s.get("page") == p2),
        Milestone("second order marked", lambda s: b["id"] in marked(s) and a["id"] in marked(s)),
        Milestone("marks submitted", lambda s: s.get("submitted") == both and marked(s) == both),
    )
    oracle = (
        *_goto(1, p1, rng),
        Click(f".mark[data-id='{a['id']}']"),
        *_goto(p1, p2, rng),
        Click(f".mark[data-id='{b['id']}']"),
        Click("#submit"),
    )
    body = (
        "<div class='card' id='list'><h3>Orders</h3><table><thead><tr><th>Order</th>"
        "<th>Customer</th><th>Amount</th><th>Status</th><th></th></tr></thead>"
        "<tbody id='rows'></tbody></table><div id='pager'></div><p id='summary'></p>"
        "<button class='primary' id='submit'>Submit marked orders</button>"
        "<p class='ok' id='done'></p></div>"
    )
    instruction = (
        f"Find order #{a['id']} ({a['customer']}, {a['amount']}) in the order list and mark it. "
        f"Then find order #{b['id']} ({b['customer']}, {b['amount']}) and mark it too. Mark "
        "nothing else, and submit the marked orders."
    )
    data = {"items": items, "per": _PER_PAGE}
    return WebTask(
        family="pagination",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Orders", body, f"const D = {js(data)};{_SCRIPT}", style=_STYLE)},
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("pagination", "find two items across a paginated list, mark them, submit", build)
