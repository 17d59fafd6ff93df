"""Sort a supplier table by a column, filter it, then select and confirm the row described."""

from __future__ import annotations

import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, OracleStep, State, TypeText, WebTask

_SUPPLIERS = (
    "Norden Supply", "Acme Parts", "Baltic Trading", "Vega Industrial", "Orion Goods",
    "Kestrel Works", "Pioneer Depot", "Sable Metals",
)  # fmt: skip
_ITEMS = (
    "Steel bolts M6", "Copper wire 2mm", "Hex nuts M8", "Wood screws 40mm", "Cable ties 200mm",
    "Hinge 75mm", "Drill bit 6mm", "Wall plugs 8mm", "Washer set", "Spring clamp",
    "Duct tape 50m", "Sandpaper P120", "Pipe clip 22mm", "Angle bracket", "Rivets 4mm",
    "Threaded rod M10", "Zip bag set", "Wing nuts M6", "Glue stick pack", "Chain link 5mm",
    "Door handle", "Shelf pin set", "Cotter pins", "Eye bolt M8", "Lock washer M10",
    "Hose clamp 30mm", "Nylon rope 10m", "Magnet strip", "Caster wheel", "Corner brace",
)  # fmt: skip
_GOALS = (
    ("price", "asc", "Price, lowest first", "the cheapest item"),
    ("price", "desc", "Price, highest first", "the most expensive item"),
    ("stock", "desc", "Stock, highest first", "the item with the most units in stock"),
    ("stock", "asc", "Stock, lowest first", "the item with the fewest units in stock"),
)
_COLUMNS = (("sku", "SKU"), ("item", "Item"), ("supplier", "Supplier"), ("price", "Price"),
            ("stock", "Stock"))  # fmt: skip

_SCRIPT = """
let sortKey = null, sortDir = 'asc', filter = '', selected = null, confirmed = null;
function visible() {
  const f = filter.trim().toLowerCase();
  const rows = D.rows.filter((r) => !f || [r.sku, r.item, r.supplier].join(' ').toLowerCase()
    .includes(f));
  if (sortKey) rows.sort((a, b) => {
    const x = a[sortKey], y = b[sortKey], c = x < y ? -1 : x > y ? 1 : 0;
    return sortDir === 'asc' ? c : -c; });
  return rows; }
function render() {
  const rows = visible();
  if (selected && !rows.some((r) => r.id === selected)) selected = null;
  document.getElementById('rows').innerHTML = rows.map((r) => `<tr data-id="${r.id}"
    class="${r.id === selected ? 'sel' : ''}"><td>${r.sku}</td><td>${r.item}</td>
    <td>${r.supplier}</td><td class="num">$${(r.price / 100).toFixed(2)}</td>
    <td class="num">${r.stock}</td></tr>`).join('');
  document.querySelectorAll('th').forEach((th) => { th.querySelector('.ind').textContent =
    th.dataset.key === sortKey ? (sortDir === 'asc' ? ' \\u25b2' : ' \\u25bc') : ''; });
  document.getElementById('count').textContent = rows.length + ' of ' + D.rows.length + ' rows';
  const sel = D.rows.find((r) => r.id === selected);
  document.getElementById('picked').textContent = sel ? 'Selected: ' + sel.item : 'No row selected';
}
document.querySelectorAll('th').forEach((th) => th.addEventListener('click', () => {
  if (sortKey === th.dataset.key) sortDir = sortDir === 'asc' ? 'desc' : 'asc';
  else { sortKey = th.dataset.key; sortDir = 'asc'; }
  render(); }));
document.getElementById('filter').addEventListener('input', (e) => {
  filter = e.target.value; render(); });
document.getElementById('rows').addEventListener('click', (e) => {
  const tr = e.target.closest('tr'); if (tr) { selected = tr.dataset.id; render(); } });
document.getElementById('confirm').addEventListener('click', () => {
  const msg = document.getElementById('msg');
  if (!selected) { msg.className = 'error'; msg.textContent = 'Select a row first.'; return; }
  confirmed = selected; msg.className = 'ok';
  msg.textContent = 'Confirmed: ' + D.rows.find((r) => r.id === selected).item; });
render();
window.kvhState = () => ({sortKey, sortDir, filter, selected, confirmed,
  visible: visible().map((r) => r.id)});
"""

_STYLE = """
td, th { padding: 3px 10px; } td.num { text-align: right; } tr.sel td { background: #cfe0ff; }
tbody tr { cursor: pointer; } .bar { display: flex; gap: 16px; align-items: center; }
"""


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    n = rng.randint(15, 30)
    suppliers = rng.sample(_SUPPLIERS, rng.randint(4, 6))
    prices = rng.sample(range(150, 9999), n)
    stocks = rng.sample(range(0, 500), n)
    rows: list[dict[str, Any]] = []
    for i, item in enumerate(rng.sample(_ITEMS, n)):
        supplier = suppliers[i % len(suppliers)] if i < len(suppliers) else rng.choice(suppliers)
        sku = "".join(w[0] for w in supplier.split()) + f"-{rng.randint(1000, 9999)}"
        rows.append({"id": f"r{i}", "sku": sku, "item": item, "supplier": supplier,
                     "price": prices[i], "stock": stocks[i]})  # fmt: skip
    rng.shuffle(rows)
    key, direction, sort_text, goal_text = rng.choice(_GOALS)
    supplier = rng.choice([s for s in suppliers if sum(r["supplier"] == s for r in rows) >= 3])
    word = supplier.split()[0]
    mine = [r for r in rows if r["supplier"] == supplier]
    pick = min if (key, direction) in (("price", "asc"), ("stock", "asc")) else max
    target = str(pick(mine, key=lambda r: r[key])["id"])

    def sorted_ok(s: State) -> bool:
        return s.get("sortKey") == key and s.get("sortDir") == direction

    def filter_ok(s: State) -> bool:
        f = s.get("filter")
        return isinstance(f, str) and f.strip().lower() == word.lower()

    milestones = (
        Milestone("sorted", sorted_ok),
        Milestone("filtered", filter_ok),
        Milestone("row selected", lambda s: s.get("selected") == target),
        Milestone(
            "confirmed",
            lambda s: s.get("confirmed") == target and sorted_ok(s) and filter_ok(s),
        ),
    )
    clicks = 1 if direction == "asc" else 2
    oracle: tuple[OracleStep, ...] = (
        *[Click(f"th[data-key='{key}']")] * clicks,
        Click("#filter"),
        TypeText(word),
        Click(f"tr[data-id='{target}']"),
        Click("#confirm"),
    )
    head = "".join(f"<th data-key='{k}'>{label}<span class='ind'></span></th>" for k, label in
                   _COLUMNS)  # fmt: skip
    body = (
        "<div class='card bar'><label for='filter'>Filter</label>"
        "<input id='filter' size='24' placeholder='Type to filter rows'>"
        "<span id='count'></span><span id='picked'></span>"
        "<button class='primary' id='confirm'>Confirm selection</button><span id='msg'></span>"
        f"</div><table><thead><tr>{head}</tr></thead><tbody id='rows'></tbody></table>"
    )
    instruction = (
        f"Sort the table by {sort_text} (click the column header), type \u201c{word}\u201d into "
        f"the Filter box, then select {goal_text} from the supplier {supplier} by clicking its "
        "row, and click Confirm selection."
    )
    return WebTask(
        family="table-sort-filter",
        seed=seed,
        instruction=instruction,
        files={
            "index.html": page(
                "Parts inventory", body, f"const D = {js({'rows': rows})};" + _SCRIPT, style=_STYLE
            )
        },
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("table-sort-filter", "sort and filter a table, then pick the row described", build)
