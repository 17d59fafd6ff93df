"""Edit a shopping cart (quantities, a removal, a coupon) and proceed to checkout."""

from __future__ import annotations

import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import (
    Click,
    Family,
    Milestone,
    OracleStep,
    Press,
    State,
    TypeText,
    WebTask,
)

_PRODUCTS = (
    ("Ceramic mug", 1299), ("Wool socks", 899), ("Desk lamp", 3450), ("Notebook set", 1575),
    ("Water bottle", 2199), ("Phone stand", 1249), ("Tea sampler", 1890), ("Scented candle", 1425),
    ("USB-C cable", 999), ("Plant pot", 1650), ("Linen towel", 2275), ("Bike light", 2999),
    ("Puzzle box", 2450), ("Hand cream", 750),
)  # fmt: skip
_WORDS = ("SPRING", "WELCOME", "SAVE", "HAPPY", "FRESH", "LUCKY", "SUMMER")

_SCRIPT = """
let cart = D.items.map((it) => Object.assign({}, it)), coupon = null, order = null;
const $ = (id) => document.getElementById(id);
const fmt = (c) => '$' + (c / 100).toFixed(2);
const subtotal = () => cart.reduce((t, it) => t + it.price * it.qty, 0);
const discount = () => coupon ? Math.round(subtotal() * D.coupon.pct / 100) : 0;
function totals() {
  $('sub').textContent = fmt(subtotal());
  $('disc').textContent = coupon ? '−' + fmt(discount()) + ` (${coupon}, ${D.coupon.pct}% off)`
    : '—';
  $('total').textContent = fmt(subtotal() - discount()); }
function render() {
  $('rows').innerHTML = cart.map((it) => `<tr id="row-${it.id}"><td>${it.name}</td>
    <td>${fmt(it.price)}</td><td class="qty"><button class="minus" data-id="${it.id}">−</button>
    <input class="q" id="q-${it.id}" data-id="${it.id}" value="${it.qty}" size="3">
    <button class="plus" data-id="${it.id}">+</button></td><td id="line-${it.id}">
    ${fmt(it.price * it.qty)}</td><td><button class="rm" id="rm-${it.id}" data-id="${it.id}">
    Remove</button></td></tr>`).join('') || '<tr><td colspan="5">Your cart is empty.</td></tr>';
  totals(); }
const item = (id) => cart.find((it) => it.id === id);
document.addEventListener('input', (e) => {
  if (!e.target.classList.contains('q')) return;
  const it = item(e.target.dataset.id), t = e.target.value.trim();
  if (/^\\d+$/.test(t) && +t >= 1 && +t <= 99) {
    it.qty = +t; $('line-' + it.id).textContent = fmt(it.price * it.qty); totals(); } });
document.addEventListener('focusout', (e) => {
  if (e.target.classList.contains('q')) e.target.value = item(e.target.dataset.id).qty; });
document.addEventListener('click', (e) => {
  const b = e.target.closest('button'); if (!b) return;
  const it = item(b.dataset.id);
  if (b.classList.contains('plus') && it.qty < 99) it.qty += 1;
  else if (b.classList.contains('minus') && it.qty > 1) it.qty -= 1;
  else if (b.classList.contains('rm')) cart = cart.filter((x) => x !== it);
  else if (b.id === 'apply') {
    const code = $('code').value.trim().toUpperCase();
    if (code === D.coupon.code) { coupon = code; $('cerr').textContent = ''; }
    else $('cerr').textContent = code ? 'That code is not valid.' : 'Enter a code.'; }
  else if (b.id === 'checkout') {
    if (!cart.length) return;
    order = {items: Object.fromEntries(cart.map((x) => [x.name, x.qty])), coupon,
             total: subtotal() - discount()};
    $('done').textContent = 'Order placed: ' + fmt(order.total); }
  else return;
  render(); });
window.kvhState = () => ({
  items: Object.fromEntries(cart.map((x) => [x.name, x.qty])), coupon, total: subtotal() -
  discount(), order });
render();
"""

_STYLE = """
td.qty input { width: 52px; text-align: center; } td.qty button { width: 32px; padding: 4px; }
table { width: 780px; } .sum td { border: none; } .sum td:first-child { width: 160px; }
"""


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    chosen = rng.sample(_PRODUCTS, rng.randint(4, 5))
    items: list[dict[str, Any]] = [
        {"id": f"p{i}", "name": n, "price": p, "qty": rng.randint(1, 3)}
        for i, (n, p) in enumerate(chosen)
    ]
    typed, clicked, gone = rng.sample(items, 3)
    typed_qty = rng.choice([q for q in range(2, 13) if q != typed["qty"]])
    clicked_qty = rng.choice([q for q in range(1, 6) if q != clicked["qty"]])
    pct = rng.choice((10, 15, 20, 25))
    code = f"{rng.choice(_WORDS)}{pct}{rng.choice('ABCDEFGHJKMNPQRSTUVWXYZ')}"
    want = {it["name"]: it["qty"] for it in items if it is not gone}
    want[typed["name"]] = typed_qty
    want[clicked["name"]] = clicked_qty
    sub = sum(it["price"] * want[it["name"]] for it in items if it is not gone)
    total = sub - (sub * pct + 50) // 100

    def qty(s: State, name: str) -> Any:
        got = s.get("items")
        return got.get(name) if isinstance(got, dict) else None

    def removed(s: State) -> bool:
        got = s.get("items")
        return isinstance(got, dict) and gone["name"] not in got

    milestones = (
        Milestone(f"{typed['name']} quantity set", lambda s: qty(s, typed["name"]) == typed_qty),
        Milestone(
            f"{clicked['name']} quantity set", lambda s: qty(s, clicked["name"]) == clicked_qty
        ),
        Milestone(f"{gone['name']} removed", removed),
        Milestone("coupon applied", lambda s: s.get("coupon") == code and s.get("items") == want),
        Milestone(
            "checked out",
            lambda s: s.get("order") == {"items": want, "coupon": code, "total": total},
        ),
    )
    step = "plus" if clicked_qty > clicked["qty"] else "minus"
    oracle: list[OracleStep] = [
        Click(f"#q-{typed['id']}"), Press("Control+a"), TypeText(str(typed_qty)),
        *[Click(f"#row-{clicked['id']} button.{step}")] * abs(clicked_qty - clicked["qty"]),
        Click(f"#rm-{gone['id']}"),
        Click("#code"), TypeText(code), Click("#apply"),
        Click("#checkout"),
    ]  # fmt: skip
    body = (
        "<div class='card'><h3>Your cart</h3><table><thead><tr><th>Item</th><th>Price</th>"
        "<th>Quantity</th><th>Subtotal</th><th></th></tr></thead><tbody id='rows'></tbody>"
        "</table></div><div class='card'><p><label for='code'>Coupon code</label>"
        "<input id='code' size='16'> <button id='apply'>Apply</button> "
        "<span class='error' id='cerr'></span></p><table class='sum'>"
        "<tr><td>Subtotal</td><td id='sub'></td></tr><tr><td>Discount</td><td id='disc'></td></tr>"
        "<tr><td><b>Total</b></td><td><b id='total'></b></td></tr></table>"
        "<p><button class='primary' id='checkout'>Proceed to checkout</button> "
        "<span class='ok' id='done'></span></p></div>"
    )
    instruction = (
        f"In your cart, set the quantity of {typed['name']} to {typed_qty} and of "
        f"{clicked['name']} to {clicked_qty}, remove {gone['name']}, apply the coupon code "
        f"{code}, then proceed to checkout. Leave the other items as they are."
    )
    script = f"const D = {js({'items': items, 'coupon': {'code': code, 'pct': pct}})};{_SCRIPT}"
    return WebTask(
        family="cart",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Shopping cart", body, script, style=_STYLE)},
        milestones=milestones,
        oracle=tuple(oracle),
    )


FAMILY = Family("cart", "edit cart quantities, remove an item, apply a coupon, check out", build)
